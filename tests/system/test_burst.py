"""A midnight herd against a handler that allows 50 requests at once (issue 7).

Tick and workers run in this process against in-process moto. The test clock
follows the wall clock: a driver thread moves it, lets an execution that waits on
a limit go when its time comes (the test queue holds SQS delays, see
``tests.pipeline``), and a tick runs every second. Worker threads poll the queue
without pause, as Lambdas behind an SQS event source do, so a wait is a real wait
and the lateness recorded is real lateness.

Each request holds the handler ``HOLD_SECONDS``. By Little's law a handler sees
(requests per second) x (seconds per request) at once. This process carries about
10-20 executions a second on two shared cores (the pipeline's DynamoDB client makes
one call at a time, about 8 for an execution, and SQS's one at a time too), so
requests of 10 ms overlapped 4 at most and the limit of 50 was never put to the
test. At 2 s a request the handler takes at most 50 / 2 = 25 a second, about what
the process carries at its best: the workers keep it near full. More worker threads
than the handler allows make the shared limit, not the thread count, keep the peak
at 50. A slot is held from its admission to just after the call, so what the
handler sees is the limit scaled by the call's share of that time (issue 22).
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from dynacron.adapters.aws.task_items import task_to_item
from dynacron.api.requests import RateLimitModel, TaskCreate
from dynacron.definitions import metric_names
from dynacron.domain.clock import SettableClock
from dynacron.domain.executions.execution import Execution, ExecutionStatus
from dynacron.domain.instants import format_instant
from dynacron.domain.tasks.task import Task, execution_id_for
from dynacron.entry.settings import LOOPBACK_NETWORKS
from dynacron.local.aws import moto_sqs_sped_up, provision
from dynacron.local.gateway import LocalContext
from dynacron.local.runtime import sqs_event
from tests.integration.api_client import ALICE
from tests.pipeline import QUEUE_ARN, Pipeline
from tests.support import Sink, wait_until

pytestmark = pytest.mark.slow

# The burst is 5,000 tasks: DYNACRON_BURST_TASKS=5000 runs it (figures in
# docs/limits.md). The suite runs 200 to stay within its ten minutes on two shared
# cores (400 of 1 s took 40-50 s at a load of 16, 200 of 2 s 20-23 s); the limit
# is pressed the same way, each waiting on it more than once on average.
TASKS = int(os.environ.get("DYNACRON_BURST_TASKS", "200"))
HANDLER_ALLOWS = 50
WORKER_THREADS = int(os.environ.get("DYNACRON_BURST_THREADS", "64"))
HOLD_SECONDS = float(os.environ.get("DYNACRON_BURST_HOLD_SECONDS", "2.0"))
# The handler alone needs TASKS * HOLD / 50 seconds; four times that, and a start.
DEADLINE_SECONDS = 120 + 4 * TASKS * HOLD_SECONDS / HANDLER_ALLOWS


@pytest.fixture
def burst(aws: tuple[Any, Any], clock: SettableClock) -> Iterator[Pipeline]:
    # Thousands of messages in flight make every receive of in-process moto slow:
    # as local mode does, count them on the epoch clock (for this test only).
    with moto_sqs_sped_up():
        yield burst_pipeline(aws, clock)


def burst_pipeline(aws: tuple[Any, Any], clock: SettableClock) -> Pipeline:
    settings = provision(
        aws[0],
        aws[1],
        shard_count=2,
        delivery_allow_networks=LOOPBACK_NETWORKS,
        initial_lookback_seconds=3600,
        tick_max_claims=TASKS,
    )
    return Pipeline(aws, settings, clock)


def seed(pipeline: Pipeline, template: Task, count: int) -> list[str]:
    """``count`` copies of a registered task, written 25 to a request: registering
    5,000 one by one would cost more than running them."""
    sharding = pipeline.settings.sharding
    ids = [uuid.uuid4().hex for _ in range(count)]
    assert template.next_run_at is not None
    for start in range(0, count, 25):
        requests = []
        for task_id in ids[start : start + 25]:
            task = dataclasses.replace(template, task_id=task_id, name=task_id)
            placement = sharding.place(task_id, template.next_run_at, pipeline.clock.now())
            requests.append({"PutRequest": {"Item": task_to_item(task, placement)}})
        pipeline.dynamodb.batch_write_item(RequestItems={pipeline.settings.tasks_table: requests})
    return ids


class Herd:
    """Runs the pipeline as deployed while the test waits: a clock that follows the
    wall clock, a tick every second, and ``workers`` threads polling the queue."""

    def __init__(self, pipeline: Pipeline, sink: Sink, workers: int) -> None:
        self.pipeline = pipeline
        self.sink = sink
        self.errors: list[BaseException] = []
        # The handler's concurrency, sampled every 50 ms while the herd runs.
        self.concurrency: list[int] = []
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._guarded, args=(self._follow_wall_clock,)),
            threading.Thread(target=self._guarded, args=(self._tick,)),
            *(threading.Thread(target=self._guarded, args=(self._work,)) for _ in range(workers)),
        ]

    def __enter__(self) -> Herd:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()

    def _guarded(self, loop: Any) -> None:
        try:
            loop()
        except BaseException as error:
            self.errors.append(error)

    def _follow_wall_clock(self) -> None:
        clock, started = self.pipeline.clock, time.monotonic()
        base = clock.now()
        while not self._stop.wait(0.05):
            clock.set(base + timedelta(seconds=time.monotonic() - started))
            self.pipeline.queue.release_due()
            self.concurrency.append(self.sink.concurrent)

    def _tick(self) -> None:
        while not self._stop.is_set():
            self.pipeline.tick()
            self._stop.wait(1.0)

    def _work(self) -> None:
        """One worker: receive a batch of up to 10, run it, delete what it ran."""
        pipeline, url = self.pipeline, self.pipeline.settings.dispatch_queue_url
        while not self._stop.is_set():
            messages = pipeline.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get(
                "Messages", []
            )
            if not messages:
                # An empty receive costs moto a pass over every message in flight.
                self._stop.wait(0.25)
                continue
            result = pipeline.app.worker(sqs_event(messages, QUEUE_ARN), LocalContext("burst", 60))
            failed = {f["itemIdentifier"] for f in result.get("batchItemFailures", [])}
            if failed:
                raise AssertionError(f"no infrastructure error is expected here: {failed}")
            pipeline.sqs.delete_message_batch(
                QueueUrl=url,
                Entries=[
                    {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                    for i, m in enumerate(messages)
                ],
            )


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def lateness_seconds(execution: Execution | None) -> float:
    assert execution is not None
    assert execution.started_at is not None
    return (execution.started_at - execution.scheduled_at).total_seconds()


@pytest.mark.timeout(DEADLINE_SECONDS + 120)
def test_five_thousand_tasks_due_in_one_second_respect_a_handler_that_allows_fifty(
    burst: Pipeline, sink: Sink
) -> None:
    # Given 5,000 one-time tasks due in the same second, for one handler host that
    # allows 50 requests at once and answers 429 beyond
    pipeline = burst
    sink.max_concurrent, sink.hold = HANDLER_ALLOWS, HOLD_SECONDS
    started = time.monotonic()
    due = pipeline.clock.now() + timedelta(seconds=1)
    template = pipeline.app.task_service.register(
        ALICE,
        TaskCreate(
            at=format_instant(due),
            handler_url=f"{sink.url}/hook",
            rate_limit=RateLimitModel(max_in_flight=HANDLER_ALLOWS),
        ).to_spec(),
    )
    ids = [template.task_id, *seed(pipeline, template, TASKS - 1)]
    registered = time.monotonic()
    pipeline.clock.advance(timedelta(seconds=1))

    # When the tick and 64 workers run until the handler has seen every execution
    with Herd(pipeline, sink, WORKER_THREADS) as herd:
        all_seen = wait_until(
            lambda: len(sink.effects) == TASKS or bool(herd.errors), DEADLINE_SECONDS, 0.2
        )
    finished = time.monotonic()

    # Then every execution succeeded once, on its first attempt, the handler never
    # saw more than 50 at once and never had to refuse one
    assert not herd.errors, herd.errors
    assert all_seen, f"{len(sink.effects)} of {TASKS} in {DEADLINE_SECONDS:.0f} s"
    executions = [pipeline.execution(execution_id_for(task_id, due)) for task_id in ids]
    statuses = Counter(e.status if e else None for e in executions)
    waited = pipeline.metrics.total(metric_names.WAITING_ON_CONCURRENCY)
    late = [lateness_seconds(e) for e in executions]
    busy = herd.concurrency[: max(i for i, c in enumerate(herd.concurrency) if c) + 1]
    print(
        f"\nburst: {TASKS} tasks, {WORKER_THREADS} worker threads, handler holds "
        f"{HOLD_SECONDS:g} s; register {registered - started:.1f}s, "
        f"run {finished - registered:.1f}s; at the handler: peak {sink.peak_concurrent}, "
        f"mean {sum(busy) / len(busy):.1f}, >= 45 for {sum(c >= 45 for c in busy) / len(busy):.0%}"
        f" of the time; 429s {sink.refused}; waits on concurrency {waited:.0f}; lateness "
        f"p50 {percentile(late, 0.5):.1f}s p95 {percentile(late, 0.95):.1f}s "
        f"max {max(late):.1f}s"
    )
    assert statuses == {ExecutionStatus.SUCCEEDED: TASKS}
    assert all(e is not None and e.attempt == 1 for e in executions)
    assert sink.peak_concurrent <= HANDLER_ALLOWS
    assert sink.refused == 0
    assert set(sink.effects.values()) == {1}
    assert len(sink.effects) == TASKS
    assert set(sink.calls_by_key().values()) == {1}
    assert pipeline.metrics.total(metric_names.FAILURES) == 0
    if WORKER_THREADS > HANDLER_ALLOWS:
        # More workers than the handler allows pressed it to its limit: the shared
        # limit held the rest back (each wait is a worker that found every slot
        # taken), and the handler saw a good part of it at once. How close to the
        # limit the peak comes is the machine's speed and how long a slot is held
        # around its call: with the batched begins a slot waited for the rest of its
        # wave's admissions, each refused one 4 writes, and peaks fell to 18-25 (400
        # tasks of 1 s, load 16); a worker that remembers a full limit and reuses the
        # slots it gave back, freed as the call returns (issue 22), reaches 31-36
        # there, and 32-49 at these 200 of 2 s (one run of 19 with three busy loops
        # added to a load of 16).
        assert waited > 0
        assert sink.peak_concurrent > HANDLER_ALLOWS // 2
