"""A midnight herd against a handler that allows 50 requests at once (issue 7).

Tick and workers run in this process against in-process moto, with a clock the
test moves: waits on limits are held by the test queue until the clock reaches
them, so the test spends real time only on real work. More worker threads than
the handler allows make the shared limit, not the thread count, keep the peak.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from datetime import timedelta

from dynacron import metric_names
from dynacron.app import Dynacron
from dynacron.domain.executions import ExecutionStatus
from dynacron.domain.instants import format_instant
from dynacron.domain.tasks import execution_id_for
from dynacron.local.gateway import LocalContext
from dynacron.local.runtime import sqs_event
from dynacron.models import RateLimitModel, TaskCreate
from tests.pipeline import QUEUE_ARN, Pipeline
from tests.support import Sink

TASKS = 5000
HANDLER_ALLOWS = 50
WORKER_THREADS = 64


def drain(pipeline: Pipeline, app: Dynacron) -> None:
    """One worker: receive and run batches until the queue looks empty."""
    url = pipeline.settings.dispatch_queue_url
    while True:
        messages = pipeline.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get(
            "Messages", []
        )
        if not messages:
            return
        result = app.worker(sqs_event(messages, QUEUE_ARN), LocalContext("burst", 60))
        failed = {f["itemIdentifier"] for f in result.get("batchItemFailures", [])}
        for message in messages:
            if message["MessageId"] not in failed:
                with contextlib.suppress(Exception):
                    pipeline.sqs.delete_message(
                        QueueUrl=url, ReceiptHandle=message["ReceiptHandle"]
                    )
            else:  # visible again at once, as after its visibility timeout
                pipeline.sqs.change_message_visibility(
                    QueueUrl=url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0
                )


def test_five_thousand_tasks_due_in_one_second_respect_a_handler_that_allows_fifty(
    pipeline: Pipeline, sink: Sink
) -> None:
    # Given 5,000 one-time tasks due in the same second, for one handler host that
    # allows 50 requests at once and answers 429 beyond
    sink.max_concurrent, sink.hold = HANDLER_ALLOWS, 0.01
    started = time.monotonic()
    due = pipeline.clock.now() + timedelta(seconds=1)
    limit = RateLimitModel(max_in_flight=HANDLER_ALLOWS)
    service = pipeline.app.task_service
    ids = [
        service.register(
            TaskCreate(at=format_instant(due), handler_url=f"{sink.url}/hook", rate_limit=limit)
        ).task_id
        for _ in range(TASKS)
    ]
    registered = time.monotonic()
    workers = [pipeline.component() for _ in range(WORKER_THREADS)]
    pipeline.clock.advance(timedelta(seconds=1))

    # When ticks and 64 worker threads run, a second of the test clock per round
    rounds = 0
    execution_ids = [execution_id_for(task_id, due) for task_id in ids]
    while rounds < 60:
        rounds += 1
        pipeline.tick()
        threads = [threading.Thread(target=drain, args=(pipeline, app)) for app in workers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if len(sink.effects) == TASKS and not pipeline.queue.held:
            break
        pipeline.clock.advance(timedelta(seconds=1))
        pipeline.queue.release_due()
    finished = time.monotonic()

    # Then every execution succeeded once, on its first attempt, the handler never
    # saw more than 50 at once and never had to refuse one
    executions = [pipeline.execution(execution_id) for execution_id in execution_ids]
    statuses = Counter(e.status if e else None for e in executions)
    waited = pipeline.metrics.total(metric_names.WAITING_ON_CONCURRENCY)
    print(
        f"\nburst: {TASKS} tasks, {WORKER_THREADS} worker threads, {rounds} rounds; "
        f"register {registered - started:.1f}s, run {finished - registered:.1f}s; "
        f"peak at handler {sink.peak_concurrent}, refused {sink.refused}, "
        f"waits on concurrency {waited:.0f}, "
        f"limit lateness total {pipeline.metrics.total(metric_names.LIMIT_LATENESS):.0f}s"
    )
    assert statuses == {ExecutionStatus.SUCCEEDED: TASKS}
    assert all(e is not None and e.attempt == 1 for e in executions)
    assert sink.peak_concurrent <= HANDLER_ALLOWS
    assert sink.refused == 0
    assert set(sink.effects.values()) == {1}
    assert len(sink.effects) == TASKS
    assert pipeline.metrics.total(metric_names.FAILURES) == 0
    # More workers than the handler allows: the shared limit did the holding back.
    assert waited > 0
