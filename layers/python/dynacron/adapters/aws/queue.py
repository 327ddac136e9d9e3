"""The dispatch and dead-letter queues on SQS (the ``DispatchQueue`` and
``DeadLetterQueue`` ports); the client is injected."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from dynacron.adapters.aws.errors import translating
from dynacron.adapters.messages import (
    EXECUTION_ID_ATTRIBUTE,
    FORWARD_REASON_ATTRIBUTE,
    MAX_DELAY_SECONDS,
    SEND_BATCH_LIMIT,
    dispatch_to_body,
    late_check_to_body,
    notification_to_body,
)
from dynacron.domain.executions.execution import Dispatch
from dynacron.domain.executions.notifications import LateCheck, NotificationMessage

# SQS's longest visibility timeout: 12 hours.
MAX_VISIBILITY_SECONDS = 12 * 3600

if TYPE_CHECKING:
    from types_boto3_sqs.client import SQSClient
    from types_boto3_sqs.type_defs import SendMessageBatchRequestEntryTypeDef


class SqsDispatchQueue:
    def __init__(self, client: SQSClient, queue_url: str) -> None:
        self._client = translating(client)
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

    def depth(self) -> int:
        """Messages waiting for a worker or being worked (approximate, as SQS counts)."""
        attributes = self._client.get_queue_attributes(
            QueueUrl=self._url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return int(attributes["ApproximateNumberOfMessages"]) + int(
            attributes["ApproximateNumberOfMessagesNotVisible"]
        )

    def send_later(self, dispatch: Dispatch, delay_seconds: float) -> None:
        """Send one dispatch, invisible for ``delay_seconds`` (capped at SQS's 15 minutes;
        the worker sends it on again if it arrives before ``not_before``)."""
        delay = _whole_seconds(delay_seconds)
        self._client.send_message(
            QueueUrl=self._url, MessageBody=dispatch_to_body(dispatch), DelaySeconds=delay
        )

    def send_notification(self, message: NotificationMessage, delay_seconds: float) -> None:
        """Send one notification, invisible for ``delay_seconds`` (at most 15 minutes)."""
        delay = _whole_seconds(delay_seconds)
        self._client.send_message(
            QueueUrl=self._url, MessageBody=notification_to_body(message), DelaySeconds=delay
        )

    def send_late_check(self, check: LateCheck, delay_seconds: float) -> None:
        """Send one on_late timer, invisible for ``delay_seconds`` (at most 15 minutes)."""
        delay = _whole_seconds(delay_seconds)
        self._client.send_message(
            QueueUrl=self._url, MessageBody=late_check_to_body(check), DelaySeconds=delay
        )

    def hold(self, receipt_handles: Sequence[str], seconds: float) -> int:
        """ChangeMessageVisibilityBatch, 10 handles a call, to ``seconds`` rounded up
        (SQS counts whole seconds, at most 12 hours); an entry SQS refuses (the
        message was deleted or received again) is skipped."""
        timeout = max(0, min(MAX_VISIBILITY_SECONDS, math.ceil(seconds)))
        held = 0
        for start in range(0, len(receipt_handles), SEND_BATCH_LIMIT):
            batch = receipt_handles[start : start + SEND_BATCH_LIMIT]
            response = self._client.change_message_visibility_batch(
                QueueUrl=self._url,
                Entries=[
                    {"Id": str(i), "ReceiptHandle": handle, "VisibilityTimeout": timeout}
                    for i, handle in enumerate(batch)
                ],
            )
            held += len(response.get("Successful", []))
        return held


class SqsDeadLetterQueue:
    """Copies of dead-lettered executions, for alarms and operators.

    The executions table is the record of dead letters (listing and redrive read
    it); a copy here is what the queue's alarm and an operator see. Copies carry
    the execution id as a message attribute so they can be found again.
    """

    # A redrive looks through at most this many receives (10 messages each) for the copy.
    SEARCH_RECEIVES = 10

    def __init__(self, client: SQSClient, queue_url: str) -> None:
        self._client = translating(client)
        self._url = queue_url

    def send(self, dispatch: Dispatch, error: str) -> None:
        self._client.send_message(
            QueueUrl=self._url,
            MessageBody=json.dumps({**json.loads(dispatch_to_body(dispatch)), "error": error}),
            MessageAttributes={
                EXECUTION_ID_ATTRIBUTE: {"DataType": "String", "StringValue": dispatch.execution_id}
            },
        )

    def forward(self, body: str, reason: str) -> None:
        """Pass on a message nothing can be recorded for (a body that is not a
        dispatch), as it is, for the queue's alarm and an operator."""
        self._client.send_message(
            QueueUrl=self._url,
            MessageBody=body,
            MessageAttributes={
                FORWARD_REASON_ATTRIBUTE: {"DataType": "String", "StringValue": reason}
            },
        )

    def remove(self, execution_id: str) -> int:
        """Delete the copies of one execution; returns how many were found.

        SQS cannot look a message up, so this receives batches, deletes the matches
        and makes every other message visible again at once. It looks at a bounded
        number of messages: in a very long queue a copy may survive, which is
        harmless (a stale copy replayed into the dispatch queue is dropped as a
        duplicate) and the queue's retention removes it in the end.
        """
        found = 0
        others: list[str] = []
        try:
            for _ in range(self.SEARCH_RECEIVES):
                messages = self._client.receive_message(
                    QueueUrl=self._url,
                    MaxNumberOfMessages=10,
                    VisibilityTimeout=30,
                    MessageAttributeNames=[EXECUTION_ID_ATTRIBUTE],
                ).get("Messages", [])
                if not messages:
                    break
                for message in messages:
                    attribute = message.get("MessageAttributes", {}).get(EXECUTION_ID_ATTRIBUTE)
                    owner = attribute.get("StringValue") if attribute else None
                    if owner == execution_id:
                        self._client.delete_message(
                            QueueUrl=self._url, ReceiptHandle=message["ReceiptHandle"]
                        )
                        found += 1
                    else:
                        others.append(message["ReceiptHandle"])
        finally:
            for start in range(0, len(others), SEND_BATCH_LIMIT):
                self._client.change_message_visibility_batch(
                    QueueUrl=self._url,
                    Entries=[
                        {"Id": str(i), "ReceiptHandle": handle, "VisibilityTimeout": 0}
                        for i, handle in enumerate(others[start : start + SEND_BATCH_LIMIT])
                    ],
                )
        return found


def _entry(entry_id: str, dispatch: Dispatch) -> SendMessageBatchRequestEntryTypeDef:
    entry: SendMessageBatchRequestEntryTypeDef = {
        "Id": entry_id,
        "MessageBody": dispatch_to_body(dispatch),
    }
    if dispatch.delay_seconds > 0:
        entry["DelaySeconds"] = dispatch.delay_seconds
    return entry


def _whole_seconds(delay_seconds: float) -> int:
    """A delay as SQS takes it: whole seconds, rounded up (a message that arrives
    early is only sent on again, with what is left, until it is due), at most 15
    minutes."""
    return max(0, min(MAX_DELAY_SECONDS, math.ceil(delay_seconds)))
