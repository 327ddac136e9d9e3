"""The overlapping worker as deployed (decision 0034): batches of the event source
mapping's size, run ``DYNACRON_WORKER_CONCURRENCY`` records at once with the
template's environment, every call authorised against the worker's own role; its
time budget against slow handlers, and a batch whose records fail one by one.

Overlap is shown without timing: the handler holds its calls until as many as
expected are in flight at once.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError

from dynacron.definitions.environment import WORKER_CONCURRENCY_VAR
from dynacron.definitions.resources import COORDINATION, DISPATCH_QUEUE
from dynacron.local.runtime import sqs_event
from tests.deployed.harness import Deployment, queue_arn
from tests.deployed.steps import delete_tasks, executions, register
from tests.support import Delivery, FakeLambdaContext, Sink, wait_until

_tenants = itertools.count(1)
# Past the dispatch queue's visibility timeout: six worker timeouts and the window.
VISIBILITY_SECONDS = 6 * 60 + 2


@pytest.fixture
def principal(deployed: Deployment) -> Iterator[str]:
    """A tenant of its own for each scenario; its tasks are deleted afterwards."""
    caller = f"arn:aws:iam::000000000000:user/overlap-{next(_tenants)}"
    yield caller
    delete_tasks(deployed, caller)


def due_together(deployed: Deployment, principal: str, count: int, url: str) -> list[str]:
    """``count`` one-time tasks due in the same second, ticked; their ids."""
    at = (deployed.clock.now() + timedelta(seconds=30)).replace(microsecond=0)
    ids = [
        register(deployed, principal, at=at.isoformat(), handler_url=url)["task_id"]
        for _ in range(count)
    ]
    deployed.clock.set(at)
    for shard in sorted(deployed.shards_of(ids)):
        deployed.tick(shard)
    return ids


def invoke_in_background(
    deployed: Deployment, messages: list[dict[str, Any]], context: FakeLambdaContext
) -> tuple[threading.Thread, list[dict[str, Any]]]:
    worker = deployed.function("worker")
    event = sqs_event(messages, queue_arn(worker.environment[DISPATCH_QUEUE.env_var]))
    answers: list[dict[str, Any]] = []
    thread = threading.Thread(target=lambda: answers.append(worker.invoke(event, context)))
    thread.start()
    return thread, answers


def delete(deployed: Deployment, messages: list[dict[str, Any]]) -> None:
    """What the event source mapping deletes after an invocation, with the worker's role."""
    worker = deployed.function("worker")
    url = worker.environment[DISPATCH_QUEUE.env_var]
    for message in messages:
        worker.sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])


def ended_once(deployed: Deployment, principal: str, task_ids: list[str]) -> bool:
    """Every task ran exactly one execution, which succeeded at its first attempt."""
    for task_id in task_ids:
        found = executions(deployed, principal, task_id)
        if [(e["status"], e["attempt"]) for e in found] != [("SUCCEEDED", 1)]:
            return False
    return True


def test_a_batch_of_the_mappings_size_runs_the_templates_concurrency_at_once(
    deployed: Deployment, principal: str, sink: Sink
) -> None:
    worker = deployed.function("worker")
    concurrency = int(worker.environment[WORKER_CONCURRENCY_VAR])
    assert (worker.batch_size, concurrency) == (100, 32)
    # Given more tasks due together than the worker runs at once, and a handler that
    # holds its calls
    task_ids = due_together(deployed, principal, concurrency + 8, sink.url)
    batch = deployed.receive_batch("worker", DISPATCH_QUEUE.env_var)
    assert len(batch) == len(task_ids)
    sink.gate = threading.Event()
    # When one invocation runs the batch
    context = FakeLambdaContext("worker-request", remaining_millis=worker.timeout_seconds * 1000)
    thread, answers = invoke_in_background(deployed, batch, context)
    # Then as many calls as the template allows are in flight at once, and no more
    assert wait_until(lambda: sink.concurrent == concurrency, timeout=60)
    sink.gate.set()
    thread.join(120)
    assert answers == [{"batchItemFailures": []}]
    assert sink.peak_concurrent == concurrency
    assert sorted(sink.calls_by_key().values()) == [1] * len(task_ids)
    assert ended_once(deployed, principal, task_ids)


def test_slow_handlers_send_the_records_not_started_in_time_back_unbegun(
    deployed: Deployment, principal: str, sink: Sink
) -> None:
    # Given forty tasks due together whose handler takes 20 s a call, in an invocation
    # with 50 s left (a record needs a call, 10 s, and the margin, 5 s, to start)
    context = FakeLambdaContext("worker-request", remaining_millis=50_000)

    def slow(delivery: Delivery) -> tuple[int, dict[str, str]]:
        context.remaining_millis -= 20_000
        return 200, {}

    sink.answer, sink.gate = slow, threading.Event()
    task_ids = due_together(deployed, principal, 40, f"{sink.url}/slow")
    batch = deployed.receive_batch("worker", DISPATCH_QUEUE.env_var)
    # When one invocation runs the batch, and two calls have used their time before
    # any ends (32 at once: at least eight records wait for a call to end)
    thread, answers = invoke_in_background(deployed, batch, context)
    assert wait_until(lambda: len(sink.snapshot()) >= 2, timeout=60)
    sink.gate.set()
    thread.join(120)
    # Then nothing failed; what started ran, the rest went back as fresh messages
    assert answers == [{"batchItemFailures": []}]
    began = [t for t in task_ids if executions(deployed, principal, t)]
    assert 2 <= len(began) <= 32
    assert len(sink.snapshot()) == len(began)
    delete(deployed, batch)
    again = deployed.receive_batch("worker", DISPATCH_QUEUE.env_var)
    assert len(again) == len(task_ids) - len(began)
    assert {m["Attributes"]["ApproximateReceiveCount"] for m in again} == {"1"}
    # And once visible again, the next invocation runs them: every task once, at its
    # first attempt
    sink.answer = None
    deployed.clock.advance(timedelta(seconds=VISIBILITY_SECONDS))
    deployed.drain("worker", DISPATCH_QUEUE.env_var)
    assert ended_once(deployed, principal, task_ids)
    assert sorted(sink.calls_by_key().values()) == [1] * len(task_ids)


def test_records_that_fail_one_by_one_are_each_reported_back_alone(
    deployed: Deployment, principal: str, sink: Sink
) -> None:
    worker = deployed.function("worker")
    # Given ten tasks due together, three of whose reads DynamoDB throttles
    task_ids = due_together(deployed, principal, 10, sink.url)
    throttled = set(task_ids[1:7:2])

    def throttle(params: dict[str, Any], **_: Any) -> None:
        if params.get("Key", {}).get("task_id", {}).get("S") in throttled:
            error = {"Code": "ProvisionedThroughputExceededException", "Message": "slow down"}
            raise ClientError({"Error": error}, "GetItem")

    def throttle_batch(params: dict[str, Any], **_: Any) -> None:
        # The batch's read of its tasks in one call names them all: throttled too.
        for request in params.get("RequestItems", {}).values():
            if any(key["task_id"]["S"] in throttled for key in request.get("Keys", [])):
                error = {"Code": "ProvisionedThroughputExceededException", "Message": "slow down"}
                raise ClientError({"Error": error}, "BatchGetItem")

    batch = deployed.receive_batch("worker", DISPATCH_QUEUE.env_var)
    assert len(batch) == 10
    # When one invocation runs the batch
    events = worker.dynamodb.meta.events
    events.register("provide-client-params.dynamodb.GetItem", throttle)
    events.register("provide-client-params.dynamodb.BatchGetItem", throttle_batch)
    try:
        context = FakeLambdaContext("worker-request", remaining_millis=60_000)
        thread, answers = invoke_in_background(deployed, batch, context)
        thread.join(120)
    finally:
        events.unregister("provide-client-params.dynamodb.GetItem", throttle)
        events.unregister("provide-client-params.dynamodb.BatchGetItem", throttle_batch)
    # Then exactly the three are reported back, each alone; the seven ran once
    (answer,) = answers
    reported = {f["itemIdentifier"] for f in answer["batchItemFailures"]}
    assert reported == {m["MessageId"] for m in batch if _task_of(m) in throttled}
    assert ended_once(deployed, principal, [t for t in task_ids if t not in throttled])
    assert all(not executions(deployed, principal, t) for t in throttled)
    # And after the visibility timeout SQS hands them out again, and they run once
    delete(deployed, [m for m in batch if m["MessageId"] not in reported])
    deployed.clock.advance(timedelta(seconds=VISIBILITY_SECONDS))
    deployed.drain("worker", DISPATCH_QUEUE.env_var)
    assert ended_once(deployed, principal, task_ids)
    assert sorted(sink.calls_by_key().values()) == [1] * 10


def test_a_batch_for_two_tenants_reads_their_hosts_together_with_the_templates_role(
    deployed: Deployment, principal: str, sink: Sink
) -> None:
    worker = deployed.function("worker")
    # Given two tenants' tasks due together on the same handler (a breaker each: the
    # worker reads both hosts' states in one BatchGetItem of the coordination table)
    other = f"{principal}-other"
    at = (deployed.clock.now() + timedelta(seconds=30)).replace(microsecond=0)
    ids = [
        register(deployed, caller, at=at.isoformat(), handler_url=sink.url)["task_id"]
        for caller in (principal, other)
    ]
    deployed.clock.set(at)
    for shard in sorted(deployed.shards_of(ids)):
        deployed.tick(shard)
    batch = deployed.receive_batch("worker", DISPATCH_QUEUE.env_var)
    assert len(batch) == 2
    read_together: list[int] = []
    coordination = worker.environment[COORDINATION.env_var]

    def count(params: dict[str, Any], **_: Any) -> None:
        if coordination in params["RequestItems"]:
            read_together.append(len(params["RequestItems"][coordination]["Keys"]))

    # When one invocation runs the batch, with the worker's own role
    events = worker.dynamodb.meta.events
    events.register("provide-client-params.dynamodb.BatchGetItem", count)
    try:
        context = FakeLambdaContext("worker-request", remaining_millis=60_000)
        thread, answers = invoke_in_background(deployed, batch, context)
        thread.join(120)
    finally:
        events.unregister("provide-client-params.dynamodb.BatchGetItem", count)
    # Then both hosts were read in one call, and both tasks ran once
    assert read_together == [2]
    assert answers == [{"batchItemFailures": []}]
    assert ended_once(deployed, principal, ids[:1])
    assert ended_once(deployed, other, ids[1:])
    delete_tasks(deployed, other)


def _task_of(message: dict[str, Any]) -> str:
    return str(json.loads(message["Body"])["task_id"])
