"""A page's sends and claims are one call each from the tick's own thread on SQLite
(decision 0043): one write transaction each for the page, not one per task (or per
ten messages) from a pool of threads that the file's single writer serialises anyway."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

from dynacron.domain.clock import SettableClock
from dynacron.domain.conditions import Transition
from dynacron.domain.executions.execution import Dispatch
from dynacron.domain.tasks.history import TaskChange
from dynacron.domain.tasks.task import TaskStatus
from dynacron.entry.composition import Dynacron
from dynacron.ports import DispatchQueue, TaskStore
from dynacron.services.tick import Ticker
from tests.integration.tick.test_tick import register

DUE_AT = "2026-11-30T12:00:01Z"
TASKS = 40


class CountedChanges:
    """The store, its changes counted on the way through (each still carried out)."""

    def __init__(self, inner: TaskStore) -> None:
        self._inner = inner
        self.claims_one_by_one = 0
        self.pages: list[int] = []

    def apply(self, task_id: str, transition: Transition, change: TaskChange | None = None) -> bool:
        if transition.move == "claim":
            self.claims_one_by_one += 1
        return self._inner.apply(task_id, transition, change)

    def apply_each(self, changes: Sequence[tuple[str, Transition]]) -> list[bool | Exception]:
        self.pages.append(len(changes))
        return self._inner.apply_each(changes)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class CountedSends:
    """The queue, its sends counted on the way through (each still sent)."""

    def __init__(self, inner: DispatchQueue) -> None:
        self._inner = inner
        self.sends: list[int] = []

    def send(self, dispatches: list[Dispatch]) -> list[Dispatch]:
        self.sends.append(len(dispatches))
        return self._inner.send(dispatches)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def test_local_mode_sends_and_claims_a_page_in_one_call_each(
    embedded: Callable[..., Dynacron], clock: SettableClock
) -> None:
    # Given local mode's SQLite system (its tick has no pool) and 40 due tasks in one shard
    system = embedded(shard_count=1)
    assert system.settings.tick_concurrency == 1
    task_ids = [register(system, at=DUE_AT) for _ in range(TASKS)]
    clock.advance(timedelta(seconds=2))
    counted = CountedChanges(system.tasks)
    queue = CountedSends(system.queue)
    ticker = Ticker(
        tasks=counted,  # type: ignore[arg-type]
        executions=system.executions,
        queue=queue,  # type: ignore[arg-type]
        cursors=system.cursors,
        settings=dataclasses.replace(system.settings, tick_page_size=100).tick_settings,
        clock=clock,
    )

    # When it ticks
    reports = ticker.tick()

    # Then the page's 40 messages were sent in one call, and its 40 claims went to
    # the store in one call, none one by one
    assert queue.sends == [TASKS]
    assert counted.pages == [TASKS]
    assert counted.claims_one_by_one == 0
    # and every task was claimed, once
    assert sum(r.claimed for r in reports) == TASKS
    assert all(t.status is TaskStatus.COMPLETED for t in system.tasks.get_many(task_ids))
    assert sum(r.claimed for r in ticker.tick()) == 0
