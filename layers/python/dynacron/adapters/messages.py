"""A dispatch as a queue message body, and the message attributes dynacron sets:
the same wire format on every queue (SQS deployed, SQLite locally)."""

from __future__ import annotations

import json
from typing import Any

from dynacron.domain.executions.execution import Dispatch, Upstream
from dynacron.domain.executions.notifications import LateCheck, NoticeKind, NotificationMessage
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


# A notification (decision 0057) travels on the dispatch queue too, told apart by this key.
NOTIFICATION_KEY = "notification"


def notification_to_body(message: NotificationMessage) -> str:
    return json.dumps(
        {
            NOTIFICATION_KEY: message.kind.value,
            "url": message.url,
            "count": message.count,
            "task_id": message.task_id,
            "task_name": message.task_name,
            "tenant_id": message.tenant_id,
            "execution_id": message.execution_id,
            "scheduled_at": format_instant(message.scheduled_at),
            "status": message.status,
            "error": message.error,
            "notified_at": format_instant(message.notified_at),
            "attempt": message.attempt,
        }
    )


_NOTIFICATION_START = '{"' + NOTIFICATION_KEY + '":'


def is_notification(body: str) -> bool:
    """Whether a message on the dispatch queue is a notification, not a dispatch: its
    body begins with the key (``notification_to_body`` writes it first), so telling
    them apart parses nothing on a dispatch's path."""
    return body.startswith(_NOTIFICATION_START)


def notification_from_body(body: str) -> NotificationMessage:
    values = json.loads(body)
    return NotificationMessage(
        kind=NoticeKind(values[NOTIFICATION_KEY]),
        url=values["url"],
        count=int(values["count"]),
        task_id=values["task_id"],
        task_name=values["task_name"],
        tenant_id=values["tenant_id"],
        execution_id=values["execution_id"],
        scheduled_at=parse_instant(values["scheduled_at"]),
        status=values["status"],
        error=values.get("error"),
        notified_at=parse_instant(values["notified_at"]),
        attempt=int(values.get("attempt", 1)),
    )


# An occurrence's on_late timer (decision 0057), on the dispatch queue too.
LATE_CHECK_KEY = "late_check"
_LATE_CHECK_START = '{"' + LATE_CHECK_KEY + '":'


def late_check_to_body(check: LateCheck) -> str:
    return json.dumps(
        {
            LATE_CHECK_KEY: check.execution_id,
            "task_id": check.task_id,
            "scheduled_at": format_instant(check.scheduled_at),
            "due_at": format_instant(check.due_at),
        }
    )


def is_late_check(body: str) -> bool:
    """Whether a message on the dispatch queue is an on_late timer (its key comes first)."""
    return body.startswith(_LATE_CHECK_START)


def late_check_from_body(body: str) -> LateCheck:
    values = json.loads(body)
    return LateCheck(
        task_id=values["task_id"],
        execution_id=values[LATE_CHECK_KEY],
        scheduled_at=parse_instant(values["scheduled_at"]),
        due_at=parse_instant(values["due_at"]),
    )


def dispatch_only_from_body(body: str) -> Dispatch:
    """A dispatch, as ``dispatch_from_body`` reads it; ``ValueError`` for a notification
    or an on_late timer, which share its queue (and some of its keys) but are none."""
    if is_notification(body) or is_late_check(body):
        raise ValueError("a notification message, not a dispatch")
    return dispatch_from_body(body)
