"""An execution as a DynamoDB item, and its handler-call record's attributes."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from dynacron.adapters.aws.items import (
    from_item,
)
from dynacron.adapters.aws.task_items import (
    retry_from_map,
)
from dynacron.domain.executions import (
    Execution,
    ExecutionStatus,
    HandlerCallRecord,
    ResultSummary,
)
from dynacron.domain.instants import parse_instant
from dynacron.domain.tenants import DEFAULT_TENANT
from dynacron.messages import upstream_from_map
from dynacron.resources import (
    EXECUTIONS,
    LEASE_INDEX,
)


def dead_letter_partition(tenant_id: str) -> str:
    """Each tenant's dead letters are one partition of the dead-letter index."""
    return f"dead-letter#{tenant_id}"


ERROR_LIMIT = 2000


_NAME = re.compile(r"#(\w+)")


_VALUE = re.compile(r":(\w+)")


def execution_from_item(item: dict[str, Any]) -> Execution:
    values = from_item(item)

    def instant(name: str) -> datetime | None:
        return parse_instant(values[name]) if name in values else None

    scheduled_at = instant("scheduled_at")
    assert scheduled_at is not None
    return Execution(
        execution_id=values["execution_id"],
        task_id=values["task_id"],
        scheduled_at=scheduled_at,
        status=ExecutionStatus(values["status"]),
        attempt=int(values.get("attempt", 1)),
        started_at=instant("started_at"),
        completed_at=instant("completed_at"),
        error=values.get("error"),
        first_attempt=int(values.get("first_attempt", 1)),
        retry=retry_from_map(values.get("retry")),
        next_attempt_at=instant("next_attempt_at"),
        lease_until=instant("lease_until"),
        lease_token=values.get("lease_token"),
        accepted_at=instant("accepted_at"),
        callback_digest=values.get("callback_digest"),
        dead_lettered_at=instant("dead_lettered_at"),
        tenant_id=values.get("tenant_id", DEFAULT_TENANT),
        upstream=upstream_from_map(values.get("upstream")),
        result=result_from_map(values.get("result")),
        lease_indexed=LEASE_INDEX.partition_key.name in values,
    )


def result_from_map(values: dict[str, Any] | None) -> ResultSummary | None:
    if values is None:
        return None
    status_code = values.get("status_code")
    return ResultSummary(
        status_code=int(status_code) if status_code is not None else None,
        excerpt=values.get("excerpt"),
    )


# The executions table's TTL attribute: DynamoDB deletes an item some time after it.
if EXECUTIONS.ttl_attribute is None:
    raise RuntimeError("executions expire through the executions table's TTL attribute")


EXPIRES_AT: str = EXECUTIONS.ttl_attribute


# The handler-call record's attributes on the execution item (its answer is ``result``).
CALL_STATUS = "call_status"


CALL_EXPIRES_AT = "call_expires_at"


CALL_IN_PROGRESS_UNTIL = "call_in_progress_until"


# A record may be replaced when there is none, it expired, or its call in progress
# timed out: Powertools' own condition for saving an in-progress record.
_CALL_REPLACEABLE = (
    f"(attribute_not_exists(#{CALL_STATUS}) OR #{CALL_EXPIRES_AT} < :call_now"
    f" OR (#{CALL_STATUS} = :call_in_progress AND attribute_exists(#{CALL_IN_PROGRESS_UNTIL})"
    f" AND #{CALL_IN_PROGRESS_UNTIL} < :call_now_ms))"
)


def _call_sets(call: HandlerCallRecord) -> dict[str, Any]:
    sets: dict[str, Any] = {CALL_STATUS: call.status, CALL_EXPIRES_AT: call.expires_at}
    if call.in_progress_until_ms is not None:
        sets[CALL_IN_PROGRESS_UNTIL] = call.in_progress_until_ms
    if call.response is not None:
        sets["result"] = {
            "status_code": call.response.status_code,
            "excerpt": call.response.excerpt,
        }
    return sets


def _replaceable_values(now_ms: int) -> dict[str, Any]:
    return {
        ":call_now": now_ms // 1000,
        ":call_now_ms": now_ms,
        ":call_in_progress": HandlerCallRecord.IN_PROGRESS,
    }


def call_from_item(item: dict[str, Any] | None) -> HandlerCallRecord | None:
    """The handler-call record kept on an execution item, if it holds one."""
    values = from_item(item or {})
    if CALL_STATUS not in values:
        return None
    until = values.get(CALL_IN_PROGRESS_UNTIL)
    completed = values[CALL_STATUS] == HandlerCallRecord.COMPLETED
    return HandlerCallRecord(
        status=values[CALL_STATUS],
        expires_at=int(values[CALL_EXPIRES_AT]),
        in_progress_until_ms=int(until) if until is not None else None,
        response=result_from_map(values.get("result")) if completed else None,
    )
