"""The composition root: settings and AWS clients in, the three Lambda entry points out.

Lambda calls ``api``, ``tick`` and ``worker`` below through ``functions/*/handler.py``;
local mode builds a ``Dynacron`` from explicit settings and calls the same methods.
"""

from __future__ import annotations

import functools
import os
from datetime import timedelta
from typing import Any

import boto3
from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    process_partial_response,
)
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from dynacron.api.routes import build_api, unsupported_body
from dynacron.config import Settings
from dynacron.delivery import HttpDelivery
from dynacron.domain.clock import Clock, SystemClock
from dynacron.domain.urls import UrlPolicy
from dynacron.queue import DispatchQueue, dispatch_from_body
from dynacron.services.tasks import TaskService
from dynacron.services.tick import Ticker
from dynacron.services.work import Delivery, ExecutionRunner
from dynacron.store import CursorStore, ExecutionStore, TaskStore

logger = Logger(service="dynacron")

EXECUTION_RETENTION = timedelta(days=90)


class Dynacron:
    def __init__(
        self,
        settings: Settings,
        *,
        dynamodb: Any,
        sqs: Any,
        clock: Clock | None = None,
        delivery: Delivery | None = None,
    ) -> None:
        self.settings = settings
        self.clock = clock or SystemClock()
        self.tasks = TaskStore(dynamodb, settings.tasks_table)
        self.executions = ExecutionStore(dynamodb, settings.executions_table, EXECUTION_RETENTION)
        self.cursors = CursorStore(dynamodb, settings.coordination_table)
        self.queue = DispatchQueue(sqs, settings.dispatch_queue_url)
        self.task_service = TaskService(
            tasks=self.tasks, executions=self.executions, settings=settings, clock=self.clock
        )
        self.ticker = Ticker(
            tasks=self.tasks,
            queue=self.queue,
            cursors=self.cursors,
            settings=settings,
            clock=self.clock,
        )
        self.runner = ExecutionRunner(
            tasks=self.tasks,
            executions=self.executions,
            delivery=delivery
            or HttpDelivery(
                UrlPolicy(settings.delivery_allow_networks), settings.http_timeout_seconds
            ),
            clock=self.clock,
        )
        self._api = build_api(self.task_service)

    def api(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        return unsupported_body(event) or self._api.resolve(event, context)

    def tick(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        """Tick the shard named in the event, or every shard when none is named."""
        shard = event.get("shard")
        reports = [self.ticker.tick_shard(int(shard))] if shard is not None else self.ticker.tick()
        claimed = sum(r.claimed for r in reports)
        if claimed:
            logger.info("tick dispatched executions", extra={"claimed": claimed})
        return {"claimed": claimed, "shards": [r.shard for r in reports]}

    def worker(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        """Run an SQS batch; failed records are reported back for redelivery."""
        processor = BatchProcessor(event_type=EventType.SQS)

        def run_record(record: SQSRecord) -> None:
            self.runner.run(dispatch_from_body(record.body))

        response = process_partial_response(
            event=event, record_handler=run_record, processor=processor, context=context
        )
        return dict(response)

    @classmethod
    def from_environment(cls) -> Dynacron:
        return cls(
            Settings.from_env(os.environ),
            dynamodb=boto3.client("dynamodb"),
            sqs=boto3.client("sqs"),
        )


@functools.cache
def _deployed() -> Dynacron:
    # Built on the first invocation, then reused by warm invocations.
    return Dynacron.from_environment()


@logger.inject_lambda_context
def api(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return _deployed().api(event, context)


@logger.inject_lambda_context
def tick(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return _deployed().tick(event, context)


@logger.inject_lambda_context
def worker(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return _deployed().worker(event, context)
