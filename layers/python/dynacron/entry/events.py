"""Lambda events handled: each function's event read, its service called, the
result reported and the metrics flushed.

``LambdaEvents`` holds the handling; ``composition.Dynacron`` is one (it builds
the services these methods call), and ``functions`` hands every Lambda
invocation to the deployed one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import APIGatewayRestResolver
from aws_lambda_powertools.event_handler.api_gateway import BaseRouter
from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    process_partial_response,
)
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from dynacron.adapters.due_page_events import page_from_event
from dynacron.adapters.messages import (
    dispatch_from_body,
    is_late_check,
    is_notification,
    late_check_from_body,
    notification_from_body,
)
from dynacron.adapters.powertools.metrics import ReliabilityMetrics
from dynacron.api.routes import unroutable_path, unsupported_body
from dynacron.definitions.tick_timing import LoopTiming
from dynacron.domain.clock import Clock
from dynacron.domain.executions.execution import Dispatch, queue_latency
from dynacron.entry.record_batches import WaveStart, process_in_waves
from dynacron.entry.settings import Settings
from dynacron.ports import ShardLeases
from dynacron.ports.faults import Boundary, Faults
from dynacron.services.attempt_records import InvocationBudget
from dynacron.services.completions import CompletionTracker
from dynacron.services.message_holds import MessageHolds
from dynacron.services.notifications import NotificationDeliveries, TaskNotifications
from dynacron.services.outcomes import Outcome
from dynacron.services.reap import Reaper
from dynacron.services.tick import Ticker
from dynacron.services.tick_loop import ShardTickLoop
from dynacron.services.undelivered import UndeliveredDispatches
from dynacron.services.work import ExecutionRunner, PendingEnd

logger = Logger(service="dynacron")

# A looping tick stops this long before Lambda would stop it, to finish its last
# tick and hand its lease over cleanly (services.tick_loop.LoopTiming).
TICK_LOOP_MARGIN = timedelta(seconds=LoopTiming().end_margin_seconds)
# A claim invocation starts no round of claims this long before its timeout: what
# it leaves is still due, and the looping tick finds it again.
CLAIM_MARGIN = timedelta(seconds=5)

# Powertools keeps the request being handled on the resolver's class
# (``BaseRouter.current_event``), so every resolver of a process shares it: two
# requests handled at once, by one resolver or two, would read each other's event
# and tenant. One request at a time per process, as in a Lambda execution
# environment; local mode's gateway answers requests on threads. A route may step
# out of it for work that reads none of the resolver's state
# (``LambdaEvents.outside_api_lock``).
_API_LOCK = threading.Lock()
_holding = threading.local()

T = TypeVar("T")


class LambdaEvents:
    """One method per Lambda function: ``api``, ``tick``, ``claim``, ``worker``,
    ``reaper``, ``undelivered``. What they call is set by the composition root."""

    settings: Settings
    clock: Clock
    faults: Faults
    metrics: ReliabilityMetrics
    leases: ShardLeases
    ticker: Ticker
    runner: ExecutionRunner
    notification_deliveries: NotificationDeliveries
    task_notifications: TaskNotifications
    lease_reaper: Reaper
    completion_tracker: CompletionTracker
    message_holds: MessageHolds | None
    undelivered_dispatches: UndeliveredDispatches
    _api: APIGatewayRestResolver
    _sleep: Callable[[float], None]

    def api(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        with _API_LOCK:
            _holding.lock = True
            try:
                return (
                    unroutable_path(event)
                    or unsupported_body(event)
                    or self._api.resolve(event, context)
                )
            finally:
                _holding.lock = False
                self.metrics.flush()

    def outside_api_lock(self, work: Callable[[], T]) -> T:
        """``work()`` with ``_API_LOCK`` released, so that other requests are routed and
        answered meanwhile (a batch create's checks and store transaction: SQLite
        releases the GIL while it writes); for the routes of this API.

        ``work`` must not read the request from Powertools (read the tenant, the
        caller and the body first). The lock is taken again before this returns, and
        the state Powertools keeps for the request put back as it was (the event,
        the context, the routing context), whatever other requests did meanwhile.
        Outside ``api`` (no lock held by this thread), ``work`` just runs.
        """
        if not getattr(_holding, "lock", False):
            return work()
        event, context = BaseRouter.current_event, BaseRouter.lambda_context
        routing = dict(self._api.context)
        _holding.lock = False
        _API_LOCK.release()
        try:
            return work()
        finally:
            _API_LOCK.acquire()
            _holding.lock = True
            BaseRouter.current_event, BaseRouter.lambda_context = event, context
            self._api.context.clear()
            self._api.context.update(routing)

    def tick(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        """Tick the shard named in the event, or every shard when none is named.

        With ``"loop": true`` (the deployed schedule's event) stand by for the named
        shard, then work it every second holding its lease, until the deadline: see
        ``services.tick_loop``.
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

    def looping_tick(self, shard: int, context: Any) -> ShardTickLoop:
        """The loop a ``{"shard": n, "loop": true}`` invocation runs: owned by the
        request, ending ``TICK_LOOP_MARGIN`` before Lambda's timeout."""
        budget = timedelta(milliseconds=context.get_remaining_time_in_millis())
        return ShardTickLoop(
            ticker=self.ticker,
            leases=self.leases,
            clock=self.clock,
            shard=shard,
            owner=context.aws_request_id,
            deadline=self.clock.now() + budget - TICK_LOOP_MARGIN,
            metrics=self.metrics,
        )

    def _tick_loop(self, shard: int, context: Any) -> dict[str, Any]:
        report = self.looping_tick(shard, context).run(self._sleep)
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

        Up to ``worker_concurrency`` records at once (decision 0034), each started
        only while a whole handler call and the margin still fit in the invocation;
        the others go back unbegun. Every record's message is held invisible a short
        while at a time until the record ends (decision 0038).
        """
        budget = InvocationBudget(
            context,
            call=timedelta(seconds=self.settings.http_timeout_seconds),
            margin=timedelta(seconds=self.settings.worker_margin_seconds),
        )
        returned: list[Dispatch] = []

        def begin_wave(records: list[SQSRecord]) -> list[WaveStart]:
            """The next records' begins, together (``ExecutionRunner.begin_each``)."""
            starts: list[WaveStart] = [None] * len(records)
            taken: list[tuple[int, Dispatch]] = []
            for index, record in enumerate(records):
                try:
                    if is_notification(record.body) or is_late_check(record.body):
                        starts[index] = self._notice_work(record.body, budget)
                        continue
                    dispatch = dispatch_from_body(record.body)
                    if not budget.take_one():
                        self.runner.return_unbegun(dispatch)
                        returned.append(dispatch)
                        continue
                    self._record_queue_latency(record, dispatch)
                except Exception as error:
                    starts[index] = error
                    continue
                taken.append((index, dispatch))
            began = self.runner.begin_each([dispatch for _, dispatch in taken], context)
            for (index, _), start in zip(taken, began, strict=True):
                if isinstance(start, Outcome):
                    self.faults.reached(Boundary.WORKER_RECORD_DONE)
                    continue
                starts[index] = start if isinstance(start, Exception) else self._done(start)
            return starts

        def finish(pending: list[PendingEnd]) -> list[Exception | None]:
            """The ends of the records whose handlers succeeded, together."""
            ended: list[Exception | None] = []
            for outcome in self.runner.end_each(pending):
                if isinstance(outcome, Exception):
                    ended.append(outcome)
                    continue
                self.faults.reached(Boundary.WORKER_RECORD_DONE)
                ended.append(None)
            return ended

        try:
            with self._holding(event) as release:
                response = process_in_waves(
                    event,
                    begin_wave=begin_wave,
                    finish=finish,
                    settled=lambda record: release(record.receipt_handle),
                    context=context,
                    concurrency=self.settings.worker_concurrency,
                )
        finally:
            self.metrics.flush()
        if returned:
            logger.info("out of time: records sent back unbegun", extra={"returned": len(returned)})
        return response

    def _notice_work(self, body: str, budget: InvocationBudget) -> WaveStart:
        """A task's notification or on_late timer (decision 0057), not an execution's
        attempt: its work, run on the pool as a handler call is. A notification is a
        call, so it too starts only while one fits in the invocation."""
        if is_late_check(body):
            check = late_check_from_body(body)
            return lambda: self.task_notifications.check_late(check)
        message = notification_from_body(body)
        if not budget.take_one():
            self.notification_deliveries.send_back(message)
            return None

        def deliver() -> None:
            self.notification_deliveries.deliver(message)

        return deliver

    def _done(self, call: Callable[[], Outcome | PendingEnd]) -> Callable[[], PendingEnd | None]:
        """``call`` (a record's handler call), then, if it ended the record, the
        record done; a success left to the batch's ends is handed back for them."""

        def run() -> PendingEnd | None:
            outcome = call()
            if isinstance(outcome, PendingEnd):
                return outcome
            self.faults.reached(Boundary.WORKER_RECORD_DONE)
            return None

        return run

    def _holding(self, event: dict[str, Any]) -> AbstractContextManager[Callable[[str], None]]:
        """The batch's messages held while its records run, or nothing when off."""
        if self.message_holds is None:
            return nullcontext(lambda _handle: None)
        handles = [r["receiptHandle"] for r in event.get("Records") or [] if "receiptHandle" in r]
        return self.message_holds.holding(handles)

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

    def completions(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        """A tracked run's state-change event from EventBridge: its execution ends
        if the run ended (see services/completions.py). An error raises, and
        EventBridge delivers the event again."""
        try:
            said = self.completion_tracker.on_event(event)
        finally:
            self.metrics.flush()
        logger.info("state-change event", extra={"outcome": said, "event_id": event.get("id")})
        return {"outcome": str(said)}

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
