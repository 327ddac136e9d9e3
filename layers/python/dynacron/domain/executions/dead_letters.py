"""An execution into the dead letters and out again: its transitions as data.

An attempt that failed for good (``dead_letter``), or whose message was given up on
before it began (``record_undelivered``, ``dead_letter_undelivered``), is FAILED and
listed as a dead letter of its tenant; ``redrive`` queues it again. Stated in the
language of ``dynacron.domain.conditions``, as the other transitions of an
execution (``dynacron.domain.executions.transitions``).
"""

from __future__ import annotations

from datetime import datetime

from dynacron.domain.conditions import AllOf, Equals, Missing, Plus, Transition, names_move
from dynacron.domain.executions.execution import Dispatch, ExecutionStatus
from dynacron.domain.executions.record import (
    ACCEPTED_AT,
    ATTEMPT,
    COMPLETED_AT,
    DEAD_LETTER,
    DEAD_LETTERED_AT,
    ERROR,
    ERROR_LIMIT,
    EXECUTION_ID,
    EXPIRES_AT,
    FIRST_ATTEMPT,
    LEASE_TOKEN,
    NEXT_ATTEMPT_AT,
    RUN_ARN,
    STATUS,
    Keeping,
    attention_sets,
    dead_letter_partition,
    dead_letter_sets,
    expiry,
    held_by,
    lease_sets,
    present,
    retry_record,
    upstream_record,
)
from dynacron.domain.executions.retry import RetryPolicy
from dynacron.domain.instants import format_instant


@names_move("dead_letter")
def dead_letter(
    lease_token: str,
    *,
    now: datetime,
    error: str,
    lease_until: datetime,
    new_token: str,
    tenant_id: str,
    keeping: Keeping,
) -> Transition:
    """A running attempt held by ``lease_token`` FAILED and listed as a dead letter of
    ``tenant_id``, with a short watched lease until its copy for the dead-letter
    queue is sent (``release``)."""
    sets = {
        STATUS: ExecutionStatus.FAILED.value,
        COMPLETED_AT: format_instant(now),
        EXPIRES_AT: expiry(keeping.retention, now, lease_until),
        ERROR: error[:ERROR_LIMIT],
        **dead_letter_sets(tenant_id, now),
        **attention_sets(tenant_id, now),
        **lease_sets(new_token, lease_until, keeping.lease_shard),
    }
    return Transition(
        held_by(lease_token), sets, frozenset({ACCEPTED_AT, RUN_ARN, NEXT_ATTEMPT_AT})
    )


@names_move("record_undelivered")
def record_undelivered(
    dispatch: Dispatch,
    *,
    now: datetime,
    error: str,
    retry: RetryPolicy,
    tenant_id: str,
    lease_until: datetime,
    lease_token: str,
    keeping: Keeping,
) -> Transition:
    """A new execution whose attempt never began: FAILED and listed as a dead letter
    of ``tenant_id`` (decision 0022), with a short watched lease as ``dead_letter``
    leaves."""
    record = {
        "task_id": dispatch.task_id,
        EXECUTION_ID: dispatch.execution_id,
        "scheduled_at": format_instant(dispatch.scheduled_at),
        STATUS: ExecutionStatus.FAILED.value,
        ATTEMPT: dispatch.attempt,
        FIRST_ATTEMPT: dispatch.attempt,
        "retry": retry_record(retry),
        "tenant_id": tenant_id,
        COMPLETED_AT: format_instant(now),
        ERROR: error[:ERROR_LIMIT],
        **dead_letter_sets(tenant_id, now),
        **attention_sets(tenant_id, now),
        **lease_sets(lease_token, lease_until, keeping.lease_shard),
        # From when the record stops mattering, never from the occurrence.
        EXPIRES_AT: expiry(keeping.retention, now),
        "upstream": upstream_record(dispatch.upstream),
    }
    return Transition(Missing(EXECUTION_ID), present(record), creates=True)


@names_move("dead_letter_undelivered")
def dead_letter_undelivered(
    seen_token: str,
    *,
    attempt: int,
    now: datetime,
    error: str,
    lease_until: datetime,
    new_token: str,
    tenant_id: str,
    keeping: Keeping,
) -> Transition:
    """An execution still QUEUED for ``attempt`` under ``seen_token``, whose message was
    given up on before it began: FAILED and listed, as ``dead_letter`` does. Its
    expiry stays as the queued attempt set it."""
    expects = AllOf(
        Equals(STATUS, ExecutionStatus.QUEUED.value),
        Equals(ATTEMPT, attempt),
        Equals(LEASE_TOKEN, seen_token),
    )
    sets = {
        STATUS: ExecutionStatus.FAILED.value,
        COMPLETED_AT: format_instant(now),
        ERROR: error[:ERROR_LIMIT],
        **dead_letter_sets(tenant_id, now),
        **attention_sets(tenant_id, now),
        **lease_sets(new_token, lease_until, keeping.lease_shard),
    }
    return Transition(expects, sets, frozenset({NEXT_ATTEMPT_AT}))


@names_move("redrive")
def redrive(
    tenant_id: str,
    *,
    now: datetime,
    lease_until: datetime,
    new_token: str,
    keeping: Keeping,
) -> Transition:
    """A dead letter of ``tenant_id`` QUEUED again, due now, under a new watched lease:
    the next attempt number, and a fresh retry budget that starts at it. It stays
    listed across tasks, from now, until it succeeds."""
    return Transition(
        AllOf(
            Equals(STATUS, ExecutionStatus.FAILED.value),
            Equals(DEAD_LETTER, dead_letter_partition(tenant_id)),
        ),
        {
            STATUS: ExecutionStatus.QUEUED.value,
            NEXT_ATTEMPT_AT: format_instant(now),
            **lease_sets(new_token, lease_until, keeping.lease_shard),
            **attention_sets(tenant_id, now),
            EXPIRES_AT: expiry(keeping.retention, now, lease_until),
        },
        frozenset({DEAD_LETTER, DEAD_LETTERED_AT, COMPLETED_AT}),
        {ATTEMPT: Plus(ATTEMPT, 1), FIRST_ATTEMPT: Plus(ATTEMPT, 1)},
    )
