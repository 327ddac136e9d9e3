"""Isolation in the worker: a task that makes the worker raise is set aside, and the
rest of the batch goes on (issue 12, must-have "isolation by construction";
decision 0021).

Tenant A's tasks are sent by the tick as usual, then go bad before a worker reads
their message: one is set aside (ERROR), one is made unreadable straight in the
table (as a bug, a hand edit or a migration could), one holds a handler URL the
worker cannot even parse. They share one SQS batch with tenant B's messages.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from aws_lambda_powertools.utilities.batch.exceptions import BatchProcessingError

from dynacron.adapters.messages import dispatch_from_body, dispatch_to_body
from dynacron.api.requests import TaskCreate
from dynacron.definitions import metric_names
from dynacron.domain.executions.execution import ExecutionStatus
from dynacron.domain.instants import format_instant
from dynacron.domain.tasks.task import TaskStatus, execution_id_for
from dynacron.entry.composition import Dynacron
from dynacron.local.gateway import LocalContext
from dynacron.local.runtime import sqs_event
from dynacron.services import task_changes
from dynacron.services.undelivered import Settled
from tests.adversarial.test_lost_before_begin import (
    RECEIVES,
    fail_before_begin,
    moved_on_by_sqs,
    settle,
    undelivered,
    waiting,
)
from tests.conftest import START
from tests.integration.api_client import ALICE, call
from tests.pipeline import QUEUE_ARN, Pipeline
from tests.support import Sink

BOB = "arn:aws:iam::000000000000:user/bob"
DUE = START + timedelta(seconds=30)
B_TASKS = 6


def register(pipeline: Pipeline, principal: str, name: str, sink: Sink) -> str:
    return pipeline.app.task_service.register(
        principal,
        TaskCreate(name=name, at=format_instant(DUE), handler_url=f"{sink.url}/{name}").to_spec(),
    ).task_id


def make_unreadable(pipeline: Pipeline, task_id: str) -> None:
    """A schedule kind nobody knows, written around the API."""
    pipeline.dynamodb.update_item(
        TableName=pipeline.settings.tasks_table,
        Key={"task_id": {"S": task_id}},
        UpdateExpression="SET #schedule.kind = :lunar",
        ExpressionAttributeNames={"#schedule": "schedule"},
        ExpressionAttributeValues={":lunar": {"S": "lunar"}},
    )


def set_handler_url(pipeline: Pipeline, task_id: str, url: str) -> None:
    pipeline.dynamodb.update_item(
        TableName=pipeline.settings.tasks_table,
        Key={"task_id": {"S": task_id}},
        UpdateExpression="SET handler_url = :url",
        ExpressionAttributeValues={":url": {"S": url}},
    )


def receive_batch(pipeline: Pipeline) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = pipeline.sqs.receive_message(
        QueueUrl=pipeline.settings.dispatch_queue_url, MaxNumberOfMessages=10
    ).get("Messages", [])
    return messages


def run_batch(app: Dynacron, messages: list[dict[str, Any]]) -> list[str]:
    """One worker invocation, as Lambda makes it; returns the records it failed (all
    of them when the invocation raised: Lambda then retries the whole batch)."""
    try:
        result = app.worker(sqs_event(messages, QUEUE_ARN), LocalContext("test-worker", 60))
    except BatchProcessingError:
        return [m["MessageId"] for m in messages]
    return [f["itemIdentifier"] for f in result.get("batchItemFailures", [])]


def owner_sees_execution(pipeline: Pipeline, execution_id: str) -> dict[str, Any]:
    status, body = call(pipeline.app, "GET", f"/executions/{execution_id}")
    assert status == 200, body
    # Nobody else does
    status, _ = call(pipeline.app, "GET", f"/executions/{execution_id}", principal=BOB)
    assert status == 404
    return dict(body)


def test_a_batch_with_poisoned_tasks_runs_every_other_record_once(
    pipeline: Pipeline, sink: Sink
) -> None:
    """Findings 1 (the worker's part) and gaps 1-3 of the worker: an ERROR task's message
    ran its handler anyway; an unreadable task made its record raise, round after round
    until SQS gave up; a handler URL that cannot be parsed did the same."""
    app = pipeline.app
    # Given A's tasks and B's tasks, all due at once and sent by the tick
    set_aside = register(pipeline, ALICE, "a-set-aside", sink)
    unreadable = register(pipeline, ALICE, "a-unreadable", sink)
    bad_url = register(pipeline, ALICE, "a-bad-url", sink)
    b_tasks = [register(pipeline, BOB, f"b-{n}", sink) for n in range(B_TASKS)]
    pipeline.clock.set(DUE)
    assert pipeline.tick() == 3 + B_TASKS
    # And, before a worker reads their messages, A's tasks go bad: one is set aside
    # (as the reaper does when its last end could not be handled), one cannot be read
    assert task_changes.set_aside_by_id(app.tasks, set_aside, "its fixed delay overflowed", DUE)
    make_unreadable(pipeline, unreadable)
    # and one calls a URL the worker cannot parse (bypassing the API's validation)
    set_handler_url(pipeline, bad_url, "http://[::1/hook")
    messages = receive_batch(pipeline)
    assert len(messages) == 3 + B_TASKS

    # When one worker invocation runs the whole batch
    failed = run_batch(app, messages)

    # Then nothing raised out of it, and no record comes back
    assert failed == []
    # And B's tasks all ran, once; none of A's did
    assert sorted(d.path for d in sink.snapshot()) == sorted(f"/b-{n}" for n in range(B_TASKS))
    for task_id in b_tasks:
        ran = pipeline.execution(execution_id_for(task_id, DUE))
        assert ran is not None
        assert ran.status is ExecutionStatus.SUCCEEDED
    # And A sees each of its executions SKIPPED, with the reason
    reasons = {
        set_aside: "its fixed delay overflowed",
        unreadable: "lunar",
        bad_url: "Invalid IPv6 URL",
    }
    for task_id, reason in reasons.items():
        shown = owner_sees_execution(pipeline, execution_id_for(task_id, DUE))
        assert shown["status"] == "SKIPPED", shown
        assert "set aside" in shown["error"], shown
        assert reason in shown["error"], shown
    # And A's tasks are ERROR, with the reason, where A looks for them
    for task_id, reason in reasons.items():
        status, body = call(app, "GET", f"/tasks/{task_id}")
        assert status == 200, body
        assert body["status"] == TaskStatus.ERROR.value
        assert reason in body["status_reason"], body
    # And the operator's alarm counts the two the worker set aside
    assert pipeline.metrics.total(metric_names.TASKS_SET_ASIDE) == 2
    # And the messages are gone: nothing goes round towards the dead-letter queue
    assert pipeline.work() == 0


def test_an_unreadable_task_does_not_loop_in_the_undelivered_function(
    pipeline: Pipeline, sink: Sink
) -> None:
    """Gap 2: a message of a task that cannot be read, received 5 times without beginning
    (workers whose DynamoDB is unreachable), reached the undelivered queue, whose function
    raised on the same read: failed, and read again for the queue's 14 days."""
    app = pipeline.app
    task_id = register(pipeline, ALICE, "a-unreadable", sink)
    pipeline.clock.set(DUE)
    assert pipeline.tick() == 1
    make_unreadable(pipeline, task_id)
    # Given the message went round maxReceiveCount times and SQS moved it on
    fail_before_begin(pipeline)
    moved_on_by_sqs(pipeline)
    # When the undelivered function reads it: nothing raises (one record that fails
    # fails the whole batch, and raises), and the message is done
    assert settle(pipeline) == 1
    assert waiting(pipeline, undelivered(pipeline)) == 0
    # Then the owner finds the dead letter, with both reasons
    execution_id = execution_id_for(task_id, DUE)
    status, page = call(app, "GET", "/dead-letters")
    assert status == 200, page
    listed = {e["execution_id"]: e for e in page["items"]}
    assert execution_id in listed, page
    assert "never began" in listed[execution_id]["error"]
    assert "lunar" in listed[execution_id]["error"]
    # And the task is set aside, with the reason
    status, body = call(app, "GET", f"/tasks/{task_id}")
    assert status == 200, body
    assert body["status"] == "ERROR"
    assert "lunar" in body["status_reason"]
    # And read again (a copy, a retry of the batch), it is recorded once
    failed = pipeline.execution(execution_id)
    assert failed is not None
    again = app.undelivered_dispatches.settle_message(dispatch_to_body(failed.as_dispatch()))
    assert again is Settled.MOVED_ON


def test_a_message_that_raises_before_begin_ends_as_a_listed_dead_letter(
    pipeline: Pipeline, sink: Sink
) -> None:
    """Gap 3: an exception that is neither an infrastructure error nor the handler's
    failure, raised before the attempt begins for a reason that is not the task's (here a
    message whose ``not_before`` underflows a date), fails only its record; after
    maxReceiveCount receives it is listed as a dead letter, never looping."""
    app = pipeline.app
    task_id = register(pipeline, ALICE, "a-odd-message", sink)
    b_task = register(pipeline, BOB, "b-0", sink)
    pipeline.clock.set(DUE)
    assert pipeline.tick() == 2
    # Given A's message is rewritten as a bug could write it (the original is dropped)
    messages = receive_batch(pipeline)
    body = next(m["Body"] for m in messages if json.loads(m["Body"])["task_id"] == task_id)
    odd = json.loads(body) | {"not_before": "0001-01-01T00:00:00.000Z"}
    pipeline.sqs.delete_message(
        QueueUrl=pipeline.settings.dispatch_queue_url,
        ReceiptHandle=next(m["ReceiptHandle"] for m in messages if m["Body"] == body),
    )
    pipeline.sqs.send_message(
        QueueUrl=pipeline.settings.dispatch_queue_url, MessageBody=json.dumps(odd)
    )
    b_message = next(m for m in messages if m["Body"] != body)
    pipeline.sqs.change_message_visibility(
        QueueUrl=pipeline.settings.dispatch_queue_url,
        ReceiptHandle=b_message["ReceiptHandle"],
        VisibilityTimeout=0,
    )
    # When workers receive it, round after round
    rounds = 0
    while batch := receive_batch(pipeline):
        rounds += 1
        failed = run_batch(app, batch)
        for message in batch:
            if message["MessageId"] in failed:
                # Only A's record fails; B's ran
                assert dispatch_from_body(message["Body"]).task_id == task_id
                pipeline.sqs.change_message_visibility(
                    QueueUrl=pipeline.settings.dispatch_queue_url,
                    ReceiptHandle=message["ReceiptHandle"],
                    VisibilityTimeout=0,
                )
            else:
                pipeline.sqs.delete_message(
                    QueueUrl=pipeline.settings.dispatch_queue_url,
                    ReceiptHandle=message["ReceiptHandle"],
                )
        assert rounds <= RECEIVES
    # Then SQS gave up after maxReceiveCount receives, and B's task ran once
    assert rounds == RECEIVES
    assert [d.path for d in sink.snapshot()] == ["/b-0"]
    assert pipeline.execution(execution_id_for(b_task, DUE)) is not None
    # And the undelivered function lists it as A's dead letter
    assert settle(pipeline) == 1
    execution_id = execution_id_for(task_id, DUE)
    status, page = call(app, "GET", "/dead-letters")
    assert status == 200, page
    assert execution_id in {e["execution_id"] for e in page["items"]}
    status, page = call(app, "GET", "/dead-letters", principal=BOB)
    assert execution_id not in {e["execution_id"] for e in page["items"]}
    # And a redrive runs it once
    status, body = call(app, "POST", f"/dead-letters/{execution_id}/redrive")
    assert status == 202, body
    pipeline.work()
    assert sorted(d.path for d in sink.snapshot()) == ["/a-odd-message", "/b-0"]


def test_an_unreadable_dependent_is_set_aside_and_its_upstream_goes_on(
    pipeline: Pipeline, sink: Sink
) -> None:
    """Gap 4: a dependent that cannot be read made the upstream's follow-up raise; the
    reaper then set aside the upstream task, and no other dependent started."""
    app = pipeline.app
    upstream = register(pipeline, ALICE, "a-upstream", sink)
    healthy = app.task_service.register(
        ALICE,
        TaskCreate(name="a-healthy", after=upstream, handler_url=f"{sink.url}/a-healthy").to_spec(),
    ).task_id
    broken = app.task_service.register(
        ALICE,
        TaskCreate(name="a-broken", after=upstream, handler_url=f"{sink.url}/a-broken").to_spec(),
    ).task_id
    make_unreadable(pipeline, broken)
    # When the upstream runs and succeeds
    pipeline.clock.set(DUE)
    pipeline.tick()
    pipeline.work()
    pipeline.work()
    # Then the healthy dependent ran, and the upstream is as it was
    assert sorted(d.path for d in sink.snapshot()) == ["/a-healthy", "/a-upstream"]
    assert app.task_service.get(ALICE, upstream).status is not TaskStatus.ERROR
    assert app.task_service.get(ALICE, healthy).status is TaskStatus.ACTIVE
    upstream_run = pipeline.execution(execution_id_for(upstream, DUE))
    assert upstream_run is not None
    assert upstream_run.status is ExecutionStatus.SUCCEEDED
    assert upstream_run.lease_token is None  # its follow-up finished
    # And the unreadable dependent is ERROR, with the reason
    status, body = call(app, "GET", f"/tasks/{broken}")
    assert status == 200, body
    assert body["status"] == "ERROR"
    assert "lunar" in body["status_reason"]
    assert pipeline.metrics.total(metric_names.TASKS_SET_ASIDE) == 1


class BrokenDelivery:
    """Delivery code with a bug: it raises instead of answering a ``DeliveryResult``
    (not the handler's failure, which is an answer)."""

    def deliver(self, task: Any, dispatch: Any, callback_token: str) -> Any:
        raise RuntimeError("a bug in the delivery code")


def test_an_error_after_begin_fails_the_attempt_and_never_loops(
    pipeline: Pipeline, sink: Sink
) -> None:
    """Gap 3, after ``begin``: the record fails, and its message, coming back to the
    running attempt, hands the lease to the reaper, which fails the attempt once it runs
    out; the next attempt runs on a healthy worker. Nothing goes round for ever."""
    task_id = register(pipeline, ALICE, "a-unlucky", sink)
    pipeline.clock.set(DUE)
    assert pipeline.tick() == 1
    buggy = Dynacron(
        pipeline.settings,
        dynamodb=pipeline.dynamodb,
        sqs=pipeline.sqs,
        clock=pipeline.clock,
        delivery=BrokenDelivery(),
        emit_metrics=pipeline.metrics,
        dispatch_queue=pipeline.queue,
    )
    # Given a worker whose delivery raised after the attempt began
    messages = receive_batch(pipeline)
    assert len(run_batch(buggy, messages)) == 1
    execution_id = execution_id_for(task_id, DUE)
    began = pipeline.execution(execution_id)
    assert began is not None
    assert began.status is ExecutionStatus.RUNNING
    pipeline.sqs.change_message_visibility(
        QueueUrl=pipeline.settings.dispatch_queue_url,
        ReceiptHandle=messages[0]["ReceiptHandle"],
        VisibilityTimeout=0,
    )
    # When healthy workers and the reaper go on (the pipeline raises on any record
    # that raises: none does)
    settled = pipeline.settle([execution_id])
    # Then the attempt failed, the next one ran once, and the message is gone
    assert settled[0].status is ExecutionStatus.SUCCEEDED
    assert settled[0].attempt == 2
    assert [d.path for d in sink.snapshot()] == ["/a-unlucky"]
    assert pipeline.work() == 0
