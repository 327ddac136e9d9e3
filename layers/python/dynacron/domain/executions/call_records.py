"""The handler-call record's transitions: saved in progress, kept completed, cleared.

The record Powertools' idempotency keeps of an execution's handler call lives on the
execution (decision 0016); these are its moves that are no part of an attempt's
begin or finish, in the language of ``dynacron.domain.conditions``, as the other
transitions of an execution (``dynacron.domain.executions.transitions``).
"""

from __future__ import annotations

from dynacron.domain.conditions import (
    AllOf,
    Condition,
    Equals,
    Exists,
    Missing,
    NotEquals,
    Transition,
    names_move,
)
from dynacron.domain.executions.execution import ExecutionStatus, HandlerCallRecord
from dynacron.domain.executions.record import (
    CALL_EXPIRES_AT,
    CALL_IN_PROGRESS_UNTIL,
    CALL_STATUS,
    EXECUTION_ID,
    STATUS,
    call_replaceable,
    call_sets,
    held_by,
)


@names_move("save_call")
def save_call(lease_token: str, call: HandlerCallRecord, call_now_ms: int) -> Transition:
    """The in-progress handler-call record ``call`` saved on the running attempt held by
    ``lease_token``, if the one there may be replaced at ``call_now_ms``."""
    return Transition(AllOf(held_by(lease_token), call_replaceable(call_now_ms)), call_sets(call))


@names_move("keep_call")
def keep_call(call: HandlerCallRecord) -> Transition:
    """The completed handler-call record ``call`` saved whoever holds the lease, unless
    the execution has SUCCEEDED already."""
    return Transition(
        AllOf(Exists(EXECUTION_ID), NotEquals(STATUS, ExecutionStatus.SUCCEEDED.value)),
        call_sets(call),
        frozenset({CALL_IN_PROGRESS_UNTIL}),
    )


@names_move("clear_call")
def clear_call(in_progress_until_ms: int | None) -> Transition:
    """The in-progress handler-call record saved with ``in_progress_until_ms`` dropped;
    one saved since by another call is left alone."""
    mine: Condition = (
        Equals(CALL_IN_PROGRESS_UNTIL, in_progress_until_ms)
        if in_progress_until_ms is not None
        else Missing(CALL_IN_PROGRESS_UNTIL)
    )
    return Transition(
        AllOf(Equals(CALL_STATUS, HandlerCallRecord.IN_PROGRESS), mine),
        removes=frozenset({CALL_STATUS, CALL_EXPIRES_AT, CALL_IN_PROGRESS_UNTIL}),
    )
