"""What the services need of the task store: tasks, their due index, their dependents,
and the hand-out of a page of due tasks to be claimed elsewhere.

The rules of each change (the state it expects, what it writes) are stated once in
``dynacron.domain.tasks.transitions``; a store carries one out atomically. Every
change names the version it read: of two writers one wins, and the other is told
it lost (``False``), with nothing written.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from dynacron.domain.tasks.claiming import Claim
from dynacron.domain.tasks.tags import TagFilter
from dynacron.domain.tasks.task import DuePlacement, Task

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
    # The stored version as it was read, in the store's own form (None if
    # missing): the set-aside write is conditional on it.
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
        self, task: Task, placement: DuePlacement | None, max_tasks: int, fresh_secret: str
    ) -> None:
        """Store a new ``task`` (in the due index at ``placement``) and count it against
        its tenant's ``max_tasks``, in one transaction; the tenant gets
        ``fresh_secret`` as its first signing secret if it has none.

        Expects no task with this id and fewer than ``max_tasks`` counted. Refused:
        ``LimitExceeded`` over quota (checked first), ``InvalidRequest`` if the id is taken.
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
    ) -> Page[Task]:
        """One page of the tenant's tasks, oldest first; with ``tags``, those matching
        every filter only. A filtered page may hold fewer than ``limit`` tasks, even
        none, with a ``next_token`` to go on from: a store bounds the work of one page.
        ``InvalidRequest`` for a token not of this tenant's listing."""
        ...

    def delete_owned(self, tenant_id: str, task_id: str) -> bool:
        """Delete the task and take it off its tenant's count, in one transaction.
        Expects the task to be the tenant's; False (nothing changed) if it is not."""
        ...

    def mark_has_dependents(self, tenant_id: str, task_id: str) -> bool:
        """Note that some task runs after ``task_id``, with the version bumped (so a
        whole-task write based on an older read is refused rather than erasing it).
        Expects the task to be the tenant's; False (nothing written) if it is not."""
        ...


class TaskStore(OwnedTasks, Protocol):
    """Tasks for the tick, the worker and the services: reads by id, the due index,
    the claim of an occurrence, whole replacements and set-asides."""

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

    def claim(self, claim: Claim, placement: DuePlacement | None, now: datetime) -> bool:
        """Move the task past the occurrence(s) of ``claim`` (``transitions.claim``).

        Expects the task still ACTIVE at the version the claim read. Changes: a new
        version, the next occurrence and its due placement (or COMPLETED, or out of
        the due index until a fixed-delay run finishes), the run slot and buffered
        occurrence. Refused: False, nothing written (another claimer or a change won).
        """
        ...

    def replace(
        self,
        task: Task,
        placement: DuePlacement | None,
        expected_version: int,
        unchanged: dict[str, int] | None = None,
    ) -> bool:
        """Store ``task`` whole (due at ``placement``), in one transaction.

        Expects the stored task at ``expected_version`` and each task of
        ``unchanged`` (id to version: those a dependency chain was checked against)
        still at its version. Refused: False, nothing written.
        """
        ...

    def set_aside(self, task: Task | UnreadableTask, reason: str, now: datetime) -> bool:
        """Mark the task ERROR with ``reason``, out of the due index, with a new version
        (``transitions.set_aside``); an undecodable one too.

        Expects it still at the version read. Refused: False, nothing written.
        """
        ...

    def set_aside_by_id(
        self, task_id: str, reason: str, now: datetime, *, release_slot_of: str | None = None
    ) -> bool:
        """``set_aside`` for a task not read yet, at the version stored now. With
        ``release_slot_of``, the run slot that execution holds is freed too if it still
        holds it; otherwise the task is set aside with its slot as it is.
        Refused (False): the task is missing, or changed between the read and the write.
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
    the claim Lambda). Not the claim of a task: that is ``TaskStore.claim``."""

    def hand_out(self, page: DuePage) -> None:
        """Start a claim of ``page`` elsewhere, without waiting for it.

        Raises when the page could not be handed out (the tick then claims it
        itself). A page handed out and never claimed stays due: the tick finds
        it again once the hand-out is no longer fresh.
        """
        ...
