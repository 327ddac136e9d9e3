"""The worker's heartbeat: while a handler call lasts, its lease is extended."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from dynacron.api.requests import TaskCreate
from dynacron.domain.clock import SettableClock
from dynacron.domain.conditions import Transition
from dynacron.domain.executions.execution import Dispatch, ExecutionStatus, LeaseTerms
from dynacron.domain.executions.record import Keeping
from dynacron.domain.tasks.task import execution_id_for
from dynacron.entry.composition import Dynacron
from dynacron.entry.settings import LOOPBACK_NETWORKS
from dynacron.local.stores import StoreOptions, open_store
from dynacron.services.attempt_records import Heartbeats
from tests.integration.api_client import ALICE
from tests.support import Sink, wait_until

LEASE = timedelta(seconds=0.6)  # renewed every 0.1 s: a third of lease minus skew


@pytest.fixture
def system(tmp_path: Path) -> Iterator[Dynacron]:
    store = open_store(StoreOptions(kind="sqlite", data_dir=tmp_path))
    clock = SettableClock(datetime(2026, 12, 2, 12, tzinfo=UTC))
    settings = store.open(
        clock,
        shard_count=1,
        delivery_allow_networks=LOOPBACK_NETWORKS,
        lease_seconds=LEASE.total_seconds(),
        clock_skew_seconds=0.3,
    )
    yield Dynacron(settings, adapters=store.adapters(settings, clock), clock=clock)
    store.close()


def test_every_call_in_flight_has_its_lease_extended_until_it_returns(
    system: Dynacron, sink: Sink
) -> None:
    clock = system.clock
    assert isinstance(clock, SettableClock)
    sink.gate = threading.Event()  # every call is held until the test lets it go
    dispatches = []
    for _ in range(3):
        task = system.task_service.register(
            ALICE, TaskCreate(rate="1 hour", handler_url=f"{sink.url}/hook").to_spec()
        )
        assert task.next_run_at is not None
        execution_id = execution_id_for(task.task_id, task.next_run_at)
        dispatches.append(Dispatch(execution_id, task.task_id, task.next_run_at))
    # Given three attempts whose handler calls are all in flight
    earlier = set(threading.enumerate())  # other tests' systems may still linger
    runs = [threading.Thread(target=system.runner.run, args=(d,)) for d in dispatches]
    for run in runs:
        run.start()
    assert wait_until(lambda: len(sink.snapshot()) == 3, timeout=10)

    def leases_end_at(instant: datetime) -> bool:
        leases = [system.executions.get(d.execution_id) for d in dispatches]
        return all(e is not None and e.lease_until == instant for e in leases)

    # When time goes on while they last
    for _ in range(2):
        clock.advance(timedelta(seconds=10))
        # Then each lease is extended to a lease from now, again and again
        assert wait_until(lambda: leases_end_at(clock.now() + LEASE), timeout=5)
    # And one thread keeps them all
    started = set(threading.enumerate()) - earlier
    assert [t.name for t in started].count("heartbeats") == 1
    # When the calls return, each attempt ends SUCCEEDED under the lease it kept
    sink.gate.set()
    for run in runs:
        run.join(timeout=10)
    ended = [system.executions.get(d.execution_id) for d in dispatches]
    assert [e.status if e else None for e in ended] == [ExecutionStatus.SUCCEEDED] * 3


class CountingRenewals:
    """Stands in for the execution store, which a heartbeat asks to carry out a
    renewal: every lease renews, and the instant each was asked is kept (what is
    tested is when, not the write)."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, float]] = []

    def keeping(self, execution_id: str) -> Keeping:
        return Keeping("0", timedelta(days=1))

    def apply(self, execution_id: str, transition: Transition) -> bool:
        assert transition.move == "renew"
        self.asked.append((execution_id, time.monotonic()))
        return True


def test_a_lease_kept_while_the_thread_lingers_is_renewed_at_its_interval() -> None:
    # Given the heartbeat thread lingering (5 s) after its only lease ended, and
    # leases renewed every 0.1 s
    terms = LeaseTerms(
        running=LEASE,
        awaiting_callback=LEASE,
        pickup_grace=LEASE,
        clock_skew=timedelta(seconds=0.3),
    )
    store = CountingRenewals()
    heartbeats = Heartbeats(
        store,  # type: ignore[arg-type]
        terms,
        SettableClock(datetime(2026, 12, 2, 12, tzinfo=UTC)),
        linger=5.0,
    )
    with heartbeats.keeping("first", "t1"):
        assert wait_until(lambda: len(store.asked) >= 1, timeout=5)
    time.sleep(0.3)  # the thread finds no lease left, and lingers
    # When another attempt keeps its lease for 0.6 s
    began = time.monotonic()
    with heartbeats.keeping("second", "t2"):
        time.sleep(0.6)
    # Then it was renewed about every 0.1 s from the start, not after the linger
    second = [at - began for execution_id, at in store.asked if execution_id == "second"]
    assert len(second) >= 3, second
    assert second[0] < 0.4, second
