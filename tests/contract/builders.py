"""Values the contract tests store: tasks, dispatches, handler-call records."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from dynacron.domain.coordination.tenants import DEFAULT_TENANT
from dynacron.domain.executions.execution import Dispatch, HandlerCallRecord, ResultSummary
from dynacron.domain.executions.retry import RetryPolicy
from dynacron.domain.schedules.expressions import AfterSchedule, OneTimeSchedule, Schedule
from dynacron.domain.tasks.task import DuePlacement, Sharding, Task, TaskStatus, execution_id_for

START = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
SHARDING = Sharding(shard_count=4, bucket_seconds=3600)
RETRY = RetryPolicy(max_attempts=3)
HANDLER = "http://127.0.0.1:9/handler"
# A quota no test reaches unless it means to.
ROOMY = 10_000


def a_task(
    task_id: str,
    *,
    tenant_id: str = DEFAULT_TENANT,
    due: datetime | None = START,
    created_at: datetime = START,
    schedule: Schedule | None = None,
    **fields: Any,
) -> Task:
    """An ACTIVE one-time task due at ``due`` (None: nothing pending)."""
    return Task(
        task_id=task_id,
        name=f"task {task_id}",
        schedule=schedule or OneTimeSchedule(at=due or START),
        handler_url=HANDLER,
        payload={"task": task_id},
        status=TaskStatus.ACTIVE,
        next_run_at=due,
        created_at=created_at,
        updated_at=created_at,
        tenant_id=tenant_id,
        **fields,
    )


def a_follower(task_id: str, upstream_task_id: str, *, tenant_id: str = DEFAULT_TENANT) -> Task:
    """A task that runs after ``upstream_task_id`` succeeds (never due by itself)."""
    return a_task(
        task_id,
        tenant_id=tenant_id,
        due=None,
        schedule=AfterSchedule(upstream_task_id=upstream_task_id),
    )


def placement_of(task: Task, now: datetime = START) -> DuePlacement | None:
    return SHARDING.place_task(task, now)


def a_dispatch(
    task_id: str = "job",
    *,
    at: datetime = START,
    attempt: int = 1,
    tenant_id: str = DEFAULT_TENANT,
) -> Dispatch:
    """The dispatch of ``task_id``'s occurrence scheduled at ``at``."""
    return Dispatch(
        execution_id=execution_id_for(task_id, at),
        task_id=task_id,
        scheduled_at=at,
        attempt=attempt,
        tenant_id=tenant_id,
    )


def epoch_ms(instant: datetime) -> int:
    return int(instant.timestamp() * 1000)


def call_in_progress(
    now: datetime, runs_for: timedelta = timedelta(seconds=30)
) -> HandlerCallRecord:
    """A handler call started at ``now``: no other may start for ``runs_for``."""
    return HandlerCallRecord(
        status=HandlerCallRecord.IN_PROGRESS,
        expires_at=int((now + timedelta(hours=1)).timestamp()),
        in_progress_until_ms=epoch_ms(now + runs_for),
    )


def call_completed(now: datetime, status_code: int = 200) -> HandlerCallRecord:
    """A handler call that succeeded at ``now``: its answer is replayed for an hour."""
    return HandlerCallRecord(
        status=HandlerCallRecord.COMPLETED,
        expires_at=int((now + timedelta(hours=1)).timestamp()),
        response=ResultSummary(status_code=status_code, excerpt="done"),
    )
