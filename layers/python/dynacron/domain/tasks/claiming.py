"""The pure rules of claiming one occurrence of a task: which occurrence runs now,
which were missed and what the catch-up and overlap policies make of them, and
the task as it is stored once the claim succeeded."""

from __future__ import annotations

import dataclasses
import hashlib
import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from dynacron.domain.coordination.uptime import UNKNOWN, ShardHistory
from dynacron.domain.executions.execution import Dispatch
from dynacron.domain.instants import format_instant, to_utc_ms
from dynacron.domain.schedules.calendars import OnExcluded
from dynacron.domain.schedules.expressions import (
    CronSchedule,
    FixedDelaySchedule,
    RateSchedule,
    Schedule,
)
from dynacron.domain.tasks.skips import Skip, skip_covering, skips_ahead
from dynacron.domain.tasks.task import (
    MAX_JITTER_SECONDS,
    SKIPPED_BUFFER_FULL,
    SKIPPED_OVERLAP,
    CatchUp,
    Overlap,
    Task,
    TaskStatus,
    execution_id_for,
)

# An occurrence claimed less than this late is on time and always runs. A later
# one is missed only if the scheduler was down while it was due (no tick of its
# shard ran, see ``uptime``) or the task was paused; then its task's catch-up
# policy decides. One held back by the scheduler's own load runs late.
DEFAULT_MISFIRE_GRACE = timedelta(seconds=60)
# run_all runs at most this many missed occurrences of one downtime: the latest.
DEFAULT_CATCHUP_MAX_RUNS = 100
_JUST_BEFORE = timedelta(microseconds=1)


@dataclass(frozen=True)
class Claim:
    """The outcome of claiming a task: the occurrence to run now, and what comes next.

    ``scheduled_at`` is None when every due occurrence was missed and the policy
    skips them: nothing runs, the task only moves on. ``skipped_since`` is the
    first occurrence passed over without running; every occurrence from it up
    to (not including) ``scheduled_at``, or ``next_run_at`` when nothing runs,
    was skipped.
    """

    task: Task
    scheduled_at: datetime | None
    next_run_at: datetime | None
    skipped_since: datetime | None = None
    # fixed_delay: the task waits for this execution to finish before it is due again.
    awaits_finish: bool = False
    # Overlap: the occurrence did not run because the slot was taken; why.
    overlap_skipped: datetime | None = None
    overlap_reason: str | None = None
    # buffer_one: the occurrence waits for the running execution to finish.
    buffered: datetime | None = None
    # run_all passed over missed occurrences (outside its window, or beyond its
    # most recent ``catchup_max_runs``): from ``skipped_since`` on.
    catchup_cut: bool = False
    # Skips: the occurrence its owner asked not to run, and why (it is recorded
    # SKIPPED); the task's skips still ahead once claimed (None: as they were).
    passed_over: datetime | None = None
    passed_over_reason: str | None = None
    skips_left: tuple[Skip, ...] | None = None

    @property
    def execution_id(self) -> str | None:
        """The id of the execution that runs ``scheduled_at``; None when nothing runs."""
        if self.scheduled_at is None:
            return None
        return execution_id_for(self.task.task_id, self.scheduled_at)

    @property
    def completes_task(self) -> bool:
        """Whether the task has nothing left to run (COMPLETED), nor waits for a finish."""
        return self.next_run_at is None and not self.awaits_finish

    @property
    def recorded_skip(self) -> tuple[datetime, str] | None:
        """The occurrence this claim passed over that leaves a SKIPPED execution, and
        why: one the overlap policy or a skip passed over; None if none."""
        if self.overlap_skipped is not None and self.overlap_reason is not None:
            return self.overlap_skipped, self.overlap_reason
        if self.passed_over is not None and self.passed_over_reason is not None:
            return self.passed_over, self.passed_over_reason
        return None

    @property
    def takes_slot(self) -> bool:
        """Whether the execution claimed holds the task's run slot (``Task.holds_slot``)."""
        return self.scheduled_at is not None and self.task.holds_slot

    def dispatch(self, now: datetime) -> Dispatch | None:
        """The message that runs this claim's occurrence; None when nothing runs."""
        if self.scheduled_at is None:
            return None
        return Dispatch(
            execution_id=execution_id_for(self.task.task_id, self.scheduled_at),
            task_id=self.task.task_id,
            scheduled_at=self.scheduled_at,
            delay_seconds=self.start_delay_seconds(now),
            tenant_id=self.task.tenant_id,
        )

    def start_delay_seconds(self, now: datetime) -> int:
        """How long the queue should hold this execution: until its jittered start.

        The start is ``scheduled_at`` plus an offset drawn from the execution id,
        so a retry or a duplicate send of the same occurrence keeps it. A late
        claim (a catch-up) is not delayed further than that start.
        """
        if self.scheduled_at is None:
            return 0
        execution_id = execution_id_for(self.task.task_id, self.scheduled_at)
        start = self.scheduled_at + timedelta(
            seconds=jitter_offset(execution_id, self.task.jitter_seconds)
        )
        return min(max(math.ceil((start - now).total_seconds()), 0), MAX_JITTER_SECONDS)


def jitter_offset(execution_id: str, jitter_seconds: int) -> int:
    """A whole number of seconds in ``[0, jitter_seconds]``, fixed by the execution id."""
    if jitter_seconds <= 0:
        return 0
    digest = hashlib.sha256(execution_id.encode()).digest()
    return int.from_bytes(digest[:8], "big") % (jitter_seconds + 1)


def claim_occurrence(
    task: Task,
    now: datetime,
    grace: timedelta = DEFAULT_MISFIRE_GRACE,
    *,
    history: ShardHistory = UNKNOWN,
    catchup_max_runs: int = DEFAULT_CATCHUP_MAX_RUNS,
) -> Claim | None:
    """Decide what claiming ``task`` at ``now`` means, or None if nothing is due.

    The next occurrence is always computed from a scheduled time, never from
    ``now``, so recurring tasks stay on their grid. An occurrence less than
    ``grace`` late is on time and runs. A later one runs late, unless it was
    missed: the task was paused when it fell due, or ``history`` says no tick of
    its shard ran while it was on time (by default nothing is known, and every
    late occurrence was missed). Missed ones go by the task's catch-up policy:
    ``run_once`` runs the earliest of a downtime and skips the rest, ``skip``
    runs none, ``run_all`` runs each one inside its window, at most the latest
    ``catchup_max_runs``. ``next_run_at`` may still be due (run_all, or on-time
    occurrences queued up): the tick claims again, and an occurrence counts as
    claimed once ``next_run_at`` has moved past it.
    """
    if task.status is not TaskStatus.ACTIVE or task.next_run_at is None:
        return None
    due = task.next_run_at
    if due > now:
        return None
    schedule = task.schedule
    if isinstance(schedule, FixedDelaySchedule):
        # No grid and nothing to catch up: the due run runs, and the next is
        # filed when it finishes. An execution still running (the schedule was
        # changed to fixed_delay under it) files it instead, when it ends.
        running = task.running_execution is not None
        return Claim(
            task=task, scheduled_at=None if running else due, next_run_at=None, awaits_finish=True
        )
    rules = _MissRules(now=now, grace=grace, history=history, resumed_at=task.resumed_at)
    claim = _excluding(_skipping(_claim_on_grid(task, schedule, due, rules, catchup_max_runs)))
    if claim.scheduled_at is None or task.running_execution is None or not task.holds_slot:
        return claim
    return _overlapping(claim, task.running_execution)


def _skipping(claim: Claim) -> Claim:
    """``claim`` with its occurrence passed over if a skip covers it (decision 0055),
    and the skips it leaves behind dropped."""
    skips = claim.task.skips
    if not skips:
        return claim
    if claim.scheduled_at is not None:
        skip = skip_covering(skips, claim.scheduled_at)
        if skip is not None:
            claim = dataclasses.replace(
                claim,
                scheduled_at=None,
                passed_over=claim.scheduled_at,
                passed_over_reason=skip.reason,
            )
    left = skips_ahead(skips, claim.next_run_at)
    return claim if left == skips else dataclasses.replace(claim, skips_left=left)


def _excluding(claim: Claim) -> Claim:
    """``claim`` with its occurrence passed over if its task's calendars exclude its
    day (decision 0056): recorded SKIPPED, or (``on_excluded: next``) moved to the
    same wall-clock time of the next included day, the task due then instead."""
    task = claim.task
    if not task.calendars or claim.scheduled_at is None:
        return claim
    reason = task.calendars.excluded(claim.scheduled_at)
    if reason is None:
        return claim
    moved = _moved(task, claim.scheduled_at, claim.next_run_at)
    if moved is not None:
        return dataclasses.replace(claim, scheduled_at=None, next_run_at=moved)
    return dataclasses.replace(
        claim, scheduled_at=None, passed_over=claim.scheduled_at, passed_over_reason=reason
    )


def _moved(task: Task, excluded: datetime, following: datetime | None) -> datetime | None:
    """Where ``on_excluded: next`` moves the ``excluded`` occurrence: the next included
    day's same wall-clock time, if that comes before the ``following`` occurrence
    (else that one runs, and this one is skipped); None when it is not moved."""
    if task.calendars.on_excluded is not OnExcluded.NEXT:
        return None
    moved = task.calendars.moved(excluded, task.timezone)
    if moved is None or (following is not None and moved >= following):
        return None
    return moved


def passed_over_reason(task: Task, occurrence: datetime) -> str | None:
    """Why claiming ``occurrence`` of ``task`` would run nothing for it, by the rules
    of ``_skipping`` and ``_excluding`` (a preview marks it so); None if it runs."""
    skip = skip_covering(task.skips, occurrence)
    if skip is not None:
        return skip.reason
    excluded = task.calendars.excluded(occurrence) if task.calendars else None
    if excluded is None:
        return None
    moved = _moved(task, occurrence, task.schedule.next_after(occurrence))
    return excluded if moved is None else f"{excluded}: runs at {format_instant(moved)} instead"


def _overlapping(claim: Claim, running: str) -> Claim:
    """The claim of an occurrence due while ``running`` holds the task's slot."""
    assert claim.scheduled_at is not None
    task = claim.task
    if task.overlap is Overlap.BUFFER_ONE and task.buffered_at is None:
        return dataclasses.replace(claim, scheduled_at=None, buffered=claim.scheduled_at)
    if task.buffered_at is not None:
        waiting = execution_id_for(task.task_id, task.buffered_at)
        reason = SKIPPED_BUFFER_FULL.format(buffered=waiting, running=running)
    else:
        reason = SKIPPED_OVERLAP.format(running=running)
    return dataclasses.replace(
        claim, scheduled_at=None, overlap_skipped=claim.scheduled_at, overlap_reason=reason
    )


@dataclass(frozen=True)
class _MissRules:
    """Whether an occurrence claimed at ``now`` was missed, and until when its downtime ran."""

    now: datetime
    grace: timedelta
    history: ShardHistory
    resumed_at: datetime | None

    @property
    def on_time_from(self) -> datetime:
        return self.now - self.grace

    def missed_until(self, became_due: datetime) -> datetime | None:
        """None if the occurrence runs (on time, or late by load); else the instant
        up to which every occurrence from it was missed (never later than on time)."""
        if became_due >= self.on_time_from:
            return None
        if self.resumed_at is not None and became_due < self.resumed_at:
            until: datetime | None = self.resumed_at
        else:
            until = self.history.missed_until(became_due, self.grace)
        return None if until is None else min(until, self.on_time_from)


def _claim_on_grid(
    task: Task, schedule: Schedule, due: datetime, rules: _MissRules, max_runs: int
) -> Claim:
    # Nothing is missed before the task existed: a one-time task registered a
    # little late is on time.
    missed_until = rules.missed_until(max(due, task.created_at))
    if missed_until is None:
        return Claim(task=task, scheduled_at=due, next_run_at=schedule.next_after(due))
    # Every occurrence in [due, missed_until) was missed; the next one is not.
    following = schedule.next_after(missed_until - _JUST_BEFORE)
    if task.catchup.policy is CatchUp.RUN_ONCE:
        after_due = schedule.next_after(due)
        return Claim(
            task=task,
            scheduled_at=due,
            next_run_at=following,
            skipped_since=after_due if after_due != following else None,
        )
    if task.catchup.policy is CatchUp.SKIP:
        runs_now = following is not None and following <= rules.now
        if runs_now and following is not None and rules.missed_until(following) is None:
            return Claim(
                task=task,
                scheduled_at=following,
                next_run_at=schedule.next_after(following),
                skipped_since=due,
            )
        return Claim(task=task, scheduled_at=None, next_run_at=following, skipped_since=due)
    # run_all: every missed occurrence inside the window, at most the latest max_runs.
    keep_from = rules.now - timedelta(seconds=task.catchup.window_seconds)
    first_kept = due if due >= keep_from else schedule.next_after(keep_from - _JUST_BEFORE)
    if first_kept is not None and first_kept < missed_until:
        first_kept = _latest_runs(schedule, first_kept, missed_until, max_runs)
    if first_kept is None or first_kept > rules.now:
        return Claim(
            task=task,
            scheduled_at=None,
            next_run_at=first_kept,
            skipped_since=due,
            catchup_cut=True,
        )
    cut = first_kept != due
    return Claim(
        task=task,
        scheduled_at=first_kept,
        next_run_at=schedule.next_after(first_kept),
        skipped_since=due if cut else None,
        catchup_cut=cut,
    )


_MILLISECOND = timedelta(milliseconds=1)


def _latest_runs(schedule: Schedule, first: datetime, end: datetime, limit: int) -> datetime:
    """The first of the latest ``limit`` occurrences in ``[first, end)`` (``first`` is one).

    A rate's grid is arithmetic. Otherwise counting costs at most ``limit + 1``
    steps; only a longer run is searched, by halving the time range (occurrences
    are whole milliseconds), once per downtime.
    """
    if isinstance(schedule, RateSchedule):
        return _latest_on_rate(schedule, first, end, limit)

    def more_than_limit_after(instant: datetime) -> bool:
        occurrence = schedule.next_after(instant)
        for _ in range(limit):
            if occurrence is None or occurrence >= end:
                return False
            occurrence = schedule.next_after(occurrence)
        return occurrence is not None and occurrence < end

    if not more_than_limit_after(first - _JUST_BEFORE):
        return first
    # More than ``limit`` occurrences after ``low``, at most ``limit`` after ``high``.
    low, high = first - _MILLISECOND, end
    while high - low > _MILLISECOND:
        middle = low + max(1, (high - low) // _MILLISECOND // 2) * _MILLISECOND
        if more_than_limit_after(middle):
            low = middle
        else:
            high = middle
    kept = schedule.next_after(high)
    assert kept is not None
    return kept


def _latest_on_rate(schedule: RateSchedule, first: datetime, end: datetime, limit: int) -> datetime:
    """``_latest_runs`` on a rate's grid: ``anchor + k * period``, ``k >= 0``, up to ``end_at``."""
    period = timedelta(seconds=schedule.every_seconds)
    # The last occurrence before ``end`` (and not after ``end_at``), as a period count.
    last = -((schedule.anchor - end) // period) - 1
    if schedule.window.end_at is not None:
        last = min(last, (schedule.window.end_at - schedule.anchor) // period)
    kept = schedule.anchor + (last - limit + 1) * period
    return max(first, to_utc_ms(kept))


def advanced(task: Task, claim: Claim, now: datetime) -> Task:
    """The task as it is stored once ``claim`` succeeded."""
    return dataclasses.replace(
        task,
        next_run_at=claim.next_run_at,
        status=TaskStatus.COMPLETED if claim.completes_task else task.status,
        last_scheduled_at=claim.scheduled_at or task.last_scheduled_at,
        running_execution=claim.execution_id if claim.takes_slot else task.running_execution,
        buffered_at=claim.buffered or task.buffered_at,
        skips=task.skips if claim.skips_left is None else claim.skips_left,
        version=task.version + 1,
        updated_at=to_utc_ms(now),
    )


def replanned_after_step_back(task: Task, now: datetime) -> datetime | None:
    """The earlier occurrence to plan ``task`` for after the clock stepped back, or
    None if it stays as planned (decision 0037).

    A clock that ran fast planned recurring tasks on its time: once corrected,
    their next occurrence lies a step ahead, and nothing would run until the clock
    caught up. A cron or rate task waits instead for the first occurrence of its
    schedule after ``now``, if that is earlier than the planned one. An occurrence
    the fast clock already ran keeps its execution id, so meeting it again runs
    nothing twice. A fixed-delay task whose last run has ended waits at most its
    delay from ``now`` (that run ended by now, whatever the fast clock said), at an
    instant no run had. One-time and ``after`` tasks keep their time, and so does a
    cron or rate task whose runs hold its slot (``overlap`` skip or buffer_one): an
    occurrence met again would take the slot under an execution already ended,
    which no end would release.
    """
    if task.status is not TaskStatus.ACTIVE or task.next_run_at is None:
        return None
    if task.next_run_at <= now:
        return None
    if isinstance(task.schedule, FixedDelaySchedule):
        if task.running_execution is not None:
            return None
        earliest: datetime | None = now + timedelta(seconds=task.schedule.delay_seconds)
    elif isinstance(task.schedule, CronSchedule | RateSchedule) and not task.holds_slot:
        earliest = task.schedule.next_after(now)
    else:
        return None
    if earliest is None or earliest >= task.next_run_at:
        return None
    return earliest
