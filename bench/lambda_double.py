"""Lambda as the scale benchmark simulates it: functions, their execution environments
and concurrency, asynchronous invocations, and the SQS event source mapping.

The limits are AWS's defaults (``bench/aws_limits.py`` cites them): 1,000 concurrent
executions per account, a function's reserved concurrency carved out of them, each
function adding at most 1,000 environments per 10 seconds (refilled continuously),
asynchronous events retried from 1 s to 5 min while no concurrency is free until
their maximum age, and an event source mapping that starts 5 pollers and adds 300 a
minute while messages wait, up to its maximum concurrency. An environment, once
started, is reused by later invocations (warm); each has its own ``Dynacron``,
built as a Lambda process builds it, with its own clients. Billing: each
invocation's duration (virtual) times its memory, rounded up to the millisecond.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench.aws_double import AwsModel, Queue
from bench.aws_limits import (
    ACCOUNT_CONCURRENCY,
    ASYNC_RETRY_FIRST_SECONDS,
    ASYNC_RETRY_MAX_SECONDS,
    ESM_BATCHES_ADDED_PER_MINUTE,
    ESM_INITIAL_BATCHES,
    ESM_MAX_BATCHES,
    LONG_POLL_SECONDS,
    SCALING_ENVIRONMENTS,
    SCALING_PERIOD_SECONDS,
    Latency,
)
from bench.simulation import Invocation, Outcome, Simulation
from dynacron.local.runtime import sqs_event
from dynacron.planning.capacity_model import cpu_share

Handler = Callable[[Any, dict[str, Any], Any], dict[str, Any]]


@dataclass(frozen=True)
class FunctionSpec:
    """A function as the template deploys it."""

    name: str
    memory_mb: int
    timeout_seconds: float
    handler: Handler
    reserved: int | None = None
    # Asynchronous events older than this are dropped (the template's max_event_age).
    max_event_age_seconds: float = 60.0


@dataclass
class FunctionState:
    spec: FunctionSpec
    idle: list[Any] = field(default_factory=list)
    busy: int = 0
    peak: int = 0
    environments: int = 0
    scaling_tokens: float = 0.0
    scaling_at: float = 0.0
    invocations: int = 0
    gb_seconds: float = 0.0
    throttles: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    async_dropped: int = 0


class LambdaContext:
    """What the real handlers read of a Lambda context, on virtual time."""

    def __init__(self, simulation: Simulation, spec: FunctionSpec, request_id: str) -> None:
        self._simulation = simulation
        self._deadline = simulation.local_now() + spec.timeout_seconds
        self.aws_request_id = request_id
        self.function_name = spec.name
        self.memory_limit_in_mb = spec.memory_mb
        self.invoked_function_arn = f"arn:aws:lambda:us-east-1:000000000000:function:{spec.name}"
        self.function_version = "$LATEST"

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - self._simulation.local_now()) * 1000))


class LambdaService:
    """The account's functions: start invocations within the limits, bill them."""

    def __init__(
        self,
        simulation: Simulation,
        functions: list[FunctionSpec],
        make_app: Callable[[FunctionSpec], Any],
        rng: random.Random,
        async_delay: Latency,
        account_concurrency: int = ACCOUNT_CONCURRENCY,
        scaling_environments: float = SCALING_ENVIRONMENTS,
    ) -> None:
        self.simulation = simulation
        self._scaling = scaling_environments
        self.functions = {
            spec.name: FunctionState(spec, scaling_tokens=scaling_environments)
            for spec in functions
        }
        self._make_app = make_app
        self._rng = rng
        self._async_delay = async_delay
        reserved = sum(spec.reserved or 0 for spec in functions)
        self.unreserved = account_concurrency - reserved
        self.unreserved_busy = 0
        self.account_peak = 0
        self._requests = 0

    def can_start(self, name: str) -> bool:
        state = self.functions[name]
        if state.spec.reserved is not None:
            room = state.busy < state.spec.reserved
        else:
            room = self.unreserved_busy < self.unreserved
        return room and (bool(state.idle) or self._scaling_tokens(state) >= 1)

    def _scaling_tokens(self, state: FunctionState) -> float:
        now = self.simulation.now
        rate = self._scaling / SCALING_PERIOD_SECONDS
        state.scaling_tokens = min(
            self._scaling, state.scaling_tokens + (now - state.scaling_at) * rate
        )
        state.scaling_at = now
        return state.scaling_tokens

    def invoke(
        self, name: str, event: dict[str, Any], done: Callable[[Outcome], None] | None = None
    ) -> bool:
        """Start an invocation now, if the limits allow it; False: throttled (429)."""
        state = self.functions[name]
        if not self.can_start(name):
            state.throttles += 1
            return False
        if state.idle:
            app = state.idle.pop()
        else:
            state.scaling_tokens -= 1
            state.environments += 1
            app = self._make_app(state.spec)
        state.busy += 1
        state.peak = max(state.peak, state.busy)
        if state.spec.reserved is None:
            self.unreserved_busy += 1
        self.account_peak = max(
            self.account_peak,
            self.unreserved_busy + sum(s.busy for s in self.functions.values() if s.spec.reserved),
        )
        state.invocations += 1
        self._requests += 1
        spec = state.spec
        simulation = self.simulation
        invocation = Invocation(slowdown=1 / cpu_share(spec.memory_mb))
        started = simulation.now
        context = LambdaContext(simulation, spec, f"{name}-{self._requests}")

        def run() -> dict[str, Any]:
            return spec.handler(app, event, context)

        def ended(outcome: Outcome) -> None:
            duration = math.ceil((simulation.local_now() - started) * 1000) / 1000
            state.gb_seconds += duration * spec.memory_mb / 1024
            state.busy -= 1
            if spec.reserved is None:
                self.unreserved_busy -= 1
            state.idle.append(app)
            if outcome[1] is not None:
                kind = type(outcome[1]).__name__
                state.errors[kind] = state.errors.get(kind, 0) + 1
            if done is not None:
                simulation.after(0, lambda: done(outcome))

        simulation.spawn(invocation, run).done.append(ended)
        return True

    def invoke_async(self, name: str, event: dict[str, Any]) -> None:
        """Queue an event (Invoke with InvocationType Event): started when concurrency
        allows, retried on throttling from 1 s on, doubling, until its maximum age."""
        queued_at = self.simulation.now
        state = self.functions[name]

        def attempt(backoff: float) -> None:
            if self.invoke(name, event):
                return
            if self.simulation.now + backoff - queued_at > state.spec.max_event_age_seconds:
                state.async_dropped += 1
                return
            self.simulation.after(
                backoff, lambda: attempt(min(ASYNC_RETRY_MAX_SECONDS, backoff * 2))
            )

        delay = self._async_delay.draw(self._rng)
        self.simulation.at(
            self.simulation.local_now() + delay, lambda: attempt(ASYNC_RETRY_FIRST_SECONDS)
        )


class SqsEventSource:
    """The event source mapping from the dispatch queue to the worker: pollers that
    each hold one long poll at a time (ReceiveMessage, up to ``batch_size`` messages,
    WaitTimeSeconds 20), invoke the worker with what it returned, and delete what it
    did not report as failed; failed records come back after the queue's visibility
    timeout.

    A long poll as SQS answers it ("Amazon SQS short and long polling"; ReceiveMessage,
    Amazon SQS API Reference): when messages are visible it returns at once with what
    there is, up to its maximum; otherwise it waits, and a message that becomes
    visible (sent, or its visibility timeout run out) is answered to one waiting poll,
    the one that waited longest, which takes what is visible then, up to its maximum
    (a batch of ten sent in one call wakes one poll, not ten); what it leaves wakes
    the next. A poll that nothing answers returns empty after its 20 seconds, and its
    poller polls again. Each poll is one billed request, counted when it returns
    (``receives``, of which ``empty_receives`` returned nothing).
    """

    def __init__(
        self,
        lambdas: LambdaService,
        model: AwsModel,
        queue_url: str,
        function: str,
        batch_size: int,
        max_concurrency: int,
        latency: Latency,
        rng: random.Random,
        share: float = 1.0,
    ) -> None:
        self._lambdas = lambdas
        self._simulation = lambdas.simulation
        self._model = model
        self._url = queue_url
        self._queue: Queue = model.queues[queue_url]
        self._function = function
        self._batch_size = batch_size
        # ``share``: this process's share of the mapping's own limits (its 1,000
        # batches at most, its 5 first and its 300 a minute) when split.
        self._max = min(int(ESM_MAX_BATCHES * share), max_concurrency)
        self._first = max(1, round(ESM_INITIAL_BATCHES * share))
        self._added_per_second = max(1, round(ESM_BATCHES_ADDED_PER_MINUTE * share / 60))
        self._latency = latency
        self._rng = rng
        self.pollers = 0
        self.peak_pollers = 0
        self.receives = 0
        self.empty_receives = 0
        self.deletes = 0
        # Waiting long polls, longest waiting first: poller -> the number of its poll
        # (a timeout of an earlier poll of the same poller finds another number).
        self._waiting: dict[int, int] = {}
        self._polls = 0
        self._wake_pending = False
        self._watching_at: float | None = None
        self._queue.on_visible = self._messages_arrived
        self._arn = f"arn:aws:sqs:us-east-1:000000000000:{queue_url.rsplit('/', 1)[-1]}"

    def start(self, warm: bool = False) -> None:
        """Start polling: with 5 pollers, or (``warm``) with as many as the mapping
        allows, as after minutes at the rate."""
        for _ in range(self._max if warm else self._first):
            self._add_poller()
        self._simulation.after(1.0, self._scale)

    def _add_poller(self) -> None:
        self.pollers += 1
        self.peak_pollers = max(self.peak_pollers, self.pollers)
        poller = self.pollers
        self._simulation.after(0, lambda: self._poll(poller))

    def _scale(self) -> None:
        """Each second, while messages wait and no poll does, up to 5 more pollers
        (300 a minute)."""
        visible, _, _ = self._queue.depth()
        if visible and not self._waiting:
            for _ in range(min(self._added_per_second, self._max - self.pollers)):
                self._add_poller()
        self._simulation.after(1.0, self._scale)

    def _poll(self, poller: int) -> None:
        """Start a long poll: answered at once if messages are visible, else it waits."""
        if not self._lambdas.can_start(self._function):
            # The worker has no concurrency free: the poller backs off.
            self._simulation.after(1.0, lambda: self._poll(poller))
            return
        if self._visible():
            self._receive(poller)
        else:
            self._wait(poller)

    def _visible(self) -> bool:
        self._queue.release()
        return bool(self._queue.visible)

    def _receive(self, poller: int) -> None:
        """The poll returns: one ReceiveMessage request, with what is visible now."""
        answer = self._model.answer(
            "sqs.ReceiveMessage",
            {
                "QueueUrl": self._url,
                "MaxNumberOfMessages": self._batch_size,
                "WaitTimeSeconds": int(LONG_POLL_SECONDS),
            },
        )
        self.receives += 1
        messages = answer.get("Messages", [])
        if self._visible():
            self._messages_arrived()  # what it left answers the next waiting poll
        if not messages:
            # Nothing to take after all (in-flight quota, or redriven): poll again.
            self.empty_receives += 1
            self._wait(poller)
            return
        latency = self._latency.draw(self._rng)
        self._simulation.after(latency, lambda: self._invoke(poller, messages))

    def _wait(self, poller: int) -> None:
        """Wait for a message for up to 20 seconds; then the poll returns empty."""
        self._polls += 1
        number = self._waiting[poller] = self._polls
        self._watch_hidden()

        def timeout() -> None:
            if self._waiting.get(poller) == number:
                del self._waiting[poller]
                if self._lambdas.can_start(self._function):
                    self._receive(poller)
                else:
                    self._simulation.after(1.0, lambda: self._poll(poller))

        self._simulation.after(LONG_POLL_SECONDS, timeout)

    def _messages_arrived(self) -> None:
        """A message became visible at once: one waiting poll is answered (once for
        all the messages made visible at this instant, as by one SendMessageBatch)."""
        if not self._wake_pending:
            self._wake_pending = True
            self._simulation.after(0, self._wake_next)

    def _wake_next(self) -> None:
        self._wake_pending = False
        if not (self._waiting and self._visible()):
            return
        if not self._lambdas.can_start(self._function):
            # No concurrency for the batch a poll would take: the pollers back off
            # (a second, as a poller does) rather than hold messages they cannot pass on.
            self._wake_pending = True
            self._simulation.after(1.0, self._wake_next)
            return
        poller = next(iter(self._waiting))
        del self._waiting[poller]
        self._receive(poller)

    def _watch_hidden(self) -> None:
        """While polls wait, wake one when the next hidden message shows (its delay or
        its visibility timeout run out): the queue tells of no such change itself."""
        showing = self._queue.next_showing()
        if showing is None or (self._watching_at is not None and self._watching_at <= showing):
            return
        self._watching_at = showing

        def shown() -> None:
            if self._watching_at == showing:
                self._watching_at = None
            self._wake_next()
            if self._waiting:
                self._watch_hidden()

        self._simulation.after(max(0.0, showing - self._model.now()), shown)

    def _invoke(self, poller: int, messages: list[dict[str, Any]]) -> None:
        def done(outcome: Outcome) -> None:
            value, error = outcome
            if error is not None:
                failed = {m["MessageId"] for m in messages}
            else:
                failed = {f["itemIdentifier"] for f in value.get("batchItemFailures", [])}
            finished = [m for m in messages if m["MessageId"] not in failed]
            if finished:
                self.deletes += 1
                self._model.answer(
                    "sqs.DeleteMessageBatch",
                    {
                        "QueueUrl": self._url,
                        "Entries": [
                            {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                            for i, m in enumerate(finished)
                        ],
                    },
                )
            self._poll(poller)

        if not self._lambdas.invoke(self._function, sqs_event(messages, self._arn), done):
            # Throttled after all: the batch stays in flight until its visibility
            # timeout; the poller backs off.
            self._simulation.after(1.0, lambda: self._poll(poller))
