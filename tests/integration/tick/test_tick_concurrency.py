"""The tick issues a page's sends and claims from a thread pool: same outcome, less waiting."""

from __future__ import annotations

import dataclasses
import threading
from datetime import timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError

from dynacron.adapters.aws.errors import AwsUnavailable
from dynacron.adapters.aws.tasks import DynamoTaskStore
from dynacron.domain.clock import SettableClock
from dynacron.domain.conditions import Transition
from dynacron.domain.tasks.history import TaskChange
from dynacron.domain.tasks.task import TaskStatus
from dynacron.entry.composition import Dynacron
from dynacron.services.tick import Ticker
from tests.integration.tick.test_tick import drain_queue, register

DUE_AT = "2026-11-30T12:00:01Z"
TASKS = 40


class ClaimsMeetAtABarrier(DynamoTaskStore):
    """The first ``parties`` claims wait for each other: only concurrent claims get past."""

    def __init__(self, client: Any, table: str, parties: int) -> None:
        super().__init__(client, table)
        self.barrier = threading.Barrier(parties, timeout=20)
        self._waiting = parties
        self._lock = threading.Lock()

    def apply(self, task_id: str, transition: Transition, change: TaskChange | None = None) -> bool:
        if transition.move == "claim":
            with self._lock:
                wait, self._waiting = self._waiting > 0, self._waiting - 1
            if wait:
                self.barrier.wait()
        return super().apply(task_id, transition, change)


class OneClaimFails(DynamoTaskStore):
    """Fault injection: DynamoDB fails the claim of one task, mid-page."""

    def __init__(self, client: Any, table: str, failing_task_id: str) -> None:
        super().__init__(client, table)
        self._failing = failing_task_id

    def apply(self, task_id: str, transition: Transition, change: TaskChange | None = None) -> bool:
        if task_id == self._failing and transition.move == "claim":
            # An infrastructure error, as the adapters raise it: it ends the tick (a task's
            # own error sets it aside).
            raise AwsUnavailable(
                {"Error": {"Code": "ServiceUnavailable", "Message": "DynamoDB is unavailable"}},
                "UpdateItem",
            )
        return super().apply(task_id, transition, change)


def ticker_with(
    system: Dynacron, clock: SettableClock, tasks: DynamoTaskStore, **settings: Any
) -> Ticker:
    return Ticker(
        tasks=tasks,
        executions=system.executions,
        queue=system.queue,
        cursors=system.cursors,
        settings=dataclasses.replace(system.settings, **settings).tick_settings,
        clock=clock,
    )


def test_claims_of_a_page_are_in_flight_together(
    system: Dynacron, aws: tuple[Any, Any], clock: SettableClock
) -> None:
    # Given 40 due tasks and a store whose first 4 claims only proceed together
    task_ids = [register(system, at=DUE_AT) for _ in range(TASKS)]
    store = ClaimsMeetAtABarrier(aws[0], system.settings.tasks_table, parties=4)
    clock.advance(timedelta(seconds=2))

    # When a tick with 16 threads runs (one at a time, the first claim would wait forever)
    reports = ticker_with(system, clock, store, tick_concurrency=16).tick()

    # Then the barrier was passed, and every task was sent and claimed exactly once
    assert not store.barrier.broken
    assert sum(r.claimed for r in reports) == TASKS
    assert sum(r.lost_races for r in reports) == 0
    bodies = drain_queue(system, aws)
    assert sorted(b["task_id"] for b in bodies) == sorted(task_ids)


@pytest.mark.parametrize("concurrency", [1, 16])
def test_each_due_task_is_claimed_once_whatever_the_concurrency(
    system: Dynacron, aws: tuple[Any, Any], clock: SettableClock, concurrency: int
) -> None:
    task_ids = [register(system, at=DUE_AT) for _ in range(TASKS)]
    clock.advance(timedelta(seconds=2))
    ticker = ticker_with(
        system, clock, system.tasks, tick_concurrency=concurrency, tick_page_size=7
    )

    first = ticker.tick()
    second = ticker.tick()

    assert sum(r.claimed for r in first) == TASKS
    assert sum(r.claimed for r in second) == 0
    assert len({b["execution_id"] for b in drain_queue(system, aws)}) == TASKS
    assert all(t.status is TaskStatus.COMPLETED for t in system.tasks.get_many(task_ids))


def test_a_claim_failing_mid_page_loses_nothing(
    system: Dynacron, aws: tuple[Any, Any], clock: SettableClock
) -> None:
    # Given due tasks, and a tick whose claim of one of them fails
    task_ids = [register(system, at=DUE_AT) for _ in range(TASKS)]
    clock.advance(timedelta(seconds=2))
    failing = OneClaimFails(aws[0], system.settings.tasks_table, failing_task_id=task_ids[7])
    with pytest.raises(ClientError):
        ticker_with(system, clock, failing, tick_concurrency=16).tick()

    # When the next tick runs against a healthy store
    system.ticker.tick()

    # Then every task ran at least once and none is left due
    assert {b["task_id"] for b in drain_queue(system, aws)} == set(task_ids)
    assert all(t.status is TaskStatus.COMPLETED for t in system.tasks.get_many(task_ids))
