"""Overlapping worker (decision 0034): what a fire costs in worker Lambda time before
and after, at handler latencies of 10 ms, 200 ms and 2 s; and local mode against a
handler that takes 1 s.

Lambda: the real ``app.worker`` runs SQS batches of one-time fires whose handler
is a loopback HTTP server in a process of its own, answering each call that many
seconds late (``bench.loopback``). Its DynamoDB is the AWS double
(``bench/aws_double.py``): real boto3 clients, each call answered after
``DYNAMODB_LATENCY_MS``, the model's own CPU counted apart; in-process moto would
spend 10-20 ms of CPU on each call under the GIL and measure itself. The tasks are
registered and claimed once on moto (what the worker reads is what the tick
wrote); every run starts the double from that state. Before: one call at a time,
batches of 10, 256 MB (the stack until decision 0034); after: the defaults;
planned: what ``dynacron plan`` sizes at a high rate (full batches of the calls at
once, at 256 MB), whose figures are ``MEASURED.worker_gb_seconds_per_fire``.

GB-s per fire = memory (GB) x the invocations' time / fires. Here a worker has a
whole core; on Lambda it has ``memory / 1,769 MB`` of one, so its CPU takes longer.
Each invocation's Lambda time is estimated from what was measured here: the wall
time with its CPU slowed to that share along one record's path (its CPU / calls at
once), or its CPU at that share if that is longer (a worker kept busy by CPU).

Local: ``dynacron local`` on SQLite with 400 one-time tasks due in the same second,
against a handler that takes 1 s, with the old defaults (4 worker threads, batches
of 10, one call at a time) and the new ones.

Run: .venv/bin/python -m bench.overlap [--only lambda|local] (``--only`` keeps the
other part's last results)
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.aws_double import AwsDouble
from bench.burst import due_tasks, write_due_tasks_sqlite
from bench.common import QUICK, RESULTS, in_process_aws, write_result
from bench.loopback import LoopbackHandler, sleeping_path
from bench.processes import Service, free_port, wait_until
from dynacron.api.requests import TaskCreate
from dynacron.definitions.resources import TABLES
from dynacron.domain.clock import SettableClock
from dynacron.domain.coordination.tenants import DEFAULT_TENANT
from dynacron.domain.executions.execution import ExecutionStatus
from dynacron.entry.composition import Dynacron
from dynacron.entry.settings import LOOPBACK_NETWORKS, Settings
from dynacron.local.gateway import LocalContext
from dynacron.local.runtime import sqs_event
from dynacron.planning.capacity_model import (
    DYNAMODB_LATENCY_MS,
    FULL_VCPU_MEMORY_MB,
    WORKER_CALLS_IN_FLIGHT,
    WORKER_MEMORY_MB,
)

LATENCIES = (0.01, 0.2, 2.0)
QUEUE_ARN = "arn:aws:sqs:us-east-1:000000000000:dynacron-dispatch"
# The Lambda timeout the worker runs under (definitions.resources).
INVOCATION_SECONDS = 60
MEMORY_SWEEP_MB = (256, 512, 1024, 1769)
LOCAL_HANDLER_SECONDS = 1.0


@dataclass(frozen=True)
class Shape:
    """How the worker is deployed: memory, calls at once, batch size."""

    name: str
    memory_mb: int
    concurrency: int
    batch: int


BEFORE = Shape("before", memory_mb=256, concurrency=1, batch=10)
AFTER = Shape("after", memory_mb=1024, concurrency=Settings.worker_concurrency, batch=100)
# What `dynacron plan` sizes at a high rate: full batches of the calls at once, at the
# memory its cost model prices (MEASURED.worker_gb_seconds_per_fire comes from this).
PLANNED = Shape(
    "planned",
    memory_mb=WORKER_MEMORY_MB,
    concurrency=WORKER_CALLS_IN_FLIGHT,
    batch=WORKER_CALLS_IN_FLIGHT,
)
SHAPES = (BEFORE, AFTER, PLANNED)
# Measured batches per latency (one more runs first, to warm the worker up).
BATCHES = {
    BEFORE.name: {0.01: 10, 0.2: 5, 2.0: 2},
    AFTER.name: {0.01: 3, 0.2: 3, 2.0: 2},
    PLANNED.name: {0.01: 6, 0.2: 6, 2.0: 3},
}
if QUICK:
    BATCHES = {
        BEFORE.name: {0.01: 3, 0.2: 2, 2.0: 1},
        AFTER.name: {0.01: 1, 0.2: 1, 2.0: 1},
        PLANNED.name: {0.01: 2, 0.2: 2, 2.0: 1},
    }


def serve_handler(port_out: Any, stop: Any) -> None:
    """The loopback handler in a process of its own, so that its CPU is not the worker's."""
    handler = LoopbackHandler().start()
    port_out.send(handler.port)
    stop.wait()


@contextmanager
def handler_process() -> Iterator[str]:
    spawn = multiprocessing.get_context("spawn")
    receive, send = spawn.Pipe(duplex=False)
    stop = spawn.Event()
    process = spawn.Process(target=serve_handler, args=(send, stop), daemon=True)
    process.start()
    try:
        yield f"http://127.0.0.1:{receive.recv()}"
    finally:
        stop.set()
        process.join(10)


def lambda_seconds(invocation: dict[str, float], memory_mb: int, concurrency: int) -> float:
    """One invocation's time on Lambda at ``memory_mb`` (see the module's doc)."""
    share = min(1.0, memory_mb / FULL_VCPU_MEMORY_MB)
    paths = max(1, min(concurrency, int(invocation["records"])))
    slowed = invocation["wall"] + invocation["cpu"] / paths * (1 / share - 1)
    return max(slowed, invocation["cpu"] / share)


@dataclass
class Fires:
    """What was registered and claimed on moto: its items, and the messages by latency."""

    items: dict[str, list[dict[str, Any]]]
    messages: dict[float, list[dict[str, Any]]]


def claimed_fires(handler_url: str, per_latency: int) -> Fires:
    clock = SettableClock(datetime.now(UTC).replace(microsecond=0))
    with in_process_aws(clock, shard_count=1) as (dynamodb, sqs, settings):
        app = Dynacron(settings, dynamodb=dynamodb, sqs=sqs, clock=clock, emit_metrics=_ignore)
        at = clock.now() + timedelta(seconds=1)
        task_latency = {}
        for latency in LATENCIES:
            url = handler_url + sleeping_path(latency)
            for _ in range(per_latency):
                spec = TaskCreate(at=at.strftime("%Y-%m-%dT%H:%M:%SZ"), handler_url=url).to_spec()
                task_latency[app.task_service.register(DEFAULT_TENANT, spec).task_id] = latency
        clock.set(at)
        claimed = 0
        while (reports := app.ticker.tick()) and (round_claimed := sum(r.claimed for r in reports)):
            claimed += round_claimed
        assert claimed == len(task_latency), (claimed, len(task_latency))
        messages: dict[float, list[dict[str, Any]]] = {latency: [] for latency in LATENCIES}
        while received := sqs.receive_message(
            QueueUrl=settings.dispatch_queue_url,
            MaxNumberOfMessages=10,
            MessageSystemAttributeNames=["All"],
            VisibilityTimeout=3600,
        ).get("Messages", []):
            for message in received:
                messages[task_latency[json.loads(message["Body"])["task_id"]]].append(message)
        items = {}
        for table in TABLES:
            name = table.default_name("dynacron")
            pages = dynamodb.get_paginator("scan").paginate(TableName=name, ConsistentRead=True)
            items[name] = [item for page in pages for item in page["Items"]]
    return Fires(items, messages)


def run_shape(fires: Fires, shape: Shape, latency: float) -> dict[str, Any]:
    """Batches of ``shape`` at ``latency``: each invocation's wall time and CPU."""
    double = AwsDouble(latency_seconds=DYNAMODB_LATENCY_MS / 1000)
    for table, items in fires.items.items():
        for item in items:
            double.put(table, item)
    dynamodb, sqs = double.clients()
    settings = double.settings(
        shard_count=1,
        delivery_allow_networks=LOOPBACK_NETWORKS,
        worker_concurrency=shape.concurrency,
    )
    clock = SettableClock(datetime.now(UTC))
    app = Dynacron(settings, dynamodb=dynamodb, sqs=sqs, clock=clock, emit_metrics=_ignore)
    batches = BATCHES[shape.name][latency] + 1
    messages = fires.messages[latency][: batches * shape.batch]
    assert len(messages) == batches * shape.batch, "register more tasks"
    invocations = []
    for start in range(0, len(messages), shape.batch):
        batch = messages[start : start + shape.batch]
        context = LocalContext("bench-worker", timeout_seconds=INVOCATION_SECONDS)
        model_before, cpu_before = double.model_cpu_seconds, time.process_time()
        began = time.perf_counter()
        answer = app.worker(sqs_event(batch, QUEUE_ARN), context)
        wall = time.perf_counter() - began
        cpu = time.process_time() - cpu_before - (double.model_cpu_seconds - model_before)
        assert answer == {"batchItemFailures": []}, answer
        invocations.append({"records": len(batch), "wall": wall, "cpu": cpu})
    for message in messages:
        execution = app.executions.get(json.loads(message["Body"])["execution_id"])
        assert execution is not None, message
        assert execution.status is ExecutionStatus.SUCCEEDED, execution
    measured = invocations[1:]  # the first warmed the worker up
    fires_run = sum(i["records"] for i in measured)
    wall = sum(i["wall"] for i in measured)
    cpu = sum(i["cpu"] for i in measured)

    def gb_seconds_per_fire(memory_mb: int) -> float:
        seconds = sum(lambda_seconds(i, memory_mb, shape.concurrency) for i in measured)
        return round(memory_mb / 1024 * seconds / fires_run, 7)

    return {
        "shape": shape.name,
        "memory_mb": shape.memory_mb,
        "concurrency": shape.concurrency,
        "batch": shape.batch,
        "handler_seconds": latency,
        "invocations": len(measured),
        "fires": fires_run,
        "wall_seconds_per_fire": round(wall / fires_run, 5),
        "cpu_ms_per_fire": round(1000 * cpu / fires_run, 3),
        # A whole core, as here.
        "gb_seconds_per_fire_here": round(shape.memory_mb / 1024 * wall / fires_run, 7),
        # At Lambda's CPU share for the memory.
        "gb_seconds_per_fire": gb_seconds_per_fire(shape.memory_mb),
        "gb_seconds_per_fire_by_memory": {
            str(memory): gb_seconds_per_fire(memory) for memory in MEMORY_SWEEP_MB
        },
        "aws_calls_per_fire": {
            name: round(count / (batches * shape.batch), 2) for name, count in double.calls.items()
        },
    }


def lambda_runs() -> list[dict[str, Any]]:
    per_latency = max(
        (BATCHES[shape.name][latency] + 1) * shape.batch
        for shape in SHAPES
        for latency in LATENCIES
    )
    with handler_process() as handler_url:
        fires = claimed_fires(handler_url, per_latency)
        runs = []
        for latency in LATENCIES:
            for shape in SHAPES:
                runs.append(run_shape(fires, shape, latency))
                print({k: v for k, v in runs[-1].items() if k != "aws_calls_per_fire"}, flush=True)
    return runs


def local_burst(tasks: int, options: list[str]) -> dict[str, Any]:
    """``tasks`` one-time tasks due in one second, through ``dynacron local`` on SQLite,
    against a loopback handler that answers each call ``LOCAL_HANDLER_SECONDS`` late."""
    handler = LoopbackHandler().start()
    local: Service | None = None
    data_dir = tempfile.TemporaryDirectory(prefix="dynacron-bench-")
    try:
        due = datetime.fromtimestamp(int(time.time()) + 15, UTC)
        url = handler.url + sleeping_path(LOCAL_HANDLER_SECONDS).rstrip("/")
        write_due_tasks_sqlite(Path(data_dir.name), due_tasks(tasks, due, url), due)
        command = ["-m", "dynacron.cli.main", "local", "--port", str(free_port())]
        local = Service([*command, "--data-dir", data_dir.name, *options], "is running")
        wait_until(
            lambda: len(handler.arrivals) >= tasks,
            timeout=due.timestamp() - time.time() + 60 + tasks * LOCAL_HANDLER_SECONDS,
            interval=0.2,
        )
        arrivals = list(handler.arrivals)
    finally:
        if local is not None:
            local.stop()
        handler.stop()
        data_dir.cleanup()
    started = sorted(a.received_at for a in arrivals)
    unique = {a.body["execution_id"] for a in arrivals}
    # Calls in flight at once: those that arrived within one handler call of each other.
    in_flight = max(
        (
            sum(1 for later in started[i:] if later < first + LOCAL_HANDLER_SECONDS)
            for i, first in enumerate(started)
        ),
        default=0,
    )
    return {
        "options": " ".join(options) or "(the defaults)",
        "tasks": tasks,
        "handler_seconds": LOCAL_HANDLER_SECONDS,
        "delivered": len(arrivals),
        "lost": tasks - len(unique),
        "duplicates": len(arrivals) - len(unique),
        # From the due second until the last call was answered.
        "drain_seconds": round(started[-1] + LOCAL_HANDLER_SECONDS - due.timestamp(), 2)
        if started
        else None,
        "calls_in_flight_at_most": in_flight,
    }


def local_runs() -> list[dict[str, Any]]:
    tasks = 100 if QUICK else 400
    runs = []
    for options in (
        ["--workers", "4", "--batch-size", "10", "--worker-concurrency", "1"],
        [],
    ):
        runs.append(local_burst(tasks, options))
        print(runs[-1], flush=True)
    return runs


def _ignore(document: Any) -> None:
    """Metrics are not what is measured."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--only", choices=("lambda", "local"))
    args = parser.parse_args()
    result: dict[str, Any] = {
        "dynamodb_latency_ms": DYNAMODB_LATENCY_MS,
        "full_vcpu_memory_mb": FULL_VCPU_MEMORY_MB,
        "before": BEFORE.__dict__,
        "after": AFTER.__dict__,
        "planned": PLANNED.__dict__,
    }
    if args.only != "local":
        result["lambda"] = lambda_runs()
    if args.only != "lambda":
        result["local"] = local_runs()
    # With --only, the other part's last results are kept (the date is this run's).
    previous = RESULTS / "overlap.json"
    if args.only and previous.exists():
        kept = json.loads(previous.read_text())
        result = {**{part: kept[part] for part in ("lambda", "local") if part in kept}, **result}
    write_result("overlap", result)


if __name__ == "__main__":
    main()
