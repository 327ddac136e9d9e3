"""The composition root: settings and AWS clients in, the Lambda entry points out.

Lambda calls ``api``, ``tick``, ``claim``, ``worker``, ``reaper`` and ``undelivered`` below through
``functions/*/handler.py``; local mode builds a ``Dynacron`` from explicit
settings and calls the same methods.
"""

from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
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

from dynacron.adapters.aws import aws_adapters
from dynacron.adapters.aws.claims import LambdaPageClaims
from dynacron.adapters.aws.clients import CLAIM_INVOKE_CONFIG, aws_client_config
from dynacron.adapters.claim_events import page_from_event
from dynacron.adapters.delivery.connections import HandlerUrlCheck, Resolver, system_resolver
from dynacron.adapters.delivery.http import HandlerDelivery, HttpDelivery, SecretsOf
from dynacron.adapters.delivery.python_handlers import PythonDelivery
from dynacron.adapters.delivery.registry import (
    HandlerRegistry,
    default_registry,
    import_handler_modules,
)
from dynacron.adapters.messages import dispatch_from_body
from dynacron.adapters.powertools.idempotency import IdempotentHandlerCalls
from dynacron.adapters.powertools.metrics import Emit, ReliabilityMetrics, print_emf
from dynacron.api.routes import build_api, unroutable_path, unsupported_body
from dynacron.definitions.resources import DISPATCH_QUEUE
from dynacron.domain.clock import Clock, SystemClock
from dynacron.domain.coordination.quotas import TenantRateLimiter
from dynacron.domain.executions.execution import Dispatch, queue_latency
from dynacron.domain.tasks.urls import UrlPolicy
from dynacron.entry.settings import Settings
from dynacron.ports import AdapterSet, DispatchQueue, PageClaims
from dynacron.ports.delivery import Delivery
from dynacron.ports.faults import NO_FAULTS, Boundary, Faults
from dynacron.services.attempt_records import InvocationBudget
from dynacron.services.executions import ExecutionService
from dynacron.services.follow_ups import Aftermath, RunStarter
from dynacron.services.forecast import HerdForecast
from dynacron.services.limits import LimitGate
from dynacron.services.outcomes import AttemptOutcomes
from dynacron.services.reap import Reaper
from dynacron.services.tasks import TaskService
from dynacron.services.tick import Ticker
from dynacron.services.tick_loop import ShardTickLoop
from dynacron.services.undelivered import UndeliveredDispatches
from dynacron.services.work import ExecutionRunner

logger = Logger(service="dynacron")

EXECUTION_RETENTION = timedelta(days=90)
# A looping tick stops this long before Lambda would stop it, to finish its last
# tick and release its lease cleanly.
TICK_LOOP_MARGIN = timedelta(seconds=15)
# A claim invocation starts no round of claims this long before its timeout: what
# it leaves is still due, and the looping tick finds it again.
CLAIM_MARGIN = timedelta(seconds=5)


# Powertools keeps the request being handled on the resolver's class
# (``BaseRouter.current_event``), so every resolver of a process shares it: two
# requests handled at once, by one resolver or two, would read each other's event
# and tenant. One request at a time per process, as in a Lambda execution
# environment; local mode's gateway answers requests on threads.
_API_LOCK = threading.Lock()


class Dynacron:
    def __init__(
        self,
        settings: Settings,
        *,
        dynamodb: Any = None,
        sqs: Any = None,
        adapters: AdapterSet | None = None,
        clock: Clock | None = None,
        delivery: Delivery | None = None,
        sleep: Callable[[float], None] = time.sleep,
        resolver: Resolver = system_resolver,
        handlers: HandlerRegistry | None = None,
        emit_metrics: Emit = print_emf,
        faults: Faults = NO_FAULTS,
        dispatch_queue: DispatchQueue | None = None,
        page_claims: PageClaims | None = None,
    ) -> None:
        import_handler_modules(settings.handler_modules)
        self.settings = settings
        self.clock = clock = clock or SystemClock()
        self._sleep = sleep
        self.faults = faults
        self.handlers = handlers or default_registry
        self.resolver = resolver
        self.metrics = ReliabilityMetrics(emit_metrics)
        terms = settings.lease_terms
        if adapters is None:
            # Deployed (and in most tests): the AWS set, on the clients given.
            adapters = aws_adapters(
                settings, dynamodb=dynamodb, sqs=sqs, execution_retention=EXECUTION_RETENTION
            )
        self.adapters = adapters
        self.tasks = adapters.tasks
        self.tenants = adapters.tenants
        self.executions = adapters.executions
        self.cursors = adapters.cursors
        self.leases = adapters.leases
        self.queue = dispatch_queue or adapters.queue
        self.dead_letter_queue = adapters.dead_letter_queue
        self.starter = RunStarter(
            executions=self.executions, queue=self.queue, clock=clock, lease_terms=terms
        )
        self.task_service = TaskService(
            tasks=self.tasks,
            executions=self.executions,
            tenants=self.tenants,
            create_keys=adapters.create_keys,
            starter=self.starter,
            settings=settings.task_settings,
            clock=clock,
            handlers=self.handlers,
            urls=HandlerUrlCheck(UrlPolicy(settings.delivery_allow_networks), resolver),
        )
        self.ticker = Ticker(
            tasks=self.tasks,
            executions=self.executions,
            queue=self.queue,
            cursors=self.cursors,
            settings=settings.tick_settings,
            clock=clock,
            faults=faults,
            metrics=self.metrics,
            sleep=sleep,
            page_claims=page_claims,
        )
        self.aftermath = Aftermath(
            tasks=self.tasks,
            executions=self.executions,
            starter=self.starter,
            sharding=settings.sharding,
            clock=clock,
            metrics=self.metrics,
        )
        self.outcomes = AttemptOutcomes(
            executions=self.executions,
            queue=self.queue,
            dead_letter_queue=self.dead_letter_queue,
            metrics=self.metrics,
            clock=clock,
            lease_terms=terms,
            aftermath=self.aftermath,
            faults=faults,
        )
        self.runner = ExecutionRunner(
            tasks=self.tasks,
            executions=self.executions,
            queue=self.queue,
            delivery=delivery
            or default_delivery(
                settings,
                clock,
                self.handlers,
                secrets_of=self.tenants.signing_secrets,
                resolver=resolver,
            ),
            handler_calls=IdempotentHandlerCalls(
                ttl_seconds=settings.idempotency_ttl_seconds,
                handler_timeout_seconds=settings.http_timeout_seconds,
                faults=faults,
            ),
            outcomes=self.outcomes,
            metrics=self.metrics,
            clock=clock,
            lease_terms=terms,
            faults=faults,
            limits=LimitGate(
                store=adapters.limits,
                metrics=self.metrics,
                clock=clock,
                breaker=settings.breaker_policy,
                call_timeout=timedelta(seconds=settings.http_timeout_seconds),
                clock_skew=terms.clock_skew,
                max_pause=timedelta(seconds=settings.max_retry_after_seconds),
            ),
        )
        self.lease_reaper = Reaper(
            executions=self.executions,
            queue=self.queue,
            outcomes=self.outcomes,
            metrics=self.metrics,
            clock=clock,
            lease_terms=terms,
            max_per_run=settings.reaper_max_per_run,
            faults=faults,
            tasks=self.tasks,
        )
        self.execution_service = ExecutionService(
            executions=self.executions,
            queue=self.queue,
            dead_letter_queue=self.dead_letter_queue,
            outcomes=self.outcomes,
            clock=clock,
            lease_terms=terms,
        )
        self.undelivered_dispatches = UndeliveredDispatches(
            tasks=self.tasks,
            executions=self.executions,
            outcomes=self.outcomes,
            dead_letter_queue=self.dead_letter_queue,
            metrics=self.metrics,
            clock=clock,
            lease_terms=terms,
            max_receive_count=DISPATCH_QUEUE.max_receive_count or 0,
            decode=dispatch_from_body,
            faults=faults,
        )
        self.forecast = HerdForecast(
            self.tasks,
            clock,
            max_tasks=settings.forecast_max_tasks,
            max_occurrences=settings.forecast_max_occurrences,
        )
        self._api = build_api(
            self.task_service,
            self.execution_service,
            settings,
            TenantRateLimiter(clock, settings.tenant_rate_per_second, settings.tenant_rate_burst),
            self.forecast,
        )

    def api(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        with _API_LOCK:
            try:
                return (
                    unroutable_path(event)
                    or unsupported_body(event)
                    or self._api.resolve(event, context)
                )
            finally:
                self.metrics.flush()

    def tick(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        """Tick the shard named in the event, or every shard when none is named.

        With ``"loop": true`` (the deployed schedule's event) work the named shard
        every second, holding its lease, until relieved: see ``services.tick_loop``.
        """
        shard = event.get("shard")
        if event.get("loop") and shard is not None:
            return self._tick_loop(int(shard), context)
        try:
            reports = (
                [self.ticker.tick_shard(int(shard))] if shard is not None else self.ticker.tick()
            )
        finally:
            self.metrics.flush()
        claimed = sum(r.claimed for r in reports)
        if claimed:
            logger.info("tick dispatched executions", extra={"claimed": claimed})
        return {"claimed": claimed, "shards": [r.shard for r in reports]}

    def claim(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        """Claim the page of due tasks a looping tick handed out (decision 0025):
        ``{"shard": N, "task_ids": [...]}``, at most one page."""
        page = page_from_event(event)
        remaining = timedelta(milliseconds=context.get_remaining_time_in_millis())
        try:
            report = self.ticker.claim_page(
                page, deadline=self.clock.now() + remaining - CLAIM_MARGIN
            )
        finally:
            self.metrics.flush()
        logger.info(
            "claimed a page handed out",
            extra={
                "shard": page.shard,
                "tasks": len(page.task_ids),
                "claimed": report.claimed,
                "lost_races": report.lost_races,
                "set_aside": report.set_aside,
            },
        )
        return {
            "shard": page.shard,
            "claimed": report.claimed,
            "rescheduled": report.rescheduled,
            "lost_races": report.lost_races,
            "set_aside": report.set_aside,
            "cut_short": report.cut_short,
        }

    def _tick_loop(self, shard: int, context: Any) -> dict[str, Any]:
        budget = timedelta(milliseconds=context.get_remaining_time_in_millis())
        loop = ShardTickLoop(
            ticker=self.ticker,
            leases=self.leases,
            clock=self.clock,
            shard=shard,
            owner=context.aws_request_id,
            deadline=self.clock.now() + budget - TICK_LOOP_MARGIN,
            metrics=self.metrics,
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
                "handed_out": report.handed_out,
                "failed_ticks": report.failed_ticks,
            },
        )
        return {
            "claimed": report.claimed,
            "handed_out": report.handed_out,
            "shards": [shard],
            "ticks": report.ticks,
            "ended": ended,
            "failed_ticks": report.failed_ticks,
            "max_lateness_seconds": max(report.lateness_seconds, default=0.0),
        }

    def worker(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        """Run an SQS batch; failed records are reported back for redelivery.

        Records one after another, each only while a whole handler call and the
        margin still fit in the invocation; the others go back unbegun.
        """
        processor = BatchProcessor(event_type=EventType.SQS)
        budget = InvocationBudget(
            context,
            call=timedelta(seconds=self.settings.http_timeout_seconds),
            margin=timedelta(seconds=self.settings.worker_margin_seconds),
        )
        returned = 0

        def run_record(record: SQSRecord) -> None:
            nonlocal returned
            dispatch = dispatch_from_body(record.body)
            if not budget.take_one():
                self.runner.return_unbegun(dispatch)
                returned += 1
                return
            self._record_queue_latency(record, dispatch)
            self.runner.run(dispatch, context)
            self.faults.reached(Boundary.WORKER_RECORD_DONE)

        try:
            response = process_partial_response(
                event=event, record_handler=run_record, processor=processor, context=context
            )
        finally:
            self.metrics.flush()
        if returned:
            logger.info("out of time: records sent back unbegun", extra={"returned": returned})
        return dict(response)

    def _record_queue_latency(self, record: SQSRecord, dispatch: Dispatch) -> None:
        """``QueueLatency``, from SQS's ``SentTimestamp`` (epoch milliseconds)."""
        sent_ms = record.attributes.get("SentTimestamp")
        if sent_ms is None:
            return
        sent_at = datetime.fromtimestamp(int(sent_ms) / 1000, UTC)
        due_at = dispatch.not_before or dispatch.scheduled_at
        latency = queue_latency(sent_at, due_at, self.clock.now())
        if latency is not None:
            self.metrics.queue_latency(latency.total_seconds())

    def reaper(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        """Make executions whose lease ran out move again (see services/reap.py)."""
        try:
            report = self.lease_reaper.reap()
        finally:
            self.metrics.flush()
        if report.reaped:
            logger.info("reaper took over expired leases", extra={"reaped": report.reaped})
        set_aside = {"set_aside": report.set_aside} if report.set_aside else {}
        return {"expired": report.expired, "reaped": report.reaped, **report.outcomes, **set_aside}

    def undelivered(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        """Settle the dispatch messages SQS gave up on (see services/undelivered.py);
        a record that fails (DynamoDB or SQS unreachable) is reported back and read
        again after the queue's visibility timeout."""
        processor = BatchProcessor(event_type=EventType.SQS)

        def settle_record(record: SQSRecord) -> None:
            self.undelivered_dispatches.settle_message(record.body)

        try:
            response = process_partial_response(
                event=event, record_handler=settle_record, processor=processor, context=context
            )
        finally:
            self.metrics.flush()
        return dict(response)

    @classmethod
    def from_environment(cls) -> Dynacron:
        settings = Settings.from_env(os.environ)
        config = aws_client_config(settings)
        page_claims = None
        if settings.claim_function:
            # Only the looping tick is given a claim function (infra/constructs/tick.py).
            page_claims = LambdaPageClaims(
                boto3.client("lambda", config=CLAIM_INVOKE_CONFIG), settings.claim_function
            )
        return cls(
            settings,
            dynamodb=boto3.client("dynamodb", config=config),
            sqs=boto3.client("sqs", config=config),
            page_claims=page_claims,
        )


def default_delivery(
    settings: Settings,
    clock: Clock,
    handlers: HandlerRegistry,
    *,
    secrets_of: SecretsOf,
    resolver: Resolver = system_resolver,
) -> Delivery:
    """HTTP handlers under the URL policy, signed with each tenant's secrets, and
    Python handlers from ``handlers``."""
    return HandlerDelivery(
        HttpDelivery(
            UrlPolicy(settings.delivery_allow_networks),
            settings.http_timeout_seconds,
            clock,
            settings.api_base_url,
            secrets_of=secrets_of,
            resolver=resolver,
            follow_cross_host=settings.follow_cross_host_redirects,
            max_retry_after_seconds=settings.max_retry_after_seconds,
        ),
        PythonDelivery(handlers, timeout_seconds=settings.http_timeout_seconds),
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
def claim(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return _deployed().claim(event, context)


@logger.inject_lambda_context
def worker(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return _deployed().worker(event, context)


@logger.inject_lambda_context
def reaper(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return _deployed().reaper(event, context)


@logger.inject_lambda_context
def undelivered(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return _deployed().undelivered(event, context)
