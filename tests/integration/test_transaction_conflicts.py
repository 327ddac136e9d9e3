"""A DynamoDB transaction cancelled for a conflict (another transaction on one of its
items at the same moment, ``TransactionConflict``) is not a refusal: the task
store asks again, and if the conflict outlasts its tries it says so (``Throttled``),
rather than answer that the change's condition did not hold."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError

from dynacron.api.requests import TaskCreate
from dynacron.domain.clock import SettableClock
from dynacron.domain.tasks.task import TaskStatus
from dynacron.entry.composition import Dynacron
from dynacron.ports import Throttled
from dynacron.services import task_changes
from tests.integration.api_client import ALICE


@contextmanager
def conflicting(dynamodb: Any, times: int) -> Iterator[list[int]]:
    """The next ``times`` TransactWriteItems calls are cancelled as DynamoDB cancels one
    that met another transaction on its items; yields the count of calls made."""
    calls = [0]

    def conflict(params: dict[str, Any], **_: Any) -> None:
        calls[0] += 1
        if calls[0] <= times:
            reasons = [{"Code": "TransactionConflict"}] + [{"Code": "None"}] * (
                len(params["TransactItems"]) - 1
            )
            error = {"Code": "TransactionCanceledException", "Message": "conflict"}
            raise ClientError(
                {"Error": error, "CancellationReasons": reasons},  # type: ignore[typeddict-unknown-key]
                "TransactWriteItems",
            )

    event = "provide-client-params.dynamodb.TransactWriteItems"
    dynamodb.meta.events.register(event, conflict)
    try:
        yield calls
    finally:
        dynamodb.meta.events.unregister(event, conflict)


def a_counted_task(system: Dynacron, clock: SettableClock) -> str:
    """A recurring task, counted in its tenant's census: setting it aside is a transaction."""
    spec = TaskCreate(cron="*/5 * * * *", handler_url="http://127.0.0.1:9/hook").to_spec()
    return system.task_service.register(ALICE, spec).task_id


def test_a_set_aside_that_meets_a_conflict_is_asked_again(
    system: Dynacron, aws: tuple[Any, Any], clock: SettableClock
) -> None:
    # Given a counted task, and DynamoDB cancelling the next transaction for a conflict
    task_id = a_counted_task(system, clock)
    with conflicting(aws[0], times=1) as calls:
        # When the worker sets the task aside
        set_aside = task_changes.set_aside_by_id(
            system.tasks, task_id, "raised", clock.now() + timedelta(seconds=1)
        )
    # Then it was asked again, and the task is set aside, not left as it was
    assert calls[0] >= 2
    assert set_aside is True
    task = system.tasks.get(task_id)
    assert task is not None
    assert task.status is TaskStatus.ERROR


def test_a_conflict_that_outlasts_the_tries_is_reported_not_taken_for_a_refusal(
    system: Dynacron, aws: tuple[Any, Any], clock: SettableClock
) -> None:
    # Given a counted task, and every transaction cancelled for a conflict
    task_id = a_counted_task(system, clock)
    before = system.tasks.get(task_id)
    with conflicting(aws[0], times=1_000), pytest.raises(Throttled):
        # When the worker sets the task aside, then it hears of the conflict
        task_changes.set_aside_by_id(
            system.tasks, task_id, "raised", clock.now() + timedelta(seconds=1)
        )
    # and the task is as it was, to be set aside again later
    assert system.tasks.get(task_id) == before
