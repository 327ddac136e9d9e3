"""The worker's heartbeat: while a handler call lasts, its lease is extended."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from dynacron.app import Dynacron
from dynacron.config import LOOPBACK_NETWORKS
from dynacron.domain.clock import SettableClock
from dynacron.domain.executions import Dispatch, ExecutionStatus
from dynacron.domain.tasks import execution_id_for
from dynacron.local.stores import StoreOptions, open_store
from dynacron.models import TaskCreate
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
