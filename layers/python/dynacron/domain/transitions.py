"""An execution's state transitions as data: what each one expects, what it changes.

Every move of an execution (begin, renew, finish, requeue, dead-letter, take-over,
redrive, the handler-call record's saves) is a pure function here returning a
``Transition``: a ``Condition`` the stored record must meet and the attributes it
sets, removes or computes. A store only carries one out atomically: the DynamoDB
adapter compiles it into a condition and update expression, the SQLite adapter
checks ``holds`` and writes ``applied_to`` inside one transaction. Two stores,
one set of rules.

A record is a plain mapping of the execution item's attribute names, as stored
(``status``, ``attempt``, ``lease_token``, ``lease_until`` as ISO text,
``lease_shard``, ``call_status``, ...), to plain values (str, int, bool, dict).
Conditions follow DynamoDB's semantics, so both stores agree on every edge: a
comparison with a missing attribute is false, except ``NotEquals`` (``<>``), which
is true; values of different kinds (text and number) never compare.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from dynacron.domain.executions import (
    Dispatch,
    ExecutionStatus,
    HandlerCallRecord,
    ResultSummary,
    Upstream,
)
from dynacron.domain.instants import format_instant
from dynacron.domain.retry import RetryPolicy
from dynacron.domain.tasks import Task

Record = Mapping[str, Any]

# The record's attributes that transitions test or that stores index. The AWS
# resources (``dynacron.resources``) name the same ones for keys, indexes and TTL.
EXECUTION_ID = "execution_id"
STATUS = "status"
ATTEMPT = "attempt"
FIRST_ATTEMPT = "first_attempt"
LEASE_TOKEN = "lease_token"
LEASE_UNTIL = "lease_until"
# Present while the lease is one the reaper must watch (the lease index's partition).
LEASE_SHARD = "lease_shard"
NEXT_ATTEMPT_AT = "next_attempt_at"
COMPLETED_AT = "completed_at"
ACCEPTED_AT = "accepted_at"
ERROR = "error"
RESULT = "result"
# When the record may be deleted (epoch seconds): the executions table's TTL.
EXPIRES_AT = "expires_at"
# A dead letter's partition (one per tenant) and time, in the dead-letter index.
DEAD_LETTER = "dead_letter"
DEAD_LETTERED_AT = "dead_lettered_at"
# The handler-call record kept on the execution (decision 0016); its answer is ``result``.
CALL_STATUS = "call_status"
CALL_EXPIRES_AT = "call_expires_at"
CALL_IN_PROGRESS_UNTIL = "call_in_progress_until"

# A stored error message is cut to this many characters.
ERROR_LIMIT = 2000


def dead_letter_partition(tenant_id: str) -> str:
    """Each tenant's dead letters are one partition of the dead-letter index."""
    return f"dead-letter#{tenant_id}"


# --- conditions --------------------------------------------------------------------


class Condition(ABC):
    """What a record must be for a transition to apply."""

    @abstractmethod
    def holds(self, record: Record | None) -> bool:
        """Whether ``record`` (None or empty: there is none) meets the condition."""


def _kind(value: Any) -> str:
    # DynamoDB's types as far as comparisons go: a number never equals a text.
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float | Decimal):
        return "number"
    return type(value).__name__


@dataclass(frozen=True)
class Exists(Condition):
    """The record has ``field`` (``attribute_exists``)."""

    field: str

    def holds(self, record: Record | None) -> bool:
        return record is not None and self.field in record


@dataclass(frozen=True)
class Missing(Condition):
    """The record lacks ``field``, or there is no record (``attribute_not_exists``)."""

    field: str

    def holds(self, record: Record | None) -> bool:
        return record is None or self.field not in record


@dataclass(frozen=True)
class Equals(Condition):
    """``field`` is present and equal to ``value`` (``=``)."""

    field: str
    value: Any

    def holds(self, record: Record | None) -> bool:
        if record is None or self.field not in record:
            return False
        stored = record[self.field]
        return _kind(stored) == _kind(self.value) and bool(stored == self.value)


@dataclass(frozen=True)
class NotEquals(Condition):
    """``field`` is missing or differs from ``value`` (``<>``, true on a missing one)."""

    field: str
    value: Any

    def holds(self, record: Record | None) -> bool:
        return not Equals(self.field, self.value).holds(record)


@dataclass(frozen=True)
class Below(Condition):
    """``field`` is present and less than ``value`` (``<``): numbers by value, text
    by code point, which for stored instants is time order."""

    field: str
    value: Any

    def holds(self, record: Record | None) -> bool:
        if record is None or self.field not in record:
            return False
        stored = record[self.field]
        kind = _kind(stored)
        if kind != _kind(self.value) or kind not in ("number", "str"):
            return False
        return bool(stored < self.value)


@dataclass(frozen=True, init=False)
class AllOf(Condition):
    """Every one of ``conditions`` holds (``AND``)."""

    conditions: tuple[Condition, ...]

    def __init__(self, *conditions: Condition) -> None:
        if not conditions:
            raise ValueError("AllOf needs at least one condition")
        object.__setattr__(self, "conditions", conditions)

    def holds(self, record: Record | None) -> bool:
        return all(c.holds(record) for c in self.conditions)


@dataclass(frozen=True, init=False)
class AnyOf(Condition):
    """At least one of ``conditions`` holds (``OR``)."""

    conditions: tuple[Condition, ...]

    def __init__(self, *conditions: Condition) -> None:
        if not conditions:
            raise ValueError("AnyOf needs at least one condition")
        object.__setattr__(self, "conditions", conditions)

    def holds(self, record: Record | None) -> bool:
        return any(c.holds(record) for c in self.conditions)


# --- transitions -------------------------------------------------------------------


@dataclass(frozen=True)
class Plus:
    """The value ``source`` had before the transition, plus ``amount``: every computed
    value reads the record as it was (as DynamoDB's and SQL's SET both do)."""

    source: str
    amount: int


@dataclass(frozen=True)
class Transition:
    """One atomic change of an execution record.

    Applies only if ``expects`` holds. Then ``removes`` go, ``sets`` are written,
    and each of ``computes`` is set from the record as it was. With ``creates``,
    ``sets`` is the whole new record and ``expects`` is that there is none.
    """

    expects: Condition
    sets: Mapping[str, Any] = field(default_factory=dict)
    removes: frozenset[str] = frozenset()
    computes: Mapping[str, Plus] = field(default_factory=dict)
    creates: bool = False

    def __post_init__(self) -> None:
        if any(value is None for value in self.sets.values()):
            raise ValueError("a transition sets values, never None: remove the attribute")
        touched = [*self.sets, *self.computes]
        if len(set(touched)) != len(touched) or self.removes & set(touched):
            raise ValueError("a transition changes each attribute once")
        if self.creates and (self.removes or self.computes):
            raise ValueError("a new record is written whole")

    def holds(self, record: Record | None) -> bool:
        """Whether the transition applies to ``record`` (None: there is none)."""
        return self.expects.holds(record)

    def applied_to(self, record: Record | None) -> dict[str, Any]:
        """The record after the transition (whether it ``holds`` is not checked here)."""
        if self.creates:
            return dict(self.sets)
        before = dict(record or {})
        after = {name: value for name, value in before.items() if name not in self.removes}
        after.update(self.sets)
        for name, plus in self.computes.items():
            if plus.source not in before:
                raise ValueError(f"{name} is computed from {plus.source}, which is missing")
            after[name] = before[plus.source] + plus.amount
        return after


# --- what the transitions write ----------------------------------------------------


def expiry(retention: timedelta, *ends: datetime | None) -> int:
    """When a record may be deleted (epoch seconds): ``retention`` after the latest of
    ``ends``.

    Each transition that starts, moves on or ends an execution passes the moments
    it matters until (now, its lease's end, its next attempt), never its scheduled
    time: a backfilled or caught-up occurrence may be years old, and must not be
    born expired (with its lease and idempotency record).
    """
    return int((max(end for end in ends if end is not None) + retention).timestamp())


def _present(values: Mapping[str, Any]) -> dict[str, Any]:
    # An absent attribute, never a null one: as DynamoDB items have always been stored.
    return {name: value for name, value in values.items() if value is not None}


def retry_record(policy: RetryPolicy) -> dict[str, int]:
    """The retry policy as the record keeps it (the budget of its current attempts)."""
    return {
        "max_attempts": policy.max_attempts,
        "base_delay_seconds": policy.base_delay_seconds,
        "max_delay_seconds": policy.max_delay_seconds,
    }


def upstream_record(upstream: Upstream | None) -> dict[str, Any] | None:
    """The upstream execution as the record keeps it (as the message carries it)."""
    if upstream is None:
        return None
    return _present(
        {
            "execution_id": upstream.execution_id,
            "status_code": upstream.result.status_code,
            "excerpt": upstream.result.excerpt,
        }
    )


def result_record(result: ResultSummary) -> dict[str, Any]:
    return _present({"status_code": result.status_code, "excerpt": result.excerpt})


def call_sets(call: HandlerCallRecord) -> dict[str, Any]:
    """The attributes that keep a handler-call record on its execution."""
    sets: dict[str, Any] = {CALL_STATUS: call.status, CALL_EXPIRES_AT: call.expires_at}
    if call.in_progress_until_ms is not None:
        sets[CALL_IN_PROGRESS_UNTIL] = call.in_progress_until_ms
    if call.response is not None:
        sets[RESULT] = result_record(call.response)
    return sets


def call_replaceable(call_now_ms: int) -> Condition:
    """The handler-call record there may be replaced (by the wall clock's ``call_now_ms``):
    there is none, it expired, or its call in progress timed out. Powertools' own
    condition for saving an in-progress record."""
    return AnyOf(
        Missing(CALL_STATUS),
        Below(CALL_EXPIRES_AT, call_now_ms // 1000),
        AllOf(
            Equals(CALL_STATUS, HandlerCallRecord.IN_PROGRESS),
            Exists(CALL_IN_PROGRESS_UNTIL),
            Below(CALL_IN_PROGRESS_UNTIL, call_now_ms),
        ),
    )


def _held(lease_token: str, status: ExecutionStatus = ExecutionStatus.RUNNING) -> Condition:
    # Every write by a lease holder names the token it holds.
    return AllOf(Equals(STATUS, status.value), Equals(LEASE_TOKEN, lease_token))


def _dead_letter_sets(tenant_id: str, now: datetime) -> dict[str, Any]:
    return {DEAD_LETTER: dead_letter_partition(tenant_id), DEAD_LETTERED_AT: format_instant(now)}


def _lease_sets(lease_token: str, lease_until: datetime, lease_shard: str) -> dict[str, Any]:
    return {
        LEASE_UNTIL: format_instant(lease_until),
        LEASE_SHARD: lease_shard,
        LEASE_TOKEN: lease_token,
    }


# --- one function per ExecutionStore method ------------------------------------------


def _running(
    dispatch: Dispatch,
    now: datetime,
    lease_until: datetime,
    lease_token: str,
    callback_digest: str,
    retention: timedelta,
) -> dict[str, Any]:
    # No lease shard: the undeleted SQS message brings a running attempt back (0015).
    return {
        STATUS: ExecutionStatus.RUNNING.value,
        ATTEMPT: dispatch.attempt,
        "started_at": format_instant(now),
        LEASE_TOKEN: lease_token,
        LEASE_UNTIL: format_instant(lease_until),
        "callback_digest": callback_digest,
        EXPIRES_AT: expiry(retention, lease_until),
    }


def begin_new(
    dispatch: Dispatch,
    *,
    now: datetime,
    lease_until: datetime,
    lease_token: str,
    callback_digest: str,
    retry: RetryPolicy,
    tenant_id: str,
    retention: timedelta,
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
        **_running(dispatch, now, lease_until, lease_token, callback_digest, retention),
        **(call_sets(call) if call is not None else {}),
    }
    return Transition(Missing(EXECUTION_ID), _present(record), creates=True)


def begin_queued(
    dispatch: Dispatch,
    *,
    now: datetime,
    lease_until: datetime,
    lease_token: str,
    callback_digest: str,
    retention: timedelta,
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
    sets = _running(dispatch, now, lease_until, lease_token, callback_digest, retention)
    if call is not None:
        queued.append(call_replaceable(call_now_ms))
        sets |= call_sets(call)
    return Transition(AllOf(*queued), sets, frozenset({NEXT_ATTEMPT_AT, LEASE_SHARD}))


def enqueue(
    dispatch: Dispatch,
    *,
    retry: RetryPolicy,
    lease_until: datetime,
    lease_token: str,
    tenant_id: str,
    lease_shard: str,
    retention: timedelta,
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
        LEASE_SHARD: lease_shard,
        "tenant_id": tenant_id,
        EXPIRES_AT: expiry(retention, lease_until, dispatch.not_before),
        "upstream": upstream_record(dispatch.upstream),
    }
    return Transition(Missing(EXECUTION_ID), _present(record), creates=True)


def record_skipped(
    task: Task,
    execution_id: str,
    scheduled_at: datetime,
    reason: str,
    now: datetime,
    *,
    retention: timedelta,
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
        EXPIRES_AT: expiry(retention, now),
    }
    return Transition(Missing(EXECUTION_ID), record, creates=True)


def renew(
    lease_token: str,
    lease_until: datetime,
    accepted_at: datetime | None = None,
    *,
    lease_shard: str,
    retention: timedelta,
) -> Transition:
    """A running lease held by ``lease_token`` extended to ``lease_until``. With
    ``accepted_at`` (a 202 answer) the lease outlives the worker's message, and so
    the reaper watches it (``lease_shard``)."""
    sets: dict[str, Any] = {
        LEASE_UNTIL: format_instant(lease_until),
        EXPIRES_AT: expiry(retention, lease_until),
    }
    if accepted_at is not None:
        sets[ACCEPTED_AT] = format_instant(accepted_at)
        sets[LEASE_SHARD] = lease_shard
    return Transition(_held(lease_token), sets)


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
    lease_shard: str,
    retention: timedelta,
) -> Transition:
    """A running attempt held by ``lease_token`` ended for good with ``status``.

    With ``follow_up_token`` and ``follow_up_until``, a short watched lease stays
    until what the end owes is done (``release``); without, the lease goes. With
    ``call`` (completed), the handler-call record is saved too.
    """
    sets: dict[str, Any] = {
        STATUS: status.value,
        COMPLETED_AT: format_instant(now),
        EXPIRES_AT: expiry(retention, now, follow_up_until),
    }
    # The callback digest stays (as it does through requeue and dead_letter): a
    # replayed callback of this attempt is then told the execution ended (409), not
    # that its token is wrong. The next attempt's begin replaces it.
    removes = {ACCEPTED_AT}
    if call is not None:
        sets |= call_sets(call)
        removes.add(CALL_IN_PROGRESS_UNTIL)
    if follow_up_token is not None and follow_up_until is not None:
        sets |= _lease_sets(follow_up_token, follow_up_until, lease_shard)
    else:
        removes |= {LEASE_TOKEN, LEASE_UNTIL, LEASE_SHARD}
    if result is not None:
        sets[RESULT] = result_record(result)
    if error is None:
        removes.add(ERROR)
    else:
        sets[ERROR] = error[:ERROR_LIMIT]
    return Transition(_held(lease_token), sets, frozenset(removes))


def requeue(
    lease_token: str,
    *,
    expected: ExecutionStatus,
    attempt: int,
    not_before: datetime,
    lease_until: datetime,
    new_token: str,
    error: str | None = None,
    lease_shard: str,
    retention: timedelta,
) -> Transition:
    """An attempt held by ``lease_token`` in status ``expected``, QUEUED for ``attempt``
    from now on, due at ``not_before``, under a new watched lease."""
    sets: dict[str, Any] = {
        STATUS: ExecutionStatus.QUEUED.value,
        ATTEMPT: attempt,
        NEXT_ATTEMPT_AT: format_instant(not_before),
        **_lease_sets(new_token, lease_until, lease_shard),
        EXPIRES_AT: expiry(retention, not_before, lease_until),
    }
    if error is not None:
        sets[ERROR] = error[:ERROR_LIMIT]
    return Transition(_held(lease_token, expected), sets, frozenset({ACCEPTED_AT}))


def dead_letter(
    lease_token: str,
    *,
    now: datetime,
    error: str,
    lease_until: datetime,
    new_token: str,
    tenant_id: str,
    lease_shard: str,
    retention: timedelta,
) -> Transition:
    """A running attempt held by ``lease_token`` FAILED and listed as a dead letter of
    ``tenant_id``, with a short watched lease until its copy for the dead-letter
    queue is sent (``release``)."""
    sets = {
        STATUS: ExecutionStatus.FAILED.value,
        COMPLETED_AT: format_instant(now),
        EXPIRES_AT: expiry(retention, now, lease_until),
        ERROR: error[:ERROR_LIMIT],
        **_dead_letter_sets(tenant_id, now),
        **_lease_sets(new_token, lease_until, lease_shard),
    }
    return Transition(_held(lease_token), sets, frozenset({ACCEPTED_AT, NEXT_ATTEMPT_AT}))


def record_undelivered(
    dispatch: Dispatch,
    *,
    now: datetime,
    error: str,
    retry: RetryPolicy,
    tenant_id: str,
    lease_until: datetime,
    lease_token: str,
    lease_shard: str,
    retention: timedelta,
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
        **_dead_letter_sets(tenant_id, now),
        **_lease_sets(lease_token, lease_until, lease_shard),
        # From when the record stops mattering, never from the occurrence.
        EXPIRES_AT: expiry(retention, now),
        "upstream": upstream_record(dispatch.upstream),
    }
    return Transition(Missing(EXECUTION_ID), _present(record), creates=True)


def dead_letter_queued(
    seen_token: str,
    *,
    attempt: int,
    now: datetime,
    error: str,
    lease_until: datetime,
    new_token: str,
    tenant_id: str,
    lease_shard: str,
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
        **_dead_letter_sets(tenant_id, now),
        **_lease_sets(new_token, lease_until, lease_shard),
    }
    return Transition(expects, sets, frozenset({NEXT_ATTEMPT_AT}))


def set_aside(reason: str, now: datetime) -> Transition:
    """An execution out of the lease index for good, and why; its status unchanged."""
    return Transition(
        Exists(EXECUTION_ID),
        {"set_aside_reason": reason[:ERROR_LIMIT], "set_aside_at": format_instant(now)},
        frozenset({LEASE_SHARD}),
    )


def release(lease_token: str) -> Transition:
    """The lease held by ``lease_token`` dropped, whatever the status: its obligation is met."""
    return Transition(
        Equals(LEASE_TOKEN, lease_token), removes=frozenset({LEASE_TOKEN, LEASE_UNTIL, LEASE_SHARD})
    )


def save_call(lease_token: str, call: HandlerCallRecord, call_now_ms: int) -> Transition:
    """The in-progress handler-call record ``call`` saved on the running attempt held by
    ``lease_token``, if the one there may be replaced at ``call_now_ms``."""
    return Transition(AllOf(_held(lease_token), call_replaceable(call_now_ms)), call_sets(call))


def keep_call(call: HandlerCallRecord) -> Transition:
    """The completed handler-call record ``call`` saved whoever holds the lease, unless
    the execution has SUCCEEDED already."""
    return Transition(
        AllOf(Exists(EXECUTION_ID), NotEquals(STATUS, ExecutionStatus.SUCCEEDED.value)),
        call_sets(call),
        frozenset({CALL_IN_PROGRESS_UNTIL}),
    )


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


def take_over(
    seen_token: str,
    *,
    cutoff: datetime,
    new_token: str,
    lease_until: datetime,
    lease_shard: str,
    retention: timedelta,
) -> Transition:
    """A lease still held by ``seen_token`` that ended before ``cutoff``, claimed under
    ``new_token`` and watched: a holder that renewed or moved on makes it fail."""
    return Transition(
        AllOf(Equals(LEASE_TOKEN, seen_token), Below(LEASE_UNTIL, format_instant(cutoff))),
        {
            LEASE_TOKEN: new_token,
            LEASE_UNTIL: format_instant(lease_until),
            LEASE_SHARD: lease_shard,
            EXPIRES_AT: expiry(retention, lease_until),
        },
    )


def watch(seen_token: str, *, lease_shard: str) -> Transition:
    """A running lease still held by ``seen_token`` put where the reaper looks, unchanged."""
    return Transition(
        AllOf(Equals(STATUS, ExecutionStatus.RUNNING.value), Equals(LEASE_TOKEN, seen_token)),
        {LEASE_SHARD: lease_shard},
    )


def redrive(
    tenant_id: str,
    *,
    now: datetime,
    lease_until: datetime,
    new_token: str,
    lease_shard: str,
    retention: timedelta,
) -> Transition:
    """A dead letter of ``tenant_id`` QUEUED again, due now, under a new watched lease:
    the next attempt number, and a fresh retry budget that starts at it."""
    return Transition(
        AllOf(
            Equals(STATUS, ExecutionStatus.FAILED.value),
            Equals(DEAD_LETTER, dead_letter_partition(tenant_id)),
        ),
        {
            STATUS: ExecutionStatus.QUEUED.value,
            NEXT_ATTEMPT_AT: format_instant(now),
            **_lease_sets(new_token, lease_until, lease_shard),
            EXPIRES_AT: expiry(retention, now, lease_until),
        },
        frozenset({DEAD_LETTER, DEAD_LETTERED_AT, COMPLETED_AT}),
        {ATTEMPT: Plus(ATTEMPT, 1), FIRST_ATTEMPT: Plus(ATTEMPT, 1)},
    )
