"""The ports: what the services need of a store, a queue and each other, and nothing more.

Services are typed against these ``Protocol``s only; each adapter set
(``dynacron.adapters.aws``: DynamoDB, SQS and Lambda; ``dynacron.adapters.sqlite``:
one SQLite file) carries them out, and ``tests/contract`` runs one suite over
every set. The rules of each change (which state it expects, what it writes)
are the domain's; an adapter only makes each change atomic.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Generic, Protocol, TypeVar

from dynacron.domain.coordination.create_keys import CreateKey, KeyReservation
from dynacron.domain.coordination.limits import HostState, RateLimit
from dynacron.domain.coordination.uptime import ShardHistory
from dynacron.domain.executions.execution import Dispatch
from dynacron.domain.tasks.claiming import Claim
from dynacron.domain.tasks.tags import TagFilter
from dynacron.domain.tasks.task import DuePlacement, Task
from dynacron.ports.executions import Applied as Applied
from dynacron.ports.executions import BeginResult as BeginResult
from dynacron.ports.executions import ExecutionStore as ExecutionStore

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
REASON_LIMIT = 500


class UnreadableTaskError(ValueError):
    """A stored task item that cannot be decoded into a ``Task``."""


@dataclass(frozen=True)
class UnreadableTask:
    """A stored task that cannot be decoded: written around the API (by hand, a bug,
    a migration). What the tick needs to set it aside without decoding it."""

    task_id: str
    reason: str
    # The stored version as it was read, in the store's own form (None if
    # missing): the set-aside write is conditional on it.
    seen_version: Any


def reason_of(error: BaseException) -> str:
    """An exception as a short, readable reason."""
    return f"{type(error).__name__}: {error}"[:REASON_LIMIT]


@dataclass(frozen=True)
class ShardCursor:
    """What one shard's tick reads first: where to start, and when it last ran."""

    bucket: datetime | None
    history: ShardHistory


@dataclass(frozen=True)
class ShardLease:
    owner: str
    lease_until: datetime
    successor: str | None = None

    def is_free_for(self, owner: str, now: datetime) -> bool:
        """True if ``owner`` may take this lease without asking anyone."""
        return self.owner == owner or self.lease_until <= now


@dataclass(frozen=True)
class ClaimPage:
    """One page of due tasks of one shard, as the due index returned it."""

    shard: int
    task_ids: tuple[str, ...]


class TaskStore(Protocol):
    """Tasks, their due index and their dependents. Every change names the version it
    expects: of two writers, one wins and the other is told it lost (False)."""

    def create_within_quota(
        self, task: Task, placement: DuePlacement | None, max_tasks: int, fresh_secret: str
    ) -> None:
        """Store a new task and count it against its tenant's ``max_tasks``; raises
        ``LimitExceeded`` over quota, ``InvalidRequest`` if the id is taken."""
        ...

    def get_owned(self, tenant_id: str, task_id: str) -> Task | None: ...

    def page_owned(
        self,
        tenant_id: str,
        limit: int,
        token: str | None,
        tags: tuple[TagFilter, ...] = (),
    ) -> Page[Task]:
        """One page of the tenant's tasks, oldest first; with ``tags``, those matching
        every filter only. A filtered page may hold fewer than ``limit`` tasks, even
        none, with a ``next_token`` to go on from: a store bounds the work of one page."""
        ...

    def delete_owned(self, tenant_id: str, task_id: str) -> bool: ...

    def get(self, task_id: str) -> Task | None: ...

    def get_many(self, task_ids: Iterable[str]) -> list[Task]: ...

    def read_many(self, task_ids: Iterable[str]) -> tuple[list[Task], list[UnreadableTask]]: ...

    def set_aside(self, task: Task | UnreadableTask, reason: str, now: datetime) -> bool: ...

    def set_aside_by_id(
        self, task_id: str, reason: str, now: datetime, *, release_slot_of: str | None = None
    ) -> bool: ...

    def replace(
        self,
        task: Task,
        placement: DuePlacement | None,
        expected_version: int,
        unchanged: dict[str, int] | None = None,
    ) -> bool: ...

    def mark_has_dependents(self, tenant_id: str, task_id: str) -> bool: ...

    def dependents(self, task_id: str) -> list[str]: ...

    def due_task_ids(
        self,
        bucket_key: str,
        now: datetime,
        limit: int,
        start_key: Any,
        due_from: datetime | None = None,
    ) -> tuple[list[str], Any]:
        """Ids due by ``now`` in one due bucket, oldest first, and where to go on from
        (opaque to the caller; None when the bucket is done)."""
        ...

    def claim(self, claim: Claim, placement: DuePlacement | None, now: datetime) -> bool: ...


class CursorStore(Protocol):
    """Per-shard tick cursors (the oldest bucket that may hold work) and heartbeats."""

    def get(self, shard: int) -> datetime | None: ...

    def read(self, shard: int, heartbeat: timedelta = ...) -> ShardCursor: ...

    def record_tick(self, shard: int, history: ShardHistory, seen: ShardHistory) -> bool: ...

    def advance(self, shard: int, bucket: datetime) -> bool: ...


class TenantStore(Protocol):
    """Each tenant's task count and signing secrets (newest first)."""

    def signing_secrets(self, tenant_id: str) -> list[str]: ...

    def task_count(self, tenant_id: str) -> int: ...

    def ensure_secret(self, tenant_id: str, fresh_secret: str) -> list[str]: ...

    def rotate_secret(self, tenant_id: str, fresh_secret: str) -> list[str] | None: ...


class CreateKeys(Protocol):
    """Each tenant's idempotency keys of task creations (``domain.create_keys``)."""

    def reserve(
        self, tenant_id: str, key: CreateKey, task_id: str, now: datetime
    ) -> KeyReservation:
        """Hold ``key`` for ``task_id`` until ``now`` plus ``KEY_LIFETIME``, unless it
        is held (and had not expired at ``now``): then what holds it. Of two at
        once, one holds it and the other is told what holds it."""
        ...

    def mark_created(self, tenant_id: str, key: str, task_id: str) -> None:
        """The task ``key`` holds was stored."""
        ...


class ShardLeases(Protocol):
    """Which tick works a shard, and until when; a handover is one change."""

    def get(self, shard: int) -> ShardLease | None: ...

    def acquire(self, shard: int, owner: str, now: datetime, until: datetime) -> bool: ...

    def request_handover(self, shard: int, owner: str) -> bool: ...

    def renew(self, shard: int, owner: str, until: datetime) -> bool: ...

    def hand_over(self, shard: int, owner: str, until: datetime) -> bool: ...

    def release(self, shard: int, owner: str) -> bool: ...


class LimitStore(Protocol):
    """Per-host breakers and rates, and per-task or per-host concurrency slots."""

    def host(self, host: str) -> HostState: ...

    def replace_host(self, state: HostState, now: datetime) -> bool: ...

    def take_token(self, host: str, limit: RateLimit, now: datetime) -> float: ...

    def acquire_slot(
        self, scope: str, limit: int, holder: str, now: datetime, until: datetime
    ) -> str | None: ...

    def extend_slot(self, slot: str, holder: str, until: datetime) -> bool: ...

    def release_slot(self, slot: str, holder: str) -> bool: ...


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


class PageClaims(Protocol):
    """Where a looping tick hands a page of due tasks to be claimed elsewhere."""

    def hand_out(self, page: ClaimPage) -> None:
        """Start a claim of ``page`` elsewhere, without waiting for it.

        Raises when the page could not be handed out (the tick then claims it
        itself). A page handed out and never claimed stays due: the tick finds
        it again once the hand-out is no longer fresh.
        """
        ...


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
