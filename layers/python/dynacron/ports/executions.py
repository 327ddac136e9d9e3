"""What the services need of an execution store: carry out a transition, answer queries.

Every conditional change of an execution (begin, renew, finish, requeue, dead-letter,
take-over, redrive, the handler-call record's saves) is the domain's
(``dynacron.domain.executions.transitions``): the state it expects and what it
changes. A service builds one and hands it to ``apply``; the store carries it out
atomically (DynamoDB: one conditional write; SQLite: one write transaction) and
says whether it held. Sequences of changes (``begin``: new, else queued) are the
services' (``dynacron.services.attempts``), stated once for every store.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from dynacron.domain.conditions import Transition
from dynacron.domain.executions.attention import AttentionQuery
from dynacron.domain.executions.execution import Execution, HandlerCallRecord
from dynacron.domain.executions.record import Keeping

if TYPE_CHECKING:
    from dynacron.ports import Page


@dataclass(frozen=True)
class Applied:
    """What carrying out one transition came to."""

    held: bool
    # Held: the execution as it now is. Refused: as it was, which says why (None if
    # there is no record).
    execution: Execution | None = None
    # The handler-call record kept on that execution, if it holds one.
    call: HandlerCallRecord | None = None


@dataclass(frozen=True)
class BeginResult:
    """What ``services.attempts.begin`` came to: whether this worker now holds the attempt."""

    began: bool
    # Begun: the execution as it now is. Refused: as it was, which says why
    # (finished, held by another worker, waiting for another attempt).
    current: Execution | None = None
    # Begun, but the handler-call record asked for was not saved: this one still
    # counts (a call in progress, or a success to replay).
    held_call: HandlerCallRecord | None = None


class ExecutionStore(Protocol):
    """Executions and their leases, each change one transition carried out atomically.

    Every transition states the record it expects; of two writers acting on one
    execution (a reaper and a late worker), one's transition holds and the other's
    is refused, whichever process each runs in. A refused transition writes nothing.
    """

    @property
    def lease_shards(self) -> int:
        """How many partitions the lease index has: the reaper sweeps each (0 to n-1)."""
        ...

    def keeping(self, execution_id: str) -> Keeping:
        """How this store keeps the execution's record: its lease shard and the
        retention after which a record that stopped mattering is deleted. Most
        transitions take it (``transitions.renew(..., keeping=...)``)."""
        ...

    def apply(self, execution_id: str, transition: Transition) -> bool:
        """Carry out ``transition`` on the execution's record, atomically.

        Expects the record to meet ``transition.expects`` (for a transition that
        ``creates``, usually that there is none). Then it writes the transition's
        changes (sets, removes, computes; a new record if it ``creates``) and answers
        True. Refused: nothing is written, and the answer is False.
        """
        ...

    def apply_returning(self, execution_id: str, transition: Transition) -> Applied:
        """As ``apply``, answering with the record too: held, the execution as it now is;
        refused, as it was (which says why; None if there is none), each with the
        handler-call record it keeps. Same write as ``apply``: no extra read."""
        ...

    def apply_each(
        self, changes: Sequence[tuple[str, Transition]], *, returning: bool = True
    ) -> list[Applied | Exception]:
        """Carry out each (execution id, transition) of ``changes`` as ``apply_returning``
        would, each alone: one refused (a begin whose message is a duplicate), or
        raising, writes nothing and leaves the others as they are. A worker's batch
        of begins, or of ends, in one call (decision 0034). ``returning`` False: each
        answered with whether it held alone, as ``apply`` (an end needs no record).

        Answers, in order, what each came to, or the exception it raised
        (``Throttled``: ask again after a wait). SQLite: one write transaction for
        them all, each change in a savepoint of its own; DynamoDB: one conditional
        write each, as ``apply_returning``, several in flight at once. Raises
        ``StoreUnavailable`` (not ``Throttled``) when the store could not be written
        at all: then the changes already carried out stand, and the others were not
        made.
        """
        ...

    def get(self, execution_id: str) -> Execution | None:
        """The execution as stored now (a consistent read); None if there is none."""
        ...

    def held_call(self, execution_id: str) -> HandlerCallRecord | None:
        """The handler-call record kept on the execution, if any (expired ones too)."""
        ...

    def list_for_task(self, task_id: str, limit: int, token: str | None) -> Page[Execution]:
        """One page of a task's executions (its history), newest scheduled time first."""
        ...

    def dead_letters(self, tenant_id: str, limit: int, token: str | None) -> Page[Execution]:
        """One page of the tenant's dead-lettered executions, most recent first."""
        ...

    def needing_attention(
        self, tenant_id: str, query: AttentionQuery, limit: int, token: str | None
    ) -> Page[Execution]:
        """The tenant's executions listed for attention (``domain.executions.attention``:
        failed, waiting for a retry, long jobs) that ``query`` admits, newest first by
        when they were listed, across all its tasks. A page may hold fewer than
        ``limit`` items and still name a next one; a token is good for its tenant and
        query only."""
        ...

    def expired_leases(self, shard: int, cutoff: datetime, limit: int) -> list[str]:
        """Ids of up to ``limit`` executions in lease shard ``shard`` whose watched lease
        ended before ``cutoff``, the earliest first: what the reaper takes over."""
        ...
