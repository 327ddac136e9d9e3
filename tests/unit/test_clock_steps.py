"""Steps of the wall clock (decision 0037): seen against a monotonic clock, counted,
allowed for in lease cutoffs; and the re-plan of a task a fast clock planned ahead."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

from dynacron.adapters.powertools.metrics import MetricTotals, ReliabilityMetrics
from dynacron.definitions import metric_names
from dynacron.domain.clock import SettableClock, SystemClock
from dynacron.domain.executions.execution import LeaseTerms
from dynacron.domain.schedules.expressions import (
    CronSchedule,
    FixedDelaySchedule,
    OneTimeSchedule,
    RateSchedule,
)
from dynacron.domain.tasks import transitions as tasks
from dynacron.domain.tasks.claiming import replanned_after_step_back
from dynacron.domain.tasks.task import Overlap, Task, TaskStatus
from dynacron.services.clock_steps import ClockSteps, lease_hold, monotonic_of

NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
SECOND = timedelta(seconds=1)
TERMS = LeaseTerms(
    running=timedelta(seconds=30),
    awaiting_callback=timedelta(seconds=600),
    pickup_grace=timedelta(seconds=300),
    clock_skew=timedelta(seconds=5),
)


def watching(clock: SettableClock) -> tuple[ClockSteps, MetricTotals, ReliabilityMetrics]:
    totals = MetricTotals()
    metrics = ReliabilityMetrics(totals)
    steps = ClockSteps(clock, monotonic_of(clock), hold=lease_hold(TERMS), metrics=metrics)
    return steps, totals, metrics


def counted(totals: MetricTotals, metrics: ReliabilityMetrics) -> float:
    metrics.flush()
    return totals.total(metric_names.CLOCK_STEPS)


def test_a_settable_clock_steps_its_wall_time_alone() -> None:
    clock = SettableClock(NOW)
    clock.advance(10 * SECOND)
    clock.set(NOW + 15 * SECOND)
    assert clock.monotonic() == 15.0
    clock.step(timedelta(hours=2))
    assert clock.now() == NOW + timedelta(hours=2, seconds=15)
    assert clock.monotonic() == 15.0
    assert monotonic_of(SystemClock()) is not None


def test_time_passing_is_no_step_and_a_step_either_way_is_counted_once() -> None:
    clock = SettableClock(NOW)
    steps, totals, metrics = watching(clock)
    clock.advance(timedelta(hours=3))
    assert steps.observe() == 0.0
    clock.step(timedelta(seconds=1.5))  # below the threshold: scheduling noise
    assert steps.observe() == 0.0

    clock.step(timedelta(hours=2))
    assert steps.observe() == 7200.0
    assert steps.observe() == 0.0  # seen once
    clock.step(-timedelta(hours=2))
    clock.advance(SECOND)
    assert steps.observe() == -7200.0
    assert counted(totals, metrics) == 2
    assert steps.backward_since(0) == (1, timedelta(hours=2))
    assert steps.backward_since(1) == (1, timedelta(0))


def test_after_a_forward_step_leases_are_measured_as_if_it_had_not_happened_for_a_hold() -> None:
    clock = SettableClock(NOW)
    steps, _, _ = watching(clock)
    assert steps.abandoned_before(TERMS) == (NOW, NOW - TERMS.clock_skew)

    clock.step(timedelta(hours=2))
    now, cutoff = steps.abandoned_before(TERMS)
    assert now == NOW + timedelta(hours=2)
    assert cutoff == NOW - TERMS.clock_skew  # a lease renewed just before still holds

    # Within the hold (the longest lease: every live one renews in it)...
    clock.advance(lease_hold(TERMS) - SECOND)
    assert steps.abandoned_before(TERMS)[1] == clock.now() - timedelta(hours=2) - TERMS.clock_skew
    # ...and after it, the clock as it reads.
    clock.advance(SECOND)
    assert steps.abandoned_before(TERMS)[1] == clock.now() - TERMS.clock_skew


def test_a_step_back_moves_no_cutoff() -> None:
    """Leases renewed on a fast clock look long to a corrected one: their recovery
    waits (a dead holder's attempt runs late), never a live holder's call twice."""
    clock = SettableClock(NOW)
    steps, _, _ = watching(clock)
    clock.step(-timedelta(hours=2))
    now, cutoff = steps.abandoned_before(TERMS)
    assert cutoff == now - TERMS.clock_skew


def test_without_a_monotonic_clock_nothing_is_looked_for() -> None:
    clock = SettableClock(NOW)
    steps = ClockSteps(clock, None, hold=lease_hold(TERMS))
    clock.step(timedelta(hours=2))
    assert steps.observe() == 0.0
    assert steps.abandoned_before(TERMS)[1] == clock.now() - TERMS.clock_skew


def a_task(
    schedule: CronSchedule | RateSchedule | OneTimeSchedule | FixedDelaySchedule,
    next_run_at: datetime,
) -> Task:
    return Task(
        task_id="job",
        name="job",
        schedule=schedule,
        handler_url="http://127.0.0.1:9/",
        payload={},
        status=TaskStatus.ACTIVE,
        next_run_at=next_run_at,
        created_at=NOW - timedelta(days=1),
        updated_at=NOW,
        version=7,
    )


def test_a_recurring_task_planned_ahead_by_a_fast_clock_waits_for_its_next_occurrence() -> None:
    now = NOW + timedelta(seconds=20)
    ahead = NOW + timedelta(hours=2, minutes=5)
    every_minute = RateSchedule(every_seconds=60, anchor=NOW - timedelta(days=1))
    assert replanned_after_step_back(a_task(every_minute, ahead), now) == NOW + timedelta(minutes=1)
    cron = CronSchedule("*/5 * * * *")
    assert replanned_after_step_back(a_task(cron, ahead), now) == NOW + timedelta(minutes=5)

    # Already on its next occurrence, or due: as planned.
    assert replanned_after_step_back(a_task(every_minute, NOW + timedelta(minutes=1)), now) is None
    assert replanned_after_step_back(a_task(every_minute, NOW), now) is None
    # A one-time task keeps its time; so does one whose runs hold a slot, or a paused one.
    assert replanned_after_step_back(a_task(OneTimeSchedule(at=ahead), ahead), now) is None
    holding = dataclasses.replace(a_task(every_minute, ahead), overlap=Overlap.SKIP)
    assert replanned_after_step_back(holding, now) is None
    paused = dataclasses.replace(a_task(every_minute, ahead), status=TaskStatus.PAUSED)
    assert replanned_after_step_back(paused, now) is None


def test_a_replan_expects_the_active_task_at_the_version_read() -> None:
    change = tasks.replan(7, NOW, "20261130T120000Z#1", NOW)
    assert change.holds({"version": 7, "status": "ACTIVE"})
    assert not change.holds({"version": 8, "status": "ACTIVE"})
    assert not change.holds({"version": 7, "status": "PAUSED"})
    assert change.sets["due_bucket"] == "20261130T120000Z#1"


def test_a_fixed_delay_task_planned_ahead_by_a_fast_clock_waits_at_most_its_delay() -> None:
    now = NOW + timedelta(seconds=20)
    ahead = NOW + timedelta(hours=2, minutes=5)
    every_five = FixedDelaySchedule(delay_seconds=300)
    # Its last run ended by now: it is due at most its delay from now
    assert replanned_after_step_back(a_task(every_five, ahead), now) == now + timedelta(minutes=5)
    # Planned within its delay already, or still running (the end plans it): as it is
    due_soon = a_task(every_five, now + timedelta(minutes=4))
    assert replanned_after_step_back(due_soon, now) is None
    running = dataclasses.replace(a_task(every_five, ahead), running_execution="job_1")
    assert replanned_after_step_back(running, now) is None
