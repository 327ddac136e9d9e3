"""The ports: what the services need of a store, a queue and each other, and nothing more.

Services are typed against these ``Protocol``s only; each adapter set
(``dynacron.adapters.aws``: DynamoDB, SQS and Lambda; ``dynacron.adapters.sqlite``:
one SQLite file) carries them out, and ``tests/contract`` runs one suite over
every set. The rules of each change (which state it expects, what it writes)
are the domain's; an adapter only makes each change atomic.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Generic, Protocol, TypeVar

from dynacron.domain.coordination.tenants import DEFAULT_TENANT
from dynacron.domain.executions.attention import Attention, AttentionQuery
from dynacron.domain.executions.execution import (
    Dispatch,
    Execution,
    ExecutionStatus,
    HandlerCallRecord,
    ResultSummary,
)
from dynacron.domain.executions.retry import RetryPolicy
from dynacron.domain.tasks.task import Task
from dynacron.domain.tasks.transitions import REASON_LIMIT as TASK_REASON_LIMIT
from dynacron.ports.coordination import CreateKeys as CreateKeys
from dynacron.ports.coordination import CursorStore as CursorStore
from dynacron.ports.coordination import LimitStore as LimitStore
from dynacron.ports.coordination import ShardCursor as ShardCursor
from dynacron.ports.coordination import ShardLease as ShardLease
from dynacron.ports.coordination import ShardLeases as ShardLeases
from dynacron.ports.coordination import TenantStore as TenantStore
from dynacron.ports.tasks import DuePage as DuePage
from dynacron.ports.tasks import DuePageHandOut as DuePageHandOut
from dynacron.ports.tasks import OwnedTasks as OwnedTasks
from dynacron.ports.tasks import TaskStore as TaskStore
from dynacron.ports.tasks import UnreadableTask as UnreadableTask
from dynacron.ports.tasks import UnreadableTaskError as UnreadableTaskError

T = TypeVar("T")


class StoreUnavailable(Exception):
    """A store or queue did not do what was asked, for a reason that is not the
    caller's: unreachable, refused, out of capacity. Not one task's fault: the
    work is left as it was and retried later."""


class Throttled(StoreUnavailable):
    """The store asked the caller to slow down: retrying after a short wait may work."""


@dataclass(frozen=True)
class Page(Generic[T]):
    items: list[T]
    next_token: str | None


# A reason is kept short: it is shown to the owner and stored on the item.
REASON_LIMIT = TASK_REASON_LIMIT


def reason_of(error: BaseException) -> str:
    """An exception as a short, readable reason."""
    return f"{type(error).__name__}: {error}"[:REASON_LIMIT]


@dataclass(frozen=True)
class BeginResult:
    began: bool
    # Begun: the execution as it now is. Refused: as it was, which says why
    # (finished, held by another worker, waiting for another attempt).
    current: Execution | None = None
    # Begun, but the handler-call record asked for was not saved: this one still
    # counts (a call in progress, or a success to replay).
    held_call: HandlerCallRecord | None = None


class ExecutionStore(Protocol):
    """Executions and their leases. Each transition states the state it expects; every
    write by a lease holder names its ``lease_token``, every change of holder writes
    a new one."""

    @property
    def lease_shards(self) -> int: ...

    def begin(
        self,
        dispatch: Dispatch,
        *,
        now: datetime,
        lease_until: datetime,
        lease_token: str,
        callback_digest: str,
        retry: RetryPolicy,
        tenant_id: str = DEFAULT_TENANT,
        call: HandlerCallRecord | None = None,
        call_now_ms: int = 0,
    ) -> BeginResult: ...

    def enqueue(
        self,
        dispatch: Dispatch,
        *,
        retry: RetryPolicy,
        lease_until: datetime,
        lease_token: str,
        tenant_id: str,
    ) -> bool: ...

    def record_skipped(
        self, task: Task, execution_id: str, scheduled_at: datetime, reason: str, now: datetime
    ) -> bool: ...

    def renew(
        self,
        execution_id: str,
        lease_token: str,
        lease_until: datetime,
        accepted_at: datetime | None = None,
        attention: Attention | None = None,
    ) -> bool: ...

    def finish(
        self,
        execution_id: str,
        lease_token: str,
        status: ExecutionStatus,
        now: datetime,
        *,
        follow_up_token: str | None = None,
        follow_up_until: datetime | None = None,
        error: str | None = None,
        result: ResultSummary | None = None,
        call: HandlerCallRecord | None = None,
    ) -> bool: ...

    def requeue(
        self,
        execution_id: str,
        lease_token: str,
        *,
        expected: ExecutionStatus,
        attempt: int,
        not_before: datetime,
        lease_until: datetime,
        new_token: str,
        error: str | None = None,
        attention: Attention | None = None,
    ) -> bool: ...

    def dead_letter(
        self,
        execution_id: str,
        lease_token: str,
        *,
        now: datetime,
        error: str,
        lease_until: datetime,
        new_token: str,
        tenant_id: str,
    ) -> bool: ...

    def record_undelivered(
        self,
        dispatch: Dispatch,
        *,
        now: datetime,
        error: str,
        retry: RetryPolicy,
        tenant_id: str,
        lease_until: datetime,
        lease_token: str,
    ) -> bool: ...

    def dead_letter_queued(
        self,
        execution_id: str,
        seen_token: str,
        *,
        attempt: int,
        now: datetime,
        error: str,
        lease_until: datetime,
        new_token: str,
        tenant_id: str,
    ) -> bool: ...

    def set_aside(self, execution_id: str, reason: str, now: datetime) -> bool: ...

    def release(self, execution_id: str, lease_token: str) -> bool: ...

    def save_call(
        self, execution_id: str, lease_token: str, call: HandlerCallRecord, call_now_ms: int
    ) -> BeginResult: ...

    def held_call(self, execution_id: str) -> HandlerCallRecord | None: ...

    def keep_call(self, execution_id: str, call: HandlerCallRecord) -> bool: ...

    def clear_call(self, execution_id: str, in_progress_until_ms: int | None) -> bool: ...

    def take_over(
        self,
        execution_id: str,
        seen_token: str,
        *,
        cutoff: datetime,
        new_token: str,
        lease_until: datetime,
    ) -> bool: ...

    def watch(self, execution_id: str, seen_token: str) -> bool: ...

    def redrive(
        self,
        tenant_id: str,
        execution_id: str,
        *,
        now: datetime,
        lease_until: datetime,
        new_token: str,
    ) -> Execution | None: ...

    def expired_leases(self, shard: int, cutoff: datetime, limit: int) -> list[str]: ...

    def dead_letters(self, tenant_id: str, limit: int, token: str | None) -> Page[Execution]: ...

    def across_tasks(
        self, tenant_id: str, query: AttentionQuery, limit: int, token: str | None
    ) -> Page[Execution]:
        """The tenant's listed executions (``domain.attention``) that ``query`` admits,
        newest first by when they were listed. A page may hold fewer than ``limit``
        items and still name a next one; a token is good for its tenant and query only."""
        ...

    def get(self, execution_id: str) -> Execution | None: ...

    def list_for_task(self, task_id: str, limit: int, token: str | None) -> Page[Execution]: ...

    def owner_of(self, dispatch: Dispatch) -> str: ...


class DispatchQueue(Protocol):
    """Where dispatches wait for a worker."""

    def send(self, dispatches: list[Dispatch]) -> list[Dispatch]:
        """Send; returns the dispatches accepted (a rejected one is not claimed)."""
        ...

    def depth(self) -> int: ...

    def send_later(self, dispatch: Dispatch, delay_seconds: float) -> None: ...


class DeadLetterQueue(Protocol):
    """Copies of dead-lettered executions, for alarms and operators."""

    def send(self, dispatch: Dispatch, error: str) -> None: ...

    def forward(self, body: str, reason: str) -> None: ...

    def remove(self, execution_id: str) -> int: ...


@dataclass(frozen=True)
class AdapterSet:
    """Every port, carried out by one backend."""

    tasks: TaskStore
    executions: ExecutionStore
    cursors: CursorStore
    tenants: TenantStore
    create_keys: CreateKeys
    leases: ShardLeases
    limits: LimitStore
    queue: DispatchQueue
    dead_letter_queue: DeadLetterQueue
