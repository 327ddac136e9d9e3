"""The guard around a handler call: at most one call per execution at a time, none
after a success (decision 0016).

``adapters.powertools.idempotency.IdempotentHandlerCalls`` runs it with Powertools'
idempotency utility; ``services.work`` only sees what is here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from dynacron.domain.executions.execution import DeliveryResult, HandlerCallRecord


class RemainingTime(Protocol):
    """What an invocation tells of its time left (a Lambda context has this)."""

    def get_remaining_time_in_millis(self) -> int:
        """Milliseconds left before the invocation is stopped."""
        ...


class AttemptRefused(Exception):
    """The attempt may not begin (a duplicate or stale message): nothing was saved."""


class CallRecords(Protocol):
    """Where one execution's handler-call record is kept, and what saving it also does."""

    def save_in_progress(self, record: HandlerCallRecord, now_ms: int) -> HandlerCallRecord | None:
        """Save ``record`` unless the one there still counts at ``now_ms``: then return
        that one. Raise ``AttemptRefused`` if the attempt may not begin at all."""
        ...

    def save_success(self, record: HandlerCallRecord) -> None:
        """Save the handler's success in the write that ends the execution SUCCEEDED;
        if the attempt's lease was lost meanwhile, keep it on the execution anyway,
        for the attempt that took over to replay instead of calling again."""
        ...

    def delete(self) -> None:
        """Drop the in-progress record this attempt saved (the call did not succeed),
        so that the next attempt calls the handler again; nothing if it saved none."""
        ...

    def load(self) -> HandlerCallRecord | None:
        """The record the execution holds now; None if it holds none."""
        ...


@dataclass(frozen=True)
class GuardedResult:
    """What a guarded handler call came to: the handler's answer, or why it was not called."""

    # None when the attempt was refused (nothing was called or saved).
    result: DeliveryResult | None
    # True when the handler had already succeeded for this execution and was not called.
    replayed: bool = False
    # True when another call for this execution was still in progress: not called.
    in_progress: bool = False

    @property
    def refused(self) -> bool:
        """True when the attempt may not begin: nothing was called or saved."""
        return self.result is None


class HandlerCalls(Protocol):
    """Calls a handler at most once at a time per execution, and never after its success."""

    @property
    def in_progress_limit_seconds(self) -> float:
        """The longest an in-progress record can block a new call (a dead caller's)."""
        ...

    def in_progress(self, invocation: RemainingTime | None = None) -> HandlerCallRecord:
        """The in-progress record a call starting now would save: a batch's begins
        write it ahead of the calls (``CallRecords.save_in_progress`` is then given
        it back, already saved)."""
        ...

    def call(
        self,
        execution_id: str,
        records: CallRecords,
        handler_call: Callable[[], DeliveryResult],
        invocation: RemainingTime | None = None,
    ) -> GuardedResult:
        """Call ``handler_call`` under the record ``records`` keeps: or replay the
        success recorded, or refuse (``GuardedResult.refused``) when ``records``
        raised ``AttemptRefused``."""
        ...
