"""Steps of the wall clock: seen against a monotonic clock, counted, and allowed for.

A laptop steps its clock on resume and NTP sync, a VM on snapshot restore. Each
observation compares how far the wall clock moved since the last one with how far
a monotonic clock did; a difference beyond ``threshold`` is a step. The tick observes
once per tick (and rewinds its cursor after a step back); the reaper and a worker
judging a lease observe too, and measure leases as if a forward step had not
happened until every live lease was renewed since. Why, in
docs/decisions/0037-clock-steps.md.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta

from dynacron.domain.clock import Clock
from dynacron.domain.executions.execution import LeaseTerms
from dynacron.ports.metrics import NO_METRICS, Metrics

logger = logging.getLogger("dynacron")

# Two observations whose clocks disagree by more than this saw a step. Both are read
# one after the other, so a loaded machine's scheduling delay is far below it.
STEP_THRESHOLD = timedelta(seconds=2)


def monotonic_of(clock: Clock) -> Callable[[], float] | None:
    """The clock's own monotonic source, if it has one (the machine's clock and the
    tests' settable clock do); without one, steps are not looked for."""
    monotonic = getattr(clock, "monotonic", None)
    return monotonic if callable(monotonic) else None


class ClockSteps:
    """Watches the wall clock for steps; safe to share between threads.

    ``hold`` is how long after a forward step leases are still measured as if it had
    not happened: the longest a live holder may go between renewals (the longest
    lease), after which every live lease was renewed on the stepped clock.
    """

    def __init__(
        self,
        clock: Clock,
        monotonic: Callable[[], float] | None,
        *,
        hold: timedelta,
        metrics: Metrics | None = None,
        threshold: timedelta = STEP_THRESHOLD,
    ) -> None:
        self._clock = clock
        self._monotonic = monotonic
        self._hold = hold.total_seconds()
        self._metrics = metrics or NO_METRICS
        self._threshold = threshold.total_seconds()
        self._lock = threading.Lock()
        self._last: tuple[float, float] | None = None
        # Forward steps still allowed for: (monotonic time seen, seconds stepped).
        self._forward: list[tuple[float, float]] = []
        # Seconds of each step back seen so far, in order: the tick handles each once
        # for each shard (``backward_since``).
        self._backward: list[float] = []
        self.steps = 0
        self.observe()

    def observe(self) -> float:
        """Seconds the wall clock stepped since the last observation (forward above
        zero, back below), 0.0 if it did not; a step is counted and logged."""
        if self._monotonic is None:
            return 0.0
        with self._lock:
            wall = self._clock.now().timestamp()
            steady = self._monotonic()
            last, self._last = self._last, (wall, steady)
            if last is None:
                return 0.0
            stepped = (wall - last[0]) - (steady - last[1])
            if abs(stepped) <= self._threshold:
                return 0.0
            self.steps += 1
            if stepped > 0:
                self._forward.append((steady, stepped))
            else:
                self._backward.append(-stepped)
        logger.warning(
            "the wall clock stepped %s by %.1f s",
            "forward" if stepped > 0 else "back",
            abs(stepped),
            extra={"clock_step_seconds": stepped},
        )
        self._metrics.clock_stepped()
        return stepped

    def backward_since(self, seen: int) -> tuple[int, timedelta]:
        """Steps back seen so far, and how far the clock stepped back in those after
        the first ``seen`` of them."""
        with self._lock:
            return len(self._backward), timedelta(seconds=sum(self._backward[seen:]))

    def forward_shift(self) -> timedelta:
        """How far the wall clock stepped forward within the last ``hold``."""
        self.observe()
        if self._monotonic is None:
            return timedelta(0)
        with self._lock:
            steady = self._monotonic()
            self._forward = [(at, s) for at, s in self._forward if steady - at < self._hold]
            return timedelta(seconds=sum(s for _, s in self._forward))

    def abandoned_before(self, terms: LeaseTerms) -> tuple[datetime, datetime]:
        """Now, and the instant before which a lease ended is abandoned: the lease
        terms' cutoff, moved back by a forward step not yet ``hold`` old, so that no
        live lease looks expired because the wall clock jumped over it."""
        shift = self.forward_shift()
        now = self._clock.now()
        return now, terms.abandoned_before(now - shift)


def lease_hold(terms: LeaseTerms) -> timedelta:
    """The longest a live holder may go between renewals, with the skew margin: after
    a forward step, leases are measured as if it had not happened for this long."""
    return max(terms.running, terms.awaiting_callback, terms.pickup_grace) + terms.clock_skew
