"""When a shard's tick was running: what makes a late occurrence *missed* rather than late.

An occurrence is missed only if no tick of its shard ran while it was due (from
its scheduled time to the misfire grace after it). An occurrence held back while
ticks kept running (dispatch pacing, a backlog) is late, and runs late: the
scheduler's own load never drops anything.

Each tick records that it ran (a heartbeat on the shard's cursor, at most every
``heartbeat`` apart); a tick that finds the last heartbeat more than the grace
old records the gap as an outage. Before the first heartbeat nothing is known,
and every late occurrence counts as missed (the scheduler was not running).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

# Outages a shard remembers; older history is forgotten (see ``ShardHistory.record``).
MAX_OUTAGES = 20
ALWAYS = datetime.max.replace(tzinfo=UTC)


@dataclass(frozen=True)
class Outage:
    """No tick of the shard recorded a heartbeat after ``last_tick`` until ``next_tick``."""

    last_tick: datetime
    next_tick: datetime


@dataclass(frozen=True)
class ShardHistory:
    """The ticks of one shard, as far as they matter for misfires.

    ``ticking_since`` is the first heartbeat remembered: before it, the shard is
    treated as down. None: nothing is known at all (every late occurrence missed).
    """

    ticking_since: datetime | None = None
    last_tick: datetime | None = None
    outages: tuple[Outage, ...] = ()
    # Heartbeats are written at most this far apart, so a tick may have run
    # this long after the last one recorded.
    heartbeat: timedelta = timedelta(0)

    def missed_until(self, became_due: datetime, grace: timedelta) -> datetime | None:
        """None if some tick ran while an occurrence due at ``became_due`` was on time;
        otherwise the end of the downtime it fell into: every occurrence from it up to
        that instant was missed too."""
        if self.ticking_since is None:
            return ALWAYS
        if became_due < self.ticking_since:
            return self.ticking_since
        for outage in self.outages:
            # A tick after ``last_tick + heartbeat`` would have recorded itself; the
            # tick at ``next_tick`` still finds on time what fell due a grace before.
            down_from = outage.last_tick + self.heartbeat
            down_until = outage.next_tick - grace
            if down_from <= became_due < down_until:
                return down_until
        return None

    def record(self, now: datetime, grace: timedelta) -> ShardHistory:
        """The history once a tick at ``now`` is recorded: a gap of more than ``grace``
        since the last heartbeat is an outage. Only the latest ``MAX_OUTAGES`` are
        kept; what came before them is treated as down, as before any heartbeat."""
        if self.last_tick is None or self.ticking_since is None:
            return ShardHistory(ticking_since=now, last_tick=now, heartbeat=self.heartbeat)
        if now <= self.last_tick:
            return self
        outages = self.outages
        if now - self.last_tick > grace:
            outages = (*outages, Outage(last_tick=self.last_tick, next_tick=now))
        ticking_since = self.ticking_since
        if len(outages) > MAX_OUTAGES:
            ticking_since = outages[-MAX_OUTAGES - 1].next_tick
            outages = outages[-MAX_OUTAGES:]
        return ShardHistory(
            ticking_since=ticking_since,
            last_tick=now,
            outages=outages,
            heartbeat=self.heartbeat,
        )

    def needs_heartbeat(self, now: datetime, grace: timedelta) -> bool:
        """Whether a tick at ``now`` must write its heartbeat: the first, one due, or an outage."""
        if self.last_tick is None:
            return True
        return now - self.last_tick >= min(self.heartbeat, grace)


UNKNOWN = ShardHistory()
