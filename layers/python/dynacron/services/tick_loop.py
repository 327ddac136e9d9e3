"""The deployed tick: each minute's invocation of a shard first waits as its standby,
reading the lease each second, while the one before it holds the shard; it takes
the shard when the holder hands it over at the holder's deadline, or as soon as the
holder's short lease has run out (the holder died). As holder it ticks the shard
every tick interval (half a second, decision 0042) and renews the lease each
second, until its own deadline, when it hands over to its standby in turn. Local
mode ticks every shard itself instead.

Why, in docs/decisions/: 0005-tick-design.md (the loop and the handover),
0036-tick-failover-in-seconds.md (the standby, the short lease, the lateness bound),
0042-half-second-ticks.md (the interval), 0051-the-rest-of-a-large-find-is-handed-out.md
(a long tick is followed at once), 0021-setting-aside-poison-work.md (a failed
tick backs off; a tick is bounded by the lease) and
0024-monitoring-without-blind-spots.md (the heartbeat).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import Enum

from dynacron.definitions.tick_timing import LoopTiming
from dynacron.domain.clock import Clock
from dynacron.domain.coordination import transitions
from dynacron.ports import ShardLeases
from dynacron.ports.metrics import NO_METRICS, Metrics
from dynacron.services.tick import Ticker

logger = logging.getLogger("dynacron")

# The share of a tick interval by which a step may come early: a renewal still
# renews, a tick still counts as its instant's.
RENEWAL_SLACK = 0.1


class LoopEnd(Enum):
    """Why a loop ended: at its deadline it handed the shard to its standby, or it
    reached its deadline with nobody to hand over to (released, or never held), or
    the lease was lost (taken over after it ran out)."""

    HANDED_OVER = "handed_over"
    DEADLINE = "deadline"
    LOST = "lost"


@dataclass
class TickLoopReport:
    """What one loop did on its shard: ticks, claims, hand-outs, waits, and how it ended."""

    shard: int
    owner: str
    ticks: int = 0
    claimed: int = 0
    # Due tasks handed to claim invocations (decision 0025).
    handed_out: int = 0
    lost_races: int = 0
    waited_seconds: float = 0.0
    # True if the lease was taken from a holder that had stopped renewing it.
    took_over_expired: bool = False
    ended: LoopEnd | None = None
    lateness_seconds: list[float] = field(default_factory=list)
    # Ticks that raised; the loop went on after each.
    failed_ticks: int = 0
    # Ticks that stopped at their lease-bound deadline with work left.
    cut_short: int = 0


class ShardTickLoop:
    """One tick invocation's work on one shard, as a sequence of ``step`` calls."""

    def __init__(
        self,
        *,
        ticker: Ticker,
        leases: ShardLeases,
        clock: Clock,
        shard: int,
        owner: str,
        deadline: datetime,
        timing: LoopTiming | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self._metrics = metrics or NO_METRICS
        self._failures_in_a_row = 0
        self._ticker = ticker
        self._leases = leases
        self._clock = clock
        self._shard = shard
        self._owner = owner
        self._deadline = deadline
        self._timing = timing or LoopTiming()
        self._phase = tick_phase_seconds(shard, self._timing.tick_interval_seconds)
        self._holding = False
        self._renewed_at: datetime | None = None
        self.report = TickLoopReport(shard=shard, owner=owner)

    @property
    def holding(self) -> bool:
        """Whether this loop holds the shard's lease now."""
        return self._holding

    def run(self, sleep: Callable[[float], None]) -> TickLoopReport:
        """Step until the loop ends, sleeping between steps; metrics are flushed
        after every step, so they reach CloudWatch while the loop runs."""
        try:
            while (pause := self.step()) is not None:
                self._metrics.flush()
                sleep(pause)
        finally:
            self._metrics.flush()
        return self.report

    def step(self) -> float | None:
        """Do the next thing: wait for the lease, renew it, or tick.

        Returns how many seconds to wait before the next step, or None once the
        loop has ended (see ``report.ended``). An exception (of a tick, or of a
        lease call) is logged and counted, and the next step comes after a short
        backoff: the loop only ends at its deadline or when the lease is gone.
        """
        try:
            pause = self._step()
        except Exception:
            self._failures_in_a_row += 1
            self.report.failed_ticks += 1
            self._metrics.tick_failed()
            logger.exception(
                "tick failed; backing off",
                extra={"shard": self._shard, "in_a_row": self._failures_in_a_row},
            )
            if self._clock.now() >= self._deadline:
                # Past the deadline nothing is retried (releasing the lease may be
                # what failed): the lease runs out by itself.
                self._holding = False
                self.report.ended = LoopEnd.DEADLINE
                return None
            backoff = self._timing.failure_backoff_seconds * 2.0 ** (self._failures_in_a_row - 1)
            return min(self._timing.max_failure_backoff_seconds, backoff)
        if pause is not None and self._holding:
            self._failures_in_a_row = 0
        return pause

    def _step(self) -> float | None:
        now = self._clock.now()
        if now >= self._deadline:
            self._end_at_deadline(now)
            return None
        if not self._holding:
            if not self._try_to_hold(now):
                pause = self._next_poll(now)
                self.report.waited_seconds += pause
                return pause
        elif self._renewal_due(now):
            # The holder renews whoever waits: it hands over at its deadline only.
            if not self._leases.apply(
                self._shard, transitions.renew_lease(self._owner, self._lease_end(now))
            ):
                # Its lease ran out (it stopped renewing for a while) and a standby
                # took the shard: it stops before ticking again.
                self._holding = False
                self.report.ended = LoopEnd.LOST
                return None
            self._renewed_at = now
        started = self._clock.now()
        tick = self._ticker.tick_shard(self._shard, deadline=self._tick_deadline())
        # What the shard's alarm watches: no heartbeat for minutes, whatever the
        # cause (no invocation, a crash, every tick raising), breaches.
        self._metrics.tick_heartbeat(self._shard)
        self.report.ticks += 1
        self.report.cut_short += tick.cut_short
        self.report.claimed += tick.claimed
        self.report.handed_out += tick.handed_out
        self.report.lost_races += tick.lost_races
        self.report.lateness_seconds += tick.lateness_seconds
        return self._until_next_tick(started)

    def _until_next_tick(self, started: datetime) -> float:
        """Seconds to the shard's next instant after the tick that ``started`` began:
        none if the tick ran past it, so a long tick is followed at once rather than
        an interval later (what fell due meanwhile waits no longer than the tick did).
        A step woken a little early still counts as its instant's."""
        interval = self._timing.tick_interval_seconds
        slack = RENEWAL_SLACK * interval
        begun = started.timestamp() + slack
        next_tick = begun + interval - (begun - self._phase) % interval
        return max(0.0, next_tick - self._clock.now().timestamp())

    def _end_at_deadline(self, now: datetime) -> None:
        """A holder hands the shard to its standby in one write (or releases it if
        none waits); a standby that never held withdraws its request."""
        if self._holding and self._leases.apply(
            self._shard, transitions.hand_over_lease(self._owner, self._lease_end(now))
        ):
            self.report.ended = LoopEnd.HANDED_OVER
        else:
            release(self._leases, self._shard, self._owner)
            self.report.ended = LoopEnd.DEADLINE
        self._holding = False

    def _try_to_hold(self, now: datetime) -> bool:
        """The standby's look at the lease: take it if it is free, expired or handed
        to us; else ask to be next, unless another standby already is."""
        lease = self._leases.get(self._shard)
        if lease is None or lease.is_free_for(self._owner, now):
            take = transitions.acquire_lease(self._owner, now, self._lease_end(now))
            if self._leases.apply(self._shard, take):
                self._holding = True
                self._renewed_at = now
                if lease is not None and lease.owner != self._owner:
                    self.report.took_over_expired = True
                return True
        elif lease.successor is None:
            self._leases.apply(self._shard, transitions.request_handover(self._owner))
        return False

    def _next_poll(self, now: datetime) -> float:
        """Seconds to the standby's next read, ``poll_phase_seconds`` into a second."""
        poll, phase = self._timing.poll_seconds, self._timing.poll_phase_seconds
        return poll - (now.timestamp() - phase) % poll

    def _tick_deadline(self) -> datetime:
        """No page starts after this: the lease, as last renewed, outlasts the tick."""
        assert self._renewed_at is not None
        lease_bound = self._renewed_at + timedelta(
            seconds=self._timing.lease_seconds - self._timing.tick_margin_seconds
        )
        return min(lease_bound, self._deadline)

    def _renewal_due(self, now: datetime) -> bool:
        assert self._renewed_at is not None
        # A step woken a little early still renews: a renewal every second is one
        # before every other half-second tick, not one every third.
        slack = RENEWAL_SLACK * self._timing.tick_interval_seconds
        return now - self._renewed_at >= timedelta(seconds=self._timing.renew_every_seconds - slack)

    def _lease_end(self, now: datetime) -> datetime:
        return now + timedelta(seconds=self._timing.lease_seconds)


def tick_phase_seconds(shard: int, interval_seconds: float) -> float:
    """When in each interval ``shard`` ticks, after the whole second: the shards'
    ticks spread over the interval (by multiples of the golden ratio, so that any
    number of shards fall apart), not all at once, so their hand-outs reach the claim
    function a few at a time rather than as one burst past its reserved concurrency.
    Shard 0 ticks on the second."""
    return (shard * _GOLDEN_RATIO_FRACTION) % 1.0 * interval_seconds


_GOLDEN_RATIO_FRACTION = 0.6180339887498949


def release(leases: ShardLeases, shard: int, owner: str) -> bool:
    """Give the shard's lease up, or else withdraw ``owner``'s request for it (two
    transitions: a holder's record goes, a waiter's request is forgotten). True only
    if ``owner`` held it."""
    if leases.apply(shard, transitions.release_lease(owner)):
        return True
    leases.apply(shard, transitions.withdraw_handover(owner))
    return False
