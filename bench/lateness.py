"""Lateness and sustained fire rate of local mode.

Starts `dynacron local` in its own process (on SQLite in a fresh data directory,
or on the AWS emulator) and a minimal loopback handler (``bench.loopback``),
registers one-time tasks spread evenly at a target rate for a while, and
measures, per execution, handler start (receive time) minus scheduled time.
Writes bench/results/lateness.json.
Run: .venv/bin/python -m bench.lateness [--rates 100,200,300] [--stores sqlite,emulator]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

from bench.common import QUICK, percentile, write_result
from bench.loopback import LoopbackHandler
from bench.processes import Service, api_call, free_port, wait_until
from dynacron.domain.instants import format_instant, parse_instant

# How fast tasks are registered ahead, through the API (each a synced commit),
# at the least on a busy machine: the tasks fall due once all are registered.
REGISTERS_PER_SECOND = 80
# The emulator carries some 20 fires a second: its rows stop there.
EMULATOR_MAX_RATE = 50


def run_rate(
    api: str, sink: LoopbackHandler, rate: int, seconds: int, registers_per_second: int
) -> dict[str, object]:
    count = rate * seconds
    # Register ahead of time, then let them fire spread evenly at `rate` per second.
    # Register ahead, faster than the tasks fall due.
    start = time.time() + 5 + count / registers_per_second
    path = f"/rate-{rate}"

    server_errors = 0

    def register(number: int) -> None:
        nonlocal server_errors
        at = datetime.fromtimestamp(start + number / rate, UTC)
        body = {"at": format_instant(at), "handler_url": f"{sink.url}{path}"}
        # An overloaded machine makes the local API fail now and then (a 5xx):
        # try again, and count it. Such a retry can register a task twice.
        for _ in range(5):
            response = api_call(api, "POST", "/tasks", body)
            if response.status_code < 500:
                break
            server_errors += 1
        response.raise_for_status()

    began = time.time()
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(register, range(count)))
    registration_seconds = time.time() - began
    if time.time() > start:
        raise SystemExit(f"registration of {count} took {registration_seconds:.1f}s: too slow")

    # Generous: a rate local mode cannot sustain still drains, late, and is measured.
    wait_until(
        lambda: sink.count(path) >= count, timeout=seconds + max(60, count / 10), interval=0.2
    )
    deliveries = [d for d in list(sink.arrivals) if d.path == path]
    lateness = [
        d.received_at - parse_instant(d.body["scheduled_at"]).timestamp() for d in deliveries
    ]
    unique = {d.body["execution_id"] for d in deliveries}
    return {
        "target_fires_per_second": rate,
        "seconds": seconds,
        "scheduled": count,
        "delivered": len(deliveries),
        "unique_executions": len(unique),
        "registrations_per_second": round(count / registration_seconds, 1),
        "registration_server_errors": server_errors,
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "lateness_samples": sorted(round(x, 3) for x in lateness),
        "lateness_seconds": {
            "p50": round(statistics.median(lateness), 3),
            "p95": round(percentile(lateness, 0.95), 3),
            "p99": round(percentile(lateness, 0.99), 3),
            "max": round(max(lateness), 3),
        },
    }


def run_store(store: str, rate: int, seconds: int, workers: int) -> dict[str, object]:
    """One rate on a fresh local mode (a fresh data directory: one-time tasks that
    ran still count against the tenant's quota)."""
    sink = LoopbackHandler().start()
    port = free_port()
    data_dir = tempfile.TemporaryDirectory(prefix="dynacron-bench-")
    command = ["-m", "dynacron.cli.main", "local", "--port", str(port), "--workers", str(workers)]
    command += ["--store", store, "--data-dir", data_dir.name]
    service = Service(command, "is running")
    try:
        registers = 50 if store == "emulator" else REGISTERS_PER_SECOND
        run = run_rate(f"http://127.0.0.1:{port}", sink, rate, seconds, registers)
    finally:
        service.stop()
        sink.stop()
        data_dir.cleanup()
    return {"store": store, **run}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rates", default="10,100,200,300")
    # 300/s for 30 s stays within a tenant's 10,000 tasks.
    parser.add_argument("--seconds", type=int, default=15 if QUICK else 30)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--stores", default="sqlite,emulator")
    args = parser.parse_args()
    rates = [int(rate) for rate in args.rates.split(",")]
    runs: list[dict[str, object]] = []
    for store in args.stores.split(","):
        for rate in rates:
            if store == "emulator" and rate > EMULATOR_MAX_RATE:
                continue
            runs.append(run_store(store, rate, args.seconds, args.workers))
            print({k: v for k, v in runs[-1].items() if k != "lateness_samples"}, flush=True)
            # After every rate: a run cut short still leaves what it measured.
            write_result(
                "lateness",
                {
                    "goals": {"100": {"p50": 0.05, "p99": 0.25}, "200": {"p99": 1.5}},
                    "workers": args.workers,
                    "runs": runs,
                },
            )


if __name__ == "__main__":
    main()
