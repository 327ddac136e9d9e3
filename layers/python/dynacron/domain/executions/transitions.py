"""An execution's state transitions as data: what each one expects, what it changes.

Every move of an execution (begin, renew, finish, requeue, dead-letter, take-over,
redrive, the handler-call record's saves) is a pure function here returning a
``Transition`` (``dynacron.domain.conditions``): a ``Condition`` the stored record
must meet and the attributes it sets, removes or computes, by the record's names
(``dynacron.domain.executions.record``). A store only carries one out atomically.
Two stores, one set of rules.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from datetime import datetime
from typing import Any, ParamSpec

from dynacron.domain.conditions import (
    AllOf,
    Below,
    Condition,
    Equals,
    Exists,
    Missing,
    NotEquals,
    Plus,
    Transition,
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
    CALL_EXPIRES_AT,
    CALL_IN_PROGRESS_UNTIL,
    CALL_STATUS,
    COMPLETED_AT,
    DEAD_LETTER,
    DEAD_LETTERED_AT,
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
    STATUS,
    Keeping,
    attention_sets,
    call_replaceable,
    call_sets,
    dead_letter_partition,
    dead_letter_sets,
    expiry,
    lease_sets,
    present,
    result_record,
    retry_record,
    upstream_record,
)
from dynacron.domain.executions.retry import RetryPolicy
from dynacron.domain.instants import format_instant
from dynacron.domain.tasks.task import Task

P = ParamSpec("P")

# --- one function per conditional change of an execution ---------------------------


def _move(name: str) -> Callable[[Callable[P, Transition]], Callable[P, Transition]]:
    """Names the move each transition of the decorated function makes (``Transition.move``)."""

    def naming(build: Callable[P, Transition]) -> Callable[P, Transition]:
        @functools.wraps(build)
        def named(*args: P.args, **kwargs: P.kwargs) -> Transition:
            return dataclasses.replace(build(*args, **kwargs), move=name)

        return named

    return naming


def _held(lease_token: str, status: ExecutionStatus = ExecutionStatus.RUNNING) -> Condition:
    # Every write by a lease holder names the token it holds.
    return AllOf(Equals(STATUS, status.value), Equals(LEASE_TOKEN, lease_token))


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


@_move("begin")
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


@_move("begin")
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


@_move("enqueue")
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


@_move("record_skipped")
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


@_move("renew")
def renew(
    lease_token: str,
    lease_until: datetime,
    accepted_at: datetime | None = None,
    *,
    keeping: Keeping,
    attention: Attention | None = None,
) -> Transition:
    """A running lease held by ``lease_token`` extended to ``lease_until``. With
    ``accepted_at`` (a 202 answer) the lease outlives the worker's message, and so
    the reaper watches it (in its lease shard); with ``attention`` the long job is
    listed across its tenant's tasks too. A heartbeat leaves the listing as it is."""
    sets: dict[str, Any] = {
        LEASE_UNTIL: format_instant(lease_until),
        EXPIRES_AT: expiry(keeping.retention, lease_until),
    }
    if accepted_at is not None:
        sets[ACCEPTED_AT] = format_instant(accepted_at)
        sets[LEASE_SHARD] = keeping.lease_shard
    if attention is not None:
        sets |= attention_sets(attention.tenant_id, attention.at)
    return Transition(_held(lease_token), sets)


@_move("finish")
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
    removes = {ACCEPTED_AT, *ATTENTION}
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
    return Transition(_held(lease_token), sets, frozenset(removes))


@_move("requeue")
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
    return Transition(_held(lease_token, expected), sets, frozenset({ACCEPTED_AT}))


@_move("dead_letter")
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
    return Transition(_held(lease_token), sets, frozenset({ACCEPTED_AT, NEXT_ATTEMPT_AT}))


@_move("record_undelivered")
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


@_move("dead_letter_undelivered")
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


@_move("set_aside")
def set_aside(reason: str, now: datetime) -> Transition:
    """An execution out of the lease index for good, and why; its status unchanged."""
    return Transition(
        Exists(EXECUTION_ID),
        {"set_aside_reason": reason[:ERROR_LIMIT], "set_aside_at": format_instant(now)},
        frozenset({LEASE_SHARD}),
    )


@_move("release")
def release(lease_token: str) -> Transition:
    """The lease held by ``lease_token`` dropped, whatever the status: its obligation is met."""
    return Transition(
        Equals(LEASE_TOKEN, lease_token), removes=frozenset({LEASE_TOKEN, LEASE_UNTIL, LEASE_SHARD})
    )


@_move("save_call")
def save_call(lease_token: str, call: HandlerCallRecord, call_now_ms: int) -> Transition:
    """The in-progress handler-call record ``call`` saved on the running attempt held by
    ``lease_token``, if the one there may be replaced at ``call_now_ms``."""
    return Transition(AllOf(_held(lease_token), call_replaceable(call_now_ms)), call_sets(call))


@_move("keep_call")
def keep_call(call: HandlerCallRecord) -> Transition:
    """The completed handler-call record ``call`` saved whoever holds the lease, unless
    the execution has SUCCEEDED already."""
    return Transition(
        AllOf(Exists(EXECUTION_ID), NotEquals(STATUS, ExecutionStatus.SUCCEEDED.value)),
        call_sets(call),
        frozenset({CALL_IN_PROGRESS_UNTIL}),
    )


@_move("clear_call")
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


@_move("take_over")
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


@_move("hand_to_reaper")
def hand_to_reaper(seen_token: str, *, keeping: Keeping) -> Transition:
    """A running lease still held by ``seen_token`` put in the lease index, where the
    reaper looks, unchanged (its message may then be deleted)."""
    return Transition(
        AllOf(Equals(STATUS, ExecutionStatus.RUNNING.value), Equals(LEASE_TOKEN, seen_token)),
        {LEASE_SHARD: keeping.lease_shard},
    )


@_move("redrive")
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
