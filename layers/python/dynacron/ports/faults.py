"""Named boundaries between the pipeline's steps, where a fault can be injected.

Production code calls ``faults.reached(boundary)`` at each one and the default
does nothing. The chaos tests pass an injector that stops the pipeline there
(an exception that nothing of ours catches, or SIGKILL of the whole process), to
show that a crash at any step boundary loses nothing and applies nothing twice.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Protocol


class Boundary(StrEnum):
    """The step boundaries a chaos test may stop the pipeline at."""

    # The tick sends first and claims second (see services/tick.py).
    TICK_SENT_NOT_CLAIMED = "tick.sent-not-claimed"
    TICK_CLAIMED_ONE = "tick.claimed-one"
    WORKER_BEGAN = "worker.began"
    # The handler answered; its idempotency record does not say so yet.
    WORKER_HANDLER_RETURNED = "worker.handler-returned"
    # The idempotency record holds the success; the execution does not: its lease
    # was taken over during the call. (Otherwise one write saves both: 0016.)
    WORKER_OUTCOME_NOT_RECORDED = "worker.outcome-not-recorded"
    # One record of an SQS batch is done and the next has not started.
    WORKER_RECORD_DONE = "worker.record-done"
    RETRY_RECORDED_NOT_SENT = "retry.recorded-not-sent"
    DEAD_LETTER_RECORDED_NOT_SENT = "dead-letter.recorded-not-sent"
    ENDED_NOT_FOLLOWED_UP = "execution.ended-not-followed-up"
    REAPER_TOOK_OVER = "reaper.took-over"


class Faults(Protocol):
    """Where a test injects a crash; production passes ``NO_FAULTS``."""

    def reached(self, boundary: Boundary) -> None:
        """Called when the pipeline crosses ``boundary``; may not return."""
        ...


class NoFaults:
    """Injects nothing: every boundary is crossed."""

    def reached(self, boundary: Boundary) -> None:
        """Return at once."""


NO_FAULTS = NoFaults()
