"""Tick capacity: the tick's own CPU per claim, and claims/s per shard at Lambda's CPU shares.

Lambda gives a function CPU in proportion to its memory: one vCPU at 1,769 MB,
a share of one below (128 MB: 7 %). The tick is CPU-bound (section 4), so what
a shard claims per second follows its memory. Three measurements:

1. **CPU per claim, emulator out of process.** The embedded AWS (moto in
   server mode, ``python -m dynacron.local.aws``) runs in a child process on a
   loopback port; this process runs the real tick over real boto3 clients and
   real HTTP, and counts only its own CPU (``resource.getrusage``, every
   thread) around the ticks that claim ``--tasks`` due tasks. moto's CPU is in
   the other process, so it is not counted; TLS is not either (plain HTTP on
   loopback). At ``tick_concurrency`` 1 and the default.
2. **Derived claims/s per shard** at 128, 512, 1,024 and 1,769 MB, from that
   CPU per claim and an assumed round trip (``dynacron.planning.capacity``, the
   same model ``dynacron plan`` uses).
3. **Measured claims/s under a CPU limit**: a child process ticks against the
   AWS double (``bench/aws_double.py``, 10 ms per call) inside a cgroup whose
   CPU quota is the Lambda's share (``cpu.cfs_quota_us`` of cgroup v1, or
   ``cpu.max`` of v2). The double's model runs in that process too; its CPU is
   measured without a limit first and the quota is raised by its share, so the
   tick's own code gets the Lambda's share. Needs root and a writable cgroup
   hierarchy; without them the rows say why they are missing.
4. **The same, the double over HTTP in its own process**: the double's model
   served on a loopback port by a child process (``--serve-double``), so the
   tick in the cgroup pays its real client and HTTP CPU and none of the
   stand-in's. The closest to a deployed tick short of TLS. At the smallest
   memory the tick is also measured against moto in its own process.

Run: .venv/bin/python -m bench.capacity
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

from bench.aws_double import AwsDouble
from bench.common import QUICK, write_result
from bench.throughput import NOW, due_items, warm
from dynacron.adapters.aws.cursors import DynamoCursorStore
from dynacron.domain.clock import SettableClock
from dynacron.domain.coordination import transitions
from dynacron.entry.composition import Dynacron
from dynacron.entry.settings import Settings
from dynacron.local.aws import aws_clients, provision
from dynacron.planning import capacity_model

MEMORIES_MB = (128, 512, 1024, 1769)
CFS_PERIOD_US = 100_000
CGROUP_NAME = "dynacron-bench-capacity"
DOUBLE_LATENCY_MS = 10


def process_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@contextmanager
def serving(*args: str) -> Iterator[str]:
    """``python -m <args>`` in a child process on a loopback port, which prints
    "... listening on <endpoint>" when ready; yields the endpoint."""
    child = subprocess.Popen([sys.executable, "-m", *args], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        if "listening on" not in line:
            raise RuntimeError(f"{args[0]} did not start: {line!r}")
        yield line.rsplit(" ", 1)[-1].strip()
    finally:
        child.terminate()
        child.wait(timeout=10)


def emulator_process() -> AbstractContextManager[str]:
    """The embedded AWS in a child process on a loopback port."""
    return serving("dynacron.local.aws", "--port", "0")


def claim_all(app: Dynacron, tasks: int, cgroup: str | None) -> tuple[int, int, float, float]:
    """Tick shard 0 until ``tasks`` are claimed (at most 10 ticks), in ``cgroup`` if
    given (joined after the clients are warm): claimed, ticks, seconds, CPU seconds."""
    warm(app)
    if cgroup:
        Path(cgroup, "cgroup.procs").write_text(str(os.getpid()))
    claimed = ticks = 0
    began, cpu = time.perf_counter(), process_cpu_seconds()
    while claimed < tasks and ticks < 10:
        claimed += app.ticker.tick_shard(0).claimed
        ticks += 1
    seconds = time.perf_counter() - began
    cpu = process_cpu_seconds() - cpu
    assert claimed == tasks, f"{claimed} of {tasks} claimed"
    return claimed, ticks, seconds, cpu


def measure_out_of_process(
    endpoint: str, tasks: int, concurrency: int, cgroup: str | None = None
) -> dict[str, Any]:
    """The tick's own CPU per claim against the emulator in another process; in
    ``cgroup`` (joined after the tasks are written), if given."""
    dynamodb, sqs = aws_clients(endpoint)
    clock = SettableClock(NOW)
    prefix = f"cap{uuid.uuid4().hex[:8]}"  # fresh tables and queue for every run
    settings = provision(
        dynamodb,
        sqs,
        prefix=prefix,
        clock=clock,
        shard_count=1,
        tick_concurrency=concurrency,
        tick_max_claims=tasks,
        tick_max_claims_per_task=1,
    )
    items = due_items(tasks, settings, seed=concurrency)
    for first in range(0, len(items), 25):
        dynamodb.batch_write_item(
            RequestItems={
                settings.tasks_table: [
                    {"PutRequest": {"Item": item}} for item in items[first : first + 25]
                ]
            }
        )
    app = Dynacron(settings, dynamodb=dynamodb, sqs=sqs, clock=clock)
    claimed, ticks, seconds, cpu = claim_all(app, tasks, cgroup)
    return {
        "simulation": "moto server in another process, loopback HTTP",
        "tick_concurrency": concurrency,
        "claimed": claimed,
        "ticks": ticks,
        "seconds": round(seconds, 2),
        "tick_cpu_seconds": round(cpu, 3),
        "tick_cpu_ms_per_claim": round(1000 * cpu / claimed, 3),
        # Unlimited, this is the emulator's pace, not the tick's: moto spends
        # milliseconds on each call.
        "claims_per_second": round(claimed / seconds, 1),
    }


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median CPU per claim, with the range of all of them (the
    machine is shared: other processes' load raises the CPU a claim takes)."""
    ordered = sorted(runs, key=lambda r: r["tick_cpu_ms_per_claim"])
    cpu = [r["tick_cpu_ms_per_claim"] for r in ordered]
    return {
        **ordered[len(ordered) // 2],
        "repeats": len(runs),
        "tick_cpu_ms_per_claim_range": [cpu[0], cpu[-1]],
    }


# CPU-limited ticks


def cgroup_directory() -> tuple[Path | None, str]:
    """A cgroup this process may create and limit, and how it limits CPU ("v1"/"v2")."""
    if os.geteuid() != 0:
        return None, "not root: no cgroup to limit the CPU with"
    v1 = Path("/sys/fs/cgroup/cpu")
    if (v1 / "cpu.cfs_quota_us").exists() and os.access(v1, os.W_OK):
        return v1 / CGROUP_NAME, "v1"
    for root in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified")):
        controllers = root / "cgroup.controllers"
        has_cpu = controllers.exists() and "cpu" in controllers.read_text().split()
        if has_cpu and os.access(root, os.W_OK):
            return root / CGROUP_NAME, "v2"
    return None, "no writable cgroup with the cpu controller"


def limit_cpu(directory: Path, version: str, share: float) -> None:
    directory.mkdir(exist_ok=True)
    quota = max(1000, round(share * CFS_PERIOD_US))
    if version == "v1":
        (directory / "cpu.cfs_period_us").write_text(str(CFS_PERIOD_US))
        (directory / "cpu.cfs_quota_us").write_text(str(quota))
    else:
        (directory / "cpu.max").write_text(f"{quota} {CFS_PERIOD_US}")


def limited_child(tasks: int, concurrency: int, cgroup: str | None) -> dict[str, Any]:
    """In the child: fill the double, join the cgroup (if any), tick until all are claimed."""
    double = AwsDouble(latency_seconds=0.0)
    settings: Settings = double.settings(
        shard_count=1,
        tick_concurrency=concurrency,
        tick_max_claims=tasks,
        tick_max_claims_per_task=1,
    )
    dynamodb, sqs = double.clients()
    DynamoCursorStore(dynamodb, settings.coordination_table).apply(
        0, transitions.advance_cursor(settings.sharding.bucket(NOW))
    )
    for item in due_items(tasks, settings, seed=1):
        double.put(settings.tasks_table, item)
    app = Dynacron(settings, dynamodb=dynamodb, sqs=sqs, clock=SettableClock(NOW))
    warm(app)
    double.latency_seconds = DOUBLE_LATENCY_MS / 1000
    if cgroup:
        # Setup ran at full speed; only the ticks run under the limit.
        Path(cgroup, "cgroup.procs").write_text(str(os.getpid()))
    claimed = ticks = 0
    began, cpu, model = time.perf_counter(), process_cpu_seconds(), double.model_cpu_seconds
    while claimed < tasks and ticks < 10:
        claimed += app.ticker.tick_shard(0).claimed
        ticks += 1
    seconds = time.perf_counter() - began
    cpu = process_cpu_seconds() - cpu
    model = double.model_cpu_seconds - model
    assert claimed == tasks, f"{claimed} of {tasks} claimed"
    return {
        "claimed": claimed,
        "seconds": seconds,
        "cpu_seconds": cpu,
        "model_cpu_seconds": model,
    }


def run_child(
    tasks: int,
    concurrency: int,
    cgroup: Path | None,
    endpoint: str | None = None,
    *,
    served: bool = False,
) -> dict[str, Any]:
    command = [sys.executable, "-m", "bench.capacity", "--child", str(tasks), str(concurrency)]
    if endpoint is not None:
        command += ["--endpoint", endpoint]
    if served:
        command += ["--served-double"]
    if cgroup is not None:
        command += ["--cgroup", str(cgroup)]
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def measure_limited_against_moto(
    endpoint: str, concurrency: int, emulator_pace: float, seconds_each: float
) -> dict[str, Any] | None:
    """claims/s at the smallest memory under its CPU limit, against moto in its own
    process: real HTTP, and no model in the tick's process. Only the smallest:
    moto answers some 50-80 claims/s by itself, so a larger share would measure moto
    (its unlimited pace is kept beside the row to judge by)."""
    directory, version = cgroup_directory()
    if directory is None:
        return None
    memory = MEMORIES_MB[0]
    try:
        limit_cpu(directory, version, capacity_model.cpu_share(memory))
        expected = capacity_model.claims_per_second_per_shard(memory, concurrency)
        tasks = max(200, int(expected * seconds_each))
        run = run_child(tasks, concurrency, directory, endpoint)
    finally:
        if directory.exists():
            directory.rmdir()
    row = {"memory_mb": memory, "emulator_pace_claims_per_second": emulator_pace, **run}
    print(f"  limited {memory} MB against moto: {row}", flush=True)
    return row


def measure_limited(concurrency: int, seconds_each: float) -> dict[str, Any]:
    """claims/s of one shard at each Lambda memory, the CPU limited by a cgroup."""
    directory, version = cgroup_directory()
    # Unlimited first: how much of the process's CPU is the double's model.
    free = run_child(max(500, int(700 * seconds_each)), concurrency, None)
    model_share = free["model_cpu_seconds"] / free["cpu_seconds"]
    unlimited = {
        "claims_per_second": round(free["claimed"] / free["seconds"], 1),
        "tick_cpu_ms_per_claim": round(
            1000 * (free["cpu_seconds"] - free["model_cpu_seconds"]) / free["claimed"], 3
        ),
        "model_share_of_cpu": round(model_share, 3),
    }
    if directory is None:
        return {"possible": False, "why_not": version, "unlimited": unlimited, "rows": []}
    rows = []
    try:
        for memory in MEMORIES_MB:
            share = capacity_model.cpu_share(memory)
            # The quota covers the tick and the model: the tick's part is the Lambda's share.
            quota_share = min(1.0, share / (1 - model_share))
            limit_cpu(directory, version, quota_share)
            expected = capacity_model.claims_per_second_per_shard(memory, concurrency)
            tasks = max(200, int(expected * seconds_each))
            run = run_child(tasks, concurrency, directory)
            rows.append(
                {
                    "memory_mb": memory,
                    "cpu_share": round(share, 4),
                    "quota_share_with_model": round(quota_share, 4),
                    "claimed": run["claimed"],
                    "seconds": round(run["seconds"], 2),
                    "claims_per_second": round(run["claimed"] / run["seconds"], 1),
                    "tick_cpu_ms_per_claim": round(
                        1000 * (run["cpu_seconds"] - run["model_cpu_seconds"]) / run["claimed"], 3
                    ),
                }
            )
            print(f"  limited {memory} MB: {rows[-1]}", flush=True)
    finally:
        if directory.exists():
            directory.rmdir()
    return {
        "possible": True,
        "cgroup": version,
        "cfs_period_us": CFS_PERIOD_US,
        "latency_ms": DOUBLE_LATENCY_MS,
        "unlimited": unlimited,
        "rows": rows,
    }


# The AWS double served over loopback HTTP from its own process


@dataclass
class _Request:
    url: str
    body: bytes


def serve_double(tasks: int, latency_ms: float) -> None:
    """In a child process: an AWS double holding ``tasks`` due tasks, answering real
    HTTP on a loopback port ``latency_ms`` after each request arrived; prints the
    endpoint, then serves until killed."""
    double = AwsDouble(latency_seconds=0.0)
    settings = double.settings(shard_count=1)
    dynamodb, _ = double.clients()
    DynamoCursorStore(dynamodb, settings.coordination_table).apply(
        0, transitions.advance_cursor(settings.sharding.bucket(NOW))
    )
    for item in due_items(tasks, settings, seed=1):
        double.put(settings.tasks_table, item)
    double.latency_seconds = latency_ms / 1000

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: the tick's pool reuses connections
        # One write per answer, sent at once: headers and body in two small writes
        # would wait for the client's delayed acknowledgement (some 40 ms).
        wbufsize = -1
        disable_nagle_algorithm = True

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            target = self.headers.get("X-Amz-Target", "")
            prefix, _, operation = target.partition(".")
            service = "dynamodb" if prefix.startswith("DynamoDB") else "sqs"
            answer = double._answer(
                _Request(url=self.path, body=body), f"before-send.{service}.{operation}"
            )
            content = answer.raw.getvalue()
            self.send_response(answer.status_code)
            for name, value in answer.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(content)

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(f"double listening on http://127.0.0.1:{server.server_port}", flush=True)
    server.serve_forever()


def double_process(tasks: int) -> AbstractContextManager[str]:
    """The bench's AWS double, ``tasks`` due, in a child process on a loopback port."""
    return serving("bench.capacity", "--serve-double", str(tasks))


def tick_served_double(
    endpoint: str, tasks: int, concurrency: int, cgroup: str | None
) -> dict[str, Any]:
    """In a child: tick the double served at ``endpoint`` until ``tasks`` are claimed,
    in ``cgroup`` if given (joined after the clients are warm)."""
    settings = AwsDouble(latency_seconds=0.0).settings(
        shard_count=1,
        tick_concurrency=concurrency,
        tick_max_claims=tasks,
        tick_max_claims_per_task=1,
    )
    config = Config(max_pool_connections=max(10, concurrency))
    dynamodb, sqs = (
        boto3.client(
            service,
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id="double",
            aws_secret_access_key="double",
            config=config,
        )
        for service in ("dynamodb", "sqs")
    )
    app = Dynacron(settings, dynamodb=dynamodb, sqs=sqs, clock=SettableClock(NOW))
    claimed, _, seconds, cpu = claim_all(app, tasks, cgroup)
    return {
        "claimed": claimed,
        "seconds": round(seconds, 2),
        "claims_per_second": round(claimed / seconds, 1),
        "tick_cpu_ms_per_claim": round(1000 * cpu / claimed, 3),
    }


def measure_limited_over_http(concurrency: int, seconds_each: float) -> dict[str, Any]:
    """claims/s at each memory's CPU share, the double in its own process over HTTP:
    the tick pays its real client and HTTP CPU, and nothing of the stand-in's."""
    directory, version = cgroup_directory()
    free_tasks = max(500, int(300 * seconds_each))
    with double_process(free_tasks) as endpoint:
        unlimited = run_child(free_tasks, concurrency, None, endpoint, served=True)
    print(f"  double over HTTP, unlimited: {unlimited}", flush=True)
    if directory is None:
        return {"possible": False, "why_not": version, "unlimited": unlimited, "rows": []}
    rows = []
    try:
        for memory in MEMORIES_MB:
            limit_cpu(directory, version, capacity_model.cpu_share(memory))
            expected = capacity_model.claims_per_second_per_shard(memory, concurrency)
            tasks = max(200, int(expected * seconds_each))
            with double_process(tasks) as endpoint:
                run = run_child(tasks, concurrency, directory, endpoint, served=True)
            rows.append({"memory_mb": memory, **run})
            print(f"  double over HTTP, limited {memory} MB: {rows[-1]}", flush=True)
    finally:
        if directory.exists():
            directory.rmdir()
    return {"possible": True, "latency_ms": DOUBLE_LATENCY_MS, "unlimited": unlimited, "rows": rows}


def derived_rows(cpu_ms_per_claim: float, concurrency: int) -> list[dict[str, Any]]:
    """The model's claims/s at each memory: from this run's CPU per claim, and from
    the figure the plan uses (``capacity_model.MEASURED``)."""
    model = capacity_model.TickModel(tick_cpu_ms_per_claim=cpu_ms_per_claim)
    plan_model = capacity_model.TickModel()
    return [
        {
            "memory_mb": memory,
            "cpu_share": round(capacity_model.cpu_share(memory), 4),
            "cpu_bound_claims_per_second": round(model.cpu_bound(memory), 1),
            "io_bound_claims_per_second": round(model.io_bound(concurrency), 1),
            "claims_per_second": round(model.claims_per_second(memory, concurrency), 1),
            "plan_claims_per_second": round(plan_model.claims_per_second(memory, concurrency), 1),
        }
        for memory in MEMORIES_MB
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=500 if QUICK else 2000)
    parser.add_argument("--seconds-each", type=float, default=3.0 if QUICK else 8.0)
    parser.add_argument("--child", nargs=2, type=int, metavar=("TASKS", "CONCURRENCY"))
    parser.add_argument("--repeats", type=int, default=1 if QUICK else 3)
    parser.add_argument("--cgroup")
    parser.add_argument("--endpoint")
    parser.add_argument("--served-double", action="store_true")
    parser.add_argument("--serve-double", type=int, metavar="TASKS")
    args = parser.parse_args()
    if args.serve_double:
        serve_double(args.serve_double, DOUBLE_LATENCY_MS)
        return
    if args.child and args.served_double:
        print(json.dumps(tick_served_double(args.endpoint, *args.child, args.cgroup)))
        return
    if args.child and args.endpoint:
        print(json.dumps(measure_out_of_process(args.endpoint, *args.child, args.cgroup)))
        return
    if args.child:
        print(json.dumps(limited_child(*args.child, args.cgroup)))
        return
    default = Settings.tick_concurrency
    measured = []
    with emulator_process() as endpoint:
        for concurrency in (1, default):
            # One at a time is slow against moto: fewer tasks keep the run short.
            tasks = args.tasks // 4 if concurrency == 1 else args.tasks
            runs = []
            for _ in range(args.repeats):
                runs.append(measure_out_of_process(endpoint, tasks, concurrency))
                print(f"  out of process: {runs[-1]}", flush=True)
            measured.append(median_run(runs))
        full = next(m for m in measured if m["tick_concurrency"] == default)
        against_moto = measure_limited_against_moto(
            endpoint, default, full["claims_per_second"], args.seconds_each
        )
    limited = measure_limited(default, args.seconds_each)
    limited["against_moto"] = against_moto
    over_http = measure_limited_over_http(default, args.seconds_each)
    write_result(
        "capacity",
        {
            "memories_mb": list(MEMORIES_MB),
            "full_vcpu_memory_mb": capacity_model.FULL_VCPU_MEMORY_MB,
            "default_tick_concurrency": default,
            "assumed_latency_ms": {
                "dynamodb": capacity_model.DYNAMODB_LATENCY_MS,
                "sqs": capacity_model.SQS_LATENCY_MS,
            },
            "cpu_per_claim": measured,
            "model_tick_cpu_ms_per_claim": capacity_model.TickModel().tick_cpu_ms_per_claim,
            "derived": derived_rows(full["tick_cpu_ms_per_claim"], default),
            "limited": limited,
            "limited_over_http": over_http,
        },
    )


if __name__ == "__main__":
    main()
