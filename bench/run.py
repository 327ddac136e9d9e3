"""`make bench`: every benchmark, one after the other, then BENCHMARKS.md.

One at a time, so they do not compete for the machine's CPUs. BENCH_QUICK=1
shortens each (fewer tasks, shorter rates). Named sections run alone, e.g.
`python -m bench.run cost`; the page is redrawn from every section's last results.
"""

from __future__ import annotations

import subprocess
import sys
import time

BENCHMARKS = (
    "bench.cost",
    "bench.scaling",
    "bench.throughput",
    "bench.capacity",
    "bench.fanout",
    "bench.lateness",
    "bench.burst",
    "bench.versus_apscheduler",
    "bench.overlap",
    "bench.scale",
    "bench.bulk",
)


def main(argv: list[str]) -> None:
    chosen = [f"bench.{name}" for name in argv] or list(BENCHMARKS)
    unknown = sorted(set(chosen) - set(BENCHMARKS))
    if unknown:
        names = ", ".join(m.removeprefix("bench.") for m in BENCHMARKS)
        raise SystemExit(f"no benchmark {', '.join(unknown)}; there are: {names}")
    failed = []
    for module in chosen:
        began = time.monotonic()
        print(f"== {module}", flush=True)
        if subprocess.run([sys.executable, "-m", module], check=False).returncode != 0:
            failed.append(module)
        print(f"== {module}: {time.monotonic() - began:.0f} s", flush=True)
    subprocess.run([sys.executable, "-m", "bench.report"], check=True)
    if failed:
        raise SystemExit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main(sys.argv[1:])
