"""A dispatch as a queue message body, and the message attributes dynacron sets:
the same wire format on every queue (SQS deployed, SQLite locally)."""

from __future__ import annotations

import json
from typing import Any

from dynacron.domain.executions.execution import Dispatch, Upstream
from dynacron.domain.executions.record import upstream_from_record, upstream_record
from dynacron.domain.instants import format_instant, parse_instant

# A limit of the queue port, kept importable from here.
from dynacron.ports.messages import SEND_BATCH_LIMIT as SEND_BATCH_LIMIT

# SQS delays one message by at most 15 minutes; longer waits take several hops.
MAX_DELAY_SECONDS = 900
EXECUTION_ID_ATTRIBUTE = "execution_id"
# On a message passed on to the dead-letter queue as it was: why it was not recorded.
FORWARD_REASON_ATTRIBUTE = "reason"


def dispatch_to_body(dispatch: Dispatch) -> str:
    body: dict[str, Any] = {
        "execution_id": dispatch.execution_id,
        "task_id": dispatch.task_id,
        "scheduled_at": format_instant(dispatch.scheduled_at),
        "attempt": dispatch.attempt,
    }
    if dispatch.not_before is not None:
        body["not_before"] = format_instant(dispatch.not_before)
    if dispatch.upstream is not None:
        # As an execution's record keeps it (a fan-in's other ends in "with").
        body["upstream"] = upstream_record(dispatch.upstream)
    if dispatch.tenant_id is not None:
        body["tenant_id"] = dispatch.tenant_id
    return json.dumps(body)


def upstream_to_map(upstream: Upstream) -> dict[str, Any]:
    """The ``upstream`` a handler receives: the end that started the run, as it has
    always been shown."""
    return {
        "execution_id": upstream.execution_id,
        "status_code": upstream.result.status_code,
        "excerpt": upstream.result.excerpt,
    }


def upstreams_to_list(upstream: Upstream) -> list[dict[str, Any]]:
    """The ``upstreams`` a handler receives: every end that started the run (one, or
    a fan-in's set, decision 0058), the one that completed it first, each with its
    task and final status."""
    return [
        {
            **upstream_to_map(end),
            "task_id": end.execution_id.rpartition("_")[0],
            "status": end.status,
        }
        for end in upstream.ends
    ]


def upstream_from_map(values: dict[str, Any] | None) -> Upstream | None:
    # As an execution's record keeps it: one reader for both.
    return upstream_from_record(values)


def dispatch_from_body(body: str) -> Dispatch:
    values = json.loads(body)
    not_before = values.get("not_before")
    return Dispatch(
        execution_id=values["execution_id"],
        task_id=values["task_id"],
        scheduled_at=parse_instant(values["scheduled_at"]),
        attempt=int(values.get("attempt", 1)),
        not_before=parse_instant(not_before) if not_before else None,
        upstream=upstream_from_map(values.get("upstream")),
        tenant_id=values.get("tenant_id"),
    )
