"""The deployed tick's clockwork: the schedule, the tick function's life, the shard
lease and its reads, in one place. ``services.tick_loop`` runs by it, the CDK app
(``infra/constructs/tick.py``) takes the tick function's timeout and schedule from
it, and ``dynacron plan`` and the cost benchmarks bill by it, so none can drift from
the others (decision 0036).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LoopTiming:
    """The loop's clockwork: the schedule, ticks, the shard lease, polls and backoff,
    in seconds. The one source of these timings: the CDK construct takes the tick
    function's timeout and schedule from here (``invocation_seconds``,
    ``schedule_period_seconds``), the entry point its end margin, and ``dynacron
    plan`` and the cost benchmarks its billed seconds and renewals (decision 0036)."""

    # A due occurrence waits for the next tick of its shard: half a second at most,
    # which keeps lateness at 10,000 fires/s under a second at p99 (decision 0042).
    # Renewals, the lease and the standby's polls keep their own periods in seconds.
    tick_interval_seconds: float = 0.5
    # EventBridge starts one invocation per shard this often (its finest rate).
    schedule_period_seconds: float = 60.0
    # An invocation waits as the standby while the one before it holds the shard,
    # and holds it until its own deadline, when it hands it to its standby. The
    # invocation after that arrives this long before the hand-over, so that a
    # holder always has a standby watching its lease (EventBridge's own lateness
    # must stay under this).
    standby_overlap_seconds: float = 15.0
    # The loop ends this long before Lambda's timeout, to hand over cleanly.
    end_margin_seconds: float = 15.0
    # A holder that stops renewing loses the shard this long after its last renewal;
    # its standby sees it within ``poll_seconds`` and ticks at once. It must outlast
    # a renewal interval, the longest tick and the margin (tests/infra/test_config.py).
    lease_seconds: float = 7.0
    # A renewal is one conditional write, before every other tick (one a second); a
    # tick is bounded by the lease as last renewed (``tick_margin_seconds``), so a
    # long tick is cut short, renewed and resumed at the next step rather than
    # outliving its lease.
    renew_every_seconds: float = 1.0
    # How often a standby reads the lease (one strongly consistent GetItem).
    poll_seconds: float = 1.0
    # A standby reads this far into each second: between the holder's ticks (shard 0
    # ticks at the top of each half second), so a hand-over is picked up within a
    # second.
    poll_phase_seconds: float = 0.5
    # A tick starts no page (and no round of claims) later than this before its
    # lease ends: one page must fit (``tick_page_size`` claims, 2.9 s at 128 MB
    # when the tick claims a page itself because its hand-out failed).
    tick_margin_seconds: float = 3.0
    # After a tick that raised, wait this long, doubled at each failure in a row.
    failure_backoff_seconds: float = 1.0
    max_failure_backoff_seconds: float = 8.0

    @property
    def invocation_seconds(self) -> float:
        """The tick function's timeout: standby for one period, holder for the next,
        the overlap and the end margin."""
        return (
            2 * self.schedule_period_seconds
            + self.standby_overlap_seconds
            + self.end_margin_seconds
        )

    @property
    def loop_seconds(self) -> float:
        """How long one invocation loops (standby, then holder) when it runs its course."""
        return self.invocation_seconds - self.end_margin_seconds

    @property
    def failover_seconds(self) -> float:
        """The longest a shard goes unticked after its holder died: the lease runs
        out, and the standby's next read sees it (it then ticks in the same step)."""
        return self.lease_seconds + self.poll_seconds
