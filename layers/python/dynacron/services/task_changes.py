"""How a task is set aside, stated once for every store: which transitions, in which order.

Each is one conditional change of the domain's (``dynacron.domain.tasks.transitions``)
that the store carries out (``TaskStore.apply``): a concurrent writer between the
read of a version and the write makes the write refuse, never undo that writer.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from dynacron.domain.tasks import transitions
from dynacron.domain.tasks.history import SYSTEM, ChangeKind, ChangeStamp, TaskChange
from dynacron.domain.tasks.task import Task
from dynacron.ports.tasks import TaskStore, UnreadableTask


def set_aside(tasks: TaskStore, task: Task | UnreadableTask, reason: str, now: datetime) -> bool:
    """Mark ``task`` ERROR with ``reason``, out of the due index, if it is still at the
    version read: nothing else of it is needed, so one that cannot be decoded is set
    aside too. False (nothing written) if it changed meanwhile."""
    seen = task.version if isinstance(task, Task) else task.seen_version
    before: dict[str, object] = {"version": _shown(seen)}
    if isinstance(task, Task):
        before["status"] = task.status.value
    tenant_id = task.tenant_id if isinstance(task, Task) else None
    change = _set_aside_record(task.task_id, tenant_id, before, reason, now)
    return tasks.apply(task.task_id, transitions.set_aside(seen, reason, now), change)


def set_aside_by_id(
    tasks: TaskStore,
    task_id: str,
    reason: str,
    now: datetime,
    *,
    release_slot_of: str | None = None,
) -> bool:
    """``set_aside`` for a task not read yet, at its version as stored now.

    With ``release_slot_of``, the run slot that execution holds is freed too (its end
    could not be handled, so nothing else would ever free it) if it still holds it;
    otherwise the task is set aside with its slot as it is. False: the task is
    missing, or changed between the read and the write.
    """
    seen = tasks.stored_version(task_id)
    attempts = transitions.set_aside_attempts(seen, reason, now, release_slot_of=release_slot_of)
    change = _set_aside_record(task_id, None, {"version": _shown(seen)}, reason, now)
    return any(tasks.apply(task_id, attempt, change) for attempt in attempts)


def _shown(seen: Any) -> int | str | None:
    """A version as stored (any form a record written around the API may hold) as a
    record shows it: a whole number, else its text."""
    if seen is None:
        return None
    try:
        return int(str(seen))
    except ValueError:
        return str(seen)


def _set_aside_record(
    task_id: str, tenant_id: str | None, before: dict[str, object], reason: str, now: datetime
) -> TaskChange:
    """The change record of a set-aside: by the scheduler, the task's status before
    (when read) and after (decision 0054). Its tenant, if None, is the store's."""
    after = {
        "status": "ERROR",
        "status_reason": reason[: transitions.REASON_LIMIT],
        "version": transitions.next_version(before["version"]),
    }
    return ChangeStamp(SYSTEM, now).recorded(
        ChangeKind.SET_ASIDE, task_id, tenant_id, before, after, note=reason[:200]
    )
