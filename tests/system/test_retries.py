"""Real SQS delays, measured: a handler that always fails is retried with growing,
jittered waits, lands in the dead-letter list, and a redrive replays it."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from itertools import pairwise

import pytest

from dynacron.domain.executions.retry import RetryPolicy
from dynacron.domain.instants import format_instant
from dynacron.local.runtime import LocalOptions, LocalRuntime
from tests.support import Sink, api_call, wait_until

pytestmark = [pytest.mark.system, pytest.mark.slow]

POLICY = RetryPolicy(max_attempts=4, base_delay_seconds=1, max_delay_seconds=8)


@pytest.fixture
def runtime() -> Iterator[LocalRuntime]:
    running = LocalRuntime(LocalOptions(port=0, shards=2)).start()
    yield running
    running.stop()


def dead_letters(api: str) -> list[dict[str, object]]:
    items: list[dict[str, object]] = api_call(api, "GET", "/dead-letters").json()["items"]
    return items


def test_an_always_failing_handler_backs_off_then_is_dead_lettered_and_redriven(
    runtime: LocalRuntime, sink: Sink
) -> None:
    # Given handlers that always answer 500, with 4 attempts from 1 s, capped at 8 s
    sink.status = 500
    api = runtime.api_url
    assert api is not None
    due = format_instant(datetime.now(UTC) + timedelta(seconds=1))
    retry = {
        "max_attempts": POLICY.max_attempts,
        "base_delay_seconds": POLICY.base_delay_seconds,
        "max_delay_seconds": POLICY.max_delay_seconds,
    }
    for _ in range(4):
        created = api_call(
            api, "POST", "/tasks", {"at": due, "handler_url": f"{sink.url}/x", "retry": retry}
        )
        assert created.status_code == 201
    # When every attempt fails, they all end in the dead-letter list
    assert wait_until(lambda: len(dead_letters(api)) == 4, timeout=60, interval=0.5)
    deliveries = sink.snapshot()
    assert len(deliveries) == 16
    by_execution: dict[str, list[float]] = {}
    for delivery in sorted(deliveries, key=lambda d: d.received_at):
        by_execution.setdefault(delivery.headers["Idempotency-Key"], []).append(
            delivery.received_at
        )
    lines = []
    for execution_id, times in by_execution.items():
        measured = [later - earlier for earlier, later in pairwise(times)]
        expected = [POLICY.backoff(execution_id, attempt) for attempt in (1, 2, 3)]
        for attempt, (got, wanted) in enumerate(zip(measured, expected, strict=True), start=1):
            # Then each wait is the seeded full-jitter draw under the growing ceiling:
            # never shorter (SQS holds the message), a little longer (polling, load)
            assert wanted <= POLICY.ceiling(attempt)
            assert wanted - 0.3 <= got <= wanted + 3.0, (execution_id, attempt, got, wanted)
        pairs = enumerate(zip(measured, expected, strict=True), start=1)
        lines.append(
            "  ".join(
                f"{got:5.2f}s (drawn {wanted}s of ≤{POLICY.ceiling(n)}s)"
                for n, (got, wanted) in pairs
            )
        )
    assert [POLICY.ceiling(n) for n in (1, 2, 3)] == [1, 2, 4]
    print("\nmeasured waits before attempts 2, 3 and 4 of an always-500 handler:")
    print("\n".join(lines))
    (letter, *_) = dead_letters(api)
    assert "all 4 attempts failed" in str(letter["error"])

    # When the handler is fixed and one dead letter is redriven
    sink.status = 200
    execution_id = str(letter["execution_id"])
    redriven = api_call(api, "POST", f"/dead-letters/{execution_id}/redrive")
    assert redriven.status_code == 202

    # Then it runs again under the same execution id, as attempt 5, and succeeds
    def status() -> str:
        view = api_call(api, "GET", f"/executions/{execution_id}").json()
        return str(view["status"])

    assert wait_until(lambda: status() == "SUCCEEDED", timeout=30, interval=0.3)
    replay = [d for d in sink.snapshot() if d.headers["Idempotency-Key"] == execution_id]
    assert [d.body["attempt"] for d in replay] == [1, 2, 3, 4, 5]
    assert len(dead_letters(api)) == 3
