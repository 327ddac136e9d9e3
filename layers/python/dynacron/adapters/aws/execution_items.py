"""An execution as a DynamoDB item, and its handler-call record's attributes."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from dynacron.adapters.aws.items import (
    from_item,
)
from dynacron.adapters.aws.task_items import (
    retry_from_map,
)
from dynacron.adapters.messages import upstream_from_map
from dynacron.definitions.resources import (
    ATTENTION_INDEX,
    DEAD_LETTER_INDEX,
    EXECUTIONS,
    LEASE_INDEX,
)
from dynacron.domain.coordination.tenants import DEFAULT_TENANT
from dynacron.domain.executions.execution import (
    Execution,
    ExecutionStatus,
    HandlerCallRecord,
    ResultSummary,
)
from dynacron.domain.executions.record import (
    ATTENTION_AT,
    ATTENTION_TENANT,
    CALL_EXPIRES_AT,
    CALL_IN_PROGRESS_UNTIL,
    CALL_STATUS,
    DEAD_LETTER,
    DEAD_LETTERED_AT,
    EXPIRES_AT,
    LEASE_SHARD,
    LEASE_UNTIL,
)
from dynacron.domain.instants import parse_instant


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
        lease_indexed=LEASE_SHARD in values,
        attention_at=instant(ATTENTION_AT) if ATTENTION_TENANT in values else None,
    )


def result_from_map(values: dict[str, Any] | None) -> ResultSummary | None:
    if values is None:
        return None
    status_code = values.get("status_code")
    return ResultSummary(
        status_code=int(status_code) if status_code is not None else None,
        excerpt=values.get("excerpt"),
    )


# The record's attribute names are the domain's (its transitions test them); the
# resources that key, index and expire the table must name the same ones.
if EXECUTIONS.ttl_attribute != EXPIRES_AT:
    raise RuntimeError("executions expire through the executions table's TTL attribute")
if (LEASE_INDEX.partition_key.name, LEASE_INDEX.sort_key.name) != (LEASE_SHARD, LEASE_UNTIL):
    raise RuntimeError("the lease index is keyed by the lease's shard and end")
if (DEAD_LETTER_INDEX.partition_key.name, DEAD_LETTER_INDEX.sort_key.name) != (
    DEAD_LETTER,
    DEAD_LETTERED_AT,
):
    raise RuntimeError("the dead-letter index is keyed by the dead letter's partition and time")
if (ATTENTION_INDEX.partition_key.name, ATTENTION_INDEX.sort_key.name) != (
    ATTENTION_TENANT,
    ATTENTION_AT,
):
    raise RuntimeError("the attention index is keyed by the tenant and when it was listed")


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
