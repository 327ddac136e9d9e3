"""Each change of a task as the services make it: the domain's transition
(``domain.tasks.transitions``), carried out by the store (``TaskStore.apply``, or
``TaskStore.replace`` for a whole task). One line per change, so that a contract test
reads as the sequence of moves it checks."""

from __future__ import annotations

from datetime import datetime

from dynacron.domain.tasks import transitions
from dynacron.domain.tasks.claiming import Claim
from dynacron.domain.tasks.task import DuePlacement, Task
from dynacron.ports import TaskStore
from dynacron.services.task_changes import set_aside, set_aside_by_id

__all__ = ["set_aside", "set_aside_by_id"]


def claim(store: TaskStore, claim: Claim, placement: DuePlacement | None, now: datetime) -> bool:
    change = transitions.claim(claim, placement.key if placement else None, now)
    return store.apply(claim.task.task_id, change)


def mark_has_dependents(store: TaskStore, tenant_id: str, task_id: str) -> bool:
    return store.apply(task_id, transitions.mark_has_dependents(tenant_id))


def replace(
    store: TaskStore,
    task: Task,
    placement: DuePlacement | None,
    expected_version: int,
    unchanged: dict[str, int] | None = None,
) -> bool:
    return store.replace(task, placement, transitions.replace(expected_version, unchanged))
