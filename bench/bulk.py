"""Ten million tasks, locally: how fast they go in, and (figures added per feature)
what a person then does with them.

For each size (100,000 and 1,000,000 tasks; 10,000 with BENCH_QUICK=1), a fresh
``dynacron local`` on a temporary data directory (SQLite, its default
durability), the default tenant's task limit raised with ``dynacron tenants
set-limits``, and a JSON Lines file of that many cron tasks (a minute and hour
spread over the day, a tag each). Then each figure of ``FIGURES`` runs in turn
against the loaded instance, in order, and returns its own dict:

- ``import``: ``dynacron tasks import FILE`` as a process of its own (batches of
  100, ``--concurrency`` in flight): tasks a second, wall time, and the CPU seconds
  local mode and the CLI spent (on this shared 2-core machine both compete).

A figure is one function ``(Loaded) -> dict``; add yours to ``FIGURES`` and a
renderer to ``bench.report``'s bulk section.

Run: .venv/bin/python -m bench.bulk [--sizes 100000,1000000] [--concurrency 4]
BENCH_QUICK=1: 10,000 tasks. The 1,000,000 size imports every task through the CLI,
as the 100,000 one does (no seeding around the API): some 9 minutes at 2,000
tasks/s on a quiet machine, an hour at the 260/s a machine at load 20 gave.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil

from bench.common import QUICK, write_result
from bench.processes import ROOT, Service, free_port
from dynacron.domain.coordination.tenants import DEFAULT_TENANT

GOAL_TASKS_PER_SECOND = 2000
HOOK = "http://127.0.0.1:9/hook"


@dataclass
class Loaded:
    """``dynacron local`` on ``data_dir``, with ``tasks`` tasks once ``import`` ran."""

    api: str
    data_dir: Path
    lines: Path
    tasks: int
    service: Service
    concurrency: int

    def cpu_seconds(self) -> float:
        """CPU spent so far by local mode's process and its worker processes."""
        process = psutil.Process(self.service.process.pid)
        total = 0.0
        for one in [process, *process.children(recursive=True)]:
            try:
                times = one.cpu_times()
            except psutil.NoSuchProcess:
                continue
            total += times.user + times.system
        return total


def dynacron(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dynacron.cli.main", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )


def task_line(number: int) -> str:
    body = {
        "name": f"task-{number:08d}",
        "cron": f"{number % 60} {number // 60 % 24} * * *",
        "handler_url": HOOK,
        "tags": {"team": f"team-{number % 10}"},
    }
    return json.dumps(body, separators=(",", ":"))


def write_lines(path: Path, count: int) -> Path:
    with path.open("w") as sink:
        for number in range(1, count + 1):
            sink.write(task_line(number) + "\n")
    return path


@contextmanager
def local_mode(root: Path, tasks: int, concurrency: int) -> Iterator[Loaded]:
    data_dir = root / "data"
    port = free_port()
    service = Service(
        ["-m", "dynacron.cli.main", "local", "--port", str(port), "--data-dir", str(data_dir)],
        "is running",
    )
    try:
        limits = dynacron(
            "tenants",
            "set-limits",
            DEFAULT_TENANT,
            "--max-tasks",
            str(max(tasks, 10_000)),
            "--data-dir",
            str(data_dir),
        )
        if limits.returncode != 0:
            raise RuntimeError(f"set-limits failed: {limits.stdout}{limits.stderr}")
        lines = write_lines(root / "tasks.jsonl", tasks)
        yield Loaded(f"http://127.0.0.1:{port}", data_dir, lines, tasks, service, concurrency)
    finally:
        service.stop()


def import_rate(loaded: Loaded) -> dict[str, Any]:
    """``dynacron tasks import`` of the whole file into the fresh instance."""
    server_before = loaded.cpu_seconds()
    client_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.monotonic()
    run = dynacron(
        "tasks",
        "--url",
        loaded.api,
        "--json",
        "import",
        str(loaded.lines),
        "--concurrency",
        str(loaded.concurrency),
    )
    seconds = time.monotonic() - began
    client_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if run.returncode != 0:
        raise RuntimeError(f"import failed: {run.stdout[-2000:]}{run.stderr[-2000:]}")
    report = json.loads(run.stdout)
    if report["created"] != loaded.tasks:
        raise RuntimeError(f"import created {report['created']} of {loaded.tasks}")
    client_cpu = (client_after.ru_utime + client_after.ru_stime) - (
        client_before.ru_utime + client_before.ru_stime
    )
    return {
        "tasks": loaded.tasks,
        "concurrency": loaded.concurrency,
        "seconds": round(seconds, 2),
        "tasks_per_second": round(loaded.tasks / seconds),
        "local_cpu_seconds": round(loaded.cpu_seconds() - server_before, 2),
        "cli_cpu_seconds": round(client_cpu, 2),
        "goal_tasks_per_second": GOAL_TASKS_PER_SECOND,
    }


def _timed_gets(loaded: Loaded, path: str, params: dict[str, str], times: int) -> list[float]:
    """Seconds each of ``times`` GETs of ``path`` took over HTTP, answered 200."""
    seconds = []
    with httpx.Client(base_url=loaded.api, timeout=60.0) as client:
        for _ in range(times):
            began = time.perf_counter()
            answer = client.get(path, params=params)
            seconds.append(time.perf_counter() - began)
            answer.raise_for_status()
    return seconds


def name_lookup(loaded: Loaded) -> dict[str, Any]:
    """``GET /tasks?name_prefix=`` for one imported task's whole name, over HTTP,
    among all of them (the done-when: under a second)."""
    wanted = f"task-{loaded.tasks // 2 + 1:08d}"
    with httpx.Client(base_url=loaded.api, timeout=60.0) as client:
        found = client.get("/tasks", params={"name_prefix": wanted}).json()["items"]
    if [task["name"] for task in found] != [wanted]:
        raise RuntimeError(f"name_prefix={wanted} found {[t['name'] for t in found]}")
    seconds = sorted(_timed_gets(loaded, "/tasks", {"name_prefix": wanted}, 20))
    return {
        "tasks": loaded.tasks,
        "median_ms": round(seconds[len(seconds) // 2] * 1000, 1),
        "max_ms": round(seconds[-1] * 1000, 1),
        "goal_ms": 1000,
    }


def forecast_time(loaded: Loaded) -> dict[str, Any]:
    """``GET /forecast?hours=24`` of the tenant holding every imported task: how long
    it takes and whether it is complete (decision 0046)."""
    seconds = _timed_gets(loaded, "/forecast", {"hours": "24"}, 3)
    with httpx.Client(base_url=loaded.api, timeout=60.0) as client:
        answer = client.get("/forecast", params={"hours": "24"}).json()
    return {
        "tasks": loaded.tasks,
        "median_s": round(sorted(seconds)[1], 2),
        "complete": answer.get("complete"),
        "not_counted": answer.get("not_counted"),
        "tasks_counted": answer.get("tasks"),
        "executions": sum(m["executions"] for m in answer.get("per_minute", [])),
        "budget_s": 29,
    }


# Each figure runs on the loaded instance, in this order ("import" first: it loads it).
FIGURES: list[tuple[str, Callable[[Loaded], dict[str, Any]]]] = [
    ("import", import_rate),
    ("lookup", name_lookup),
    ("forecast", forecast_time),
]


def run_size(tasks: int, concurrency: int) -> dict[str, Any]:
    with (
        tempfile.TemporaryDirectory(prefix="dynacron-bulk-") as root,
        local_mode(Path(root), tasks, concurrency) as loaded,
    ):
        figures: dict[str, Any] = {"tasks": tasks}
        for name, figure in FIGURES:
            figures[name] = figure(loaded)
            print(f"{tasks:,} tasks, {name}: {figures[name]}", flush=True)
        return figures


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_sizes = "10000" if QUICK else "100000,1000000"
    parser.add_argument("--sizes", default=default_sizes, help="Comma-separated task counts")
    parser.add_argument("--concurrency", type=int, default=4, help="Batches in flight")
    parser.add_argument(
        "--results",
        type=Path,
        default=None,
        help="Write bulk.json into this directory, not bench/results (a side-by-side run "
        "that must leave the committed figures alone)",
    )
    args = parser.parse_args(argv)
    sizes = [int(size) for size in args.sizes.split(",") if size.strip()]
    runs = [run_size(size, args.concurrency) for size in sizes]
    command = "python -m bench.bulk" + (" ".join(["", *argv]) if argv else "")
    print(write_result("bulk", {"command": command, "runs": runs}, args.results))


if __name__ == "__main__":
    main(sys.argv[1:])
