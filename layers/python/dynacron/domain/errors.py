"""Typed domain errors. They are mapped to HTTP once, at the API edge."""

from __future__ import annotations


class DynacronError(Exception):
    """Base class of every error dynacron raises on purpose."""


class InvalidRequest(DynacronError):
    """Input that can never succeed as given; ``field`` names what to fix."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class InvalidSchedule(InvalidRequest):
    """A schedule expression or time zone that cannot be understood."""


class TaskNotFound(DynacronError):
    def __init__(self, task_id: str) -> None:
        super().__init__(f"task {task_id!r} does not exist")
        self.task_id = task_id


class Conflict(DynacronError):
    """The stored state moved on since it was read; the caller may retry."""


class ExecutionNotFound(DynacronError):
    def __init__(self, execution_id: str) -> None:
        super().__init__(f"execution {execution_id!r} does not exist")
        self.execution_id = execution_id


class CallbackRefused(DynacronError):
    """A heartbeat or completion without the token of the execution's current attempt."""


class UnknownHandler(InvalidRequest):
    """A task names a Python handler that no module registered."""
