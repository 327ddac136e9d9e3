"""Tasks (what to run and when), the ids of their executions, and where a task waits
in the due index. What claiming one occurrence means is ``claiming``."""

from __future__ import annotations

import dataclasses
import zlib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from dynacron.domain.coordination.limits import TaskLimits
from dynacron.domain.coordination.tenants import DEFAULT_TENANT
from dynacron.domain.executions.notifications import (
    NO_NOTIFICATIONS,
    NO_NOTIFY,
    NotificationState,
    NotifySettings,
)
from dynacron.domain.executions.retry import RetryPolicy
from dynacron.domain.instants import compact_instant
from dynacron.domain.schedules.calendars import NO_CALENDARS, CalendarRule
from dynacron.domain.schedules.expressions import AfterSchedule, FixedDelaySchedule, Schedule
from dynacron.domain.tasks.skips import Skip
from dynacron.domain.tasks.targets import Target

DEFAULT_CATCHUP_WINDOW_SECONDS = 24 * 3600
MAX_CATCHUP_WINDOW_SECONDS = 366 * 24 * 3600
# SQS DelaySeconds is at most 15 minutes, and jitter is applied as that delay.
MAX_JITTER_SECONDS = 900


class TaskStatus(StrEnum):
    """Whether the tick may claim the task: only an ACTIVE one is ever in the due index."""

    ACTIVE = "ACTIVE"
    PAUSED = "PAUSED"
    COMPLETED = "COMPLETED"
    # Set aside: claiming it, or handling the end of one of its executions, raised.
    # Out of the due index like PAUSED; ``status_reason`` says why. PATCH with a
    # schedule, or resume, makes it ACTIVE again.
    ERROR = "ERROR"


class CatchUp(StrEnum):
    """What happens to occurrences missed by more than the misfire grace."""

    SKIP = "skip"  # none of them runs; the task resumes with the next on-time one
    RUN_ONCE = "run_once"  # the earliest runs, once, standing in for all of them
    # each runs, with its own execution, within the catch-up window; at most the
    # latest ``catchup_max_runs`` of one downtime
    RUN_ALL = "run_all"


class Overlap(StrEnum):
    """What happens to a scheduled occurrence while the previous one still runs."""

    ALLOW = "allow"  # it runs anyway, alongside
    SKIP = "skip"  # it does not run; a SKIPPED execution records why
    BUFFER_ONE = "buffer_one"  # it runs once the running one ends; at most one waits


# Why an occurrence was passed over; stored as the SKIPPED execution's error.
SKIPPED_OVERLAP = "overlap: the previous execution {running} was still running"
SKIPPED_BUFFER_FULL = "overlap: {buffered} was already waiting for {running} to finish"
SKIPPED_PAUSED = "the task was paused when this execution was due to run"
SKIPPED_SET_ASIDE = "the task was set aside (ERROR) when this execution was due to run: {reason}"
SKIPPED_CATCHUP = (
    "catch-up: the occurrences from this one until before {kept} were missed and not run"
    " (run_all runs missed occurrences inside catchup_window_seconds, at most the latest {limit})"
)


@dataclass(frozen=True)
class CatchUpPolicy:
    """What runs of the occurrences a downtime missed (``CatchUp``), and within what window."""

    policy: CatchUp = CatchUp.RUN_ONCE
    # run_all only: occurrences missed by more than this never run.
    window_seconds: int = DEFAULT_CATCHUP_WINDOW_SECONDS


@dataclass(frozen=True, order=True)
class UpstreamEnd:
    """An upstream execution's end, as a fan-in counts it: ordered by when it ended
    (the finisher's clock), then by id (two ends in one millisecond)."""

    completed_at: datetime
    execution_id: str


@dataclass(frozen=True)
class FanInState:
    """A fan-in dependent's progress (``domain.tasks.fan_in``): the newest matching
    end of each upstream; of its last run, ``fired``, the end whose write completed
    the set (the run's id is derived from it), and ``through``, the newest end of
    that set, which each end of the next set must be newer than."""

    ends: dict[str, UpstreamEnd] = field(default_factory=dict)
    fired: UpstreamEnd | None = None
    through: UpstreamEnd | None = None


@dataclass(frozen=True)
class Task:
    """A task runs exactly one of an HTTP handler (``handler_url``), a registered
    Python handler (``handler_name``) or an AWS ``target``."""

    task_id: str
    name: str
    schedule: Schedule
    handler_url: str | None
    payload: dict[str, Any]
    status: TaskStatus
    next_run_at: datetime | None
    created_at: datetime
    updated_at: datetime
    version: int = 1
    last_scheduled_at: datetime | None = None
    catchup: CatchUpPolicy = dataclasses.field(default_factory=CatchUpPolicy)
    jitter_seconds: int = 0
    tenant_id: str = DEFAULT_TENANT
    handler_name: str | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    overlap: Overlap = Overlap.ALLOW
    pause_note: str | None = None
    # The scheduled execution holding the task's run slot (overlap skip or
    # buffer_one, fixed_delay), and the one occurrence waiting for it (buffer_one).
    running_execution: str | None = None
    buffered_at: datetime | None = None
    limits: TaskLimits = field(default_factory=TaskLimits)
    # Set once some task was registered to run after this one; saves the
    # dependents lookup on every success of a task nobody follows.
    has_dependents: bool = False
    # ERROR only: what raised, for the owner to read.
    status_reason: str | None = None
    # When the task was last resumed: an occurrence that fell due before it was
    # missed (the task was paused), whatever the scheduler did meanwhile.
    resumed_at: datetime | None = None
    # Labels for its owner to find it by (``domain.tasks.tags``); never interpreted.
    tags: dict[str, str] = field(default_factory=dict)
    # An AWS API called with its owner's role (``domain.tasks.targets``).
    target: Target | None = None
    # Skips: occurrences its owner asked not to run, those still ahead (``domain.tasks.skips``).
    skips: tuple[Skip, ...] = ()
    # Calendars: those its occurrences are held to, their days copied here so that
    # a claim reads nothing more (``domain.schedules.calendars``, decision 0056).
    calendars: CalendarRule = NO_CALENDARS
    # Whom to tell when it fails, recovers, dead-letters or is late (decision 0057),
    # and what its notifications counted and sent so far.
    notify: NotifySettings = NO_NOTIFY
    notification_state: NotificationState = NO_NOTIFICATIONS
    # Fan-in (decision 0058). On a dependent of several upstreams: the ends it has
    # counted since its last run. On an upstream: the dependents that name it after
    # their first upstream (the dependents index holds only the first).
    fan_in: FanInState | None = None
    fan_in_dependents: tuple[str, ...] = ()

    @property
    def timezone(self) -> str:
        """The zone its schedule reads wall-clock times in; UTC for kinds without one."""
        return getattr(self.schedule, "timezone", "UTC")

    @property
    def holds_slot(self) -> bool:
        """Whether a scheduled execution of this task must end before the next starts."""
        return self.overlap is not Overlap.ALLOW or isinstance(self.schedule, FixedDelaySchedule)

    @property
    def upstream_task_id(self) -> str | None:
        """The task it runs after; None unless its schedule is ``after``."""
        return getattr(self.schedule, "upstream_task_id", None)


# The schedule of a stored task whose own schedule cannot be read (an item written
# around the API): shown as "unreadable", never claimed (such a task is ERROR).
UNREADABLE_SCHEDULE = AfterSchedule(upstream_task_id="")


def execution_id_for(task_id: str, scheduled_at: datetime) -> str:
    """The deterministic id of one occurrence: the task id plus its scheduled instant.

    Sending or running the same occurrence twice yields the same id, which is what
    makes duplicates detectable downstream. Ids of one task sort by time.
    """
    return f"{task_id}_{compact_instant(scheduled_at)}"


BACKFILL_SUFFIX = "-backfill"


def triggered_execution_id(task_id: str, now: datetime) -> str:
    """A run asked for by hand: its own id, never one a scheduled occurrence has."""
    return f"{task_id}_{compact_instant(now)}-trigger"


def backfill_execution_id(task_id: str, scheduled_at: datetime) -> str:
    """The backfill run of one occurrence: the same every time it is asked for."""
    return f"{task_id}_{compact_instant(scheduled_at)}{BACKFILL_SUFFIX}"


def is_backfill(execution_id: str) -> bool:
    """Whether ``execution_id`` is a backfill run (``backfill_execution_id``): one of
    an occurrence long past, asked for now."""
    return execution_id.endswith(BACKFILL_SUFFIX)


def downstream_execution_id(task_id: str, upstream_execution_id: str) -> str:
    """The run of a dependent task caused by one upstream execution.

    Derived from the upstream id, so a success signalled twice yields the same id
    and runs once. The upstream task's hash keeps the ids of two upstreams apart
    (a PATCH may change which task ``task_id`` follows).
    """
    upstream_task, _, suffix = upstream_execution_id.rpartition("_")
    return f"{task_id}_{suffix}-after-{zlib.crc32(upstream_task.encode()):08x}"


def task_id_of(execution_id: str) -> str:
    """The task an execution id belongs to; ``ValueError`` if it is not an execution id."""
    task_id, _, _ = execution_id.rpartition("_")
    if not task_id:
        raise ValueError(f"{execution_id!r} is not an execution id")
    return task_id


def shard_for(task_id: str, shard_count: int) -> int:
    """A stable shard in ``[0, shard_count)``; the same on every machine and run."""
    return zlib.crc32(task_id.encode()) % shard_count


def bucket_start(instant: datetime, bucket_seconds: int) -> datetime:
    """The start of the time bucket holding ``instant``, whole seconds from the epoch."""
    epoch = int(instant.timestamp())
    return datetime.fromtimestamp(epoch - epoch % bucket_seconds, UTC)


def due_bucket_key(bucket: datetime, shard: int) -> str:
    """The due index partition key: a time bucket and a shard, e.g. ``20261130T030000Z#3``."""
    return f"{bucket:%Y%m%dT%H%M%SZ}#{shard}"


@dataclass(frozen=True)
class DuePlacement:
    """Where a task with a pending occurrence sits in the due index."""

    bucket: datetime
    shard: int

    @property
    def key(self) -> str:
        """The due index partition key of this placement."""
        return due_bucket_key(self.bucket, self.shard)


@dataclass(frozen=True)
class Sharding:
    """How pending occurrences are spread over the due index: shards times time buckets."""

    shard_count: int
    bucket_seconds: int

    def bucket(self, instant: datetime) -> datetime:
        """The start of the time bucket holding ``instant``."""
        return bucket_start(instant, self.bucket_seconds)

    def place(
        self, task_id: str, next_run_at: datetime | None, now: datetime
    ) -> DuePlacement | None:
        """The bucket a pending occurrence is filed under; None when nothing is pending.

        An occurrence already in the past is filed under the bucket of ``now``, never
        an older one: the tick's cursor may have moved past older buckets, and an
        item filed behind the cursor would never be found.
        """
        if next_run_at is None:
            return None
        return DuePlacement(
            bucket=self.bucket(max(next_run_at, now)),
            shard=shard_for(task_id, self.shard_count),
        )

    def place_task(self, task: Task, now: datetime) -> DuePlacement | None:
        """Where ``task`` belongs in the due index: nowhere unless it is ACTIVE
        (paused and completed tasks leave the sparse index)."""
        if task.status is not TaskStatus.ACTIVE:
            return None
        return self.place(task.task_id, task.next_run_at, now)


def skipped_reason(task: Task) -> str:
    """Why an execution of ``task``, which is not running executions now, is SKIPPED."""
    if task.status is TaskStatus.ERROR:
        return SKIPPED_SET_ASIDE.format(reason=task.status_reason or "no reason was recorded")
    return SKIPPED_PAUSED
