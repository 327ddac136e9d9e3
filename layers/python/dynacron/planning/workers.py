"""The worker's event source for a rate of fires: its batches, and how many
invocations at once carry the rate (``capacity_model.WorkerModel`` says what one
fire costs an invocation).

An SQS event source mapping runs at most 1,000 invocations at once (its maximum
concurrency is 2 to 1,000: AWS Lambda Developer Guide, "Configuring scaling
behavior for SQS event source mappings"), so with one handler call at a time a
worker could carry no more than 1,000 / (handler seconds + overhead) fires a
second: 4,000 of 0.2 s handlers. With its calls overlapping, one invocation
carries ``concurrent_calls`` at once: at 32, one mapping carries 10,000 fires a
second of handlers answering in 2 s (801 invocations, with headroom).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dynacron.planning.capacity_model import (
    MEASURED,
    UNWINDOWED_BATCH,
    WORKER_CALLS_IN_FLIGHT_PLACEHOLDER,
    Measured,
    WorkerModel,
)

# The limits of an SQS event source mapping's maximum concurrency.
MAX_WORKER_CONCURRENCY = 1000
MIN_WORKER_CONCURRENCY = 2
WORKER_HEADROOM = 1.25


@dataclass(frozen=True)
class WorkerSizing:
    """The worker's event source for a rate: its batches and how many invocations at once."""

    model: WorkerModel
    handler_seconds: float
    # Invocations at once the rate needs, with WORKER_HEADROOM, all mappings together.
    invocations: int

    @classmethod
    def of(
        cls, model: WorkerModel, fires_per_second: float, handler_seconds: float
    ) -> WorkerSizing:
        """``model`` sized for the rate, with WORKER_HEADROOM."""
        busy = fires_per_second * model.seconds_per_fire(handler_seconds)
        return cls(model, handler_seconds, math.ceil(busy * WORKER_HEADROOM))

    @property
    def seconds_per_fire(self) -> float:
        return self.model.seconds_per_fire(self.handler_seconds)

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
        model = self.model
        held = model.batching_window_seconds + model.invocation_seconds(self.handler_seconds)
        return fires_per_second * held


def size_workers(
    fires_per_second: float,
    handler_seconds: float,
    measured: Measured = MEASURED,
    *,
    calls_in_flight: int = WORKER_CALLS_IN_FLIGHT_PLACEHOLDER,
) -> WorkerSizing:
    """The worker's batches and invocations for ``fires_per_second`` of handlers
    answering in ``handler_seconds``, with ``calls_in_flight`` calls at once an invocation.

    Batches of 10 with no window while one mapping's 1,000 invocations carry the
    rate (a window adds to every fire's lateness when the rate is low); else full
    batches of ``calls_in_flight``, gathered for a second, which take the fewest
    invocations; beyond 1,000 even so, ``dispatch_queues`` says how many mappings.
    """
    choices = (
        WorkerModel(calls_in_flight, UNWINDOWED_BATCH),
        WorkerModel(calls_in_flight, calls_in_flight, measured.worker_gb_seconds_per_fire),
    )
    sizings = [WorkerSizing.of(model, fires_per_second, handler_seconds) for model in choices]
    return next((s for s in sizings if s.invocations <= MAX_WORKER_CONCURRENCY), sizings[-1])
