"""A worker invocation runs the records of its batch at once (decision 0034), on moto:
never more than ``worker_concurrency`` handler calls in flight, a record that raises
reported back alone, and the limits that bound calls across workers still bounding
them across the records of one batch.

Overlap is shown without timing: the handler holds its calls until as many as
expected are in flight at once, which only records run at once bring about.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from datetime import timedelta
from typing import Any
from unittest import mock

from botocore.exceptions import ClientError

from dynacron.adapters.delivery.registry import ExecutionContext, HandlerRegistry
from dynacron.api.requests import RateLimitModel, TaskCreate
from dynacron.domain.clock import SettableClock
from dynacron.domain.executions.execution import ExecutionStatus
from dynacron.entry.composition import Dynacron
from dynacron.entry.settings import Settings
from dynacron.local.gateway import LocalContext
from dynacron.local.runtime import sqs_event
from dynacron.local.stores import SqsQueues
from tests.integration.api_client import ALICE
from tests.pipeline import VirtualDelayQueue
from tests.support import Sink, wait_until

QUEUE_ARN = "arn:aws:sqs:us-east-1:123456789012:dynacron-dispatch"


def worker(
    aws: tuple[Any, Any], settings: Settings, clock: SettableClock, **changes: Any
) -> Dynacron:
    return Dynacron(
        dataclasses.replace(settings, **changes), dynamodb=aws[0], sqs=aws[1], clock=clock
    )


def due_together(system: Dynacron, clock: SettableClock, count: int, **fields: Any) -> list[str]:
    """``count`` one-time tasks due in the same second, claimed by a tick; their ids."""
    at = clock.now() + timedelta(seconds=1)
    ids = [
        system.task_service.register(
            ALICE, TaskCreate(at=at.strftime("%Y-%m-%dT%H:%M:%SZ"), **fields).to_spec()
        ).task_id
        for _ in range(count)
    ]
    clock.set(at)
    assert sum(r.claimed for r in system.ticker.tick()) == count
    return ids


def receive_all(settings: Settings, sqs: Any) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    while batch := sqs.receive_message(
        QueueUrl=settings.dispatch_queue_url, MaxNumberOfMessages=10
    ).get("Messages", []):
        messages += batch
    return messages


def in_background(
    system: Dynacron, messages: list[dict[str, Any]]
) -> tuple[threading.Thread, list[Any]]:
    """The worker invocation of ``messages``, started on a thread; its answer lands in the list."""
    answers: list[Any] = []
    thread = threading.Thread(
        target=lambda: answers.append(
            system.worker(sqs_event(messages, QUEUE_ARN), LocalContext("test-worker"))
        )
    )
    thread.start()
    return thread, answers


def statuses(system: Dynacron, task_ids: list[str]) -> list[tuple[ExecutionStatus, int]]:
    found = []
    for task_id in task_ids:
        (execution,) = system.executions.list_for_task(task_id, 10, None).items
        found.append((execution.status, execution.attempt))
    return found


def test_a_batchs_records_run_at_once_never_more_than_the_workers_concurrency(
    system: Dynacron, aws: tuple[Any, Any], settings: Settings, clock: SettableClock, sink: Sink
) -> None:
    # Given ten tasks due together, and a worker that runs three records at once
    task_ids = due_together(system, clock, 10, handler_url=f"{sink.url}/hook")
    overlapping = worker(aws, settings, clock, worker_concurrency=3)
    sink.gate = threading.Event()
    # When one invocation runs the batch
    thread, answers = in_background(overlapping, receive_all(settings, aws[1]))
    # Then three calls are in flight at once
    assert wait_until(lambda: sink.concurrent == 3, timeout=30)
    sink.gate.set()
    thread.join(60)
    # And never more; every task ran once and succeeded
    assert answers == [{"batchItemFailures": []}]
    assert sink.peak_concurrent == 3
    assert sorted(sink.calls_by_key().values()) == [1] * 10
    assert statuses(system, task_ids) == [(ExecutionStatus.SUCCEEDED, 1)] * 10


def test_records_that_raise_one_by_one_are_each_reported_back_alone(
    system: Dynacron, aws: tuple[Any, Any], settings: Settings, clock: SettableClock, sink: Sink
) -> None:
    # Given a batch of eight in which DynamoDB throttles the reads of three tasks
    task_ids = due_together(system, clock, 8, handler_url=f"{sink.url}/hook")
    throttled = set(task_ids[1:7:2])

    def throttle(params: dict[str, Any], **_: Any) -> None:
        if params["TableName"] == settings.tasks_table and (
            params["Key"]["task_id"]["S"] in throttled
        ):
            error = {"Code": "ProvisionedThroughputExceededException", "Message": "slow down"}
            raise ClientError({"Error": error}, "GetItem")

    def throttle_batch(params: dict[str, Any], **_: Any) -> None:
        # The batch's read of its tasks in one call names them all: throttled too.
        keys = params["RequestItems"].get(settings.tasks_table, {}).get("Keys", [])
        if any(key["task_id"]["S"] in throttled for key in keys):
            error = {"Code": "ProvisionedThroughputExceededException", "Message": "slow down"}
            raise ClientError({"Error": error}, "BatchGetItem")

    aws[0].meta.events.register("provide-client-params.dynamodb.GetItem", throttle)
    aws[0].meta.events.register("provide-client-params.dynamodb.BatchGetItem", throttle_batch)
    messages = receive_all(settings, aws[1])
    by_task = {json.loads(m["Body"])["task_id"]: m["MessageId"] for m in messages}
    # When one invocation runs it, all eight at once
    try:
        result = system.worker(sqs_event(messages, QUEUE_ARN), LocalContext("test-worker"))
    finally:
        aws[0].meta.events.unregister("provide-client-params.dynamodb.GetItem", throttle)
    # Then exactly those three are reported back, each on its own
    reported = sorted(f["itemIdentifier"] for f in result["batchItemFailures"])
    assert reported == sorted(by_task[t] for t in throttled)
    # And the other five ran once and succeeded; the three never began
    ran = [t for t in task_ids if t not in throttled]
    assert statuses(system, ran) == [(ExecutionStatus.SUCCEEDED, 1)] * 5
    assert all(not system.executions.list_for_task(t, 10, None).items for t in throttled)
    assert len(sink.calls_by_key()) == 5
    # And redelivered, they run too, each once
    again = [m for m in messages if m["MessageId"] in reported]
    assert system.worker(sqs_event(again, QUEUE_ARN), LocalContext("test-worker")) == {
        "batchItemFailures": []
    }
    assert statuses(system, task_ids) == [(ExecutionStatus.SUCCEEDED, 1)] * 8
    assert sorted(sink.calls_by_key().values()) == [1] * 8


def test_a_hosts_limit_bounds_the_calls_of_one_batch(
    system: Dynacron, aws: tuple[Any, Any], settings: Settings, clock: SettableClock, sink: Sink
) -> None:
    # Given six tasks due together on one host that allows two calls at once
    limit = RateLimitModel(max_in_flight=2)
    task_ids = due_together(system, clock, 6, handler_url=f"{sink.url}/hook", rate_limit=limit)
    queue = VirtualDelayQueue(aws[1], settings.dispatch_queue_url, clock)
    overlapping = Dynacron(settings, dynamodb=aws[0], sqs=aws[1], clock=clock, dispatch_queue=queue)
    sink.gate = threading.Event()
    # When one invocation runs all six at once
    thread, answers = in_background(overlapping, receive_all(settings, aws[1]))
    # Then two calls go, and the other four wait for the host while those two are held
    assert wait_until(lambda: sink.concurrent == 2 and len(queue.delays) == 4, timeout=30)
    sink.gate.set()
    thread.join(60)
    assert answers == [{"batchItemFailures": []}]
    assert sink.peak_concurrent == 2
    # And the four waited without using an attempt: no execution began for them
    waited = {dispatch.task_id for dispatch, _ in queue.delays}
    assert all(delay >= 1 for _, delay in queue.delays)
    assert all(not system.executions.list_for_task(t, 10, None).items for t in waited)
    called = [t for t in task_ids if t not in waited]
    assert statuses(system, called) == [(ExecutionStatus.SUCCEEDED, 1)] * 2


def test_python_handlers_keep_their_own_bound(
    aws: tuple[Any, Any], settings: Settings, clock: SettableClock
) -> None:
    # Given Python handlers that wait until let go, at most two at once in this process
    running: list[str] = []
    peak = [0]
    lock, let_go = threading.Lock(), threading.Event()

    def held(run: ExecutionContext) -> None:
        with lock:
            running.append(run.execution_id)
            peak[0] = max(peak[0], len(running))
        let_go.wait(30)
        with lock:
            running.remove(run.execution_id)

    registry = HandlerRegistry()
    registry.register("held", held)
    system = Dynacron(
        dataclasses.replace(settings, worker_concurrency=6, python_handler_concurrency=2),
        dynamodb=aws[0],
        sqs=aws[1],
        clock=clock,
        handlers=registry,
    )
    task_ids = due_together(system, clock, 6, handler="held")
    # When one invocation runs six records at once
    thread, answers = in_background(system, receive_all(settings, aws[1]))
    # Then two handlers run, and no more
    assert wait_until(lambda: len(running) == 2, timeout=30)
    let_go.set()
    thread.join(60)
    assert answers == [{"batchItemFailures": []}]
    assert peak[0] == 2
    assert statuses(system, task_ids) == [(ExecutionStatus.SUCCEEDED, 1)] * 6


def test_local_modes_queue_on_sqs_gathers_a_batch_larger_than_one_receive(
    aws: tuple[Any, Any], settings: Settings
) -> None:
    """Local mode on the emulator: a batch of 25 from receives of 10, as the event
    source mapping gathers one, and deleted whole."""
    _, sqs = aws
    url = settings.dispatch_queue_url
    for number in range(30):
        sqs.send_message(QueueUrl=url, MessageBody=str(number))
    queues = SqsQueues(sqs, {"dispatch": url})
    batch = queues.receive("dispatch", 25, wait_seconds=0)
    assert len({m["MessageId"] for m in batch}) == 25
    queues.delete("dispatch", batch)
    rest = queues.receive("dispatch", 25, wait_seconds=0)
    assert sorted(int(m["Body"]) for m in batch + rest) == list(range(30))
    assert queues.receive("dispatch", 25, wait_seconds=0) == []


def test_a_batch_begins_together_and_ends_together_a_duplicate_refused_alone(
    system: Dynacron, aws: tuple[Any, Any], settings: Settings, clock: SettableClock, sink: Sink
) -> None:
    # Given a batch of eight due messages and a copy of the first (SQS delivers at
    # least once)
    task_ids = due_together(system, clock, 8, handler_url=f"{sink.url}/hook")
    messages = receive_all(settings, aws[1])
    messages.append({**messages[0], "MessageId": "copy-of-the-first"})
    store = system.executions
    # When one invocation runs it, the store's calls counted (the store underneath
    # is moto's, unchanged)
    with (
        mock.patch.object(store, "apply_each", wraps=store.apply_each) as each,
        mock.patch.object(store, "apply_returning", wraps=store.apply_returning) as alone,
    ):
        answer = system.worker(sqs_event(messages, QUEUE_ARN), LocalContext("test-worker"))
    # Then the nine began in one call, the copy refused alone, and nothing failed
    assert answer == {"batchItemFailures": []}
    begins, *ends = (len(call.args[0]) for call in each.call_args_list)
    assert begins == 9
    assert alone.call_count == 0
    # and the eight successes ended in the batch's calls, none alone
    assert sum(ends) == 8
    assert sorted(sink.calls_by_key().values()) == [1] * 8
    assert statuses(system, task_ids) == [(ExecutionStatus.SUCCEEDED, 1)] * 8
