"""The port completion tracking asks when a tracked run's end never arrived
(decision 0049): what became of the run an attempt started."""

from __future__ import annotations

from typing import Protocol

from dynacron.domain.executions.completion import RunState
from dynacron.domain.executions.execution import Execution
from dynacron.domain.tasks.task import Task


class RunDescriptionFailed(Exception):
    """The service could not say (throttled, unreachable, refused); ``retryable``
    says whether asking again later may help."""

    def __init__(self, reason: str, *, retryable: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retryable = retryable


class RunDescriber(Protocol):
    """Describes the run a tracked attempt started, as the task's role."""

    def describe(self, task: Task, execution: Execution) -> RunState:
        """The run of ``execution``'s current attempt: ended, still running, or
        missing; ``RunDescriptionFailed`` if the service could not say."""
        ...
