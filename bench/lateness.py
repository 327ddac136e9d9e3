"""Lateness and sustained fire rate of local mode.

Starts `dynacron local` in its own process and a loopback sink, registers one-time
tasks spread evenly at a target rate for a while, and measures, per execution,
handler start (sink receive time) minus scheduled time. Writes
bench/results/lateness.json. Run: .venv/bin/python bench/lateness.py [--rates 10,50,100]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dynacron import __version__
from dynacron.domain.instants import format_instant, parse_instant
from tests.support import Service, Sink, api_call, free_port, wait_until

RESULTS = Path(__file__).resolve().parent / "results"


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def run_rate(api: str, sink: Sink, rate: int, seconds: int) -> dict[str, object]:
    count = rate * seconds
    # Register ahead of time, then let them fire spread evenly at `rate` per second.
    start = time.time() + 5 + count / 150
    path = f"/rate-{rate}"

    def register(number: int) -> None:
        at = datetime.fromtimestamp(start + number / rate, UTC)
        response = api_call(
            api,
            "POST",
            "/tasks",
            {
                "at": format_instant(at),
                "handler_url": f"{sink.url}{path}",
            },
        )
        response.raise_for_status()

    began = time.time()
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(register, range(count)))
    registration_seconds = time.time() - began
    if time.time() > start:
        raise SystemExit(f"registration of {count} took {registration_seconds:.1f}s: too slow")

    def arrived() -> int:
        return sum(1 for d in sink.snapshot() if d.path == path)

    wait_until(lambda: arrived() >= count, timeout=seconds + 60, interval=0.2)
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
    parser.add_argument("--seconds", type=int, default=20)
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
        runs = [run_rate(api, sink, int(r), args.seconds) for r in args.rates.split(",")]
    finally:
        service.stop()
        sink.stop()
    result = {
        "benchmark": "local-mode lateness",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "python": platform.python_version(),
            "cpus": __import__("os").cpu_count(),
            "platform": platform.platform(),
        },
        "dynacron": __version__,
        "workers": args.workers,
        "runs": runs,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "lateness.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
