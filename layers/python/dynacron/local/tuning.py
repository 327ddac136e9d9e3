"""The garbage collector of a local mode process, set for a long run of many small objects.

A fire allocates thousands of short-lived objects (records, dicts, datetimes,
futures) and almost no cycles; CPython's collector runs a young collection every
700 allocations net of frees and, every so often, walks every object the process
holds, its imported modules' included. In a burst that was some 5 % of a worker
process's CPU (``perf``, BENCHMARKS.md section 5). Here what start-up made is
moved out of the collector's sight (``gc.freeze``: it lives as long as the
process anyway) and young collections run ten times less often; cycles are
still collected.
"""

from __future__ import annotations

import gc

# Allocations (net of frees) between young collections: CPython's default is 700.
YOUNG_THRESHOLD = 7_000


def settle_collector() -> None:
    """Once start-up is over: freeze what it made, and collect young objects less often."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
