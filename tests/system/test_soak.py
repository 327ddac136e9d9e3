"""A seeded soak: faults at random step boundaries, and SIGKILLs of workers and the tick.

Four processes share one embedded AWS: a tick, two workers and a reaper. Each
injects faults of its own: a crash at a random step boundary (the process ends
with SIGKILL), DynamoDB throttling surfacing as errors, SQS duplicates and
partial batch failures. Meanwhile the test kills one of them every few seconds
and starts it again. Sized by --soak-executions (or $DYNACRON_SOAK_EXECUTIONS).
"""

from __future__ import annotations

import random
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from dynacron.api.requests import MAX_BATCH, TaskCreate
from dynacron.definitions import metric_names
from dynacron.domain.coordination.tenants import DEFAULT_TENANT
from dynacron.domain.instants import format_instant
from dynacron.domain.tasks.specs import TaskSpec
from dynacron.domain.tasks.task import execution_id_for
from dynacron.services.tasks import BatchItem
from tests.support import Sink
from tests.system.cluster import FAST_RECOVERY, Cluster

pytestmark = [pytest.mark.system, pytest.mark.slow]

RECOVERY = (
    *FAST_RECOVERY,
    "--batch-size", "3",
    "--pickup-grace-seconds", "5",
    "--reaper-interval", "0.5",
)  # fmt: skip
COMPONENTS = {
    "tick": ("tick", "--shards", "2"),
    "worker-a": ("worker", "--workers", "4", "--shards", "2"),
    "worker-b": ("worker", "--workers", "4", "--shards", "2"),
    "reaper": ("reaper", "--shards", "2"),
}
# Executions per second the window asks for: what the embedded AWS (one process,
# DynamoDB requests serialised) sustains on two shared cores, about seven
# DynamoDB requests per execution.
RATE = 25
KILL_EVERY = 4.0
# However slow the machine, the test kills at least this many processes itself.
MIN_KILLS = 2


# The faults' rates: twice those the soak of 500 executions had, so that the 250
# it runs by default meet as many faults (a crash or two injected, a dozen
# duplicates, a few throttles and failed sends) in half the window.
def chaos(rng: random.Random) -> list[str]:
    return [
        "--chaos-seed", str(rng.randrange(1 << 30)),
        "--crash-rate", "0.002",
        "--throttle-rate", "0.006",
        "--duplicate-rate", "0.02",
        "--send-failure-rate", "0.04",
    ]  # fmt: skip


def one_time_task(due: datetime, sink: Sink) -> TaskSpec:
    return TaskCreate(
        at=format_instant(due),
        handler_url=f"{sink.url}/effect",
        retry={"base_delay_seconds": 1, "max_delay_seconds": 2, "max_attempts": 30},
    ).to_spec()


def test_soak_loses_nothing_and_applies_nothing_twice(
    tmp_path: Path, sink: Sink, request: pytest.FixtureRequest
) -> None:
    size: int = request.config.getoption("--soak-executions")
    seed: int = request.config.getoption("--soak-seed")
    rng = random.Random(seed)
    sink.hold = 0.005
    cluster = Cluster(tmp_path, shard_count=2)
    try:
        began = time.monotonic()
        cluster.start_all(
            {
                name: [components, *options, *RECOVERY, *chaos(rng)]
                for name, (components, *options) in COMPONENTS.items()
            }
        )
        # Given `size` one-time tasks due over a window at `RATE` a second
        # (registered faster than they fall due)
        window = max(5.0, size / RATE)
        first_due = datetime.now(UTC) + timedelta(seconds=2)
        # (in batches, as POST /tasks/batch stores them: one by one, registering
        # 500 took longer than their window on a loaded machine)
        dues = [first_due + timedelta(seconds=window * number / size) for number in range(size)]
        ids = []
        for start in range(0, size, MAX_BATCH):
            batch = dues[start : start + MAX_BATCH]
            outcomes = cluster.app.task_service.register_many(
                DEFAULT_TENANT, [BatchItem(one_time_task(due, sink)) for due in batch]
            )
            for outcome, due in zip(outcomes, batch, strict=True):
                assert outcome.task is not None, outcome.error
                ids.append(execution_id_for(outcome.task.task_id, outcome.task.next_run_at or due))
        window_ends = time.monotonic() + (first_due - datetime.now(UTC)).total_seconds() + window
        # When processes die at random points, and are killed and restarted meanwhile
        self_killed = 0
        next_kill = time.monotonic() + KILL_EVERY
        deadline = window_ends + 120
        while time.monotonic() < deadline:
            for name in cluster.dead():
                self_killed += 1
                cluster.restart(name, *chaos(rng))
            # On a slow machine registering may outlast the window: the kills still
            # come, at least MIN_KILLS of them, while the last of the work is done.
            killing = time.monotonic() < window_ends or cluster.kills < MIN_KILLS
            if killing and time.monotonic() >= next_kill:
                victim = rng.choice(sorted(COMPONENTS))
                cluster.kill(victim)
                cluster.restart(victim, *chaos(rng))
                next_kill = time.monotonic() + KILL_EVERY
            if (
                time.monotonic() > window_ends
                and cluster.kills >= MIN_KILLS
                and len(sink.effects) == size
                and all(status == "SUCCEEDED" for status in cluster.statuses(ids))
            ):
                break
            time.sleep(0.25)
        elapsed = time.monotonic() - began
        statuses = cluster.statuses(ids)
    finally:
        cluster.stop()

    calls = sink.calls_by_key()
    executed = sum(1 for i in ids if sink.effects.get(i, 0) >= 1)
    lost = sum(1 for i, s in zip(ids, statuses, strict=True) if s != "SUCCEEDED" or i not in calls)
    applied_twice = sink.applied_twice + sum(1 for count in sink.effects.values() if count > 1)
    suppressed = int(cluster.metric_total(metric_names.DUPLICATES_SUPPRESSED))
    print(
        f"\nsoak (seed {seed}): scheduled {size}, executed {executed}, "
        f"duplicates suppressed {suppressed}, lost {lost}, effects applied twice {applied_twice}; "
        f"handler calls {sum(calls.values())}, SIGKILLs by the test {cluster.kills}, "
        f"crashes injected {self_killed}, leases reaped "
        f"{int(cluster.metric_total(metric_names.LEASES_REAPED))}, retries "
        f"{int(cluster.metric_total(metric_names.RETRIES))}, {elapsed:.0f} s"
    )
    assert lost == 0
    assert applied_twice == 0
    assert cluster.kills >= MIN_KILLS
