"""An execution record (the domain's transitions' map shape, as JSON text) read back
as an ``Execution`` and its handler-call record: the boto-free twins of
``adapters/aws/execution_items.py``'s readers."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from dynacron.adapters.sqlite.records import retry_from_map
from dynacron.domain.executions import (
    Execution,
    ExecutionStatus,
    HandlerCallRecord,
    ResultSummary,
)
from dynacron.domain.instants import parse_instant
from dynacron.domain.tenants import DEFAULT_TENANT
from dynacron.domain.transitions import (
    CALL_EXPIRES_AT,
    CALL_IN_PROGRESS_UNTIL,
    CALL_STATUS,
    LEASE_SHARD,
)
from dynacron.messages import upstream_from_map


def execution_from_record(values: Mapping[str, Any]) -> Execution:
    def instant(name: str) -> datetime | None:
        return parse_instant(values[name]) if name in values else None

    return Execution(
        execution_id=values["execution_id"],
        task_id=values["task_id"],
        scheduled_at=parse_instant(values["scheduled_at"]),
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
        result=_result_from_map(values.get("result")),
        lease_indexed=LEASE_SHARD in values,
    )


def _result_from_map(values: Mapping[str, Any] | None) -> ResultSummary | None:
    if values is None:
        return None
    status_code = values.get("status_code")
    return ResultSummary(
        status_code=int(status_code) if status_code is not None else None,
        excerpt=values.get("excerpt"),
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
        response=_result_from_map(values.get("result")) if completed else None,
    )
