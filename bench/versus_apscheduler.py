"""Side by side: dynacron local mode and APScheduler 3.11 (SQLAlchemy job store on SQLite).

1,000 one-time jobs due at the same second, no-op handlers, both in one run.
APScheduler's job is a Python function that only notes the time it started;
dynacron's is a loopback HTTP handler that does nothing (so dynacron also pays
an HTTP round trip per job, as it would deployed). Reports drain time (due
second to last start) and lateness, and their ratios.

Run: .venv/bin/python -m bench.versus_apscheduler [--jobs 1000]
"""

from __future__ import annotations

import argparse
import importlib
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.burst import run_burst
from bench.common import distribution, write_result

_started: list[tuple[float, float]] = []
_lock = threading.Lock()


def noop_job(scheduled_at: float) -> None:
    """The job APScheduler runs: nothing but a note of when it started."""
    with _lock:
        _started.append((time.time(), scheduled_at))


def run_apscheduler(jobs: int) -> dict[str, Any]:
    from apscheduler.executors.pool import ThreadPoolExecutor
    from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
    from apscheduler.schedulers.background import BackgroundScheduler

    # By name, so that run as __main__ the job and this function share one list.
    module = importlib.import_module("bench.versus_apscheduler")
    started_list: list[tuple[float, float]] = module._started
    started_list.clear()
    with tempfile.TemporaryDirectory() as directory:
        store = SQLAlchemyJobStore(url=f"sqlite:///{Path(directory) / 'jobs.sqlite'}")
        scheduler = BackgroundScheduler(
            jobstores={"default": store},
            executors={"default": ThreadPoolExecutor(10)},  # APScheduler's default
            # Run every job however late: lost jobs would flatter the drain time.
            job_defaults={"misfire_grace_time": None, "coalesce": False},
            timezone=UTC,
        )
        scheduler.start()
        # Each add is a SQLite transaction: some 30 ms apiece on a busy machine.
        due = datetime.fromtimestamp(int(time.time() + 10 + jobs * 0.06), UTC)
        began = time.time()
        for number in range(jobs):
            scheduler.add_job(
                "bench.versus_apscheduler:noop_job",
                trigger="date",
                run_date=due,
                args=[due.timestamp()],
                id=f"job-{number}",
            )
        added_seconds = time.time() - began
        if time.time() > due.timestamp():
            raise SystemExit(f"adding {jobs} jobs took {added_seconds:.1f}s: raise the margin")
        deadline = due.timestamp() + 120
        while len(started_list) < jobs and time.time() < deadline:
            time.sleep(0.1)
        scheduler.shutdown(wait=True)
    with module._lock:
        started = list(started_list)
    lateness = [at - scheduled for at, scheduled in started]
    arrivals = sorted(at - due.timestamp() for at, _ in started)
    return {
        "jobs": jobs,
        "ran": len(started),
        "added_seconds": round(added_seconds, 2),
        "drain_seconds": round(max(arrivals), 3) if arrivals else None,
        "lateness_seconds": distribution(lateness),
        "arrivals": [round(a, 3) for a in arrivals],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=1000)
    jobs = parser.parse_args().jobs
    apscheduler = run_apscheduler(jobs)
    print({k: v for k, v in apscheduler.items() if k != "arrivals"}, flush=True)
    dynacron = run_burst(jobs, "sqlite")
    print({k: v for k, v in dynacron.items() if k != "arrivals"}, flush=True)
    emulator = run_burst(jobs, "emulator")
    print({k: v for k, v in emulator.items() if k != "arrivals"}, flush=True)

    def ratio(a: float | None, b: float | None) -> float | None:
        return round(a / b, 2) if a and b else None

    write_result(
        "versus_apscheduler",
        {
            "jobs": jobs,
            "apscheduler": apscheduler,
            "dynacron": dynacron,
            "dynacron_emulator": emulator,
            "ratios_dynacron_to_apscheduler": {
                "drain_seconds": ratio(dynacron["drain_seconds"], apscheduler["drain_seconds"]),
                **{
                    f"lateness_{q}": ratio(
                        dynacron["lateness_seconds"].get(q), apscheduler["lateness_seconds"].get(q)
                    )
                    for q in ("p50", "p95", "p99", "max")
                },
            },
        },
    )


if __name__ == "__main__":
    main()
