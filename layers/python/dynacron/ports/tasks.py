"""What the services need of the task store: tasks, their due index, their dependents,
and the hand-out of a page of due tasks to be claimed elsewhere.

Every conditional change of a task (the claim of an occurrence, a set-aside, the mark
that some task runs after it, a whole replacement) is the domain's
(``dynacron.domain.tasks.transitions``): the state it expects and what it changes. A
service builds one and hands it to ``apply`` (or, for a whole replacement, to
``replace``); the store carries it out atomically and says whether it held. Every
change names the version it read: of two writers one wins, and the other is told
it lost (``False``), with nothing written. Sequences of changes (a set-aside that
first tries to free a run slot) are the services' (``dynacron.services.task_changes``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from dynacron.domain.conditions import Transition
from dynacron.domain.schedules.signatures import Signature
from dynacron.domain.tasks.history import TaskChange
from dynacron.domain.tasks.listing import ALL_TASKS, TaskListing
from dynacron.domain.tasks.tags import TagFilter
from dynacron.domain.tasks.task import DuePlacement, Task
from dynacron.domain.tasks.transitions import Replacement

# The executions one change record may start in its transaction: DynamoDB's
# transaction holds at most 100 actions, the record's put one of them (decision 0054).
MAX_STARTED_WITH_CHANGE = 99

if TYPE_CHECKING:
    from dynacron.ports import Page


class UnreadableTaskError(ValueError):
    """A stored task item that cannot be decoded into a ``Task``."""


@dataclass(frozen=True)
class UnreadableTask:
    """A stored task that cannot be decoded: written around the API (by hand, a bug,
    a migration). What the tick needs to set it aside without decoding it."""

    task_id: str
    reason: str
    # The stored version as it was read, as a plain value (None if missing; not
    # necessarily a whole number): the set-aside is conditional on it.
    seen_version: Any


def sorted_reads(
    reads: Iterable[Task | UnreadableTask],
) -> tuple[list[Task], list[UnreadableTask]]:
    """Tasks read, with those that cannot be decoded apart (``read_many``'s answer)."""
    tasks: list[Task] = []
    unreadable: list[UnreadableTask] = []
    for read in reads:
        if isinstance(read, UnreadableTask):
            unreadable.append(read)
        else:
            tasks.append(read)
    return tasks, unreadable


def all_readable(read: tuple[list[Task], list[UnreadableTask]]) -> list[Task]:
    """The tasks of ``read_many``'s answer; ``UnreadableTaskError`` if one could not be
    decoded (``get_many``'s answer)."""
    tasks, unreadable = read
    if unreadable:
        raise UnreadableTaskError(f"task {unreadable[0].task_id}: {unreadable[0].reason}")
    return tasks


class OwnedTasks(Protocol):
    """The API's reads and writes of tasks, each scoped to one tenant: another tenant's
    task is, to a caller, exactly a missing one."""

    def create_within_quota(
        self,
        task: Task,
        placement: DuePlacement | None,
        max_tasks: int,
        fresh_secret: str,
        change: TaskChange | None = None,
    ) -> None:
        """Store a new ``task`` (in the due index at ``placement``) and count it against
        its tenant's ``max_tasks``, in one transaction (with ``change``'s record, if
        given: decision 0054); the tenant gets ``fresh_secret`` as its first signing
        secret if it has none.

        Expects no task with this id and fewer than ``max_tasks`` counted. Refused:
        ``LimitExceeded`` over quota (checked first), ``InvalidRequest`` if the id is taken.
        """
        ...

    def create_many_within_quota(
        self,
        tasks: Sequence[tuple[Task, DuePlacement | None]],
        max_tasks: int,
        fresh_secret: str,
        changes: Sequence[TaskChange | None] | None = None,
        keys: Sequence[str | None] | None = None,
    ) -> list[Exception | None]:
        """``create_within_quota`` for each of one tenant's new ``tasks``, in order: for
        each, None if it was stored, else why not (``LimitExceeded``, ``InvalidRequest``).

        The quota holds for the whole batch against any concurrent create: the tasks
        are counted in the same transactions that store them (SQLite: one; DynamoDB:
        one per chunk of up to 99), and when a chunk does not fit, its tasks are tried
        one by one, so the batch fills exactly the places left and no more. Each of
        ``changes`` (in the order of ``tasks``) is stored with its task, or not at all.

        Each of ``keys`` (in the order of ``tasks``; None: none) is the tenant's
        idempotency key reserved for that task's id (``CreateKeys``): once the task is
        stored, the key is marked created (``mark_key_created``: only if it still
        holds that id). SQLite marks them in the transaction that stores the tasks;
        DynamoDB after, one conditional write each, as ``CreateKeys.apply`` makes one.
        """
        ...

    def get_owned(self, tenant_id: str, task_id: str) -> Task | None:
        """The task as its owner sees it (one that cannot be decoded is shown as an
        ERROR task), or None if missing or another tenant's."""
        ...

    def page_owned(
        self,
        tenant_id: str,
        limit: int,
        token: str | None,
        tags: tuple[TagFilter, ...] = (),
        listing: TaskListing = ALL_TASKS,
    ) -> Page[Task]:
        """One page of the tenant's tasks, oldest first (or in ``listing``'s order);
        with ``tags`` and ``listing``'s filters, those matching every one only. A
        filtered page may hold fewer than ``limit`` tasks, even none, with a
        ``next_token`` to go on from: a store bounds the work of one page.
        ``InvalidRequest`` for a token not of this tenant's listing, and for a
        listing the store does not offer (naming what it does)."""
        ...

    def delete_owned(self, tenant_id: str, task_id: str, change: TaskChange | None = None) -> bool:
        """Delete the task and take it off its tenant's count, in one transaction (with
        ``change``'s record). Expects the task to be the tenant's; False (nothing
        changed, nothing recorded) if it is not."""
        ...

    def record_change(
        self, change: TaskChange, starting: Sequence[tuple[str, Transition]] = ()
    ) -> bool:
        """Record a change that writes no task record (a trigger, a backfill), in one
        transaction with the executions it starts: each (execution id, transition
        that creates its record) of ``starting``, at most ``MAX_STARTED_WITH_CHANGE``.
        False if one of them was refused (its record exists): nothing is written."""
        ...

    def changes_page(
        self, tenant_id: str, task_id: str, limit: int, token: str | None
    ) -> Page[TaskChange]:
        """One page of the task's change records, newest first, kept after the task
        is deleted until their retention; another tenant's are none.
        ``InvalidRequest`` for a token this listing did not give."""
        ...

    def get_change(self, tenant_id: str, task_id: str, change_id: str) -> TaskChange | None:
        """One change record of the tenant's task, or None (missing, or another's)."""
        ...


@dataclass(frozen=True)
class CensusEntry:
    """How many of a tenant's tasks share one schedule signature (decision 0046)."""

    signature: Signature
    tasks: int


class ScheduleCensus(Protocol):
    """Each tenant's schedule census: how many of its tasks share each schedule
    signature (``domain.schedules.signatures``), kept by the store itself in the same
    transaction as every write of a task that changes what it counts (create, a
    whole replacement, a set-aside, a delete); a fire changes none (decision 0046).
    A task stored before the census existed is counted by ``count_uncounted``."""

    def census_page(
        self,
        tenant_id: str,
        limit: int,
        token: str | None,
        ending_after: datetime | None = None,
    ) -> Page[CensusEntry]:
        """Up to ``limit`` of the tenant's census entries (any order, those counting
        no task left out; with ``ending_after``, those whose signature ends before it
        too: past one-time minutes and end bounds), and where to go on from. A page
        may hold fewer, even none, with a token to go on from. ``InvalidRequest``
        for a token not of this tenant's census."""
        ...

    def count_uncounted(self, tenant_id: str, limit: int, token: str | None) -> Page[str]:
        """Count, in the census, the tasks of one page of the tenant's tasks (at most
        ``limit``) that it does not count yet (stored before it existed): each in one
        transaction with its record's mark, conditional on the version read, so that
        none is counted twice. The ids counted, and where to go on from."""
        ...


class TaskStore(OwnedTasks, ScheduleCensus, Protocol):
    """Tasks for the tick, the worker and the services: reads by id, the due index,
    and the conditional changes of one task (``apply``) or of a whole one (``replace``)."""

    def get(self, task_id: str) -> Task | None:
        """The task, or None if missing; ``UnreadableTaskError`` if it cannot be decoded."""
        ...

    def get_many(self, task_ids: Iterable[str]) -> list[Task]:
        """The tasks of ``task_ids`` that exist, read consistently (missing ones left
        out); ``UnreadableTaskError`` if one cannot be decoded."""
        ...

    def read_many(self, task_ids: Iterable[str]) -> tuple[list[Task], list[UnreadableTask]]:
        """As ``get_many``, with the tasks that cannot be decoded apart, not raised."""
        ...

    def dependents(self, task_id: str) -> list[str]:
        """Ids of the tasks set to run after ``task_id`` (``after`` schedules)."""
        ...

    def due_task_ids(
        self,
        bucket_key: str,
        now: datetime,
        limit: int,
        start_key: Any,
        due_from: datetime | None = None,
    ) -> tuple[list[str], Any]:
        """Ids due by ``now`` in one due bucket (from ``due_from`` on, if given), oldest
        first, and where to go on from (opaque to the caller; None when the bucket is
        done)."""
        ...

    def stored_version(self, task_id: str) -> Any:
        """The task's version as stored now (a consistent read), as a plain value:
        None if the task or its version is missing, and whatever a record written
        around the API holds otherwise. What a set-aside of a task not read yet is
        conditional on (``transitions.set_aside``)."""
        ...

    def apply(self, task_id: str, transition: Transition, change: TaskChange | None = None) -> bool:
        """Carry out ``transition`` (``transitions.claim``, ``set_aside``,
        ``mark_has_dependents``) on the task's record, atomically; with ``change``
        (never a claim), its record in the same transaction (its tenant, if None,
        the task's as stored).

        Expects the record to meet ``transition.expects`` (a missing task meets
        none). Then it writes the transition's changes (sets, removes, computes),
        keeping the due index in step with the record, and answers True. Refused:
        nothing is written, and the answer is False.
        """
        ...

    def apply_each(self, changes: Sequence[tuple[str, Transition]]) -> list[bool | Exception]:
        """Carry out each (task id, transition) of ``changes`` as ``apply`` would, each
        alone: one refused, or raising, writes nothing and leaves the others as they
        are. A page of claims in one call (the tick's, decision 0043).

        Answers, in order, whether each held, or the exception it raised (``Throttled``:
        ask again after a wait). SQLite: one write transaction for the page; DynamoDB:
        one conditional UpdateItem each, as ``apply``. Raises ``StoreUnavailable`` (not
        ``Throttled``) when the store could not be written at all: then the changes
        already carried out stand, and the others were not made.
        """
        ...

    def replace(
        self,
        task: Task,
        placement: DuePlacement | None,
        replacement: Replacement,
        change: TaskChange | None = None,
    ) -> bool:
        """Store ``task`` whole, due at ``placement`` (``transitions.replace``), with
        ``change``'s record in the same transaction.

        Not one record's transition: the write of the whole task and a check of
        each other task ``replacement.unchanged`` names (those a dependency chain
        was checked against) are one transaction (DynamoDB: a conditional PutItem,
        or TransactWriteItems with a ConditionCheck per other task). Expects the
        stored task to meet ``replacement.expects`` (its version read) and each
        other task its condition. Refused: False, nothing written.
        """
        ...


@dataclass(frozen=True)
class DuePage:
    """One page of due tasks of one shard, as the due index returned it: the unit a
    looping tick hands out for claiming elsewhere."""

    shard: int
    task_ids: tuple[str, ...]


class DuePageHandOut(Protocol):
    """Where a looping tick hands a page of due tasks to be claimed elsewhere (on AWS,
    the claim Lambda). Not the claim of a task: that is ``transitions.claim``, applied
    by ``TaskStore.apply``."""

    def hand_out(self, page: DuePage) -> None:
        """Start a claim of ``page`` elsewhere, without waiting for it.

        Raises when the page could not be handed out (the tick then claims it
        itself). A page handed out and never claimed stays due: the tick finds
        it again once the hand-out is no longer fresh.
        """
        ...
