from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

from dynacron.domain.instants import compact_instant, format_instant, parse_instant
from dynacron.domain.schedules.expressions import parse_at, parse_cron, parse_rate
from dynacron.domain.tasks.claiming import advanced, claim_occurrence
from dynacron.domain.tasks.task import (
    Sharding,
    Task,
    TaskStatus,
    execution_id_for,
    shard_for,
    task_id_of,
)

T0 = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)


def make_task(schedule, next_run_at: datetime | None, status=TaskStatus.ACTIVE) -> Task:  # type: ignore[no-untyped-def]
    return Task(
        task_id="t1",
        name="t1",
        schedule=schedule,
        handler_url="http://127.0.0.1:9/",
        payload={},
        status=status,
        next_run_at=next_run_at,
        created_at=T0,
        updated_at=T0,
    )


def test_execution_id_is_deterministic_and_sorts_by_time() -> None:
    first = execution_id_for("abc", T0)
    assert first == execution_id_for("abc", T0)
    assert first == "abc_20261130T120000.000Z"
    assert execution_id_for("abc", T0 + timedelta(milliseconds=1)) > first
    assert task_id_of(first) == "abc"


def test_instants_are_fixed_width_utc_with_z() -> None:
    assert format_instant(T0) == "2026-11-30T12:00:00.000Z"
    assert compact_instant(T0 + timedelta(microseconds=1500)) == "20261130T120000.001Z"
    assert parse_instant("2026-11-30T13:00:00+01:00") == T0


def test_nothing_is_claimed_before_it_is_due() -> None:
    task = make_task(parse_rate("10 seconds", T0), T0 + timedelta(seconds=10))
    assert claim_occurrence(task, T0 + timedelta(seconds=9)) is None


def test_recurring_claim_computes_next_from_the_scheduled_time() -> None:
    task = make_task(parse_rate("10 seconds", T0), T0 + timedelta(seconds=10))
    # The tick runs 3 s late; the next occurrence is still on the 10 s grid.
    claim = claim_occurrence(task, T0 + timedelta(seconds=13))
    assert claim is not None
    assert claim.scheduled_at == T0 + timedelta(seconds=10)
    assert claim.next_run_at == T0 + timedelta(seconds=20)
    assert claim.execution_id == execution_id_for("t1", T0 + timedelta(seconds=10))


def test_missed_occurrences_catch_up_once_then_rejoin_the_grid() -> None:
    task = make_task(parse_cron("* * * * *"), T0)
    claim = claim_occurrence(task, T0 + timedelta(minutes=30, seconds=5))
    assert claim is not None
    assert claim.scheduled_at == T0
    # 12:01..12:29 were missed (more than the 60 s grace late) and are skipped;
    # 12:30 is only 5 s late, so it is on time and runs next, on the grid.
    assert claim.skipped_since == T0 + timedelta(minutes=1)
    assert claim.next_run_at == T0 + timedelta(minutes=30)


def test_one_time_task_completes() -> None:
    task = make_task(parse_at("2026-11-30T12:00:00Z"), T0)
    claim = claim_occurrence(task, T0 + timedelta(seconds=1))
    assert claim is not None
    assert claim.completes_task
    after = advanced(task, claim, T0 + timedelta(seconds=1))
    assert after.status is TaskStatus.COMPLETED
    assert after.next_run_at is None
    assert after.version == task.version + 1


def test_paused_task_is_not_claimed() -> None:
    task = make_task(parse_rate("1 second", T0), T0, status=TaskStatus.PAUSED)
    assert claim_occurrence(task, T0 + timedelta(hours=1)) is None


def test_shards_are_stable_and_spread() -> None:
    ids = [f"task-{i}" for i in range(4000)]
    shards = [shard_for(i, 8) for i in ids]
    assert shards == [shard_for(i, 8) for i in ids]
    counts = [shards.count(s) for s in range(8)]
    assert min(counts) > 400  # roughly 500 each


def test_a_past_occurrence_is_filed_under_the_current_bucket() -> None:
    sharding = Sharding(shard_count=4, bucket_seconds=3600)
    past = T0 - timedelta(hours=5)
    placement = sharding.place("t1", past, now=T0 + timedelta(minutes=10))
    assert placement is not None
    assert placement.bucket == T0
    future = sharding.place("t1", T0 + timedelta(hours=3, minutes=5), now=T0)
    assert future is not None
    assert future.bucket == T0 + timedelta(hours=3)
    assert sharding.place("t1", None, now=T0) is None


def test_advanced_keeps_identity_and_bumps_version() -> None:
    task = make_task(parse_rate("1 minute", T0), T0)
    claim = claim_occurrence(task, T0)
    assert claim is not None
    after = advanced(task, claim, T0)
    assert dataclasses.replace(after, next_run_at=None, version=1, last_scheduled_at=None) == (
        dataclasses.replace(task, next_run_at=None)
    )
