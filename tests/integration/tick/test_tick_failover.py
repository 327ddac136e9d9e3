"""The deployed tick's schedule on a moved clock: each minute an invocation of the
shard arrives (as EventBridge starts it) with the tick function's timeout; they run
at once, as concurrent Lambdas do. A holder killed mid-loop is replaced by its
standby within the bound; without a kill, holders hand over with no gap
(decision 0036)."""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta

from dynacron.api.requests import TaskCreate
from dynacron.definitions.tick_timing import LoopTiming
from dynacron.domain.clock import SettableClock
from dynacron.domain.coordination.tenants import DEFAULT_TENANT
from dynacron.domain.tasks.task import shard_for
from dynacron.entry.composition import Dynacron
from dynacron.entry.settings import Settings
from dynacron.services.tick_loop import LoopEnd, ShardTickLoop
from tests.support import ConcurrentLoops, FakeLambdaContext

HOOK = "http://127.0.0.1:9/hook"
SHARD = 0
TIMING = LoopTiming()
# The seed's promise: a task fires less than this late, whatever the tick's fate.
BOUND = timedelta(seconds=10)
# EventBridge starts an invocation somewhere in its minute, never on the second.
ARRIVAL_OFFSET = timedelta(milliseconds=300)


def one_time_tasks_in_shard(
    system: Dynacron, settings: Settings, first: datetime, seconds: int
) -> list[str]:
    """A one-time task of ``SHARD`` due at each whole second from ``first``."""
    task_ids = []
    for second in range(seconds):
        at = (first + timedelta(seconds=second)).isoformat()
        while True:
            task = system.task_service.register(
                DEFAULT_TENANT, TaskCreate(handler_url=HOOK, at=at).to_spec()
            )
            if shard_for(task.task_id, settings.shard_count) == SHARD:
                task_ids.append(task.task_id)
                break
            system.task_service.delete(DEFAULT_TENANT, task.task_id)
    return task_ids


def invocation(system: Dynacron, minute: int) -> ShardTickLoop:
    """Minute ``minute``'s invocation, as the entry point builds it from the schedule's
    event and the function's timeout."""
    context = FakeLambdaContext(
        aws_request_id=f"minute-{minute}",
        remaining_millis=int(TIMING.invocation_seconds * 1000),
    )
    return system.looping_tick(SHARD, context)


def run_schedule(
    system: Dynacron, clock: SettableClock, minutes: int, kill_at: datetime | None = None
) -> tuple[ConcurrentLoops, list[ShardTickLoop]]:
    """Start an invocation each schedule period for ``minutes`` periods; at ``kill_at``
    kill whichever invocation holds the shard then. Runs on until every loop ended."""
    start = clock.now()
    loops, started = ConcurrentLoops(clock), []
    period = timedelta(seconds=TIMING.schedule_period_seconds)
    for minute in range(minutes):
        arrival = start + minute * period + ARRIVAL_OFFSET
        if kill_at is not None and clock.now() < kill_at <= arrival:
            loops.until(kill_at)
            (holder,) = [loop for loop in started if loop.holding and loop.report.ended is None]
            loops.kill(holder)
        loops.until(arrival)
        started.append(invocation(system, minute))
        loops.start(started[-1])
    loops.until(clock.now() + timedelta(seconds=TIMING.invocation_seconds))
    return loops, started


def test_a_holder_killed_mid_loop_is_replaced_by_its_standby_within_ten_seconds(
    system: Dynacron, clock: SettableClock, settings: Settings
) -> None:
    # Given a task of the shard due each second around the moment the holder dies
    start = clock.now()
    kill_at = start + timedelta(seconds=150.2)
    first_due = kill_at - timedelta(seconds=5.2)
    task_ids = one_time_tasks_in_shard(system, settings, first_due, seconds=30)
    # When the schedule runs for four minutes and the holder is killed mid-loop
    loops, started = run_schedule(system, clock, minutes=4, kill_at=kill_at)
    # Then another invocation, standing by, took the expired lease, never two at once
    (killed,) = loops.run.killed
    assert killed.report.ticks > 0
    assert loops.run.most_holders == 1
    took_over = [loop for loop in started if loop.report.took_over_expired]
    assert len(took_over) == 1
    # And every task of the shard was claimed once, none more than the bound late
    lateness = [s for loop in started for s in loop.report.lateness_seconds]
    assert len(lateness) == len(task_ids)
    assert max(lateness) <= BOUND.total_seconds()
    # (the lease and the standby's read: the bound the decision states, plus the tick)
    assert max(lateness) <= TIMING.failover_seconds + TIMING.tick_interval_seconds
    # And the shard went unticked for no longer than that either
    ticks = [at for at, _ in loops.run.tick_times]
    gap = max(b - a for a, b in itertools.pairwise(ticks))
    assert gap <= timedelta(seconds=TIMING.failover_seconds + TIMING.tick_interval_seconds)


def test_on_schedule_each_holder_hands_over_to_its_standby_with_no_gap(
    system: Dynacron, clock: SettableClock, settings: Settings
) -> None:
    # Given a task of the shard due every 7 s for four minutes
    start = clock.now()
    task_ids = [
        task_id
        for offset in range(10, 250, 7)
        for task_id in one_time_tasks_in_shard(
            system, settings, start + timedelta(seconds=offset), seconds=1
        )
    ]
    # When the schedule runs five minutes and nobody dies
    loops, started = run_schedule(system, clock, minutes=5)
    # Then each invocation stood by, then held the shard, and handed it to the next
    assert loops.run.most_holders == 1
    assert not any(loop.report.took_over_expired for loop in started)
    assert [loop.report.ended for loop in started[:-1]] == [LoopEnd.HANDED_OVER] * 4
    assert started[-1].report.ended is LoopEnd.DEADLINE
    assert all(loop.report.ticks > 0 for loop in started)
    # And from the second invocation's arrival to the last's, the holder always had
    # a standby watching its lease
    second, last = (
        start + ARRIVAL_OFFSET + timedelta(seconds=TIMING.schedule_period_seconds),
        (start + ARRIVAL_OFFSET + 4 * timedelta(seconds=TIMING.schedule_period_seconds)),
    )
    assert [(a, b) for a, b in loops.run.without_standby if a < last and b > second] == []
    # And the shard was ticked every second throughout: a hand-over costs half a tick
    ticks = [at for at, _ in loops.run.tick_times]
    assert max(b - a for a, b in itertools.pairwise(ticks)) <= timedelta(seconds=1.5)
    # And every task was claimed once, less than a tick and a half late
    lateness = [s for loop in started for s in loop.report.lateness_seconds]
    assert len(lateness) == len(task_ids)
    assert max(lateness) <= 1.5
