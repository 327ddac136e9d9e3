"""Burst: many one-time tasks due in the same second, through local mode.

The tasks are written straight into the store (registering 10,000 over HTTP
would take longer than the burst): into the SQLite file of a fresh data
directory, or into an embedded AWS in its own process with BatchWriteItem. Then
``dynacron local`` starts on that store and a minimal loopback handler
(``bench.loopback``) records every delivery. Reports the time from the due
second to the last delivery, lateness (delivery minus scheduled time) and
counts that show none was lost, and the CPU that local mode's processes spent
(every process of it, from the due second to the last delivery) per fire.

Rows: SQLite as ``dynacron local`` runs by default (its workers in processes of
their own), SQLite with every worker a thread of one process (as before issue
22), SQLite with every commit synced, the AWS emulator, and a slow handler (each
call answered after 1 s: how many calls are in flight at once).

Run: .venv/bin/python -m bench.burst [--tasks 10000] [--stores sqlite,sqlite-threads,...]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil

from bench.common import QUICK, distribution, write_result
from bench.loopback import LoopbackHandler, bare_posts
from bench.processes import Service, free_port, wait_until
from dynacron.adapters.aws.task_items import task_to_item
from dynacron.adapters.aws.tenants import DynamoTenantStore
from dynacron.domain.clock import SystemClock
from dynacron.domain.coordination.tenants import DEFAULT_TENANT
from dynacron.domain.instants import parse_instant
from dynacron.domain.schedules.expressions import OneTimeSchedule
from dynacron.domain.tasks.task import Task, TaskStatus
from dynacron.local.aws import aws_clients, provision
from dynacron.local.stores import StoreOptions, open_store
from dynacron.services.tasks import new_signing_secret

WRITE_BATCH = 25
SHARDS = 4  # local mode's default
# Threads of the bare client the rows are compared with (local mode's worker
# threads, before the rows ran local mode's defaults).
BARE_THREADS = 8


def due_tasks(count: int, due: datetime, url: str) -> list[Task]:
    now = datetime.now(UTC)
    return [
        Task(
            task_id=uuid.uuid4().hex,
            name="burst",
            schedule=OneTimeSchedule(at=due),
            handler_url=url,
            payload={},
            status=TaskStatus.ACTIVE,
            next_run_at=due,
            created_at=now,
            updated_at=now,
        )
        for _ in range(count)
    ]


def write_due_tasks_sqlite(data_dir: Path, tasks: list[Task], due: datetime) -> None:
    """Into a fresh data directory, through the SQLite adapters local mode uses."""
    store = open_store(StoreOptions(kind="sqlite", data_dir=data_dir, durability="normal"))
    clock = SystemClock()
    settings = store.open(clock, shard_count=SHARDS)
    adapters = store.adapters(settings, clock)
    now = clock.now()
    secret = new_signing_secret()
    for task in tasks:
        placement = settings.sharding.place(task.task_id, due, now)
        adapters.tasks.create_within_quota(task, placement, len(tasks), secret)
    store.close()


def write_due_tasks(dynamodb: Any, settings: Any, tasks: list[Task], due: datetime) -> None:
    now = datetime.now(UTC)
    items = [task_to_item(task, settings.sharding.place(task.task_id, due, now)) for task in tasks]
    for start in range(0, len(items), WRITE_BATCH):
        batch = items[start : start + WRITE_BATCH]
        request = {settings.tasks_table: [{"PutRequest": {"Item": i}} for i in batch]}
        while request:
            request = dynamodb.batch_write_item(RequestItems=request).get("UnprocessedItems")
    # Registering through the API gives the tenant its signing secret; written
    # directly, the tasks need it given (a worker refuses to send unsigned).
    DynamoTenantStore(dynamodb, settings.coordination_table).ensure_secret(
        DEFAULT_TENANT, new_signing_secret()
    )


class TreeCpu:
    """CPU seconds (user + system) of a process and its descendants, sampled often, so
    that a child that ends still counts what it spent until its last sample."""

    def __init__(self, pid: int) -> None:
        self._root = psutil.Process(pid)
        self._spent: dict[int, float] = {}
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        threading.Thread(target=self._watch, daemon=True).start()

    def _watch(self) -> None:
        while not self._stopped.wait(0.2):
            self.sample()

    def sample(self) -> float:
        """The tree's CPU seconds so far (``root_seconds``: the root process's alone)."""
        try:
            processes = [self._root, *self._root.children(recursive=True)]
        except psutil.NoSuchProcess:
            processes = []
        with self._lock:
            for process in processes:
                try:
                    times = process.cpu_times()
                except psutil.NoSuchProcess:
                    continue
                self._spent[process.pid] = times.user + times.system
            return sum(self._spent.values())

    def root_seconds(self) -> float:
        """The root process's CPU seconds at the last sample (local mode's own: the
        tick, the API, the reaper; its workers run in child processes)."""
        with self._lock:
            return self._spent.get(self._root.pid, 0.0)

    def stop(self) -> None:
        self._stopped.set()


def run_burst(
    count: int,
    store: str = "sqlite",
    workers: int | None = None,
    sync: str = "acknowledged",
    worker_processes: int | None = None,
    answer_after: float = 0.0,
    worker_concurrency: int | None = None,
) -> dict[str, Any]:
    """``count`` tasks due at one whole second, fired by local mode on ``store``
    (SQLite: committing with durability ``sync``, local mode's ``--sync``), with
    ``workers`` worker threads running ``worker_concurrency`` records each, in
    ``worker_processes`` processes (None: local mode's defaults), to a handler that
    answers ``answer_after`` seconds after each call."""
    handler = LoopbackHandler(answer_after=answer_after).start()
    aws: Service | None = None
    local: Service | None = None
    data_dir = tempfile.TemporaryDirectory(prefix="dynacron-bench-")
    try:
        # Due at a whole second far enough ahead to write everything and start.
        lead = 20 + count // (1000 if store == "sqlite" else 250)
        due = datetime.fromtimestamp(int(time.time()) + lead, UTC)
        tasks = due_tasks(count, due, f"{handler.url}/burst")
        began = time.time()
        command = ["-m", "dynacron.cli.main", "local", "--port", str(free_port())]
        command += ["--shards", str(SHARDS)]
        if workers is not None:
            command += ["--workers", str(workers)]
        if worker_processes is not None:
            command += ["--worker-processes", str(worker_processes)]
        if worker_concurrency is not None:
            command += ["--worker-concurrency", str(worker_concurrency)]
        if store == "sqlite":
            write_due_tasks_sqlite(Path(data_dir.name), tasks, due)
            command += ["--data-dir", data_dir.name, "--sync", sync]
        else:
            aws = Service(["-m", "dynacron.local.aws", "--port", "0"], "listening on")
            endpoint = aws.ready_line.split()[-1]
            dynamodb, sqs = aws_clients(endpoint)
            settings = provision(dynamodb, sqs, "dynacron", shard_count=SHARDS)
            write_due_tasks(dynamodb, settings, tasks, due)
            command += ["--aws-endpoint", endpoint]
        write_seconds = time.time() - began
        local = Service(command, "is running")
        if time.time() > due.timestamp() - 2:
            raise SystemExit(f"writing {count} tasks took {write_seconds:.0f}s: raise the margin")
        cpu = TreeCpu(local.process.pid)
        time.sleep(max(0.0, due.timestamp() - time.time()))
        cpu_at_due = cpu.sample()
        root_at_due = cpu.root_seconds()
        wait_until(
            lambda: len(handler.arrivals) >= count,
            timeout=due.timestamp() - time.time() + 60 + count / 10,
            interval=0.05,
        )
        cpu_seconds = cpu.sample() - cpu_at_due
        root_seconds = cpu.root_seconds() - root_at_due
        cpu.stop()
        running = [line for line in local.output if "workers " in line]
        deliveries = list(handler.arrivals)
        # The baseline, in the same run: a bare threaded client posting the same
        # bodies to the same handler from ``BARE_THREADS`` threads.
        # (Not against a slow handler: the client's threads would only wait.)
        bodies = [json.dumps(d.body).encode() for d in deliveries]
        bare = bare_posts(f"{handler.url}/bare", bodies, BARE_THREADS) if not answer_after else None
    finally:
        if local is not None:
            local.stop()
        if aws is not None:
            aws.stop()
        handler.stop()
        data_dir.cleanup()
    lateness = [
        d.received_at - parse_instant(d.body["scheduled_at"]).timestamp() for d in deliveries
    ]
    unique = {d.body["execution_id"] for d in deliveries}
    arrivals = sorted(d.received_at - due.timestamp() for d in deliveries)
    span = arrivals[-1] - arrivals[0] if len(arrivals) > 1 else 0
    sustained = round(len(unique) / span, 1) if span else None
    return {
        "store": store,
        "sync": sync if store == "sqlite" else None,
        "tasks": count,
        "workers": workers,
        "worker_concurrency": worker_concurrency,
        # As local mode said at start-up ("workers  8 in each of 2 processes, ...").
        "workers_line": running[0].strip() if running else None,
        "worker_processes": worker_processes,
        "answer_after_seconds": answer_after,
        # Every process of local mode, from the due second to the last delivery.
        "cpu_seconds": round(cpu_seconds, 2),
        "cpu_ms_per_fire": round(1000 * cpu_seconds / max(1, len(unique)), 3),
        # Of which local mode's own process (the tick, with the workers elsewhere).
        "tick_process_cpu_ms_per_fire": round(1000 * root_seconds / max(1, len(unique)), 3),
        "due_at": due.isoformat().replace("+00:00", "Z"),
        "written_seconds": round(write_seconds, 1),
        "delivered": len(deliveries),
        "unique_executions": len(unique),
        "lost": count - len(unique),
        "duplicates": len(deliveries) - len(unique),
        "drain_seconds": round(max(arrivals), 3) if arrivals else None,
        "fires_per_second": round(len(unique) / max(arrivals), 1) if arrivals else None,
        # From the first delivery to the last: the rate once the tick has started.
        "sustained_fires_per_second": sustained,
        "bare_httpx_posts_per_second": round(bare, 1) if bare else None,
        "cost_ratio_to_bare_httpx": round(bare / sustained, 2) if bare and sustained else None,
        "lateness_seconds": distribution(lateness),
        # Deliveries over time, for the plot: seconds after the due second.
        "arrivals": [round(a, 3) for a in arrivals],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=2000 if QUICK else 10_000)
    # The emulator drains some 20 a second: its row is smaller, to end in minutes.
    parser.add_argument("--emulator-tasks", type=int, default=500 if QUICK else 2000)
    parser.add_argument("--slow-tasks", type=int, default=400)
    parser.add_argument("--stores", default=",".join(ROWS))
    args = parser.parse_args()
    runs = []
    for name in args.stores.split(","):
        row = ROWS[name]
        tasks = {"emulator": args.emulator_tasks, "slow": args.slow_tasks}.get(name, args.tasks)
        runs.append({"row": name, **run_burst(tasks, **row)})
        print({k: v for k, v in runs[-1].items() if k != "arrivals"}, flush=True)
        write_result("burst", {"runs": runs})


# The rows of the section: run_burst's arguments for each.
ROWS: dict[str, dict[str, Any]] = {
    # As `dynacron local` runs by default: workers in processes of their own.
    "sqlite": {"store": "sqlite"},
    # Every worker a thread of one process, as local mode ran before issue 22.
    "sqlite-threads": {"store": "sqlite", "worker_processes": 0},
    # Every commit synced (--sync full), for its price.
    "sqlite-full": {"store": "sqlite", "sync": "full"},
    "emulator": {"store": "emulator"},
    # A handler that answers each call after 1 s: how many calls are in flight at once.
    "slow": {"store": "sqlite", "answer_after": 1.0},
}


if __name__ == "__main__":
    main()
