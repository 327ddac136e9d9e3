"""Notification counts (decision 0057) over every store: an end counted once however
often its follow-up runs, even after other ends were counted in between (the
reaper's replay of a follow-up whose finisher died after counting)."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from dynacron.domain.clock import SettableClock
from dynacron.domain.executions.execution import Execution, ExecutionStatus
from dynacron.domain.executions.notifications import NotifySettings, NotifyTarget
from dynacron.ports import AdapterSet
from dynacron.services.notifications import TaskNotifications
from tests.contract.builders import ROOMY, START, a_task

# on_failure after three failed executions in a row.
AFTER_THREE = NotifySettings(on_failure=NotifyTarget("http://127.0.0.1:9/failed", after=3))


def failed(n: int) -> Execution:
    at = START + timedelta(minutes=n)
    return Execution(
        execution_id=f"job_{at:%Y%m%dT%H%M%S%f}",
        task_id="job",
        scheduled_at=at,
        status=ExecutionStatus.FAILED,
        attempt=3,
        started_at=at,
        completed_at=at,
    )


def test_a_repeated_end_is_counted_once_after_another_was_counted_since(
    adapters: AdapterSet, clock: SettableClock
) -> None:
    # Given a task told after three failures in a row, and two failures counted
    task = dataclasses.replace(a_task("job"), notify=AFTER_THREE)
    adapters.tasks.create_within_quota(task, None, ROOMY, "secret-job")
    notifications = TaskNotifications(
        tasks=adapters.tasks, executions=adapters.executions, queue=adapters.queue, clock=clock
    )
    first, second = failed(1), failed(2)
    notifications.after_end(first)
    notifications.after_end(second)

    # When the first one's follow-up runs again (its finisher died after counting it)
    notifications.after_end(first)

    # Then it counted nothing more: still two in a row, no on_failure sent
    stored = adapters.tasks.get("job")
    assert stored is not None
    assert stored.notification_state.consecutive_failures == 2
    assert adapters.queue.depth() == 0
    # And a third failure is the third: on_failure is sent, once
    notifications.after_end(failed(3))
    notifications.after_end(failed(3))
    stored = adapters.tasks.get("job")
    assert stored is not None
    assert stored.notification_state.consecutive_failures == 3
    assert adapters.queue.depth() == 1


def succeeded(n: int) -> Execution:
    return dataclasses.replace(failed(n), status=ExecutionStatus.SUCCEEDED, attempt=1)


def test_a_replayed_success_does_not_end_a_run_of_failures_that_began_after_it(
    adapters: AdapterSet, clock: SettableClock
) -> None:
    # Given a task told after three failures in a row: a success (nothing to count,
    # so nothing stored), then two failures of later occurrences counted
    task = dataclasses.replace(a_task("job"), notify=AFTER_THREE)
    adapters.tasks.create_within_quota(task, None, ROOMY, "secret-job")
    notifications = TaskNotifications(
        tasks=adapters.tasks, executions=adapters.executions, queue=adapters.queue, clock=clock
    )
    notifications.after_end(succeeded(1))
    notifications.after_end(failed(2))
    notifications.after_end(failed(3))

    # When the success's follow-up runs again (the reaper's replay, a message twice)
    notifications.after_end(succeeded(1))

    # Then the run of failures stands, and the next failure is its third
    stored = adapters.tasks.get("job")
    assert stored is not None
    assert stored.notification_state.consecutive_failures == 2
    notifications.after_end(failed(4))
    assert adapters.queue.depth() == 1
    # And a success of a later occurrence ends the run
    notifications.after_end(succeeded(5))
    stored = adapters.tasks.get("job")
    assert stored is not None
    assert stored.notification_state.consecutive_failures == 0
    assert stored.notification_state.failing_since is None
