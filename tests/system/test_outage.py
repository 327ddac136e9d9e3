"""A handler host down for 30 s, then back (issue 7): the breaker opens, waiting
executions use no attempts, and everything runs after recovery.

The outage is measured on the test clock, which the test moves a second at a
time, so 30 s of outage cost well under a second of real time.
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest

from dynacron import metric_names
from dynacron.domain.executions import ExecutionStatus
from dynacron.domain.instants import format_instant
from dynacron.domain.tasks import execution_id_for
from dynacron.limits import LimitStore
from tests.pipeline import Pipeline
from tests.support import Delivery, Sink

pytestmark = pytest.mark.slow

TASKS = 10
OUTAGE = timedelta(seconds=30)


def test_a_host_down_for_30_seconds_opens_its_breaker_and_everything_runs_after(
    pipeline: Pipeline, sink: Sink
) -> None:
    # Given 10 tasks due now on a host that answers 503 for the next 30 s
    clock = pipeline.clock
    start = clock.now()
    recovers_at = start + OUTAGE
    sink.answer = lambda _: (503, {}) if clock.now() < recovers_at else (200, {})
    due = start + timedelta(seconds=1)
    ids = [
        pipeline.register(at=format_instant(due), handler_url=f"{sink.url}/hook")
        for _ in range(TASKS)
    ]
    execution_ids = [execution_id_for(task_id, due) for task_id in ids]
    host = f"127.0.0.1:{sink.url.rsplit(':', 1)[1]}"
    store = LimitStore(pipeline.dynamodb, pipeline.settings.coordination_table)

    # When tick and worker run every second of the test clock for two minutes
    timeline: list[str] = []
    seen = 0
    for second in range(120):
        pipeline.tick()
        pipeline.work()
        calls: list[Delivery] = sink.snapshot()[seen:]
        seen += len(calls)
        state = store.host(host)
        executions = [pipeline.execution(i) for i in execution_ids]
        done = Counter(e.status.value for e in executions if e is not None)
        timeline.append(
            f"t={second:3d}s breaker={state.breaker.value:9s} calls={len(calls):2d} {dict(done)}"
        )
        if done.get("SUCCEEDED") == TASKS:
            break
        clock.advance(timedelta(seconds=1))
        pipeline.queue.release_due()
    print("\n" + "\n".join(line for i, line in enumerate(timeline) if i % 3 == 0 or i > 28))

    # Then the breaker opened, nothing exhausted its attempts, and every execution
    # succeeded after the host came back
    executions = [pipeline.execution(i) for i in execution_ids]
    assert all(e is not None and e.status is ExecutionStatus.SUCCEEDED for e in executions)
    assert pipeline.metrics.total(metric_names.BREAKER_OPENED) >= 1
    assert pipeline.metrics.total(metric_names.BREAKER_CLOSED) >= 1
    assert pipeline.metrics.total(metric_names.DEAD_LETTERS) == 0
    assert pipeline.metrics.total(metric_names.WAITING_ON_BREAKER) > 0
    assert all(
        e is not None and e.completed_at and e.completed_at >= recovers_at for e in executions
    )
    # While open, the host saw only the failures that opened it and single probes.
    failing_calls = len(sink.snapshot()) - TASKS
    assert failing_calls <= pipeline.settings.breaker_failure_threshold + 5
    assert store.host(host).breaker.value == "CLOSED"
