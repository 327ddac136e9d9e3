"""The ports: what the services need of a store, a queue and each other, and nothing more.

Services are typed against these ``Protocol``s only; each adapter set
(``dynacron.adapters.aws``: DynamoDB, SQS and Lambda; ``dynacron.adapters.sqlite``:
one SQLite file) carries them out, and ``tests/contract`` runs one suite over
every set. The rules of each change (which state it expects, what it writes)
are the domain's; an adapter only makes each change atomic.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from dynacron.domain.executions.execution import Dispatch
from dynacron.domain.executions.notifications import LateCheck, NotificationMessage
from dynacron.domain.tasks.transitions import REASON_LIMIT as TASK_REASON_LIMIT
from dynacron.ports.coordination import CalendarStore as CalendarStore
from dynacron.ports.coordination import CreateKeys as CreateKeys
from dynacron.ports.coordination import CursorStore as CursorStore
from dynacron.ports.coordination import LimitStore as LimitStore
from dynacron.ports.coordination import ShardCursor as ShardCursor
from dynacron.ports.coordination import ShardLease as ShardLease
from dynacron.ports.coordination import ShardLeases as ShardLeases
from dynacron.ports.coordination import TenantStore as TenantStore
from dynacron.ports.executions import Applied as Applied
from dynacron.ports.executions import BeginResult as BeginResult
from dynacron.ports.executions import ExecutionStore as ExecutionStore
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
    work is left as it was and retried later.

    ``transient``: whether asking again soon may work (busy, throttled, unreachable,
    the service's own failure), as opposed to a refusal that lasts until someone
    changes the deployment (access denied, a missing table)."""

    @property
    def transient(self) -> bool:
        """True unless the adapter knows the refusal lasts."""
        return True


class Throttled(StoreUnavailable):
    """The store asked the caller to slow down: retrying after a short wait may work."""


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a listing, in the listing's order; ``next_token`` (opaque, None on
    the last page) asks for the page after it."""

    items: list[T]
    next_token: str | None


# A reason is kept short: it is shown to the owner and stored on the item.
REASON_LIMIT = TASK_REASON_LIMIT


def reason_of(error: BaseException) -> str:
    """An exception as a short, readable reason."""
    return f"{type(error).__name__}: {error}"[:REASON_LIMIT]


class DispatchQueue(Protocol):
    """Where dispatches wait for a worker."""

    def send(self, dispatches: list[Dispatch]) -> list[Dispatch]:
        """Send; returns the dispatches accepted (a rejected one is not claimed)."""
        ...

    def depth(self) -> int:
        """Messages waiting for a worker or being worked: approximate on SQS."""
        ...

    def send_later(self, dispatch: Dispatch, delay_seconds: float) -> None:
        """Send one dispatch, invisible for ``delay_seconds``, capped at 15 minutes as
        SQS caps it: a worker that meets it before ``not_before`` sends it on again.
        Raises ``StoreUnavailable`` if it was not sent."""
        ...

    def send_notification(self, message: NotificationMessage, delay_seconds: float) -> None:
        """Send one notification for a worker to deliver, invisible for ``delay_seconds``
        (capped at 15 minutes). Raises ``StoreUnavailable`` if it was not sent."""
        ...

    def send_late_check(self, check: LateCheck, delay_seconds: float) -> None:
        """Send one on_late timer, invisible for ``delay_seconds`` (capped at 15
        minutes: a worker that meets it before ``due_at`` sends it on again)."""
        ...

    def hold(self, receipt_handles: Sequence[str], seconds: float) -> int:
        """Keep received messages invisible for ``seconds`` from now (their receipt
        handles, as a worker's event carries them), whatever the queue's own
        visibility timeout; 0 makes them visible at once. A handle that no longer
        names its message (deleted, or received again since) is skipped. Returns
        how many were held."""
        ...


class DeadLetterQueue(Protocol):
    """Copies of dead-lettered executions, for alarms and operators."""

    def send(self, dispatch: Dispatch, error: str) -> None:
        """Copy a dead-lettered execution here with ``error``, findable by its
        execution id. The executions store, not this copy, is the dead letter's record."""
        ...

    def forward(self, body: str, reason: str) -> None:
        """Pass on, as it is, a message nothing can be recorded for (a body that is
        not a dispatch), with ``reason``."""
        ...

    def remove(self, execution_id: str) -> int:
        """Delete an execution's copies (it was redriven); returns how many were found.
        SQS looks through a bounded number of messages, so a copy may survive."""
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
    calendars: CalendarStore
