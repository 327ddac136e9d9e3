"""An execution's state transitions as data: what each one expects, what it changes.

Every move of an execution (begin, renew, finish, requeue, take-over; into the dead
letters and out again in ``dead_letters``; the handler-call record's in
``call_records``) is a pure function returning a ``Transition``
(``dynacron.domain.conditions``): a ``Condition`` the stored record must meet and
the attributes it sets, removes or computes, by the record's names
(``dynacron.domain.executions.record``). A store only carries one out atomically.
Two stores, one set of rules.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from dynacron.domain.conditions import (
    AllOf,
    Below,
    Condition,
    Equals,
    Exists,
    Missing,
    Transition,
    names_move,
)
from dynacron.domain.executions.attention import Attention
from dynacron.domain.executions.execution import (
    Dispatch,
    ExecutionStatus,
    HandlerCallRecord,
    ResultSummary,
)
from dynacron.domain.executions.record import (
    ACCEPTED_AT,
    ATTEMPT,
    ATTENTION,
    CALL_IN_PROGRESS_UNTIL,
    COMPLETED_AT,
    ERROR,
    ERROR_LIMIT,
    EXECUTION_ID,
    EXPIRES_AT,
    FIRST_ATTEMPT,
    LEASE_SHARD,
    LEASE_TOKEN,
    LEASE_UNTIL,
    NEXT_ATTEMPT_AT,
    RESULT,
    RUN_ARN,
    STATUS,
    Keeping,
    attention_sets,
    call_replaceable,
    call_sets,
    expiry,
    held_by,
    lease_sets,
    present,
    result_record,
    retry_record,
    upstream_record,
)
from dynacron.domain.executions.retry import RetryPolicy
from dynacron.domain.instants import format_instant
from dynacron.domain.tasks.task import Task

# --- one function per conditional change of an execution ---------------------------


def _running(
    dispatch: Dispatch,
    now: datetime,
    lease_until: datetime,
    lease_token: str,
    callback_digest: str,
    keeping: Keeping,
) -> dict[str, Any]:
    # No lease shard: the undeleted SQS message brings a running attempt back (0015).
    return {
        STATUS: ExecutionStatus.RUNNING.value,
        ATTEMPT: dispatch.attempt,
        "started_at": format_instant(now),
        LEASE_TOKEN: lease_token,
        LEASE_UNTIL: format_instant(lease_until),
        "callback_digest": callback_digest,
        EXPIRES_AT: expiry(keeping.retention, lease_until),
    }


@names_move("begin")
def begin_new(
    dispatch: Dispatch,
    *,
    now: datetime,
    lease_until: datetime,
    lease_token: str,
    callback_digest: str,
    retry: RetryPolicy,
    tenant_id: str,
    keeping: Keeping,
    call: HandlerCallRecord | None = None,
) -> Transition:
    """``begin`` of an execution never seen before: a new record, RUNNING (with the
    in-progress handler-call record ``call``, if given)."""
    record = {
        "task_id": dispatch.task_id,
        EXECUTION_ID: dispatch.execution_id,
        "scheduled_at": format_instant(dispatch.scheduled_at),
        FIRST_ATTEMPT: dispatch.attempt,
        "retry": retry_record(retry),
        "tenant_id": tenant_id,
        "upstream": upstream_record(dispatch.upstream),
        **_running(dispatch, now, lease_until, lease_token, callback_digest, keeping),
        **(call_sets(call) if call is not None else {}),
    }
    return Transition(Missing(EXECUTION_ID), present(record), creates=True)


@names_move("begin")
def begin_queued(
    dispatch: Dispatch,
    *,
    now: datetime,
    lease_until: datetime,
    lease_token: str,
    callback_digest: str,
    keeping: Keeping,
    call: HandlerCallRecord | None = None,
    call_now_ms: int = 0,
) -> Transition:
    """``begin`` of an execution QUEUED for exactly this attempt: RUNNING under a new
    lease, out of the lease index. With ``call``, it also saves that handler-call
    record, and so expects the one there to be replaceable at ``call_now_ms``; a
    store whose first try fails on that tries again without ``call``."""
    queued: list[Condition] = [
        Equals(STATUS, ExecutionStatus.QUEUED.value),
        Equals(ATTEMPT, dispatch.attempt),
    ]
    sets = _running(dispatch, now, lease_until, lease_token, callback_digest, keeping)
    if call is not None:
        queued.append(call_replaceable(call_now_ms))
        sets |= call_sets(call)
    return Transition(AllOf(*queued), sets, frozenset({NEXT_ATTEMPT_AT, LEASE_SHARD}))


@names_move("enqueue")
def enqueue(
    dispatch: Dispatch,
    *,
    retry: RetryPolicy,
    lease_until: datetime,
    lease_token: str,
    tenant_id: str,
    keeping: Keeping,
) -> Transition:
    """A new execution QUEUED for its first attempt, its lease watched by the reaper
    (if the message is lost, the lease runs out and the reaper sends it)."""
    record = {
        "task_id": dispatch.task_id,
        EXECUTION_ID: dispatch.execution_id,
        "scheduled_at": format_instant(dispatch.scheduled_at),
        STATUS: ExecutionStatus.QUEUED.value,
        ATTEMPT: 1,
        FIRST_ATTEMPT: 1,
        "retry": retry_record(retry),
        NEXT_ATTEMPT_AT: format_instant(dispatch.not_before or dispatch.scheduled_at),
        LEASE_TOKEN: lease_token,
        LEASE_UNTIL: format_instant(lease_until),
        LEASE_SHARD: keeping.lease_shard,
        "tenant_id": tenant_id,
        EXPIRES_AT: expiry(keeping.retention, lease_until, dispatch.not_before),
        "upstream": upstream_record(dispatch.upstream),
    }
    return Transition(Missing(EXECUTION_ID), present(record), creates=True)


@names_move("record_skipped")
def record_skipped(
    task: Task,
    execution_id: str,
    scheduled_at: datetime,
    reason: str,
    now: datetime,
    *,
    keeping: Keeping,
) -> Transition:
    """A new execution of ``task`` that never runs, and why: SKIPPED from the start."""
    record = {
        "task_id": task.task_id,
        "tenant_id": task.tenant_id,
        EXECUTION_ID: execution_id,
        "scheduled_at": format_instant(scheduled_at),
        STATUS: ExecutionStatus.SKIPPED.value,
        ATTEMPT: 0,
        COMPLETED_AT: format_instant(now),
        ERROR: reason[:ERROR_LIMIT],
        EXPIRES_AT: expiry(keeping.retention, now),
    }
    return Transition(Missing(EXECUTION_ID), record, creates=True)


@names_move("renew")
def renew(
    lease_token: str,
    lease_until: datetime,
    accepted_at: datetime | None = None,
    *,
    keeping: Keeping,
    attention: Attention | None = None,
    run_arn: str | None = None,
) -> Transition:
    """A running lease held by ``lease_token`` extended to ``lease_until``. With
    ``accepted_at`` (a 202 answer) the lease outlives the worker's message, and so
    the reaper watches it (in its lease shard); with ``attention`` the long job is
    listed across its tenant's tasks too. A heartbeat leaves the listing as it is.
    ``run_arn``: the tracked run the attempt now waits for."""
    sets: dict[str, Any] = {
        LEASE_UNTIL: format_instant(lease_until),
        EXPIRES_AT: expiry(keeping.retention, lease_until),
    }
    if accepted_at is not None:
        sets[ACCEPTED_AT] = format_instant(accepted_at)
        sets[LEASE_SHARD] = keeping.lease_shard
    if run_arn is not None:
        sets[RUN_ARN] = run_arn
    if attention is not None:
        sets |= attention_sets(attention.tenant_id, attention.at)
    return Transition(held_by(lease_token), sets)


@names_move("finish")
def finish(
    lease_token: str,
    status: ExecutionStatus,
    now: datetime,
    *,
    follow_up_token: str | None = None,
    follow_up_until: datetime | None = None,
    error: str | None = None,
    result: ResultSummary | None = None,
    call: HandlerCallRecord | None = None,
    keeping: Keeping,
) -> Transition:
    """A running attempt held by ``lease_token`` ended for good with ``status``.

    With ``follow_up_token`` and ``follow_up_until``, a short watched lease stays
    until what the end owes is done (``release``); without, the lease goes. With
    ``call`` (completed), the handler-call record is saved too. It is no longer
    listed across tasks: removing attributes it never had (a first attempt that
    succeeded) writes no index.
    """
    sets: dict[str, Any] = {
        STATUS: status.value,
        COMPLETED_AT: format_instant(now),
        EXPIRES_AT: expiry(keeping.retention, now, follow_up_until),
    }
    # The callback digest stays (as it does through requeue and dead_letter): a
    # replayed callback of this attempt is then told the execution ended (409), not
    # that its token is wrong. The next attempt's begin replaces it.
    removes = {ACCEPTED_AT, RUN_ARN, *ATTENTION}
    if call is not None:
        sets |= call_sets(call)
        removes.add(CALL_IN_PROGRESS_UNTIL)
    if follow_up_token is not None and follow_up_until is not None:
        sets |= lease_sets(follow_up_token, follow_up_until, keeping.lease_shard)
    else:
        removes |= {LEASE_TOKEN, LEASE_UNTIL, LEASE_SHARD}
    if result is not None:
        sets[RESULT] = result_record(result)
    if error is None:
        removes.add(ERROR)
    else:
        sets[ERROR] = error[:ERROR_LIMIT]
    return Transition(held_by(lease_token), sets, frozenset(removes))


@names_move("requeue")
def requeue(
    lease_token: str,
    *,
    expected: ExecutionStatus,
    attempt: int,
    not_before: datetime,
    lease_until: datetime,
    new_token: str,
    error: str | None = None,
    keeping: Keeping,
    attention: Attention | None = None,
) -> Transition:
    """An attempt held by ``lease_token`` in status ``expected``, QUEUED for ``attempt``
    from now on, due at ``not_before``, under a new watched lease. With ``attention``
    (an attempt that failed) it is listed across its tenant's tasks as waiting for
    a retry; without (a postponed attempt) its listing is left as it is."""
    sets: dict[str, Any] = {
        STATUS: ExecutionStatus.QUEUED.value,
        ATTEMPT: attempt,
        NEXT_ATTEMPT_AT: format_instant(not_before),
        **lease_sets(new_token, lease_until, keeping.lease_shard),
        EXPIRES_AT: expiry(keeping.retention, not_before, lease_until),
    }
    if error is not None:
        sets[ERROR] = error[:ERROR_LIMIT]
    if attention is not None:
        sets |= attention_sets(attention.tenant_id, attention.at)
    return Transition(held_by(lease_token, expected), sets, frozenset({ACCEPTED_AT, RUN_ARN}))


@names_move("set_aside")
def set_aside(reason: str, now: datetime) -> Transition:
    """An execution out of the lease index for good, and why; its status unchanged."""
    return Transition(
        Exists(EXECUTION_ID),
        {"set_aside_reason": reason[:ERROR_LIMIT], "set_aside_at": format_instant(now)},
        frozenset({LEASE_SHARD}),
    )


@names_move("release")
def release(lease_token: str) -> Transition:
    """The lease held by ``lease_token`` dropped, whatever the status: its obligation is met."""
    return Transition(
        Equals(LEASE_TOKEN, lease_token), removes=frozenset({LEASE_TOKEN, LEASE_UNTIL, LEASE_SHARD})
    )


@names_move("take_over")
def take_over(
    seen_token: str,
    *,
    cutoff: datetime,
    new_token: str,
    lease_until: datetime,
    keeping: Keeping,
) -> Transition:
    """A lease still held by ``seen_token`` that ended before ``cutoff``, claimed under
    ``new_token`` and watched: a holder that renewed or moved on makes it fail."""
    return Transition(
        AllOf(Equals(LEASE_TOKEN, seen_token), Below(LEASE_UNTIL, format_instant(cutoff))),
        {
            LEASE_TOKEN: new_token,
            LEASE_UNTIL: format_instant(lease_until),
            LEASE_SHARD: keeping.lease_shard,
            EXPIRES_AT: expiry(keeping.retention, lease_until),
        },
    )


@names_move("hand_to_reaper")
def hand_to_reaper(seen_token: str, *, keeping: Keeping) -> Transition:
    """A running lease still held by ``seen_token`` put in the lease index, where the
    reaper looks, unchanged (its message may then be deleted)."""
    return Transition(
        AllOf(Equals(STATUS, ExecutionStatus.RUNNING.value), Equals(LEASE_TOKEN, seen_token)),
        {LEASE_SHARD: keeping.lease_shard},
    )
