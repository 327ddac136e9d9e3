"""The dispatch and dead-letter queues on SQLite: the ``DispatchQueue`` and
``DeadLetterQueue`` ports (``dynacron.ports``) on the queues of ``SqliteQueues``,
as ``adapters/aws/queue.py`` puts them on SQS."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

from dynacron.adapters.messages import (
    EXECUTION_ID_ATTRIBUTE,
    FORWARD_REASON_ATTRIBUTE,
    MAX_DELAY_SECONDS,
    dispatch_to_body,
    late_check_to_body,
    notification_to_body,
)
from dynacron.adapters.sqlite.queue import OutgoingMessage, SqliteQueues
from dynacron.definitions.resources import DEAD_LETTER_QUEUE, DISPATCH_QUEUE
from dynacron.domain.executions.execution import Dispatch
from dynacron.domain.executions.notifications import LateCheck, NotificationMessage


class SqliteDispatchQueue:
    """The dispatch queue on SQLite, with the public methods and meaning of
    the ``DispatchQueue`` port (``dynacron.ports``)."""

    def __init__(self, queues: SqliteQueues, queue: str = DISPATCH_QUEUE.suffix) -> None:
        self._queues = queues
        self._queue = queue

    def send(self, dispatches: list[Dispatch]) -> list[Dispatch]:
        """Send all in one transaction; returns the dispatches accepted (all of them,
        or the call raises and none was sent)."""
        # Capped as SQS caps a delay, so both adapters hold a message equally long.
        self._queues.send_batch(
            self._queue,
            [
                OutgoingMessage(dispatch_to_body(d), delay_seconds=_capped(d.delay_seconds))
                for d in dispatches
            ],
        )
        return list(dispatches)

    def depth(self) -> int:
        """Messages waiting for a worker or being worked."""
        visible, in_flight = self._queues.depth(self._queue)
        return visible + in_flight

    def send_later(self, dispatch: Dispatch, delay_seconds: float) -> None:
        """Send one dispatch, invisible for ``delay_seconds`` (capped at SQS's 15
        minutes, as on SQS; the worker sends it on again if it arrives before
        ``not_before``)."""
        self._queues.send(
            self._queue, dispatch_to_body(dispatch), delay_seconds=_capped(delay_seconds)
        )

    def send_notification(self, message: NotificationMessage, delay_seconds: float) -> None:
        """Send one notification, invisible for ``delay_seconds`` (at most 15 minutes)."""
        self._queues.send(
            self._queue, notification_to_body(message), delay_seconds=_capped(delay_seconds)
        )

    def send_late_check(self, check: LateCheck, delay_seconds: float) -> None:
        """Send one on_late timer, invisible for ``delay_seconds`` (at most 15 minutes)."""
        self._queues.send(
            self._queue, late_check_to_body(check), delay_seconds=_capped(delay_seconds)
        )

    def hold(self, receipt_handles: Sequence[str], seconds: float) -> int:
        """Keep received messages invisible for ``seconds`` from now, in one
        transaction; a handle that is not its message's latest is skipped."""
        return self._queues.change_visibility_batch(self._queue, receipt_handles, seconds)


class SqliteDeadLetterQueue:
    """Copies of dead-lettered executions, with the public methods and meaning of
    the ``DeadLetterQueue`` port (``dynacron.ports``)."""

    def __init__(self, queues: SqliteQueues, queue: str = DEAD_LETTER_QUEUE.suffix) -> None:
        self._queues = queues
        self._queue = queue

    def send(self, dispatch: Dispatch, error: str) -> None:
        self._queues.send(
            self._queue,
            json.dumps({**json.loads(dispatch_to_body(dispatch)), "error": error}),
            attributes={EXECUTION_ID_ATTRIBUTE: dispatch.execution_id},
        )

    def forward(self, body: str, reason: str) -> None:
        """Pass on a message nothing can be recorded for (a body that is not a
        dispatch), as it is, for an operator."""
        self._queues.send(self._queue, body, attributes={FORWARD_REASON_ATTRIBUTE: reason})

    def remove(self, execution_id: str) -> int:
        """Delete the copies of one execution; returns how many were found. Unlike
        SQS, SQLite looks them up by attribute: every copy is found."""
        return self._queues.remove_by_attribute(self._queue, EXECUTION_ID_ATTRIBUTE, execution_id)


def _capped(delay_seconds: float) -> int:
    # Rounded up: a timer that arrives early is only sent on again until it is due.
    return max(0, min(MAX_DELAY_SECONDS, math.ceil(delay_seconds)))
