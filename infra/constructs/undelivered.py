"""The function that reads the undelivered queue (decision 0022)."""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_lambda_event_sources as event_sources
from constructs import Construct

from dynacron.definitions.resources import (
    DEAD_LETTER_QUEUE,
    DEPENDENTS_INDEX,
    DISPATCH_QUEUE,
    EXECUTIONS,
    TASKS,
    UNDELIVERED_QUEUE,
    UNDELIVERED_TIMEOUT_SECONDS,
)
from infra.constructs.foundation import Foundation
from infra.constructs.functions import allow, allow_census_deletes, index_arn

# Undelivered messages are rare; two concurrent invocations (the least an SQS
# event source allows) keep this function from ever competing with the workers.
MAX_CONCURRENCY = 2
BATCH_SIZE = 10


class Undelivered(Construct):
    """Dispatch messages SQS gave up on before their attempt began: each becomes a
    dead-letter record (listed, redrivable) and frees its task's run slot."""

    def __init__(self, scope: Construct, construct_id: str, *, foundation: Foundation) -> None:
        super().__init__(scope, construct_id)
        config, storage, queues = foundation.config, foundation.storage, foundation.queues
        self.function = foundation.kit.function(
            self,
            "Function",
            entry="undelivered",
            memory_mb=config.reaper_memory_mb,
            timeout=Duration.seconds(UNDELIVERED_TIMEOUT_SECONDS),
            description="records dispatch messages that never began as dead letters",
        )
        self.function.add_event_source(
            event_sources.SqsEventSource(
                queues.queue(UNDELIVERED_QUEUE),
                batch_size=BATCH_SIZE,
                max_concurrency=MAX_CONCURRENCY,
                report_batch_item_failures=True,
            )
        )
        tasks, executions = storage.table(TASKS), storage.table(EXECUTIONS)
        dispatch = queues.queue(DISPATCH_QUEUE)
        # Reads the task (its tenant and retry policy) and the execution, records the
        # dead letter or takes a running lease over (the event source grants the
        # queue's receive and delete). Freeing the run slot is a versioned put of the
        # task (fixed_delay files its next run); buffer_one's waiting occurrence is
        # recorded and sent. A dead letter of a task with dependents starts those
        # that run after failures (decision 0058): the dependents index, then the
        # dependents read in one batch.
        allow(self.function, ["dynamodb:GetItem", "dynamodb:PutItem"], [tasks.table_arn])
        allow(self.function, ["dynamodb:BatchGetItem"], [tasks.table_arn])
        allow(self.function, ["dynamodb:Query"], [index_arn(tasks, DEPENDENTS_INDEX)])
        # A task that cannot be read, or whose message cannot be settled, is set aside
        # (decision 0021); the tenant of an old message that did not name it is read
        # from the task's earlier executions.
        allow(self.function, ["dynamodb:UpdateItem"], [tasks.table_arn])
        allow(self.function, ["dynamodb:Query"], [executions.table_arn])
        allow(
            self.function,
            ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"],
            [executions.table_arn],
        )
        allow_census_deletes(self.function, executions)
        # The dead letter's copy, or a body that is not a dispatch, as it was; a
        # running attempt taken over may be retried, a buffered occurrence started.
        allow(
            self.function,
            ["sqs:SendMessage"],
            [queues.queue(DEAD_LETTER_QUEUE).queue_arn, dispatch.queue_arn],
        )
