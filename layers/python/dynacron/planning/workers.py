"""The worker's event source for a rate of fires: its batches, the calls each
invocation has in flight, and how many invocations at once carry the rate
(``capacity_model.WorkerModel`` says what one fire costs an invocation).

An SQS event source mapping runs at most 1,000 invocations at once (its maximum
concurrency is 2 to 1,000: AWS Lambda Developer Guide, "Configuring scaling
behavior for SQS event source mappings"). An invocation runs its batch's calls at
once (decision 0034) and lasts until the slowest of them answers: with handlers
whose answers spread (lognormal, ``HandlerLatency``), a batch of 10 around a 0.2 s
median waits about 0.45 s, and one of 32 around 2 s about 7 s. A larger batch,
all its calls at once, spreads that tail over more fires, until the batch's CPU
(one core) bounds the invocation instead: the plan takes the smallest batch that
one mapping's invocations carry, so that the fewest messages wait in flight.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dynacron.definitions.resources import WORKER_TIMEOUT_SECONDS
from dynacron.planning.capacity_model import (
    MEASURED,
    UNWINDOWED_BATCH,
    WORKER_CALLS_IN_FLIGHT,
    HandlerLatency,
    Measured,
    WorkerModel,
)

# The limits of an SQS event source mapping's maximum concurrency.
MAX_WORKER_CONCURRENCY = 1000
MIN_WORKER_CONCURRENCY = 2
WORKER_HEADROOM = 1.25
# Full batches, every record's call at once, that the plan may choose beyond
# batches of 10: the measured 32 and larger (``worker_concurrency`` set to match).
FULL_BATCHES = (WORKER_CALLS_IN_FLIGHT, 64, 128, 256, 512)
# An invocation must end well within the worker's timeout (its time budget stops
# records that would not), so a planned batch runs at most half of it.
LONGEST_PLANNED_INVOCATION_SECONDS = WORKER_TIMEOUT_SECONDS / 2


@dataclass(frozen=True)
class WorkerSizing:
    """The worker's event source for a rate: its batches and how many invocations at once."""

    model: WorkerModel
    latency: HandlerLatency
    # Invocations at once the rate needs, with WORKER_HEADROOM, all mappings together.
    invocations: int

    @classmethod
    def of(
        cls, model: WorkerModel, fires_per_second: float, latency: HandlerLatency
    ) -> WorkerSizing:
        """``model`` sized for the rate, with WORKER_HEADROOM."""
        busy = fires_per_second * model.seconds_per_fire(latency)
        return cls(model, latency, math.ceil(busy * WORKER_HEADROOM))

    @property
    def handler_seconds(self) -> float:
        """The handlers' median answer."""
        return self.latency.median

    @property
    def seconds_per_fire(self) -> float:
        return self.model.seconds_per_fire(self.latency)

    @property
    def invocation_seconds(self) -> float:
        return self.model.invocation_seconds(self.latency)

    @property
    def max_concurrency(self) -> int:
        """The one mapping's maximum concurrency (the stack has one dispatch queue)."""
        return max(MIN_WORKER_CONCURRENCY, min(MAX_WORKER_CONCURRENCY, self.invocations))

    @property
    def dispatch_queues(self) -> int:
        """Queues, each with its own mapping, that carry the rate (one is built)."""
        return math.ceil(self.invocations / MAX_WORKER_CONCURRENCY)

    def in_flight_messages(self, fires_per_second: float) -> float:
        """Received and not yet deleted, at once: a batch's messages are in flight
        while the batch is gathered and until its invocation ends."""
        held = self.model.batching_window_seconds + self.invocation_seconds
        return fires_per_second * held


def worker_shapes(
    measured: Measured = MEASURED, *, calls_in_flight: int = WORKER_CALLS_IN_FLIGHT
) -> tuple[WorkerModel, ...]:
    """The batches the plan chooses from, smallest first: 10 with no window, then
    full batches with every record's call at once."""
    figures = measured.worker_gb_seconds_per_fire
    full = tuple(
        WorkerModel(max(calls_in_flight, batch), max(calls_in_flight, batch), figures)
        for batch in FULL_BATCHES
        if batch >= calls_in_flight
    )
    return (WorkerModel(calls_in_flight, UNWINDOWED_BATCH, figures), *full)


def size_workers(
    fires_per_second: float,
    latency: HandlerLatency,
    measured: Measured = MEASURED,
    *,
    calls_in_flight: int = WORKER_CALLS_IN_FLIGHT,
) -> WorkerSizing:
    """The worker's batches and invocations for ``fires_per_second`` of handlers
    answering as ``latency`` says, with at least ``calls_in_flight`` calls at once
    an invocation.

    Batches of 10 with no window while one mapping's 1,000 invocations carry the
    rate (a window adds to every fire's lateness when the rate is low); else the
    smallest full batch, gathered for a second, that carries it within
    LONGEST_PLANNED_INVOCATION_SECONDS; beyond 1,000 even so, the one that needs
    the fewest invocations, and ``dispatch_queues`` says how many mappings.
    """
    shapes = worker_shapes(measured, calls_in_flight=calls_in_flight)
    sizings = [WorkerSizing.of(model, fires_per_second, latency) for model in shapes]
    timely = [
        sizing
        for sizing in sizings
        if sizing.invocation_seconds <= LONGEST_PLANNED_INVOCATION_SECONDS
    ] or sizings[:1]
    fitting = (s for s in timely if s.invocations <= MAX_WORKER_CONCURRENCY)
    return next(fitting, min(timely, key=lambda sizing: sizing.invocations))
