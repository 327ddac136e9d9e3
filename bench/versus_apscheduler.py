"""Side by side: dynacron local mode, APScheduler 3.11 and Huey, each on SQLite,
running the same HTTP job against the same kind of sink, one after the other in one run.

10,000 one-time jobs due at the same second. Each job POSTs a small JSON body to a
minimal loopback handler (``bench.loopback``): dynacron's through its worker
(signed, with its queue message and execution record), APScheduler's and Huey's
from a job function with a keep-alive httpx client per thread. APScheduler runs
with its SQLAlchemy job store on a SQLite file and its default pool of 10 threads
(``misfire_grace_time=None``, so every job runs however late); Huey with its SQLite
storage and a consumer of 10 worker threads. Each scheduler runs in a process of
its own; the handler is in this one. Reports drain time (due second to the last
call received), lateness, and the scheduler's CPU (its processes, from the due
second to the last call) per job.

Run: .venv/bin/python -m bench.versus_apscheduler [--jobs 10000]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from bench.burst import TreeCpu, run_burst
from bench.common import QUICK, distribution, write_result
from bench.loopback import LoopbackHandler
from bench.processes import Service, wait_until
from dynacron.domain.instants import format_instant, parse_instant

THREADS = 10  # APScheduler's default pool; Huey's consumer is given as many
_client = threading.local()


def post_job(url: str, body: dict[str, Any]) -> None:
    """The job both schedulers run: POST ``body`` as JSON to ``url``."""
    client = getattr(_client, "client", None)
    if client is None:
        client = _client.client = httpx.Client(trust_env=False, timeout=10)
    client.post(url, content=json.dumps(body), headers={"Content-Type": "application/json"})


def job_bodies(jobs: int, due: datetime) -> list[dict[str, Any]]:
    return [{"execution_id": f"job-{n}", "scheduled_at": format_instant(due)} for n in range(jobs)]


def serve_apscheduler(url: str, jobs: int, due: datetime, directory: Path) -> None:
    from apscheduler.executors.pool import ThreadPoolExecutor
    from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
    from apscheduler.schedulers.background import BackgroundScheduler

    scheduler = BackgroundScheduler(
        jobstores={"default": SQLAlchemyJobStore(url=f"sqlite:///{directory / 'jobs.sqlite'}")},
        executors={"default": ThreadPoolExecutor(THREADS)},
        # Run every job however late: lost jobs would flatter the drain time.
        job_defaults={"misfire_grace_time": None, "coalesce": False},
        timezone=UTC,
    )
    # Paused while the jobs are added: each add would otherwise wake the scheduler.
    scheduler.start(paused=True)
    for number, body in enumerate(job_bodies(jobs, due)):
        scheduler.add_job(
            "bench.versus_apscheduler:post_job",
            trigger="date",
            run_date=due,
            args=[url, body],
            id=f"job-{number}",
        )
    scheduler.resume()
    print("ready", flush=True)
    threading.Event().wait()


def serve_huey(url: str, jobs: int, due: datetime, directory: Path) -> None:
    from huey import SqliteHuey

    huey = SqliteHuey("versus", filename=str(directory / "huey.sqlite"))
    task = huey.task()(post_job)
    for body in job_bodies(jobs, due):
        task.schedule(args=(url, body), eta=due)
    consumer = huey.create_consumer(workers=THREADS, worker_type="thread")
    print("ready", flush=True)
    consumer.run()


SCHEDULERS = {"apscheduler": serve_apscheduler, "huey": serve_huey}


def run_scheduler(name: str, jobs: int) -> dict[str, Any]:
    """``jobs`` due at one second, run by scheduler ``name`` in a process of its own."""
    handler = LoopbackHandler().start()
    directory = tempfile.TemporaryDirectory(prefix=f"versus-{name}-")
    # Adding a job is a SQLite transaction each: some milliseconds on a busy machine
    # (APScheduler's 10,000 took 136 s at a load average of 5-6).
    due = datetime.fromtimestamp(int(time.time() + 15 + jobs * 0.02), UTC)
    began = time.time()
    serve = ["--serve", name, "--url", f"{handler.url}/job", "--jobs", str(jobs)]
    serve += ["--due", format_instant(due), "--directory", directory.name]
    child = Service(["-m", "bench.versus_apscheduler", *serve], "ready")
    try:
        added_seconds = time.time() - began
        if time.time() > due.timestamp():
            raise SystemExit(
                f"{name}: adding {jobs} jobs took {added_seconds:.0f}s: raise the margin"
            )
        cpu = TreeCpu(child.process.pid)
        time.sleep(max(0.0, due.timestamp() - time.time()))
        cpu_at_due = cpu.sample()
        wait_until(lambda: len(handler.arrivals) >= jobs, timeout=300, interval=0.05)
        cpu_seconds = cpu.sample() - cpu_at_due
        cpu.stop()
    finally:
        child.stop()
        handler.stop()
        directory.cleanup()
    return summary(list(handler.arrivals), jobs, due, added_seconds, cpu_seconds)


def summary(
    arrivals: list[Any], jobs: int, due: datetime, added_seconds: float, cpu_seconds: float
) -> dict[str, Any]:
    unique = {a.body["execution_id"] for a in arrivals}
    after_due = sorted(a.received_at - due.timestamp() for a in arrivals)
    lateness = [a.received_at - parse_instant(a.body["scheduled_at"]).timestamp() for a in arrivals]
    return {
        "jobs": jobs,
        "ran": len(unique),
        "duplicates": len(arrivals) - len(unique),
        "added_seconds": round(added_seconds, 1),
        "drain_seconds": round(max(after_due), 3) if after_due else None,
        "cpu_seconds": round(cpu_seconds, 2),
        "cpu_ms_per_job": round(1000 * cpu_seconds / max(1, len(unique)), 3),
        "lateness_seconds": distribution(lateness),
        "arrivals": [round(a, 3) for a in after_due],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=2000 if QUICK else 10_000)
    parser.add_argument("--serve", choices=sorted(SCHEDULERS), help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--due", help=argparse.SUPPRESS)
    parser.add_argument("--directory", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        SCHEDULERS[args.serve](args.url, args.jobs, parse_instant(args.due), Path(args.directory))
        return
    results: dict[str, Any] = {"jobs": args.jobs, "threads": THREADS}
    for name in SCHEDULERS:
        results[name] = run_scheduler(name, args.jobs)
        print(name, {k: v for k, v in results[name].items() if k != "arrivals"}, flush=True)
    dynacron = run_burst(args.jobs, "sqlite")
    results["dynacron"] = {
        **dynacron,
        "ran": dynacron["unique_executions"],
        "cpu_ms_per_job": dynacron["cpu_ms_per_fire"],
    }
    print("dynacron", {k: v for k, v in dynacron.items() if k != "arrivals"}, flush=True)
    write_result("versus_apscheduler", results)


if __name__ == "__main__":
    sys.exit(main())
