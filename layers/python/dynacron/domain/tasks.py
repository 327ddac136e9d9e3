"""Tasks (what to run and when) and the pure rules of claiming one occurrence."""

from __future__ import annotations

import dataclasses
import hashlib
import math
import zlib
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from dynacron.domain.executions import Dispatch
from dynacron.domain.instants import compact_instant, to_utc_ms
from dynacron.domain.limits import TaskLimits
from dynacron.domain.retry import RetryPolicy
from dynacron.domain.schedules import Schedule

# An occurrence claimed less than this late is on time and always runs; a later
# one was missed (the scheduler was down, the task paused) and its task's
# catch-up policy decides. The tick runs every second, so only an outage is late.
DEFAULT_MISFIRE_GRACE = timedelta(seconds=60)
DEFAULT_CATCHUP_WINDOW_SECONDS = 24 * 3600
MAX_CATCHUP_WINDOW_SECONDS = 366 * 24 * 3600
# SQS DelaySeconds is at most 15 minutes, and jitter is applied as that delay.
MAX_JITTER_SECONDS = 900
_JUST_BEFORE = timedelta(microseconds=1)


class TaskStatus(StrEnum):
    ACTIVE = "ACTIVE"
    PAUSED = "PAUSED"
    COMPLETED = "COMPLETED"


class CatchUp(StrEnum):
    """What happens to occurrences missed by more than the misfire grace."""

    SKIP = "skip"  # none of them runs; the task resumes with the next on-time one
    RUN_ONCE = "run_once"  # the earliest runs, once, standing in for all of them
    RUN_ALL = "run_all"  # each runs, with its own execution, within the catch-up window


@dataclass(frozen=True)
class CatchUpPolicy:
    policy: CatchUp = CatchUp.RUN_ONCE
    # run_all only: occurrences missed by more than this never run.
    window_seconds: int = DEFAULT_CATCHUP_WINDOW_SECONDS


@dataclass(frozen=True)
class Task:
    """A task runs either an HTTP handler (``handler_url``) or a registered Python
    handler (``handler_name``), never both."""

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
    handler_name: str | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    limits: TaskLimits = field(default_factory=TaskLimits)

    @property
    def timezone(self) -> str:
        return getattr(self.schedule, "timezone", "UTC")


def execution_id_for(task_id: str, scheduled_at: datetime) -> str:
    """The deterministic id of one occurrence: the task id plus its scheduled instant.

    Sending or running the same occurrence twice yields the same id, which is what
    makes duplicates detectable downstream. Ids of one task sort by time.
    """
    return f"{task_id}_{compact_instant(scheduled_at)}"


def task_id_of(execution_id: str) -> str:
    task_id, _, _ = execution_id.rpartition("_")
    if not task_id:
        raise ValueError(f"{execution_id!r} is not an execution id")
    return task_id


def shard_for(task_id: str, shard_count: int) -> int:
    """A stable shard in ``[0, shard_count)``; the same on every machine and run."""
    return zlib.crc32(task_id.encode()) % shard_count


def bucket_start(instant: datetime, bucket_seconds: int) -> datetime:
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
        return due_bucket_key(self.bucket, self.shard)


@dataclass(frozen=True)
class Sharding:
    """How pending occurrences are spread over the due index: shards times time buckets."""

    shard_count: int
    bucket_seconds: int

    def bucket(self, instant: datetime) -> datetime:
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

    @property
    def execution_id(self) -> str | None:
        if self.scheduled_at is None:
            return None
        return execution_id_for(self.task.task_id, self.scheduled_at)

    @property
    def completes_task(self) -> bool:
        return self.next_run_at is None

    def dispatch(self, now: datetime) -> Dispatch | None:
        """The message that runs this claim's occurrence; None when nothing runs."""
        if self.scheduled_at is None:
            return None
        return Dispatch(
            execution_id=execution_id_for(self.task.task_id, self.scheduled_at),
            task_id=self.task.task_id,
            scheduled_at=self.scheduled_at,
            delay_seconds=self.start_delay_seconds(now),
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
    task: Task, now: datetime, grace: timedelta = DEFAULT_MISFIRE_GRACE
) -> Claim | None:
    """Decide what claiming ``task`` at ``now`` means, or None if nothing is due.

    The next occurrence is always computed from a scheduled time, never from
    ``now``, so recurring tasks stay on their grid. An occurrence less than
    ``grace`` late is on time and runs. Older ones were missed, and the task's
    catch-up policy decides: ``run_once`` runs the earliest missed one and skips
    the rest, ``skip`` runs none, ``run_all`` runs each one inside its window.
    ``next_run_at`` may still be due (run_all, or on-time occurrences queued up):
    the tick claims again, and an occurrence counts as claimed once
    ``next_run_at`` has moved past it.
    """
    if task.status is not TaskStatus.ACTIVE or task.next_run_at is None:
        return None
    due = task.next_run_at
    if due > now:
        return None
    schedule = task.schedule
    on_time_from = now - grace
    # Nothing is missed before the task existed: a one-time task registered a
    # little late is on time.
    if max(due, task.created_at) >= on_time_from:
        return Claim(task=task, scheduled_at=due, next_run_at=schedule.next_after(due))
    if task.catchup.policy is CatchUp.RUN_ONCE:
        following = schedule.next_after(on_time_from - _JUST_BEFORE)
        after_due = schedule.next_after(due)
        return Claim(
            task=task,
            scheduled_at=due,
            next_run_at=following,
            skipped_since=after_due if after_due != following else None,
        )
    # skip keeps only on-time occurrences; run_all every one inside its window.
    keep_from = on_time_from
    if task.catchup.policy is CatchUp.RUN_ALL:
        keep_from = now - timedelta(seconds=task.catchup.window_seconds)
        if due >= keep_from:
            return Claim(task=task, scheduled_at=due, next_run_at=schedule.next_after(due))
    first_kept = schedule.next_after(keep_from - _JUST_BEFORE)
    if first_kept is None or first_kept > now:
        return Claim(task=task, scheduled_at=None, next_run_at=first_kept, skipped_since=due)
    return Claim(
        task=task,
        scheduled_at=first_kept,
        next_run_at=schedule.next_after(first_kept),
        skipped_since=due,
    )


def advanced(task: Task, claim: Claim, now: datetime) -> Task:
    """The task as it is stored once ``claim`` succeeded."""
    return dataclasses.replace(
        task,
        next_run_at=claim.next_run_at,
        status=TaskStatus.COMPLETED if claim.completes_task else task.status,
        last_scheduled_at=claim.scheduled_at or task.last_scheduled_at,
        version=task.version + 1,
        updated_at=to_utc_ms(now),
    )
