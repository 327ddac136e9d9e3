"""The SQS queues, each built from its definition in ``dynacron.definitions.resources``."""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from dynacron.definitions.resources import (
    DEAD_LETTER_QUEUE,
    DISPATCH_QUEUE,
    QUEUES,
    UNDELIVERED_QUEUE,
    WORKER_TIMEOUT_SECONDS,
    QueueDefinition,
)
from infra.config import SchedulerConfig
from infra.constructs.nag import acknowledge

# AWS: a queue that feeds a Lambda function should hide a received message for
# at least six times the function's timeout, plus the batching window.
VISIBILITY_PER_TIMEOUT = 6


class Queues(Construct):
    """The dispatch queue and its dead-letter queue, encrypted (with SQS's own key, or
    the operator's ``key``: decision 0059), TLS only, with redrive."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: SchedulerConfig,
        key: kms.IKey | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.queues: dict[str, sqs.Queue] = {}
        advised = VISIBILITY_PER_TIMEOUT * WORKER_TIMEOUT_SECONDS + (
            config.worker_batch_window_seconds
        )
        # QUEUES lists a dead-letter queue before the queue that sends to it.
        for definition in QUEUES:
            dead_letter = None
            if definition.dead_letter is not None and definition.max_receive_count:
                dead_letter = sqs.DeadLetterQueue(
                    max_receive_count=definition.max_receive_count,
                    queue=self.queues[definition.dead_letter.logical_id],
                )
            visibility = definition.visibility_timeout_seconds
            if definition == DISPATCH_QUEUE:  # the worker's event source
                visibility = max(visibility, advised)
            self.queues[definition.logical_id] = sqs.Queue(
                self,
                definition.logical_id,
                visibility_timeout=Duration.seconds(visibility),
                retention_period=Duration.seconds(definition.retention_seconds),
                encryption=sqs.QueueEncryption.KMS if key else sqs.QueueEncryption.SQS_MANAGED,
                encryption_master_key=key,
                enforce_ssl=True,
                dead_letter_queue=dead_letter,
            )
        # The end of the line: neither has a dead-letter queue of its own (0022).
        acknowledge(
            self.queue(DEAD_LETTER_QUEUE),
            "AwsSolutions-SQS3",
            "This is the dead-letter queue: copies of dead letters, for its alarm and for "
            "operators; nothing redrives from it automatically.",
        )
        acknowledge(
            self.queue(UNDELIVERED_QUEUE),
            "AwsSolutions-SQS3",
            "This is the dispatch queue's dead-letter queue: its function records each "
            "message as a dead letter, and forwards a body it cannot read to the "
            "dead-letter queue itself.",
        )

    def queue(self, definition: QueueDefinition) -> sqs.Queue:
        return self.queues[definition.logical_id]
