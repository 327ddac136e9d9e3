"""An execution's row: its record (the domain's transitions' map shape, as JSON text)
with the index columns taken from it; a transition carried out on it; the record
read back as an ``Execution`` and its handler-call record (the boto-free twins of
``adapters/aws/execution_items.py``'s readers)."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from dynacron.adapters.messages import upstream_from_map
from dynacron.adapters.sqlite.records import dump, load, retry_from_map
from dynacron.domain.conditions import Transition
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
    LEASE_SHARD,
    LEASE_UNTIL,
)
from dynacron.domain.instants import parse_instant
from dynacron.domain.tasks.task import task_id_of


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
        attention_at=instant(ATTENTION_AT) if ATTENTION_TENANT in values else None,
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


Record = dict[str, Any]


def read_record(connection: sqlite3.Connection, execution_id: str) -> Record | None:
    row = connection.execute(
        "SELECT record FROM executions WHERE execution_id = ?", (execution_id,)
    ).fetchone()
    return load(row["record"]) if row is not None else None


def carry_out(
    connection: sqlite3.Connection, execution_id: str, transition: Transition
) -> tuple[bool, Record | None]:
    """Within a write transaction: whether ``transition`` held, and the record (the new
    one if it held, else the one that made it fail, None if there is none)."""
    before = read_record(connection, execution_id)
    if not transition.holds(before):
        return False, before
    after = transition.applied_to(before)
    after.setdefault("execution_id", execution_id)
    after.setdefault("task_id", task_id_of(execution_id))

    def text(name: str) -> str | None:
        value = after.get(name)
        return value if isinstance(value, str) else None

    connection.execute(
        """INSERT OR REPLACE INTO executions (execution_id, task_id, lease_shard, lease_until,
           dead_letter, dead_lettered_at, record, attention_tenant, attention_at)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)""",
        (
            execution_id,
            after["task_id"],
            text(LEASE_SHARD),
            text(LEASE_UNTIL),
            text(DEAD_LETTER),
            text(DEAD_LETTERED_AT),
            dump(after),
            text(ATTENTION_TENANT),
            text(ATTENTION_AT),
        ),
    )
    return True, after
