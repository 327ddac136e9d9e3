"""What a skipped or calendar-excluded occurrence costs, metered as AWS bills it
(``bench.meter``) on the real tick (decisions 0055 and 0056): its claim and its
SKIPPED record, never more than a fire; and a task held to a calendar fires for
what any recurring task does."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from bench.cost import drain_worker, fresh_bench, register
from bench.meter import summarise
from dynacron.domain.coordination.tenants import DEFAULT_TENANT
from dynacron.domain.tasks.skips import SkipRequest
from tests.support import Sink

WRITE_UNIT_GOAL = 5
BATCH = 2


def per_task_write_units(calls: list[Any]) -> dict[str, float]:
    summary = summarise(calls, fires=BATCH)
    return {
        f"{r['caller']} {r['operation']}": r["wcu"] + r["index_wcu"]
        for r in summary["breakdown"]
        # The tick's own heartbeat and cursor are shared by every task it claims.
        if not r["caller"].startswith("CursorStore.") and r["wcu"] + r["index_wcu"]
    }


def test_a_skipped_occurrence_costs_its_claim_and_its_record_and_sends_nothing() -> None:
    sink = Sink().start()
    try:
        with fresh_bench(sink) as bench:
            # Given recurring tasks whose next occurrence is skipped
            register(bench, BATCH, rate="1 minute")
            service = bench.app.task_service
            for task in service.page(DEFAULT_TENANT, 10, None).items:
                service.skip(DEFAULT_TENANT, task.task_id, SkipRequest(occurrences=1), "alice")
            # When the tick reaches it
            bench.meter.reset()
            bench.clock.advance(timedelta(seconds=60))
            report = bench.app.ticker.tick_shard(0)
            assert (report.claimed, report.rescheduled) == (0, BATCH)
            assert drain_worker(bench) == 0
            calls = bench.meter.reset()
    finally:
        sink.stop()
    # Then each costs its claim (item and due index) and its SKIPPED record: 4 units
    units = per_task_write_units(calls)
    assert sum(units.values()) == 4, units
    assert not [c for c in calls if c.service == "sqs" and "Send" in c.operation]


def test_a_task_held_to_a_calendar_fires_for_five_write_units() -> None:
    sink = Sink().start()
    try:
        with fresh_bench(sink) as bench:
            # Given recurring tasks held to a year of public holidays (none today)
            holidays = [f"2027-{month:02d}-01" for month in range(1, 13)]
            bench.app.task_service.calendar_service.put(  # type: ignore[union-attr]
                DEFAULT_TENANT, "holidays", "Europe/Berlin", holidays
            )
            register(bench, BATCH, rate="1 minute", exclude_calendars=["holidays"])
            bench.meter.reset()
            bench.clock.advance(timedelta(seconds=60))
            report = bench.app.ticker.tick_shard(0)
            assert report.claimed == BATCH
            drain_worker(bench)
            calls = bench.meter.reset()
    finally:
        sink.stop()
    units = per_task_write_units(calls)
    assert sum(units.values()) <= WRITE_UNIT_GOAL, units
