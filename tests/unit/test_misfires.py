"""Misfires mean downtime, not load; run_all's backlog is bounded (issue 12, findings 4 and 6)."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from dynacron.domain.coordination.uptime import MAX_OUTAGES, UNKNOWN, Outage, ShardHistory
from dynacron.domain.schedules.expressions import Window, parse_cron, parse_rate, upcoming
from dynacron.domain.tasks.claiming import _latest_runs, advanced, claim_occurrence
from dynacron.domain.tasks.task import CatchUp, CatchUpPolicy, Task, TaskStatus

T0 = datetime(2026, 11, 30, 12, tzinfo=UTC)
GRACE = timedelta(seconds=60)
HEARTBEAT = timedelta(seconds=10)
SECOND = timedelta(seconds=1)
MINUTE = timedelta(minutes=1)


def task(policy: CatchUp, *, every: str = "1 minute", due: datetime = T0, **fields: object) -> Task:
    return Task(
        task_id="t",
        name="t",
        schedule=parse_rate(every, T0 - timedelta(days=30)),
        handler_url="http://127.0.0.1:9/",
        payload={},
        status=TaskStatus.ACTIVE,
        next_run_at=due,
        created_at=T0 - timedelta(days=30),
        updated_at=T0 - timedelta(days=30),
        catchup=CatchUpPolicy(policy=policy),
        **fields,  # type: ignore[arg-type]
    )


def ticking(since: datetime, until: datetime, *outages: tuple[datetime, datetime]) -> ShardHistory:
    return ShardHistory(
        ticking_since=since,
        last_tick=until,
        outages=tuple(Outage(a, b) for a, b in outages),
        heartbeat=HEARTBEAT,
    )


def test_a_first_tick_starts_the_history_and_a_long_gap_is_an_outage() -> None:
    history = UNKNOWN.record(T0, GRACE)
    assert history.ticking_since == T0
    assert history.outages == ()
    steady = history.record(T0 + HEARTBEAT, GRACE).record(T0 + 2 * HEARTBEAT, GRACE)
    assert steady.outages == ()
    after = steady.record(T0 + 5 * MINUTE, GRACE)
    assert after.outages == (Outage(T0 + 2 * HEARTBEAT, T0 + 5 * MINUTE),)
    # A tick whose clock is behind the last recorded one changes nothing
    assert after.record(T0, GRACE) == after


def test_only_the_latest_outages_are_kept_and_older_history_counts_as_down() -> None:
    history = UNKNOWN.record(T0, GRACE)
    for hour in range(1, MAX_OUTAGES + 3):
        history = history.record(T0 + timedelta(hours=hour), GRACE)
    assert len(history.outages) == MAX_OUTAGES
    assert history.ticking_since == history.outages[0].last_tick
    assert history.missed_until(T0 + MINUTE, GRACE) == history.ticking_since


def test_an_occurrence_is_missed_only_if_no_tick_ran_while_it_was_on_time() -> None:
    # Ticks up to T0 (recorded), none until T0 + 5 min
    history = ticking(T0 - timedelta(hours=1), T0 + 10 * MINUTE, (T0, T0 + 5 * MINUTE))
    # Before the last heartbeat's margin a tick may still have run: not missed
    assert history.missed_until(T0 + 5 * SECOND, GRACE) is None
    # In the outage, more than a grace before the tick that ended it: missed, until then
    assert history.missed_until(T0 + HEARTBEAT, GRACE) == T0 + 4 * MINUTE
    assert history.missed_until(T0 + 3 * MINUTE, GRACE) == T0 + 4 * MINUTE
    # Due within a grace of the tick that ended the outage: that tick found it on time
    assert history.missed_until(T0 + 4 * MINUTE, GRACE) is None
    # While ticks ran: never missed, however late it is claimed
    assert history.missed_until(T0 + 6 * MINUTE, GRACE) is None
    # Before the first heartbeat: the scheduler was not running
    assert history.missed_until(T0 - 2 * timedelta(hours=1), GRACE) == T0 - timedelta(hours=1)
    # Nothing known: missed (the rule before heartbeats existed)
    assert UNKNOWN.missed_until(T0, GRACE) is not None


@pytest.mark.parametrize("policy", list(CatchUp))
def test_lateness_from_load_runs_the_occurrence_late_whatever_the_policy(policy: CatchUp) -> None:
    # Given a shard that ticked all along, and an occurrence claimed 5 minutes late
    now = T0 + 5 * MINUTE
    history = ticking(T0 - timedelta(days=1), now)
    claim = claim_occurrence(task(policy), now, GRACE, history=history)
    # Then it runs, late, and the task moves to its next occurrence on the grid
    assert claim is not None
    assert claim.scheduled_at == T0
    assert claim.next_run_at == T0 + MINUTE
    assert claim.skipped_since is None


@pytest.mark.parametrize(
    ("policy", "runs", "next_run_at"),
    [
        (CatchUp.SKIP, T0 + 4 * MINUTE, T0 + 5 * MINUTE),
        (CatchUp.RUN_ONCE, T0, T0 + 4 * MINUTE),
        (CatchUp.RUN_ALL, T0, T0 + MINUTE),
    ],
)
def test_an_outage_still_goes_by_the_catch_up_policy(
    policy: CatchUp, runs: datetime, next_run_at: datetime
) -> None:
    # Given no tick from 10 s before T0 until T0 + 5 min (the claim's time)
    now = T0 + 5 * MINUTE
    history = ticking(T0 - timedelta(days=1), now, (T0 - HEARTBEAT, now))
    claim = claim_occurrence(task(policy), now, GRACE, history=history)
    assert claim is not None
    assert claim.scheduled_at == runs
    assert claim.next_run_at == next_run_at


def test_a_task_paused_when_its_occurrence_fell_due_missed_it() -> None:
    now = T0 + 5 * MINUTE
    history = ticking(T0 - timedelta(days=1), now)
    paused = task(CatchUp.SKIP, resumed_at=now - SECOND)
    claim = claim_occurrence(paused, now, GRACE, history=history)
    assert claim is not None
    assert claim.skipped_since == T0
    # The occurrences from the resume on are on time and run
    assert claim.scheduled_at == T0 + 4 * MINUTE


def run_all_claims(start: Task, now: datetime, limit: int) -> list[datetime]:
    ran: list[datetime] = []
    current = start
    while (claim := claim_occurrence(current, now, GRACE, catchup_max_runs=limit)) is not None:
        if claim.scheduled_at is not None:
            ran.append(claim.scheduled_at)
        current = advanced(current, claim, now)
    return ran


@pytest.mark.parametrize("limit", [1, 7, 100])
def test_run_all_runs_at_most_the_latest_missed_occurrences(limit: int) -> None:
    # Given a per-second run_all task that missed a day (inside its window)
    now = T0 + timedelta(days=1)
    start = task(CatchUp.RUN_ALL, every="1 second", due=T0 + SECOND)
    ran = run_all_claims(start, now, limit)
    # Then it ran the latest ``limit`` missed ones, then every on-time one, each once
    missed = [o for o in ran if o < now - GRACE]
    assert missed == [now - GRACE - (limit - i) * SECOND for i in range(limit)]
    assert ran[len(missed) :] == [now - GRACE + i * SECOND for i in range(61)]


def test_run_all_keeps_the_latest_occurrences_of_a_cron_schedule_exactly() -> None:
    # An irregular grid (minutes 0, 7 and 30 of hours 9-17 on weekdays, Berlin)
    schedule = parse_cron("0,7,30 9-17 * * MON-FRI", "Europe/Berlin")
    now = T0 + timedelta(days=1)
    start = Task(
        task_id="t",
        name="t",
        schedule=schedule,
        handler_url="http://127.0.0.1:9/",
        payload={},
        status=TaskStatus.ACTIVE,
        next_run_at=schedule.next_after(T0 - timedelta(days=1)),
        created_at=T0 - timedelta(days=30),
        updated_at=T0 - timedelta(days=30),
        catchup=CatchUpPolicy(policy=CatchUp.RUN_ALL),
    )
    ran = run_all_claims(start, now, 10)
    window_start = now - timedelta(days=1)
    every = [
        o
        for o in upcoming(schedule, window_start - timedelta(microseconds=1), 500)
        if o < now - GRACE
    ]
    assert len(every) > 10
    assert [o for o in ran if o < now - GRACE] == every[-10:]
    assert [o for o in ran if o >= now - GRACE] == [now]  # 13:00 in Berlin, on time


def test_the_latest_runs_of_a_rate_grid_match_a_brute_force_count() -> None:
    rng = random.Random(20261201)
    for _ in range(300):
        every = rng.choice([1, 7, 60, 3600])
        anchor = T0 + timedelta(milliseconds=rng.randrange(0, 10_000_000))
        end_at = anchor + timedelta(seconds=rng.randrange(every, 500 * every))
        schedule = parse_rate(f"{every} seconds", anchor, Window(end_at=end_at))
        first = schedule.next_after(anchor + timedelta(seconds=rng.randrange(0, 100 * every)))
        if first is None:
            continue
        end = first + timedelta(milliseconds=rng.randrange(1, 400_000 * every))
        limit = rng.randrange(1, 50)
        grid = [o for o in upcoming(schedule, first - timedelta(microseconds=1), 1000) if o < end]
        assert _latest_runs(schedule, first, end, limit) == grid[-limit:][0]
