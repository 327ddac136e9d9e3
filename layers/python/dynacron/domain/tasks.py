"""Tasks (what to run and when) and the pure rules of claiming one occurrence."""

from __future__ import annotations

import dataclasses
import zlib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from dynacron.domain.instants import compact_instant, to_utc_ms
from dynacron.domain.retry import RetryPolicy
from dynacron.domain.schedules import Schedule


class TaskStatus(StrEnum):
    ACTIVE = "ACTIVE"
    PAUSED = "PAUSED"
    COMPLETED = "COMPLETED"


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
    handler_name: str | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)

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
    """The outcome of claiming a task's due occurrence: what to run, what comes next."""

    task: Task
    scheduled_at: datetime
    execution_id: str
    next_run_at: datetime | None

    @property
    def completes_task(self) -> bool:
        return self.next_run_at is None


def claim_occurrence(task: Task, now: datetime) -> Claim | None:
    """Decide what claiming ``task`` at ``now`` means, or None if nothing is due.

    The next occurrence is computed from the scheduled time, not from ``now``,
    so recurring tasks stay on their grid. If the scheduler was down and several
    occurrences were missed, the one claimed runs as the catch-up and the task
    moves to its first occurrence after ``now`` (one catch-up run, not a flood).
    """
    if task.status is not TaskStatus.ACTIVE or task.next_run_at is None:
        return None
    scheduled_at = task.next_run_at
    if scheduled_at > now:
        return None
    following = task.schedule.next_after(scheduled_at)
    if following is not None and following <= now:
        following = task.schedule.next_after(now)
    return Claim(
        task=task,
        scheduled_at=scheduled_at,
        execution_id=execution_id_for(task.task_id, scheduled_at),
        next_run_at=following,
    )


def advanced(task: Task, claim: Claim, now: datetime) -> Task:
    """The task as it is stored once ``claim`` succeeded."""
    return dataclasses.replace(
        task,
        next_run_at=claim.next_run_at,
        status=TaskStatus.COMPLETED if claim.completes_task else task.status,
        last_scheduled_at=claim.scheduled_at,
        version=task.version + 1,
        updated_at=to_utc_ms(now),
    )
