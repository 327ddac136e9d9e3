"""A handler host down for 30 s, then back (issue 7): the breaker opens, waiting
executions use no attempts, and everything runs after recovery.

The outage is measured on the test clock, which the test moves a second at a
time, so 30 s of outage cost well under a second of real time. The test prints
the timeline (``pytest -s``): what the host answered, when the breaker opened,
each probe, when it closed, when the last execution succeeded, and how many
attempts each execution used.
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest

from dynacron.adapters.aws.limits import DynamoLimitStore
from dynacron.definitions import metric_names
from dynacron.domain.executions.execution import ExecutionStatus
from dynacron.domain.executions.retry import RetryPolicy
from dynacron.domain.instants import format_instant
from dynacron.domain.tasks.task import execution_id_for
from tests.pipeline import Pipeline
from tests.support import Delivery, Sink

pytestmark = pytest.mark.slow

TASKS = 10
OUTAGE = timedelta(seconds=30)
# What the timeline follows, second by second: the metrics the breaker emits.
EVENTS = {
    metric_names.BREAKER_HALF_OPENED: "probe",
    metric_names.BREAKER_OPENED: "breaker opened",
    metric_names.BREAKER_CLOSED: "breaker closed",
}


def test_a_host_down_for_30_seconds_opens_its_breaker_and_everything_runs_after(
    pipeline: Pipeline, sink: Sink
) -> None:
    # Given 10 tasks due in a second on a host that answers 503 for the next 30 s
    clock = pipeline.clock
    start = clock.now()
    recovers_at = start + OUTAGE
    answered: list[tuple[int, int]] = []  # (second, status)

    def answer(_: Delivery) -> tuple[int, dict[str, str]]:
        status = 503 if clock.now() < recovers_at else 200
        answered.append((int((clock.now() - start).total_seconds()), status))
        return status, {}

    sink.answer = answer
    due = start + timedelta(seconds=1)
    ids = [
        pipeline.register(at=format_instant(due), handler_url=f"{sink.url}/hook")
        for _ in range(TASKS)
    ]
    execution_ids = [execution_id_for(task_id, due) for task_id in ids]
    host = f"127.0.0.1:{sink.url.rsplit(':', 1)[1]}"
    store = DynamoLimitStore(pipeline.dynamodb, pipeline.settings.coordination_table)

    # When tick and worker run every second of the test clock for two minutes
    timeline = [f"t=  0s host down: answers 503 until t={OUTAGE.seconds}s"]
    seen = {name: 0.0 for name in [*EVENTS, metric_names.WAITING_ON_BREAKER]}
    for second in range(120):
        if second == OUTAGE.seconds:
            timeline.append(f"t={second:3d}s host back: answers 200")
        pipeline.tick()
        pipeline.work()
        events = []
        for name in seen:
            total = pipeline.metrics.total(name)
            if total > seen[name] and name in EVENTS:
                events.append(f"{EVENTS[name]} x{total - seen[name]:.0f}")
            seen[name] = total
        calls = Counter(status for at, status in answered if at == second)
        if calls or events:
            statuses = ", ".join(f"{n} x {status}" for status, n in sorted(calls.items()))
            timeline.append(
                f"t={second:3d}s calls: {statuses or 'none'}; {'; '.join(events) or '-'}; "
                f"breaker {store.host(host).breaker.value}; "
                f"{seen[metric_names.WAITING_ON_BREAKER]:.0f} waits on the breaker so far"
            )
        executions = [pipeline.execution(i) for i in execution_ids]
        if all(e is not None and e.status is ExecutionStatus.SUCCEEDED for e in executions):
            break
        clock.advance(timedelta(seconds=1))
        pipeline.queue.release_due()

    # Then the breaker opened, nothing exhausted its attempts, and every execution
    # succeeded after the host came back
    executions = [pipeline.execution(i) for i in execution_ids]
    assert all(e is not None and e.status is ExecutionStatus.SUCCEEDED for e in executions)
    last = max(e.completed_at for e in executions if e is not None and e.completed_at)
    attempts = Counter(e.attempt for e in executions if e is not None)
    timeline += [
        f"t={(last - start).total_seconds():3.0f}s last execution succeeded",
        "attempts used (attempts: executions): "
        + ", ".join(f"{used}: {n}" for used, n in sorted(attempts.items()))
        + f"; calls while down {sum(s == 503 for _, s in answered)}; dead letters "
        + f"{pipeline.metrics.total(metric_names.DEAD_LETTERS):.0f}",
    ]
    print("\n" + "\n".join(timeline))
    assert pipeline.metrics.total(metric_names.BREAKER_OPENED) >= 1
    assert pipeline.metrics.total(metric_names.BREAKER_CLOSED) >= 1
    assert pipeline.metrics.total(metric_names.DEAD_LETTERS) == 0
    assert pipeline.metrics.total(metric_names.WAITING_ON_BREAKER) > 0
    assert max(attempts) < RetryPolicy().max_attempts
    assert all(
        e is not None and e.completed_at and e.completed_at >= recovers_at for e in executions
    )
    # While open, the host saw only the failures that opened it (with the calls of
    # the same batch already in flight when it opened: decision 0034) and single probes.
    failing_calls = sum(status == 503 for _, status in answered)
    in_flight = min(TASKS, pipeline.settings.worker_concurrency)
    assert failing_calls <= max(pipeline.settings.breaker_failure_threshold, in_flight) + 5
    assert store.host(host).breaker.value == "CLOSED"
