"""Running one execution: record it, call its handler, record the outcome."""

from __future__ import annotations

from typing import Protocol

from dynacron.delivery import DeliveryResult
from dynacron.domain.clock import Clock
from dynacron.domain.executions import Dispatch, ExecutionStatus
from dynacron.domain.tasks import Task
from dynacron.store import ExecutionStore, TaskStore


class Delivery(Protocol):
    def deliver(self, task: Task, dispatch: Dispatch) -> DeliveryResult: ...


class ExecutionRunner:
    def __init__(
        self,
        *,
        tasks: TaskStore,
        executions: ExecutionStore,
        delivery: Delivery,
        clock: Clock,
    ) -> None:
        self._tasks = tasks
        self._executions = executions
        self._delivery = delivery
        self._clock = clock

    def run(self, dispatch: Dispatch) -> ExecutionStatus | None:
        """Run ``dispatch`` once; None when it is a duplicate of a finished execution.

        A handler failure is recorded as FAILED and returned, not raised: the
        message has been dealt with. Infrastructure errors (DynamoDB, SQS) are
        raised so that the message returns to the queue and runs again.
        """
        if not self._executions.start(dispatch, self._clock.now()):
            return None
        task = self._tasks.get(dispatch.task_id)
        if task is None:
            self._executions.finish(
                dispatch.execution_id,
                ExecutionStatus.SKIPPED,
                self._clock.now(),
                error="the task was deleted before this execution ran",
            )
            return ExecutionStatus.SKIPPED
        result = self._delivery.deliver(task, dispatch)
        status = ExecutionStatus.SUCCEEDED if result.ok else ExecutionStatus.FAILED
        self._executions.finish(dispatch.execution_id, status, self._clock.now(), result.error)
        return status
