"""How a task is set aside, stated once for every store: which transitions, in which order.

Each is one conditional change of the domain's (``dynacron.domain.tasks.transitions``)
that the store carries out (``TaskStore.apply``): a concurrent writer between the
read of a version and the write makes the write refuse, never undo that writer.
"""

from __future__ import annotations

from datetime import datetime

from dynacron.domain.tasks import transitions
from dynacron.domain.tasks.task import Task
from dynacron.ports.tasks import TaskStore, UnreadableTask


def set_aside(tasks: TaskStore, task: Task | UnreadableTask, reason: str, now: datetime) -> bool:
    """Mark ``task`` ERROR with ``reason``, out of the due index, if it is still at the
    version read: nothing else of it is needed, so one that cannot be decoded is set
    aside too. False (nothing written) if it changed meanwhile."""
    seen = task.version if isinstance(task, Task) else task.seen_version
    return tasks.apply(task.task_id, transitions.set_aside(seen, reason, now))


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
    return any(tasks.apply(task_id, attempt) for attempt in attempts)
