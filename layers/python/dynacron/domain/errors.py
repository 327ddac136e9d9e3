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
    """No such task for the caller's tenant (another tenant's task is not found either)."""

    def __init__(self, task_id: str) -> None:
        super().__init__(f"task {task_id!r} does not exist")
        self.task_id = task_id


class Conflict(DynacronError):
    """The stored state moved on since it was read; the caller may retry."""


class LimitExceeded(InvalidRequest):
    """A request over an operator limit; ``limit`` names it (e.g. ``max_tasks_per_tenant``)."""

    def __init__(self, limit: str, field: str, message: str) -> None:
        super().__init__(field, message)
        self.limit = limit


class RateLimited(DynacronError):
    """The caller's tenant sent more requests than its rate allows; retry after a while."""

    def __init__(self, retry_after_seconds: int) -> None:
        super().__init__(f"too many requests; retry in {retry_after_seconds} s")
        self.retry_after_seconds = retry_after_seconds


class Unauthenticated(DynacronError):
    """No tenant can be derived from the caller's identity."""


class ExecutionNotFound(DynacronError):
    """No such execution for the caller's tenant (another tenant's is not found either)."""

    def __init__(self, execution_id: str) -> None:
        super().__init__(f"execution {execution_id!r} does not exist")
        self.execution_id = execution_id


class CallbackRefused(DynacronError):
    """A heartbeat or completion without the token of the execution's current attempt."""


class UnknownHandler(InvalidRequest):
    """A task names a Python handler that no module registered."""
