"""Executions: one run of one occurrence of a task, and the message that carries it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum


class ExecutionStatus(StrEnum):
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    SKIPPED = "SKIPPED"

    @property
    def is_final(self) -> bool:
        return self is not ExecutionStatus.RUNNING


@dataclass(frozen=True)
class Dispatch:
    """What the tick sends through the queue: which occurrence to run, not how.

    The worker reads the task when it runs, so a handler or payload changed after
    the occurrence was enqueued takes effect, and a deleted task does not fire.
    """

    execution_id: str
    task_id: str
    scheduled_at: datetime
    attempt: int = 1
    # How long SQS holds the message before a worker may see it (jitter).
    delay_seconds: int = 0


@dataclass(frozen=True)
class Execution:
    execution_id: str
    task_id: str
    scheduled_at: datetime
    status: ExecutionStatus
    attempt: int
    started_at: datetime | None = None
    completed_at: datetime | None = None
    error: str | None = None
