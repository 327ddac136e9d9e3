"""A task's conditional changes as data: what each one expects, what it changes.

The claim of an occurrence, a set-aside, the mark that some task runs after this
one, and a whole replacement are each a pure function here, returning a
``Transition`` (``dynacron.domain.conditions``) on the task record's attribute
names below, or for a replacement the conditions a whole-task write must meet.
Each store carries one out atomically (DynamoDB: one conditional write; SQLite:
one transaction that checks the condition on the row). Two stores, one set of rules.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from dynacron.domain.conditions import (
    AllOf,
    AnyOf,
    Below,
    Condition,
    Equals,
    Exists,
    Missing,
    Plus,
    Transition,
    names_move,
)
from dynacron.domain.instants import format_instant
from dynacron.domain.tasks.claiming import Claim
from dynacron.domain.tasks.record import NOTIFY_STATE, SKIPS, fan_in_dependent_attribute
from dynacron.domain.tasks.skips import skips_to_list
from dynacron.domain.tasks.task import TaskStatus

# The task record's attributes that transitions test or change. The AWS resources
# (``dynacron.definitions.resources``) name the same ones for keys and indexes.
TASK_ID = "task_id"
TENANT_ID = "tenant_id"
VERSION = "version"
STATUS = "status"
STATUS_REASON = "status_reason"
UPDATED_AT = "updated_at"
NEXT_RUN_AT = "next_run_at"
# Present while the task is in the due index (the index's partition: shard and bucket).
DUE_BUCKET = "due_bucket"
LAST_SCHEDULED_AT = "last_scheduled_at"
# The execution holding the task's run slot (overlap: skip or buffer_one).
RUNNING_EXECUTION = "running_execution"
BUFFERED_AT = "buffered_at"
HAS_DEPENDENTS = "has_dependents"

# A reason is kept short: it is shown to the owner and stored on the record.
REASON_LIMIT = 500


@names_move("claim")
def claim(claim: Claim, placement_key: str | None, now: datetime) -> Transition:
    """Move a task past the occurrence(s) of ``claim``.

    Expects the task still ACTIVE at the version the claim read: of any number of
    concurrent claimers of the same occurrence exactly one wins. Changes: a new
    version; the occurrence claimed; the run slot and buffered occurrence; then
    either out of the due index until a fixed-delay run finishes, or COMPLETED
    (no next occurrence, or no ``placement_key`` for it), or due again at the next
    occurrence in the bucket ``placement_key``.
    """
    sets: dict[str, Any] = {UPDATED_AT: format_instant(now)}
    if claim.scheduled_at is not None:
        sets[LAST_SCHEDULED_AT] = format_instant(claim.scheduled_at)
    if claim.takes_slot and claim.execution_id is not None:
        sets[RUNNING_EXECUTION] = claim.execution_id
    if claim.buffered is not None:
        sets[BUFFERED_AT] = format_instant(claim.buffered)
    removes: frozenset[str] = frozenset()
    if claim.skips_left is not None:
        if claim.skips_left:
            sets[SKIPS] = skips_to_list(claim.skips_left)
        else:
            removes = frozenset({SKIPS})
    if claim.awaits_finish:
        removes |= {NEXT_RUN_AT, DUE_BUCKET}
    elif claim.next_run_at is None or placement_key is None:
        sets[STATUS] = TaskStatus.COMPLETED.value
        removes |= {NEXT_RUN_AT, DUE_BUCKET}
    else:
        sets[NEXT_RUN_AT] = format_instant(claim.next_run_at)
        sets[DUE_BUCKET] = placement_key
    return Transition(
        expects=AllOf(Equals(VERSION, claim.task.version), Equals(STATUS, TaskStatus.ACTIVE.value)),
        sets=sets,
        removes=removes,
        computes={VERSION: Plus(VERSION, 1)},
    )


@names_move("replan")
def replan(
    seen_version: int, next_run_at: datetime, placement_key: str, now: datetime
) -> Transition:
    """Plan an ACTIVE task for ``next_run_at`` in the bucket ``placement_key`` instead
    (after a step back of the clock, decision 0037). Expects the version read."""
    return Transition(
        expects=AllOf(Equals(VERSION, seen_version), Equals(STATUS, TaskStatus.ACTIVE.value)),
        sets={
            NEXT_RUN_AT: format_instant(next_run_at),
            DUE_BUCKET: placement_key,
            UPDATED_AT: format_instant(now),
        },
        computes={VERSION: Plus(VERSION, 1)},
    )


def next_version(seen: Any) -> int:
    """The version after ``seen`` as stored (any form a record written around the API
    may hold): one more than a whole number, else 1."""
    try:
        return int(str(seen)) + 1
    except (TypeError, ValueError):
        return 1


@names_move("set_aside")
def set_aside(
    seen_version: Any, reason: str, now: datetime, *, release_slot_of: str | None = None
) -> Transition:
    """Mark a task ERROR with ``reason``, out of the due index, with a new version.

    Expects the task at ``seen_version`` as stored (None: it has none), whatever
    else it holds: nothing else of it is read, so one that cannot be decoded is set
    aside too. With ``release_slot_of``, also expects that execution to hold the run
    slot, and frees it.
    """
    expects: list[Condition] = [
        Exists(TASK_ID),
        Missing(VERSION) if seen_version is None else Equals(VERSION, seen_version),
    ]
    removes = {DUE_BUCKET}
    if release_slot_of is not None:
        expects.append(Equals(RUNNING_EXECUTION, release_slot_of))
        removes |= {RUNNING_EXECUTION, BUFFERED_AT}
    return Transition(
        expects=AllOf(*expects),
        sets={
            STATUS: TaskStatus.ERROR.value,
            STATUS_REASON: reason[:REASON_LIMIT],
            UPDATED_AT: format_instant(now),
            VERSION: next_version(seen_version),
        },
        removes=frozenset(removes),
    )


def set_aside_attempts(
    seen_version: Any, reason: str, now: datetime, *, release_slot_of: str | None = None
) -> list[Transition]:
    """The set-asides to try in turn, until one holds: with ``release_slot_of``, first
    one that frees the run slot that execution holds (nothing else would free it),
    then, the slot held by another, one that leaves it as it is."""
    plain = set_aside(seen_version, reason, now)
    if release_slot_of is None:
        return [plain]
    return [set_aside(seen_version, reason, now, release_slot_of=release_slot_of), plain]


@names_move("mark_has_dependents")
def mark_has_dependents(
    tenant_id: str,
    *,
    fan_in_dependent: str | None = None,
    marked_at: datetime | None = None,
    seen_version: int | None = None,
) -> Transition:
    """Note that some task runs after this one. Expects the task to be ``tenant_id``'s;
    bumps the version, so that a whole-task write based on an older read is refused
    rather than erasing the mark. With ``fan_in_dependent``, also names that task as
    one following it after another first upstream (decision 0058): the dependents
    index holds only a dependent's first upstream. The name holds ``marked_at`` until
    a whole-task write stores it as ``True``: a mark that fresh may belong to a
    create or change still under way, which ``unmark_fan_in_dependent`` leaves.
    With ``seen_version``, expects the task at the version whose names were counted
    against their bound: of two marks racing for the last place, one is refused."""
    sets: dict[str, Any] = {HAS_DEPENDENTS: True}
    if fan_in_dependent is not None:
        stamp = format_instant(marked_at) if marked_at is not None else True
        sets[fan_in_dependent_attribute(fan_in_dependent)] = stamp
    owner: Condition = Equals(TENANT_ID, tenant_id)
    if seen_version is not None:
        owner = AllOf(owner, Equals(VERSION, seen_version))
    return Transition(
        expects=owner,
        sets=sets,
        computes={VERSION: Plus(VERSION, 1)},
    )


@names_move("unmark_fan_in_dependent")
def unmark_fan_in_dependent(dependent_task_id: str, marked_before: datetime) -> Transition:
    """Forget that ``dependent_task_id`` follows this task: it is gone, or no longer
    names this task (a refused create, a change of ``after``, a delete). Expects the
    name present and marked before ``marked_before`` (or stored by a whole-task write
    since): a newer mark may be a create still under way, whose task is not written
    yet. Bumps the version, as the mark does."""
    name = fan_in_dependent_attribute(dependent_task_id)
    return Transition(
        expects=AnyOf(Equals(name, True), Below(name, format_instant(marked_before))),
        removes=frozenset({name}),
        computes={VERSION: Plus(VERSION, 1)},
    )


@names_move("record_notifications")
def record_notifications(seen_version: int, state: Mapping[str, Any] | None) -> Transition:
    """Store what a task's notifications counted and sent (None: nothing). Expects
    the task at the version read, whose state the new one follows from; bumps the
    version, so that a whole-task write based on an older read is refused rather
    than putting the older state back."""
    return Transition(
        expects=Equals(VERSION, seen_version),
        sets={NOTIFY_STATE: dict(state)} if state is not None else {},
        removes=frozenset() if state is not None else frozenset({NOTIFY_STATE}),
        computes={VERSION: Plus(VERSION, 1)},
    )


@dataclass(frozen=True)
class Replacement:
    """What a whole-task write (pause, resume, PATCH, the release of a run slot)
    expects, checked in one transaction with the write: of the task written, and of
    each other task (by id) the change was checked against."""

    expects: Condition
    unchanged: Mapping[str, Condition] = field(default_factory=dict)


def replace(expected_version: int, unchanged: Mapping[str, int] | None = None) -> Replacement:
    """A whole-task write that expects the stored task still at ``expected_version``
    (any write in between, a claim or another change, bumped it) and each task of
    ``unchanged`` (id to version: a dependency chain) still at its version."""
    return Replacement(
        expects=Equals(VERSION, expected_version),
        unchanged={
            task_id: Equals(VERSION, version) for task_id, version in (unchanged or {}).items()
        },
    )
