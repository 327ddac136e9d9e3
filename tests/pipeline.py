"""Drive tick, workers and reaper by hand in this process, against in-process moto,
with a clock the test moves.

A component built with faults stops where they say (``InjectedCrash``), like a
killed process: its SQS messages become visible again, as they would after the
visibility timeout, and its leases and idempotency records stay as they were.

Only what a test injected is absorbed: an ``InjectedCrash``, throttling from a
component built with chaos that throttles, or an endpoint a test made unreachable
(in-process moto is never out of reach). Any other exception from the tick, the
reaper or a worker fails the test, so a real bug cannot hide behind "nothing was
lost": a worker's record that raised is reported back as failed by the batch
processor, and is raised here all the same.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from aws_lambda_powertools.utilities.batch.exceptions import BatchProcessingError
from aws_lambda_powertools.utilities.idempotency.exceptions import (
    IdempotencyPersistenceLayerError,
)
from botocore.exceptions import ClientError, EndpointConnectionError

from dynacron.adapters.aws.errors import AwsUnreachable
from dynacron.adapters.aws.queue import SqsDispatchQueue
from dynacron.adapters.delivery.registry import HandlerRegistry
from dynacron.adapters.powertools.metrics import MetricTotals
from dynacron.api.requests import TaskCreate
from dynacron.definitions.resources import UNDELIVERED_QUEUE
from dynacron.domain.clock import SettableClock
from dynacron.domain.executions.execution import Dispatch, Execution
from dynacron.entry.composition import Dynacron
from dynacron.entry.settings import Settings
from dynacron.local.aws import undelivered_queue_url
from dynacron.local.chaos import THROTTLED, ChaosSettings, InjectedCrash, chaotic_clients
from dynacron.local.gateway import LocalContext
from dynacron.local.runtime import settle_undelivered, sqs_event
from dynacron.local.stores import SqsQueues
from dynacron.ports.faults import NO_FAULTS, Faults
from dynacron.services.outcomes import Outcome
from dynacron.services.work import ExecutionRunner
from tests.integration.api_client import ALICE

QUEUE_ARN = "arn:aws:sqs:us-east-1:123456789012:dispatch"


class VirtualDelayQueue(SqsDispatchQueue):
    """SQS delays run on the wall clock, which a test clock cannot move: this queue
    holds delayed messages back until the *test* clock reaches their time, then
    sends them. It remembers every delay asked for. Safe to share between threads:
    workers may hold messages back while another thread releases them."""

    def __init__(self, client: Any, queue_url: str, clock: SettableClock) -> None:
        super().__init__(client, queue_url)
        self._clock = clock
        self._held_lock = threading.Lock()
        self.delays: list[tuple[Dispatch, float]] = []
        self.held: list[tuple[datetime, Dispatch]] = []

    def send_later(self, dispatch: Dispatch, delay_seconds: float) -> None:
        if delay_seconds <= 0:
            with self._held_lock:
                self.delays.append((dispatch, delay_seconds))
            super().send_later(dispatch, 0)
            return
        with self._held_lock:
            self.delays.append((dispatch, delay_seconds))
            self.held.append((self._clock.now() + timedelta(seconds=delay_seconds), dispatch))

    def release_due(self) -> None:
        now = self._clock.now()
        with self._held_lock:
            due = [d for at, d in self.held if at <= now]
            self.held[:] = [(at, d) for at, d in self.held if at > now]
        for dispatch in due:
            super().send_later(dispatch, 0)


class AtomicClient:
    """In-process moto takes no lock. In DynamoDB two conditional writes racing from
    two threads can both succeed, which DynamoDB never allows; in SQS a receive
    racing a send can fail ("set changed size during iteration"). One call at a
    time per service here, as ``local.aws.AtomicDynamoDB`` does for the embedded
    server's DynamoDB."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._client, name)
        if name.startswith("_") or not callable(attribute):
            return attribute

        def call(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                return attribute(*args, **kwargs)

        return call


class WatchedRunner:
    """A worker's runner that notes what each record raised before the batch
    processor turns it into a batch item failure, so that the pipeline can tell
    an injected failure from a bug."""

    def __init__(self, runner: ExecutionRunner) -> None:
        self._runner = runner
        self.raised: list[Exception] = []

    def run(self, dispatch: Dispatch, invocation: Any = None) -> Outcome:
        try:
            return self._runner.run(dispatch, invocation)
        except Exception as error:
            self.raised.append(error)
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self._runner, name)


class Pipeline:
    def __init__(
        self,
        aws: tuple[Any, Any],
        settings: Settings,
        clock: SettableClock,
        handlers: HandlerRegistry | None = None,
    ) -> None:
        self.dynamodb, self.sqs = AtomicClient(aws[0]), AtomicClient(aws[1])
        self.settings = settings
        self.clock = clock
        self.handlers = handlers
        self.metrics = MetricTotals()
        self.queue = VirtualDelayQueue(self.sqs, settings.dispatch_queue_url, clock)
        self.crashes = 0
        self.record_failures = 0  # SQS records a worker reported back as failed
        self.injected_errors = 0  # throttling a chaotic component was asked to inject
        # Worker invocations that raised (the whole batch went back): Powertools raises
        # when every record of a batch failed. A test that injects no failure expects none.
        # Components whose DynamoDB calls the test asked to throttle.
        self._throttled: list[Dynacron] = []
        self.app = self.component()

    def component(
        self, *, faults: Faults = NO_FAULTS, chaos: ChaosSettings | None = None
    ) -> Dynacron:
        """One more tick/worker/reaper "process" sharing the store and the queues."""
        dynamodb, sqs = self.dynamodb, self.sqs
        queue = self.queue
        if chaos is not None:
            dynamodb, sqs = chaotic_clients(dynamodb, sqs, chaos)
            queue = VirtualDelayQueue(sqs, self.settings.dispatch_queue_url, self.clock)
            queue.delays, queue.held = self.queue.delays, self.queue.held
            queue._held_lock = self.queue._held_lock
        app = Dynacron(
            self.settings,
            dynamodb=dynamodb,
            sqs=sqs,
            clock=self.clock,
            handlers=self.handlers,
            emit_metrics=self.metrics,
            faults=faults,
            dispatch_queue=queue,
        )
        if chaos is not None and chaos.throttle_rate > 0:
            self._throttled.append(app)
        return app

    def _injected(self, app: Dynacron, error: BaseException | None) -> bool:
        """Whether ``error`` is one the test asked for: throttling, from a component
        built to throttle (moto itself never throttles), or an endpoint that cannot
        be reached (in-process moto always can: a test pointed a component at one).
        Powertools' idempotency wraps what the store raised, and the AWS adapters
        raise botocore's errors as the ports' ``StoreUnavailable``: the cause counts."""
        while (
            isinstance(error, IdempotencyPersistenceLayerError | AwsUnreachable) and error.__cause__
        ):
            error = error.__cause__
        if isinstance(error, EndpointConnectionError):
            return True
        return (
            any(app is throttled for throttled in self._throttled)
            and isinstance(error, ClientError)
            and error.response.get("Error", {}).get("Code") == THROTTLED
        )

    def _raise_unless_injected(self, app: Dynacron, raised: list[BaseException | None]) -> None:
        for error in raised:
            if not self._injected(app, error):
                raise AssertionError(f"a worker's record raised {error!r}") from error
        self.injected_errors += len(raised)

    @staticmethod
    def _watched(app: Dynacron) -> WatchedRunner:
        if not isinstance(app.runner, WatchedRunner):
            app.runner = WatchedRunner(app.runner)  # type: ignore[assignment]
        return app.runner

    def register(self, **fields: Any) -> str:
        return self.app.task_service.register(ALICE, TaskCreate(**fields).to_spec()).task_id

    def tick(self, app: Dynacron | None = None) -> int:
        """One tick of every shard; a tick failed by an injected fault is left for
        the next, as deployed. Any other exception is raised."""
        app = app or self.app
        try:
            return sum(r.claimed for r in app.ticker.tick())
        except InjectedCrash:
            self.crashes += 1
        except Exception as error:
            if not self._injected(app, error):
                raise
            self.injected_errors += 1
        return 0

    def work(self, app: Dynacron | None = None, *, batches: int = 1000, sqs: Any = None) -> int:
        """Receive and run batches until the queue is empty; returns messages received."""
        app = app or self.app
        sqs = sqs or self.sqs
        runner = self._watched(app)
        received = 0
        for _ in range(batches):
            self.queue.release_due()
            messages = sqs.receive_message(
                QueueUrl=self.settings.dispatch_queue_url, MaxNumberOfMessages=10
            ).get("Messages", [])
            if not messages:
                break
            received += len(messages)
            context = LocalContext("test-worker", timeout_seconds=60)
            runner.raised.clear()
            try:
                result = app.worker(sqs_event(messages, QUEUE_ARN), context)
            except InjectedCrash:
                self.crashes += 1
                self._visible_again(messages)
                break
            except BatchProcessingError as every_record_failed:
                self._raise_unless_injected(
                    app, [raised for _, raised, _ in every_record_failed.child_exceptions]
                )
                self.record_failures += len(messages)
                self._visible_again(messages)
                continue
            self._raise_unless_injected(app, list(runner.raised))
            failed = {f["itemIdentifier"] for f in result.get("batchItemFailures", [])}
            self.record_failures += len(failed)
            self._visible_again([m for m in messages if m["MessageId"] in failed])
            for message in messages:
                if message["MessageId"] not in failed:
                    # A duplicate may have been deleted through another receipt already.
                    with contextlib.suppress(Exception):
                        self.sqs.delete_message(
                            QueueUrl=self.settings.dispatch_queue_url,
                            ReceiptHandle=message["ReceiptHandle"],
                        )
        return received

    def reap(self, app: Dynacron | None = None) -> dict[str, Any]:
        """One reaper run; as ``tick``, only an injected fault is absorbed."""
        app = app or self.app
        try:
            return app.reaper({}, LocalContext("test-reaper"))
        except InjectedCrash:
            self.crashes += 1
        except Exception as error:
            if not self._injected(app, error):
                raise
            self.injected_errors += 1
        return {}

    def settle(self, execution_ids: Iterable[str], *, rounds: int = 40) -> list[Execution]:
        """Run healthy components, moving the clock past leases, until every execution
        is final (or ``rounds`` run out); returns them. The rounds span twice the
        handler timeout of wall time: a crashed call's in-progress record expires
        on the wall clock, a handler timeout after it began."""
        ids = list(execution_ids)
        pause = max(0.1, 2 * self.settings.http_timeout_seconds / rounds)
        lease = self.settings.lease_terms
        for _ in range(rounds):
            self.tick()
            self.work()
            self.settle_undelivered()
            executions = [self.execution(i) for i in ids]
            if all(
                e is not None and e.status.is_final and e.lease_token is None for e in executions
            ):
                return [e for e in executions if e is not None]
            self.clock.advance(lease.running + lease.clock_skew + timedelta(seconds=1))
            self.reap()
            time.sleep(pause)  # idempotency records expire on the wall clock
        raise AssertionError(f"not settled: {[self.execution(i) for i in ids]}")

    def settle_undelivered(self) -> int:
        """What the deployed undelivered function does: settle the messages SQS moved
        to the undelivered queue after ``maxReceiveCount`` receives (one that guarded
        a running attempt hands it to the reaper). Returns how many it received."""
        url = undelivered_queue_url(self.sqs)
        return settle_undelivered(self.app, SqsQueues(self.sqs, {UNDELIVERED_QUEUE.suffix: url}))

    def execution(self, execution_id: str) -> Execution | None:
        return self.app.executions.get(execution_id)

    def _visible_again(self, messages: list[dict[str, Any]]) -> None:
        for message in messages:
            # A message already deleted was processed by someone else.
            with contextlib.suppress(Exception):
                self.sqs.change_message_visibility(
                    QueueUrl=self.settings.dispatch_queue_url,
                    ReceiptHandle=message["ReceiptHandle"],
                    VisibilityTimeout=0,
                )
