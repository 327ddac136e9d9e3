"""An execution's record as stored: its attribute names and the shape of its values.

A record is a plain mapping of the execution item's attribute names, as stored
(``status``, ``attempt``, ``lease_token``, ``lease_until`` as ISO text,
``lease_shard``, ``call_status``, ...), to plain values (str, int, bool, dict).
The transitions (``dynacron.domain.executions.transitions``) write it through the helpers
here; the stores index it and read it back by the same names.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from dynacron.domain.conditions import AllOf, AnyOf, Below, Condition, Equals, Exists, Missing
from dynacron.domain.coordination.tenants import DEFAULT_TENANT
from dynacron.domain.executions.execution import (
    Execution,
    ExecutionStatus,
    HandlerCallRecord,
    ResultSummary,
    Upstream,
)
from dynacron.domain.executions.retry import RetryPolicy
from dynacron.domain.instants import format_instant, parse_instant

# The record's attributes that transitions test or that stores index. The AWS
# resources (``dynacron.definitions.resources``) name the same ones for keys, indexes and TTL.
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
# The tracked run an accepted attempt waits for (decision 0049); goes with ACCEPTED_AT.
RUN_ARN = "run_arn"
ERROR = "error"
RESULT = "result"
# When the record may be deleted (epoch seconds): the executions table's TTL.
EXPIRES_AT = "expires_at"
# A dead letter's partition (one per tenant) and time, in the dead-letter index.
DEAD_LETTER = "dead_letter"
DEAD_LETTERED_AT = "dead_lettered_at"
# Present only while the execution is listed across its tenant's tasks (the
# attention index, decision 0028): its tenant, and since when.
ATTENTION_TENANT = "attention_tenant"
ATTENTION_AT = "attention_at"
ATTENTION = frozenset({ATTENTION_TENANT, ATTENTION_AT})
# The handler-call record kept on the execution (decision 0016); its answer is ``result``.
CALL_STATUS = "call_status"
CALL_EXPIRES_AT = "call_expires_at"
CALL_IN_PROGRESS_UNTIL = "call_in_progress_until"

# A stored error message is cut to this many characters.
ERROR_LIMIT = 2000


@dataclass(frozen=True)
class Keeping:
    """How a store keeps one execution's record, which most transitions write: the
    lease shard its watched lease is indexed under, and how long the record is kept
    after it stops mattering (``expiry``). The store's, not the change's, to say."""

    lease_shard: str
    retention: timedelta


def dead_letter_partition(tenant_id: str) -> str:
    """Each tenant's dead letters are one partition of the dead-letter index."""
    return f"dead-letter#{tenant_id}"


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


def present(values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` without the None ones: a field is absent, never null, as DynamoDB
    items have always been stored."""
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
    return present(
        {
            "execution_id": upstream.execution_id,
            "status_code": upstream.result.status_code,
            "excerpt": upstream.result.excerpt,
            "status": upstream.status,
            # A fan-in's other ends (decision 0058), each as this one.
            "with": [upstream_record(other) for other in upstream.others] or None,
        }
    )


def result_record(result: ResultSummary) -> dict[str, Any]:
    """A handler's answer as the record keeps it."""
    return present({"status_code": result.status_code, "excerpt": result.excerpt})


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


def held_by(lease_token: str, status: ExecutionStatus = ExecutionStatus.RUNNING) -> Condition:
    """The attempt is in ``status`` under the lease ``lease_token``: what every write
    by a lease holder expects."""
    return AllOf(Equals(STATUS, status.value), Equals(LEASE_TOKEN, lease_token))


def dead_letter_sets(tenant_id: str, now: datetime) -> dict[str, Any]:
    """The attributes that list an execution as a dead letter of ``tenant_id``."""
    return {DEAD_LETTER: dead_letter_partition(tenant_id), DEAD_LETTERED_AT: format_instant(now)}


def attention_sets(tenant_id: str, at: datetime) -> dict[str, Any]:
    """The attributes that list an execution across ``tenant_id``'s tasks from ``at``."""
    return {ATTENTION_TENANT: tenant_id, ATTENTION_AT: format_instant(at)}


def lease_sets(lease_token: str, lease_until: datetime, lease_shard: str) -> dict[str, Any]:
    """The attributes of a lease held by ``lease_token``, watched by the reaper."""
    return {
        LEASE_UNTIL: format_instant(lease_until),
        LEASE_SHARD: lease_shard,
        LEASE_TOKEN: lease_token,
    }


# --- what the stores read back -----------------------------------------------------


def execution_from_record(values: Mapping[str, Any]) -> Execution:
    """The execution a record holds (numbers may come back as any number type)."""

    def instant(name: str) -> datetime | None:
        return parse_instant(values[name]) if name in values else None

    return Execution(
        execution_id=values[EXECUTION_ID],
        task_id=values["task_id"],
        scheduled_at=parse_instant(values["scheduled_at"]),
        status=ExecutionStatus(values[STATUS]),
        attempt=int(values.get(ATTEMPT, 1)),
        started_at=instant("started_at"),
        completed_at=instant(COMPLETED_AT),
        error=values.get(ERROR),
        first_attempt=int(values.get(FIRST_ATTEMPT, 1)),
        retry=retry_from_record(values.get("retry")),
        next_attempt_at=instant(NEXT_ATTEMPT_AT),
        lease_until=instant(LEASE_UNTIL),
        lease_token=values.get(LEASE_TOKEN),
        accepted_at=instant(ACCEPTED_AT),
        run_arn=values.get(RUN_ARN),
        callback_digest=values.get("callback_digest"),
        dead_lettered_at=instant(DEAD_LETTERED_AT),
        tenant_id=values.get("tenant_id", DEFAULT_TENANT),
        upstream=upstream_from_record(values.get("upstream")),
        result=result_from_record(values.get(RESULT)),
        lease_indexed=LEASE_SHARD in values,
        attention_at=instant(ATTENTION_AT) if ATTENTION_TENANT in values else None,
    )


def call_from_record(values: Mapping[str, Any] | None) -> HandlerCallRecord | None:
    """The handler-call record kept on an execution record, if it holds one."""
    if not values or CALL_STATUS not in values:
        return None
    until = values.get(CALL_IN_PROGRESS_UNTIL)
    completed = values[CALL_STATUS] == HandlerCallRecord.COMPLETED
    return HandlerCallRecord(
        status=values[CALL_STATUS],
        expires_at=int(values[CALL_EXPIRES_AT]),
        in_progress_until_ms=int(until) if until is not None else None,
        response=result_from_record(values.get(RESULT)) if completed else None,
    )


def result_from_record(values: Mapping[str, Any] | None) -> ResultSummary | None:
    """A handler's answer as ``result_record`` stored it; None if none was."""
    if values is None:
        return None
    status_code = values.get("status_code")
    return ResultSummary(
        status_code=int(status_code) if status_code is not None else None,
        excerpt=values.get("excerpt"),
    )


def retry_from_record(values: Mapping[str, Any] | None) -> RetryPolicy:
    """The retry policy as ``retry_record`` stored it; the default if none was."""
    if not values:
        return RetryPolicy()
    return RetryPolicy(**{name: int(value) for name, value in values.items()})


def upstream_from_record(values: Mapping[str, Any] | None) -> Upstream | None:
    """The upstream execution as ``upstream_record`` stored it; None if none was."""
    if not values:
        return None
    status_code = values.get("status_code")
    others = (upstream_from_record(other) for other in values.get("with") or ())
    return Upstream(
        execution_id=values["execution_id"],
        result=ResultSummary(
            status_code=int(status_code) if status_code is not None else None,
            excerpt=values.get("excerpt"),
        ),
        status=values.get("status"),
        others=tuple(other for other in others if other is not None),
    )
