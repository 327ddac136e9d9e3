from __future__ import annotations

import json
import time
from datetime import timedelta
from typing import Any

from dynacron.adapters.messages import is_late_check
from dynacron.api.requests import TaskCreate
from dynacron.domain.clock import SettableClock
from dynacron.domain.executions.execution import Dispatch, Execution, ExecutionStatus
from dynacron.domain.tasks.task import execution_id_for
from dynacron.entry.composition import Dynacron
from dynacron.local.gateway import LocalContext
from dynacron.local.runtime import sqs_event
from tests.integration.api_client import ALICE, call
from tests.support import Sink


def receive(system: Dynacron, aws: tuple[Any, Any]) -> list[dict[str, Any]]:
    _, sqs = aws
    messages: list[dict[str, Any]] = []
    while batch := sqs.receive_message(
        QueueUrl=system.settings.dispatch_queue_url, MaxNumberOfMessages=10
    ).get("Messages", []):
        messages += batch
    return messages


def run_batch(system: Dynacron, messages: list[dict[str, Any]]) -> dict[str, Any]:
    event = sqs_event(messages, "arn:aws:sqs:us-east-1:123456789012:dynacron-dispatch")
    return system.worker(event, LocalContext("test-worker"))


def only_execution(system: Dynacron, task_id: str) -> Execution:
    """The one execution recorded for ``task_id``."""
    (execution,) = system.executions.list_for_task(task_id, 10, None).items
    return execution


def fire(system: Dynacron, clock: SettableClock, sink: Sink, **fields: Any) -> str:
    task = system.task_service.register(
        ALICE, TaskCreate(handler_url=f"{sink.url}/hook", **fields).to_spec()
    )
    assert task.next_run_at is not None
    clock.set(task.next_run_at + timedelta(milliseconds=5))
    assert sum(r.claimed for r in system.ticker.tick()) == 1
    return task.task_id


def test_the_handler_receives_the_execution_and_it_is_recorded(
    system: Dynacron, aws: tuple[Any, Any], clock: SettableClock, sink: Sink
) -> None:
    task_id = fire(system, clock, sink, rate="1 minute", payload={"invoice": 42})
    scheduled = clock.now().replace(microsecond=0)
    execution_id = execution_id_for(task_id, scheduled)

    assert run_batch(system, receive(system, aws)) == {"batchItemFailures": []}

    (delivery,) = sink.snapshot()
    assert delivery.path == "/hook"
    assert delivery.headers["Idempotency-Key"] == execution_id
    assert delivery.headers["Content-Type"] == "application/json"
    assert delivery.body == {
        "task_id": task_id,
        "execution_id": execution_id,
        "scheduled_at": "2026-11-30T12:01:00.000Z",
        "attempt": 1,
        "payload": {"invoice": 42},
    }
    status, page = call(system, "GET", f"/tasks/{task_id}/executions")
    assert status == 200
    (execution,) = page["items"]
    assert execution["execution_id"] == execution_id
    assert execution["status"] == "SUCCEEDED"
    assert execution["started_at"]
    assert execution["completed_at"]
    assert execution["error"] is None


class WriteCounter:
    """The DynamoDB writes a client makes, by table: what a fire is billed for."""

    WRITES = ("PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems")

    def __init__(self, client: Any) -> None:
        self.writes: list[tuple[str, str]] = []
        client.meta.events.register("before-parameter-build.dynamodb", self._count)

    def _count(self, model: Any, params: dict[str, Any], **_: Any) -> None:
        if model.name in self.WRITES:
            self.writes.append((params.get("TableName", "?"), model.name))


def raw_execution(aws: tuple[Any, Any], system: Dynacron, execution_id: str) -> dict[str, Any]:
    dynamodb, _ = aws
    key = {"task_id": {"S": execution_id.split("_")[0]}, "execution_id": {"S": execution_id}}
    item = dynamodb.get_item(
        TableName=system.settings.executions_table, Key=key, ConsistentRead=True
    )["Item"]
    return {name: next(iter(value.values())) for name, value in item.items()}


def test_a_fire_writes_its_task_once_and_its_execution_twice(
    system: Dynacron, aws: tuple[Any, Any], clock: SettableClock, sink: Sink
) -> None:
    # Given a recurring task, and every DynamoDB write counted from its tick on
    task = system.task_service.register(
        ALICE, TaskCreate(handler_url=f"{sink.url}/hook", rate="1 minute").to_spec()
    )
    assert task.next_run_at is not None
    clock.set(task.next_run_at + timedelta(milliseconds=5))
    counter = WriteCounter(aws[0])
    # When it fires and its handler succeeds
    assert sum(r.claimed for r in system.ticker.tick()) == 1
    run_batch(system, receive(system, aws))
    # Then the claim, the begin (with the idempotency record in progress) and the
    # end (with the success saved) are the only writes of the fire (decision 0016)
    settings = system.settings
    fire_writes = [w for w in counter.writes if w[0] != settings.coordination_table]
    assert fire_writes == [
        (settings.tasks_table, "UpdateItem"),
        (settings.executions_table, "PutItem"),
        (settings.executions_table, "UpdateItem"),
    ]
    execution = only_execution(system, task.task_id)
    assert execution.status is ExecutionStatus.SUCCEEDED
    assert not execution.lease_indexed


def test_the_idempotency_record_is_kept_on_the_execution(
    system: Dynacron, aws: tuple[Any, Any], clock: SettableClock, sink: Sink
) -> None:
    # A success is remembered for a day (Powertools' record, on the execution item)
    task_id = fire(system, clock, sink, rate="1 minute")
    run_batch(system, receive(system, aws))
    execution = only_execution(system, task_id)
    item = raw_execution(aws, system, execution.execution_id)
    assert item["call_status"] == "COMPLETED"
    ttl = system.settings.idempotency_ttl_seconds
    assert abs(int(item["call_expires_at"]) - (time.time() + ttl)) < 60  # the wall clock
    assert "call_in_progress_until" not in item
    assert item["result"]["status_code"] == {"N": "200"}
    # A failed call leaves no record: the next attempt calls again
    sink.status = 500
    clock.advance(timedelta(minutes=1))
    assert sum(r.claimed for r in system.ticker.tick()) == 1
    run_batch(system, receive(system, aws))
    failed = [e for e in system.executions.list_for_task(task_id, 10, None).items]
    assert failed[0].status is ExecutionStatus.QUEUED  # newest first: a retry is queued
    assert "call_status" not in raw_execution(aws, system, failed[0].execution_id)


def test_a_failing_handler_is_recorded_failed_with_its_reason(
    system: Dynacron, aws: tuple[Any, Any], clock: SettableClock, sink: Sink
) -> None:
    sink.status = 500
    task_id = fire(system, clock, sink, rate="1 minute", retry={"max_attempts": 1})
    run_batch(system, receive(system, aws))
    execution = only_execution(system, task_id)
    assert execution.status is ExecutionStatus.FAILED
    assert execution.error is not None
    assert "HTTP 500" in execution.error


def test_an_unreachable_handler_is_recorded_failed(
    system: Dynacron, aws: tuple[Any, Any], clock: SettableClock, sink: Sink
) -> None:
    task_id = fire(system, clock, sink, rate="1 minute", retry={"max_attempts": 1})
    sink.stop()
    run_batch(system, receive(system, aws))
    execution = only_execution(system, task_id)
    assert execution.status is ExecutionStatus.FAILED
    assert execution.error is not None
    assert "unreachable" in execution.error


def test_a_duplicate_delivery_of_a_finished_execution_does_not_run_again(
    system: Dynacron, aws: tuple[Any, Any], clock: SettableClock, sink: Sink
) -> None:
    fire(system, clock, sink, rate="1 minute")
    (message,) = receive(system, aws)
    run_batch(system, [message])
    run_batch(system, [message])  # SQS delivers at least once
    assert len(sink.snapshot()) == 1


def test_a_duplicate_delivery_of_a_late_execution_starts_no_second_late_timer(
    system: Dynacron, aws: tuple[Any, Any], clock: SettableClock, sink: Sink
) -> None:
    # Given a task to be told of an occurrence not done within 60 s, whose first
    # attempt is picked up 61 s late and fails
    sink.status = 500
    fire(
        system,
        clock,
        sink,
        rate="10 minutes",
        retry={"max_attempts": 1},
        notify={"on_late": {"url": f"{sink.url}/notify/late", "within_seconds": 60}},
    )
    (message,) = receive(system, aws)
    clock.advance(timedelta(seconds=61))

    # When SQS delivers that attempt twice, the second a duplicate whose begin is refused
    run_batch(system, [message])
    run_batch(system, [message])

    # Then one on_late timer was started, not two, and the owner is told once
    timers = [m for m in receive(system, aws) if is_late_check(m["Body"])]
    assert len(timers) == 1
    run_batch(system, timers)
    while messages := receive(system, aws):
        run_batch(system, messages)
    late = [d.body for d in sink.snapshot() if d.path == "/notify/late"]
    assert len(late) == 1, late
    assert late[0]["count"] == 1


def test_a_task_deleted_after_dispatch_does_not_fire(
    system: Dynacron, aws: tuple[Any, Any], clock: SettableClock, sink: Sink
) -> None:
    task_id = fire(system, clock, sink, rate="1 minute")
    system.task_service.delete(ALICE, task_id)
    run_batch(system, receive(system, aws))
    assert sink.snapshot() == []
    execution = only_execution(system, task_id)
    assert execution.status is ExecutionStatus.SKIPPED


def test_delivery_outside_the_allowed_networks_is_refused_at_delivery(
    system: Dynacron, aws: tuple[Any, Any], clock: SettableClock, sink: Sink
) -> None:
    # Given a task stored with a URL that registration would refuse (e.g. DNS changed)
    task_id = fire(system, clock, sink, rate="1 minute")
    dynamodb, _ = aws
    dynamodb.update_item(
        TableName=system.settings.tasks_table,
        Key={"task_id": {"S": task_id}},
        UpdateExpression="SET handler_url = :url",
        ExpressionAttributeValues={":url": {"S": "http://10.0.0.1/hook"}},
    )
    run_batch(system, receive(system, aws))
    execution = only_execution(system, task_id)
    assert execution.status is ExecutionStatus.FAILED
    assert execution.error is not None
    assert "delivery refused" in execution.error


def test_a_bad_record_fails_alone_and_is_reported_for_redelivery(
    system: Dynacron, aws: tuple[Any, Any], clock: SettableClock, sink: Sink
) -> None:
    fire(system, clock, sink, rate="1 minute")
    (good,) = receive(system, aws)
    bad = {**good, "MessageId": "poison", "Body": json.dumps({"nonsense": True})}
    result = run_batch(system, [bad, good])
    assert result == {"batchItemFailures": [{"itemIdentifier": "poison"}]}
    assert len(sink.snapshot()) == 1


def test_the_thin_lambda_handlers_work_from_the_environment(
    system: Dynacron, aws: tuple[Any, Any], sink: Sink, monkeypatch: Any
) -> None:
    import importlib.util

    from dynacron.entry import functions
    from tests.support import ROOT

    for name, value in system.settings.to_env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", "dynacron-test")
    functions._deployed.cache_clear()

    def load(function: str) -> Any:
        spec = importlib.util.spec_from_file_location(
            f"handler_{function}", ROOT / "functions" / function / "handler.py"
        )
        assert spec
        assert spec.loader
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.handler

    from dynacron.local.gateway import proxy_event

    body = json.dumps({"at": "2026-01-01T00:00:00Z", "handler_url": f"{sink.url}/h"})

    def signed(event: dict[str, Any]) -> dict[str, Any]:
        event["requestContext"]["identity"]["userArn"] = ALICE
        return event

    # Without an identity there is no tenant: refused before anything else
    unsigned = proxy_event(
        "POST", "/tasks", {"content-type": "application/json"}, body.encode(), "::1"
    )
    assert load("api")(unsigned, LocalContext("dynacron-api"))["statusCode"] == 401
    # `at` in the past by the real clock is refused: proves the real API handler ran
    response = load("api")(
        signed(
            proxy_event(
                "POST", "/tasks", {"content-type": "application/json"}, body.encode(), "::1"
            )
        ),
        LocalContext("dynacron-api"),
    )
    assert response["statusCode"] == 422
    created = load("api")(
        signed(
            proxy_event(
                "POST",
                "/tasks",
                {"content-type": "application/json"},
                json.dumps({"rate": "1 second", "handler_url": f"{sink.url}/h"}).encode(),
                "::1",
            )
        ),
        LocalContext("dynacron-api"),
    )
    assert created["statusCode"] == 201
    import time

    time.sleep(1.2)  # the deployed entry points use the real clock
    # On a slow machine a second occurrence may be due too: each runs once.
    claimed = load("tick")({}, LocalContext("dynacron-tick"))["claimed"]
    assert claimed >= 1
    result = load("worker")(
        sqs_event(receive(system, aws), "arn:aws:sqs:us-east-1:123456789012:q"),
        LocalContext("dynacron-worker"),
    )
    assert result == {"batchItemFailures": []}
    assert len(sink.snapshot()) == claimed
    functions._deployed.cache_clear()


BOB = "arn:aws:iam::000000000000:user/bob"


def test_an_execution_of_a_task_deleted_before_it_began_is_its_tenants(
    system: Dynacron, aws: tuple[Any, Any], clock: SettableClock, sink: Sink
) -> None:
    """Finding 8: it was recorded under the ``default`` tenant, where its owner never
    sees it (and another tenant named ``default`` would)."""
    # Given Bob's task, sent to the queue, then deleted before a worker began it
    task = system.task_service.register(
        BOB, TaskCreate(handler_url=sink.url, rate="1 minute").to_spec()
    )
    assert task.next_run_at is not None
    clock.set(task.next_run_at)
    assert sum(r.claimed for r in system.ticker.tick()) == 1
    assert call(system, "DELETE", f"/tasks/{task.task_id}", principal=BOB) == (204, None)
    # When the worker gets to it
    assert run_batch(system, receive(system, aws)) == {"batchItemFailures": []}
    # Then it is skipped, unsent, and Bob's
    execution = only_execution(system, task.task_id)
    assert execution.status is ExecutionStatus.SKIPPED
    assert execution.tenant_id == BOB
    assert sink.snapshot() == []


def test_a_message_without_its_tenant_finds_it_in_the_tasks_earlier_executions(
    system: Dynacron, aws: tuple[Any, Any], clock: SettableClock, sink: Sink
) -> None:
    """Finding 8, for a message sent before messages named their tenant."""
    task = system.task_service.register(
        BOB, TaskCreate(handler_url=sink.url, rate="1 minute").to_spec()
    )
    assert task.next_run_at is not None
    clock.set(task.next_run_at)
    system.ticker.tick()
    run_batch(system, receive(system, aws))
    system.task_service.delete(BOB, task.task_id)
    later = task.next_run_at + timedelta(minutes=1)
    old_message = Dispatch(execution_id_for(task.task_id, later), task.task_id, later)
    assert old_message.tenant_id is None
    system.runner.run(old_message)
    skipped = system.executions.get(old_message.execution_id)
    assert skipped is not None
    assert (skipped.status, skipped.tenant_id) == (ExecutionStatus.SKIPPED, BOB)
