"""Hours of ticks with random lateness: next_run_at never drifts off the grid.

The clock moves to each hour plus a random delay of up to 59 minutes (the tick
ran late), and now and then skips hours (the scheduler was down). After every
tick each task's next_run_at must be an occurrence of its schedule and in the
future; every occurrence run must be on the grid and run once; the run_all
tasks must have run every occurrence there was, and the skip task none that was
missed. Both runs cross the March 2027 DST changes of their zones.

1,000 hours run through the claim rules the tick uses (``claim_occurrence`` and
``advanced``, claiming until nothing is due, as a tick pass does); a day runs
through the real tick against moto, which costs about 0.3 s a tick there.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from dynacron.api.requests import TaskCreate
from dynacron.domain.clock import SettableClock
from dynacron.domain.coordination.tenants import DEFAULT_TENANT
from dynacron.domain.schedules.expressions import Schedule, upcoming
from dynacron.domain.tasks.claiming import DEFAULT_MISFIRE_GRACE, advanced, claim_occurrence
from dynacron.domain.tasks.task import Task
from dynacron.entry.composition import Dynacron
from dynacron.services.tasks import TaskService
from tests.contract import coordination_changes as changes
from tests.integration.tick.test_tick_policies import recording_ticker

TASKS = {
    "hourly-berlin-run-once": {"cron": "0 * * * *", "timezone": "Europe/Berlin"},
    "7-minutes-run-all": {
        "rate": "7 minutes",
        "anchor": "2027-03-01T00:00:13Z",
        "catchup": "run_all",
        "catchup_window_seconds": 86400,
    },
    "20-minutes-new-york-skip": {
        "cron": "*/20 * * * *",
        "timezone": "America/New_York",
        "dst": {"ambiguous": "both"},
        "catchup": "skip",
    },
    "hashed-15-minutes-run-all": {"cron": "H/15 * * * *", "catchup": "run_all"},
    "6-hours-run-once": {"rate": "6 hours"},
}
RUN_ALL = ("7-minutes-run-all", "hashed-15-minutes-run-all")
SKIP = "20-minutes-new-york-skip"

# One tick: given "now", run every due occurrence; returns (task name, scheduled_at) run.
Tick = Callable[[datetime], list[tuple[str, datetime]]]


def late_ticks(start: datetime, hours: int, seed: int) -> Iterator[datetime]:
    """Tick instants: each hour plus up to 59 minutes late; sometimes hours apart."""
    lateness = random.Random(seed)
    hour = start
    while hour < start + timedelta(hours=hours):
        hour += timedelta(hours=lateness.choice([1] * 30 + [2, 3, 5]))
        yield hour + timedelta(seconds=lateness.randrange(0, 3600))


def on_grid(schedule: Schedule, instant: datetime) -> bool:
    return schedule.next_after(instant - timedelta(microseconds=1)) == instant


def simulate(
    start: datetime,
    hours: int,
    tick: Tick,
    tasks: Callable[[], dict[str, Task]],
    clock: SettableClock,
) -> int:
    """Run the ticks, checking the grid after each one; returns how many ticks ran."""
    schedules = {name: task.schedule for name, task in tasks().items()}
    history: dict[str, list[datetime]] = {name: [] for name in schedules}
    ticks = 0
    now = start
    for now in late_ticks(start, hours, seed=20270301):
        clock.set(now)
        ran = tick(now)
        ticks += 1
        # Then each task waits for a future occurrence on its grid
        for name, task in tasks().items():
            assert task.next_run_at is not None, name
            assert task.next_run_at > now, name
            assert on_grid(schedules[name], task.next_run_at), (name, task.next_run_at)
        for name, scheduled_at in ran:
            history[name].append(scheduled_at)
            # And the skip task runs nothing that was missed
            if name == SKIP:
                assert scheduled_at >= now - DEFAULT_MISFIRE_GRACE
    for name, occurrences in history.items():
        # And every occurrence run was on the grid, in order, and run once
        assert occurrences == sorted(set(occurrences)), name
        assert all(on_grid(schedules[name], o) for o in occurrences), name
    for name in RUN_ALL:
        # And the run_all tasks ran every occurrence there was
        occurrences = history[name]
        assert occurrences == upcoming(schedules[name], start, len(occurrences)), name
        assert occurrences[-1] > now - timedelta(minutes=15), name
    # And the run_once tasks ran on every tick that found them due
    assert len(history["hourly-berlin-run-once"]) >= ticks
    return ticks


def registered(service: TaskService) -> dict[str, Task]:
    return {
        name: service.register(
            DEFAULT_TENANT, TaskCreate(handler_url="http://127.0.0.1:9/", **body).to_spec()
        )
        for name, body in TASKS.items()
    }


def test_a_thousand_hours_of_claims_never_drift_off_the_grid(
    system: Dynacron, clock: SettableClock
) -> None:
    # Given the tasks, registered through the service and then kept in memory
    start = datetime(2027, 3, 1, tzinfo=UTC)
    clock.set(start)
    tasks = registered(system.task_service)

    def tick(now: datetime) -> list[tuple[str, datetime]]:
        ran = []
        for name, task in tasks.items():
            while (claim := claim_occurrence(task, now)) is not None:
                if claim.scheduled_at is not None:
                    ran.append((name, claim.scheduled_at))
                task = advanced(task, claim, now)
            tasks[name] = task
        return ran

    # When 1,000 hours pass with late ticks and outages; then (see simulate)
    assert simulate(start, 1000, tick, lambda: tasks, clock) > 800


@pytest.mark.slow
def test_the_real_tick_never_drifts_off_the_grid(
    system: Dynacron, aws: tuple[Any, Any], clock: SettableClock
) -> None:
    # Given the tasks, 7 hours before Berlin's spring-forward (New York's was
    # two weeks before), and a new tick that need not look back further
    start = datetime(2027, 3, 27, 18, tzinfo=UTC)
    clock.set(start)
    for shard in range(system.settings.shard_count):  # the store was provisioned earlier
        changes.advance(system.cursors, shard, system.settings.sharding.bucket(start))
    ids = {name: task.task_id for name, task in registered(system.task_service).items()}
    names = {task_id: name for name, task_id in ids.items()}
    # (a task's whole catch-up in one tick: the simulation checks after each tick)
    ticker, queue = recording_ticker(
        system, initial_lookback_seconds=3600, tick_max_claims_per_task=1000
    )

    def tick(now: datetime) -> list[tuple[str, datetime]]:
        before = len(queue.accepted)
        ticker.tick()
        return [(names[d.task_id], d.scheduled_at) for d in queue.accepted[before:]]

    def stored() -> dict[str, Task]:
        tasks = {name: system.tasks.get(task_id) for name, task_id in ids.items()}
        return {name: task for name, task in tasks.items() if task is not None}

    # When 24 hours pass with late ticks and outages; then (see simulate)
    assert simulate(start, 24, tick, stored, clock) > 15
