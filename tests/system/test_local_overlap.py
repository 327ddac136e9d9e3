"""Local mode's worker overlaps its deliveries (decision 0034): a burst against a slow
handler is not held to one call per worker thread, and each task still runs once.

No timing is asserted: the handler holds every call until it has seen more calls
at once than local mode has worker threads, which only overlapping deliveries can
bring about (the wait for it fails the test otherwise). How fast such a burst
drains is measured by ``make bench BENCH=overlap``.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime

import pytest

import dynacron
from dynacron.entry.settings import Settings
from dynacron.local.runtime import LocalOptions, LocalRuntime
from tests.support import Sink, wait_until

pytestmark = pytest.mark.system
TASKS = 40


def test_a_burst_against_a_slow_handler_has_more_calls_in_flight_than_worker_threads(
    sink: Sink,
) -> None:
    # Given local mode with its default worker threads, and a handler that holds
    # every call until it is let go
    sink.gate = threading.Event()
    options = LocalOptions(port=0, shards=1)
    runtime = LocalRuntime(options).start()
    try:
        # When TASKS one-time tasks fall due in the same second
        due = datetime.fromtimestamp(int(time.time()) + 3, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        with dynacron.Client(runtime.api_url) as client:
            for number in range(TASKS):
                client.create_task(at=due, handler_url=f"{sink.url}/slow", name=f"burst-{number}")
        # Then the handler sees more calls at once than there are worker threads
        assert wait_until(lambda: sink.concurrent > options.workers, timeout=60), (
            sink.peak_concurrent
        )
        sink.gate.set()
        # And every task reaches it once, never more at once than the workers allow
        assert wait_until(lambda: len(sink.calls_by_key()) == TASKS, timeout=60)
        assert set(sink.calls_by_key().values()) == {1}
        assert options.workers < sink.peak_concurrent
        assert sink.peak_concurrent <= options.workers * Settings.worker_concurrency
    finally:
        sink.gate.set()
        runtime.stop()
