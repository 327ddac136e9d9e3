"""SQS adapter for the dispatch queue. The client is injected."""

from __future__ import annotations

import json
from typing import Any

from dynacron.domain.executions import Dispatch
from dynacron.domain.instants import format_instant, parse_instant

SEND_BATCH_LIMIT = 10


def dispatch_to_body(dispatch: Dispatch) -> str:
    return json.dumps(
        {
            "execution_id": dispatch.execution_id,
            "task_id": dispatch.task_id,
            "scheduled_at": format_instant(dispatch.scheduled_at),
            "attempt": dispatch.attempt,
        }
    )


def dispatch_from_body(body: str) -> Dispatch:
    values = json.loads(body)
    return Dispatch(
        execution_id=values["execution_id"],
        task_id=values["task_id"],
        scheduled_at=parse_instant(values["scheduled_at"]),
        attempt=int(values.get("attempt", 1)),
    )


class DispatchQueue:
    def __init__(self, client: Any, queue_url: str) -> None:
        self._client = client
        self._url = queue_url

    def send(self, dispatches: list[Dispatch]) -> list[Dispatch]:
        """Send with SendMessageBatch; returns the dispatches SQS accepted.

        A rejected entry is left out of the result, so the caller does not claim
        it and the next tick tries again: nothing is claimed without being sent.
        """
        sent: list[Dispatch] = []
        for start in range(0, len(dispatches), SEND_BATCH_LIMIT):
            batch = dispatches[start : start + SEND_BATCH_LIMIT]
            response = self._client.send_message_batch(
                QueueUrl=self._url,
                Entries=[_entry(str(i), d) for i, d in enumerate(batch)],
            )
            sent += [batch[int(entry["Id"])] for entry in response.get("Successful", [])]
        return sent


def _entry(entry_id: str, dispatch: Dispatch) -> dict[str, Any]:
    entry: dict[str, Any] = {"Id": entry_id, "MessageBody": dispatch_to_body(dispatch)}
    if dispatch.delay_seconds > 0:
        entry["DelaySeconds"] = dispatch.delay_seconds
    return entry
