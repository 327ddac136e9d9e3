"""Lateness and sustained fire rate of local mode.

Starts `dynacron local` in its own process and a loopback sink, registers one-time
tasks spread evenly at a target rate for a while, and measures, per execution,
handler start (sink receive time) minus scheduled time. Writes
bench/results/lateness.json. Run: .venv/bin/python -m bench.lateness [--rates 10,50,100]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

from bench.common import QUICK, percentile, write_result
from dynacron.domain.instants import format_instant, parse_instant
from tests.support import Service, Sink, api_call, free_port, wait_until


def run_rate(api: str, sink: Sink, rate: int, seconds: int) -> dict[str, object]:
    count = rate * seconds
    # Register ahead of time, then let them fire spread evenly at `rate` per second.
    # Local mode registers some 75 a second on two shared cores: lead by 50 a second.
    start = time.time() + 5 + count / 50
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

    def arrived() -> int:
        return sum(1 for d in sink.snapshot() if d.path == path)

    # Generous: a rate local mode cannot sustain still drains, late, and is measured.
    wait_until(lambda: arrived() >= count, timeout=seconds + max(60, count / 10), interval=0.2)
    deliveries = [d for d in sink.snapshot() if d.path == path]
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rates", default="10,50,100")
    parser.add_argument("--seconds", type=int, default=15 if QUICK else 60)
    parser.add_argument("--workers", type=int, default=8)
    args = parser.parse_args()
    sink = Sink().start()
    port = free_port()
    service = Service(
        ["-m", "dynacron.cli", "local", "--port", str(port), "--workers", str(args.workers)],
        "is running",
    )
    api = f"http://127.0.0.1:{port}"
    try:
        runs = []
        for rate in args.rates.split(","):
            runs.append(run_rate(api, sink, int(rate), args.seconds))
            print({k: v for k, v in runs[-1].items() if k != "lateness_samples"}, flush=True)
            # After every rate: a run cut short still leaves what it measured.
            write_result(
                "lateness", {"goal_p99_seconds": 1.5, "workers": args.workers, "runs": runs}
            )
    finally:
        service.stop()
        sink.stop()


if __name__ == "__main__":
    main()
