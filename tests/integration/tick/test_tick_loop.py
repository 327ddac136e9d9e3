"""The deployed tick loop: one holder per shard, handover, expiry, and per-second ticks."""

from __future__ import annotations

import itertools
from datetime import timedelta
from typing import Any

from dynacron.api.requests import TaskCreate
from dynacron.definitions.tick_timing import LoopTiming
from dynacron.domain.clock import SettableClock
from dynacron.domain.coordination.tenants import DEFAULT_TENANT
from dynacron.domain.tasks.task import shard_for
from dynacron.entry.composition import Dynacron
from dynacron.entry.settings import Settings
from dynacron.ports.faults import Boundary
from dynacron.services.tick_loop import LoopEnd, ShardTickLoop, tick_phase_seconds
from tests.conftest import sleep_moving
from tests.support import ConcurrentLoops, FakeLambdaContext

HOOK = "http://127.0.0.1:9/hook"
SHARD = 0
TIMING = LoopTiming()


def make_loop(system: Dynacron, owner: str, seconds: float = 300) -> ShardTickLoop:
    return ShardTickLoop(
        ticker=system.ticker,
        leases=system.leases,
        clock=system.clock,
        shard=SHARD,
        owner=owner,
        deadline=system.clock.now() + timedelta(seconds=seconds),
    )


def test_a_newcomer_stands_by_and_the_holder_hands_over_at_its_deadline(
    system: Dynacron, clock: SettableClock
) -> None:
    # Given minute one's invocation holding the shard until its deadline
    first = make_loop(system, "minute-1", seconds=20)
    first.step()
    assert first.holding
    # When minute two's invocation arrives, it stands by: never two holders at once
    second = make_loop(system, "minute-2")
    assert second.step() == TIMING.poll_phase_seconds  # it reads again at x.5 s
    assert not second.holding
    lease = system.leases.get(SHARD)
    assert lease is not None
    assert (lease.owner, lease.successor) == ("minute-1", "minute-2")
    # And the holder renews and ticks with its standby waiting, until its deadline
    loops = ConcurrentLoops(clock)
    loops.start(first)
    loops.start(second)
    run = loops.until(clock.now() + timedelta(seconds=25))
    # Then it handed the shard over at its deadline, and the standby ticks from then on,
    # never two holders at once and never a second without a tick
    assert run.most_holders == 1
    assert first.report.ended is LoopEnd.HANDED_OVER
    assert 19 <= first.report.ticks * TIMING.tick_interval_seconds <= 21
    assert second.holding
    assert not second.report.took_over_expired
    ticks = [at for at, _ in run.tick_times]
    assert max(b - a for a, b in itertools.pairwise(ticks)) <= timedelta(seconds=1.5)
    assert [loop.report.owner for _, loop in run.tick_times][-1] == "minute-2"
    lease = system.leases.get(SHARD)
    assert lease is not None
    assert (lease.owner, lease.successor) == ("minute-2", None)


def test_a_second_newcomer_does_not_take_the_standbys_place(
    system: Dynacron, clock: SettableClock
) -> None:
    holder = make_loop(system, "minute-1", seconds=10)
    holder.step()
    standby, third = make_loop(system, "minute-2"), make_loop(system, "minute-3")
    standby.step()
    third.step()
    lease = system.leases.get(SHARD)
    assert lease is not None
    assert (lease.owner, lease.successor) == ("minute-1", "minute-2")
    # When the holder hands over, the third becomes the new holder's standby
    clock.advance(timedelta(seconds=10))
    holder.step()
    assert holder.report.ended is LoopEnd.HANDED_OVER
    standby.step()
    third.step()
    assert standby.holding
    assert not third.holding
    lease = system.leases.get(SHARD)
    assert lease is not None
    assert (lease.owner, lease.successor) == ("minute-2", "minute-3")


def test_the_lease_of_a_holder_that_died_expires_and_is_taken_over(
    system: Dynacron, clock: SettableClock
) -> None:
    dead = make_loop(system, "died")
    dead.step()
    # Given a holder that stopped stepping (its Lambda was killed)
    successor = make_loop(system, "successor")
    successor.step()
    clock.advance(timedelta(seconds=TIMING.lease_seconds - 0.5))
    successor.step()
    assert not successor.holding
    # When its lease runs out, the standby's next read (a second later at most) sees it
    clock.advance(timedelta(seconds=TIMING.poll_seconds))
    successor.step()
    # Then the waiting invocation takes it, and says it took over an expired lease
    assert successor.holding
    assert successor.report.took_over_expired
    # And the old holder, should it wake up, finds out at renewal and stops
    clock.advance(timedelta(seconds=TIMING.renew_every_seconds))
    assert dead.step() is None
    assert dead.report.ended is LoopEnd.LOST
    lease = system.leases.get(SHARD)
    assert lease is not None
    assert lease.owner == "successor"


def test_a_holder_releases_the_shard_at_its_deadline(
    system: Dynacron, clock: SettableClock
) -> None:
    holder = make_loop(system, "holder", seconds=10)
    report = holder.run(sleep_moving(clock))
    assert report.ended is LoopEnd.DEADLINE
    assert 9 <= report.ticks * TIMING.tick_interval_seconds <= 11
    assert system.leases.get(SHARD) is None
    # So the next invocation starts at once, without waiting for an expiry
    after = make_loop(system, "after")
    after.step()
    assert after.holding
    assert not after.report.took_over_expired


def test_a_waiter_that_reaches_its_deadline_withdraws_its_request(
    system: Dynacron, clock: SettableClock
) -> None:
    make_loop(system, "holder").step()
    waiter = make_loop(system, "waiter", seconds=1)
    waiter.step()
    clock.advance(timedelta(seconds=1))
    assert waiter.step() is None
    assert waiter.report.ended is LoopEnd.DEADLINE
    lease = system.leases.get(SHARD)
    assert lease is not None
    assert (lease.owner, lease.successor) == ("holder", None)


def test_the_looping_tick_fires_a_rate_task_on_every_occurrence_within_a_second(
    system: Dynacron, clock: SettableClock, settings: Settings
) -> None:
    # Given a task every 10 s, and a tick invocation with two minutes to live
    task = system.task_service.register(
        DEFAULT_TENANT, TaskCreate(handler_url=HOOK, rate="10 seconds").to_spec()
    )
    shard = shard_for(task.task_id, settings.shard_count)
    clock.advance(timedelta(milliseconds=300))  # invocations never start on the second
    context = FakeLambdaContext(aws_request_id="invocation-1", remaining_millis=120_000)
    # When the invocation runs to its deadline
    result = system.tick({"shard": shard, "loop": True}, context)
    # Then it ticked every tick interval for its whole budget (less the safety margin)
    assert result["ended"] == LoopEnd.DEADLINE.value
    assert 100 <= result["ticks"] * TIMING.tick_interval_seconds <= 106
    # And every occurrence in that time was sent once, less than a second late
    assert result["claimed"] == 10
    assert 0 <= result["max_lateness_seconds"] < 1
    lease = system.leases.get(shard)
    assert lease is None


def test_the_shards_tick_apart_within_the_second_not_all_at_once(
    system: Dynacron, clock: SettableClock
) -> None:
    # Given the phases of 40 shards' ticks within a second
    phases = sorted(tick_phase_seconds(shard, 1.0) for shard in range(40))
    # Then they spread over the second: no two closer than a third of an even share,
    # no gap wider than twice one
    gaps = [b - a for a, b in itertools.pairwise(phases)] + [1 + phases[0] - phases[-1]]
    assert min(gaps) > 1 / 40 / 3
    assert max(gaps) < 2 / 40
    assert tick_phase_seconds(0, 1.0) == 0.0
    # And shard 1's loop, having ticked, waits until its own instant in the next interval
    loop = ShardTickLoop(
        ticker=system.ticker,
        leases=system.leases,
        clock=system.clock,
        shard=1,
        owner="holder",
        deadline=clock.now() + timedelta(seconds=60),
    )
    pause = loop.step()
    assert pause is not None
    woke = clock.now().timestamp() + pause
    interval = TIMING.tick_interval_seconds
    offset = (woke - tick_phase_seconds(1, interval)) % interval
    assert min(offset, interval - offset) < 1e-6


class SlowClaims:
    """Faults that inject none: each claim the tick sends takes ``seconds`` of the
    clock, as a tick claiming a page itself at 128 MB does."""

    def __init__(self, clock: SettableClock, seconds: float) -> None:
        self.clock = clock
        self.seconds = seconds

    def reached(self, boundary: Boundary) -> None:
        if boundary is Boundary.TICK_SENT_NOT_CLAIMED:
            self.clock.advance(timedelta(seconds=self.seconds))


def test_a_tick_that_runs_past_the_shards_next_instant_is_followed_at_once(
    aws: tuple[Any, Any], settings: Settings, clock: SettableClock
) -> None:
    # Given a tick whose claim takes longer than an interval, and a task due now
    dynamodb, sqs = aws
    interval = TIMING.tick_interval_seconds
    slow = SlowClaims(clock, 1.4 * interval)
    system = Dynacron(settings, dynamodb=dynamodb, sqs=sqs, clock=clock, faults=slow)
    due = clock.now() + timedelta(seconds=1)
    task = system.task_service.register(
        DEFAULT_TENANT, TaskCreate(handler_url=HOOK, at=due.isoformat()).to_spec()
    )
    clock.set(due)
    loop = ShardTickLoop(
        ticker=system.ticker,
        leases=system.leases,
        clock=clock,
        shard=shard_for(task.task_id, settings.shard_count),
        owner="holder",
        deadline=clock.now() + timedelta(seconds=60),
    )
    # When the loop ticks, claiming it past the shard's next instant
    began = clock.now()
    assert loop.step() == 0.0
    # Then the next tick starts at once, not an interval later (what fell due during
    # the long tick waits no longer than it took)
    assert loop.report.claimed == 1
    assert clock.now() - began >= timedelta(seconds=interval)
    # And a tick on time waits for the shard's next instant again
    pause = loop.step()
    assert pause is not None
    assert 0 < pause <= interval
    woke = clock.now().timestamp() + pause
    offset = (woke - tick_phase_seconds(loop.report.shard, interval)) % interval
    assert min(offset, interval - offset) < 1e-6
