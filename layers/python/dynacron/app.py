"""The composition root: settings and AWS clients in, the three Lambda entry points out.

Lambda calls ``api``, ``tick`` and ``worker`` below through ``functions/*/handler.py``;
local mode builds a ``Dynacron`` from explicit settings and calls the same methods.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
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
from dynacron.delivery import HttpDelivery, Resolver, system_resolver
from dynacron.domain.clock import Clock, SystemClock
from dynacron.domain.limits import TenantRateLimiter
from dynacron.domain.urls import UrlPolicy
from dynacron.leases import ShardLeases
from dynacron.queue import DispatchQueue, dispatch_from_body
from dynacron.services.tasks import TaskService
from dynacron.services.tick import Ticker
from dynacron.services.tick_loop import ShardTickLoop
from dynacron.services.work import Delivery, ExecutionRunner
from dynacron.store import CursorStore, ExecutionStore, TaskStore, TenantStore

logger = Logger(service="dynacron")

EXECUTION_RETENTION = timedelta(days=90)
# A looping tick stops this long before Lambda would stop it, to finish its last
# tick and release its lease cleanly.
TICK_LOOP_MARGIN = timedelta(seconds=15)


class Dynacron:
    def __init__(
        self,
        settings: Settings,
        *,
        dynamodb: Any,
        sqs: Any,
        clock: Clock | None = None,
        delivery: Delivery | None = None,
        sleep: Callable[[float], None] = time.sleep,
        resolver: Resolver = system_resolver,
    ) -> None:
        self.settings = settings
        self.clock = clock or SystemClock()
        self._sleep = sleep
        self.tasks = TaskStore(dynamodb, settings.tasks_table, settings.coordination_table)
        self.tenants = TenantStore(dynamodb, settings.coordination_table)
        self.executions = ExecutionStore(dynamodb, settings.executions_table, EXECUTION_RETENTION)
        self.cursors = CursorStore(dynamodb, settings.coordination_table)
        self.leases = ShardLeases(dynamodb, settings.coordination_table)
        self.queue = DispatchQueue(sqs, settings.dispatch_queue_url)
        url_policy = UrlPolicy(settings.delivery_allow_networks)
        self.task_service = TaskService(
            tasks=self.tasks,
            executions=self.executions,
            tenants=self.tenants,
            settings=settings,
            clock=self.clock,
            resolver=resolver,
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
                url_policy,
                settings.http_timeout_seconds,
                secrets_of=self.tenants.signing_secrets,
                resolver=resolver,
                follow_cross_host=settings.follow_cross_host_redirects,
            ),
            clock=self.clock,
        )
        self._api = build_api(
            self.task_service,
            settings,
            TenantRateLimiter(
                self.clock, settings.tenant_rate_per_second, settings.tenant_rate_burst
            ),
        )

    def api(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        return unsupported_body(event) or self._api.resolve(event, context)

    def tick(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        """Tick the shard named in the event, or every shard when none is named.

        With ``"loop": true`` (the deployed schedule's event) work the named shard
        every second, holding its lease, until relieved: see ``services.tick_loop``.
        """
        shard = event.get("shard")
        if event.get("loop") and shard is not None:
            return self._tick_loop(int(shard), context)
        reports = [self.ticker.tick_shard(int(shard))] if shard is not None else self.ticker.tick()
        claimed = sum(r.claimed for r in reports)
        if claimed:
            logger.info("tick dispatched executions", extra={"claimed": claimed})
        return {"claimed": claimed, "shards": [r.shard for r in reports]}

    def _tick_loop(self, shard: int, context: Any) -> dict[str, Any]:
        budget = timedelta(milliseconds=context.get_remaining_time_in_millis())
        loop = ShardTickLoop(
            ticker=self.ticker,
            leases=self.leases,
            clock=self.clock,
            shard=shard,
            owner=context.aws_request_id,
            deadline=self.clock.now() + budget - TICK_LOOP_MARGIN,
        )
        report = loop.run(self._sleep)
        ended = report.ended.value if report.ended else None
        if report.took_over_expired:
            logger.warning("took over an expired tick lease", extra={"shard": shard})
        logger.info(
            "tick loop ended",
            extra={
                "shard": shard,
                "ended": ended,
                "ticks": report.ticks,
                "claimed": report.claimed,
            },
        )
        return {
            "claimed": report.claimed,
            "shards": [shard],
            "ticks": report.ticks,
            "ended": ended,
            "max_lateness_seconds": max(report.lateness_seconds, default=0.0),
        }

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
