"""Separate processes, real SIGKILLs: the promises hold when components die."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from dynacron.api.requests import TaskCreate
from dynacron.domain.coordination.tenants import DEFAULT_TENANT
from dynacron.domain.instants import format_instant
from dynacron.domain.tasks.task import execution_id_for
from tests.support import Sink, wait_until
from tests.system.cluster import FAST_RECOVERY, Cluster

pytestmark = [pytest.mark.system, pytest.mark.slow]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    running = Cluster(tmp_path, shard_count=4)
    yield running
    running.stop()


def register_due_soon(cluster: Cluster, sink: Sink, count: int, in_seconds: float) -> list[str]:
    due = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=in_seconds)
    ids = []
    for _ in range(count):
        task = cluster.app.task_service.register(
            DEFAULT_TENANT,
            TaskCreate(
                at=format_instant(due),
                handler_url=f"{sink.url}/effect",
                retry={"base_delay_seconds": 1, "max_delay_seconds": 2, "max_attempts": 20},
            ).to_spec(),
        )
        ids.append(execution_id_for(task.task_id, due))
    return ids


def test_local_mode_on_aws_killed_mid_flight_runs_everything_within_a_minute_of_restart(
    cluster: Cluster, sink: Sink
) -> None:
    # Given the whole of local mode in one process on the AWS code paths, with the
    # default leases and handler timeout (a worker holds its messages: decision 0038)
    sink.hold = 0.05
    cluster.start("local", "tick,worker,reaper")
    ids = register_due_soon(cluster, sink, 200, in_seconds=3)
    # When it is SIGKILLed with executions in flight, and started again
    assert wait_until(lambda: len(sink.snapshot()) >= 20, timeout=60)
    cluster.kill("local")
    done_at_kill = cluster.succeeded(ids)
    assert done_at_kill < 200, "the kill came too late to test anything"
    cluster.restart("local")
    restarted_at = time.monotonic()
    # Then all 200 are SUCCEEDED within a minute of the restart (not after the dispatch
    # queue's six-minute visibility timeout), each business effect applied once
    recovered = wait_until(lambda: cluster.succeeded(ids) == 200, timeout=90, interval=0.5)
    recovered_in = time.monotonic() - restarted_at
    assert recovered, Counter(cluster.statuses(ids))
    assert recovered_in < 60, recovered_in
    assert sink.effects == dict.fromkeys(ids, 1)
    assert sink.applied_twice == 0
    print(
        f"\nlocal mode on AWS SIGKILLed with {done_at_kill}/200 SUCCEEDED; all 200 "
        f"SUCCEEDED {recovered_in:.1f} s after the restart; handler calls "
        f"{sum(sink.calls_by_key().values())}"
    )


def test_killing_a_worker_with_200_in_flight_loses_nothing(cluster: Cluster, sink: Sink) -> None:
    # Given a tick and reaper process, and a worker process with eight threads
    sink.hold = 0.05
    cluster.start("control", "tick,reaper", *FAST_RECOVERY, "--reaper-interval", "0.5")
    cluster.start("worker", "worker", "--workers", "8", *FAST_RECOVERY)
    ids = register_due_soon(cluster, sink, 200, in_seconds=3)
    # When 200 executions are in flight and the worker is killed with SIGKILL
    assert wait_until(lambda: len(sink.snapshot()) >= 20, timeout=60)
    cluster.kill("worker")
    killed_at = time.monotonic()
    done_at_kill = cluster.succeeded(ids)
    assert done_at_kill < 200, "the kill came too late to test anything"
    # And a new worker starts
    cluster.restart("worker")
    # Then all 200 are recorded SUCCEEDED, and the sink saw each business effect once
    assert wait_until(lambda: cluster.succeeded(ids) == 200, timeout=90, interval=0.5)
    recovered_in = time.monotonic() - killed_at
    assert sink.effects == dict.fromkeys(ids, 1)
    assert sink.applied_twice == 0
    calls = sink.calls_by_key()
    print(
        f"\n200 in flight, worker SIGKILLed with {done_at_kill} recorded SUCCEEDED; "
        f"all 200 SUCCEEDED {recovered_in:.1f} s after the kill; handler calls "
        f"{sum(calls.values())} for 200 executions (each effect applied once)"
    )
