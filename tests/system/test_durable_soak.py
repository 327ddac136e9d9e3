"""Durability you can show: the whole of local mode SIGKILLed at random moments.

One `dynacron local` process (API, tick, workers, reaper) on a SQLite data
directory runs one-time tasks due over a window; every few seconds the test
kills the process with SIGKILL (nothing flushed, nothing released) and starts
it again on the same directory. Meanwhile this process reads the same database
file through the ports, as a second process may. Sized by --soak-executions
(or $DYNACRON_SOAK_EXECUTIONS), seeded by --soak-seed.
"""

from __future__ import annotations

import random
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from dynacron.adapters.powertools.metrics import MetricTotals
from dynacron.api.requests import TaskCreate
from dynacron.domain.clock import SystemClock
from dynacron.domain.coordination.tenants import DEFAULT_TENANT
from dynacron.domain.executions.execution import ExecutionStatus
from dynacron.domain.instants import format_instant
from dynacron.domain.tasks.task import execution_id_for
from dynacron.entry.composition import Dynacron
from dynacron.entry.settings import LOOPBACK_NETWORKS
from dynacron.local.stores import SqliteStore, StoreOptions
from tests.support import Sink
from tests.system.local_process import LocalMode

pytestmark = [pytest.mark.system, pytest.mark.slow]

SHARDS = 2
# Short leases and handler timeouts, so that what a killed process was running
# is taken over within seconds (the defaults would take 30 s a lease).
RECOVERY = (
    "--shards", str(SHARDS),
    "--lease-seconds", "2",
    "--clock-skew-seconds", "0.5",
    "--http-timeout-seconds", "1",
    "--pickup-grace-seconds", "5",
    "--reaper-interval", "0.5",
)  # fmt: skip
RATE = 100  # executions a second the window asks for
KILL_EVERY = (1.0, 2.5)  # seconds between kills, drawn at random
# What was in flight at the last kill runs again within this of the restart.
RECOVERY_LIMIT = timedelta(seconds=60)


def test_sigkilled_at_random_local_mode_loses_nothing_and_applies_nothing_twice(
    tmp_path: Path, sink: Sink, request: pytest.FixtureRequest
) -> None:
    size: int = request.config.getoption("--soak-executions")
    seed: int = request.config.getoption("--soak-seed")
    rng = random.Random(seed)
    sink.hold = 0.005
    local = LocalMode(tmp_path / "data", *RECOVERY)
    # This process reads and registers through the same file, as a second process.
    store = SqliteStore(StoreOptions(data_dir=local.data_dir))
    clock = SystemClock()
    settings = store.open(clock, shard_count=SHARDS, delivery_allow_networks=LOOPBACK_NETWORKS)
    app = Dynacron(settings, adapters=store.adapters(settings, clock), emit_metrics=MetricTotals())
    try:
        local.start()
        began = time.monotonic()

        # Given `size` one-time tasks due over a window at RATE a second
        window = max(5.0, size / RATE)
        first_due = datetime.now(UTC) + timedelta(seconds=3)
        ids = []
        for number in range(size):
            due = first_due + timedelta(seconds=window * number / size)
            task = app.task_service.register(
                DEFAULT_TENANT,
                TaskCreate(
                    at=format_instant(due),
                    handler_url=f"{sink.url}/effect",
                    retry={"base_delay_seconds": 1, "max_delay_seconds": 2, "max_attempts": 30},
                ).to_spec(),
            )
            ids.append(execution_id_for(task.task_id, task.next_run_at or due))
        window_ends = time.monotonic() + (first_due - datetime.now(UTC)).total_seconds() + window

        # When the whole of local mode is SIGKILLed at random moments of the window,
        # and started again at once on the same directory
        kills = 0
        while time.monotonic() < window_ends or kills < 5:
            time.sleep(rng.uniform(*KILL_EVERY))
            local.kill()
            kills += 1
            local.start()
        restarted = time.monotonic()

        # Then every execution runs, each effect once, within a minute of the last restart
        def finished() -> list[str]:
            return [
                i
                for i in ids
                if (e := app.executions.get(i)) is not None
                and e.status is ExecutionStatus.SUCCEEDED
            ]

        deadline = restarted + RECOVERY_LIMIT.total_seconds()
        while time.monotonic() < deadline and len(finished()) < size:
            time.sleep(0.5)
        recovered_in = time.monotonic() - restarted
        succeeded = finished()
        histories = {i: app.executions.get(i) for i in ids}
    finally:
        local.stop()
        store.close()

    calls = sink.calls_by_key()
    lost = [i for i in ids if i not in succeeded or i not in calls]
    applied_twice = sink.applied_twice + sum(1 for count in sink.effects.values() if count > 1)
    print(
        f"\ndurable soak (seed {seed}): scheduled {size}, succeeded {len(succeeded)}, "
        f"lost {len(lost)}, effects applied twice {applied_twice}, handler calls "
        f"{sum(calls.values())}, SIGKILLs {kills}, done {recovered_in:.1f} s after the "
        f"last restart, {time.monotonic() - began:.0f} s in all"
    )
    assert lost == []
    assert applied_twice == 0
    assert set(sink.effects) == set(ids)
    # Every execution's history is whole: when it was due, began and ended, in order
    for execution_id, execution in histories.items():
        assert execution is not None, execution_id
        assert execution.started_at is not None
        assert execution.completed_at is not None
        assert execution.scheduled_at <= execution.started_at <= execution.completed_at
