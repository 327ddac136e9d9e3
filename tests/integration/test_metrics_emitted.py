"""What the deployed functions emit for their alarms (issue 13): the looping tick's
heartbeat after every step, the worker's handler duration and queue latency, and
the totals that give failures and retries a denominator. On moto, through the
``emit_metrics`` seam: each EMF document is kept as Lambda would print it."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest

from dynacron.adapters.delivery.registry import ExecutionContext, HandlerRegistry
from dynacron.adapters.messages import dispatch_from_body, dispatch_to_body
from dynacron.adapters.powertools.metrics import EmfDocument
from dynacron.api.requests import RetryCreate, TaskCreate
from dynacron.definitions import metric_names
from dynacron.domain.clock import SettableClock
from dynacron.domain.executions.execution import ExecutionStatus
from dynacron.domain.tasks.task import execution_id_for, shard_for
from dynacron.entry.composition import Dynacron
from dynacron.entry.settings import Settings
from dynacron.local.gateway import LocalContext
from dynacron.local.runtime import sqs_event
from dynacron.ports.faults import Boundary
from dynacron.services.outcomes import Outcome
from dynacron.services.tick_loop import LoopEnd
from tests.conftest import sleep_moving
from tests.contract import coordination_changes as changes
from tests.integration.api_client import ALICE
from tests.support import FakeLambdaContext, RaiseAt
from tests.unit.test_emf_documents import emitted, shard, units

DISPATCH_ARN = "arn:aws:sqs:us-east-1:123456789012:dynacron-dispatch"
HOOK = "http://127.0.0.1:9/hook"


def values_of(documents: list[EmfDocument], name: str, **dimensions: str) -> list[float]:
    """Every value of ``name`` emitted with exactly these dimensions besides service."""
    return emitted(documents).get((name, frozenset(dimensions.items())), [])


def dimensions_of(documents: list[EmfDocument], name: str) -> list[list[str]]:
    return [
        sorted(directive["Dimensions"][0])
        for document in documents
        for directive in document["_aws"]["CloudWatchMetrics"]
        if any(metric["Name"] == name for metric in directive["Metrics"])
    ]


def system_with(
    aws: tuple[Any, Any],
    settings: Settings,
    clock: SettableClock,
    documents: list[EmfDocument],
    **kwargs: Any,
) -> Dynacron:
    dynamodb, sqs = aws
    return Dynacron(
        settings,
        dynamodb=dynamodb,
        sqs=sqs,
        clock=clock,
        emit_metrics=documents.append,
        **{"sleep": sleep_moving(clock), **kwargs},
    )


# --- the looping tick -------------------------------------------------------------------


def test_every_step_of_the_looping_tick_flushes_one_line_with_its_shards_heartbeat(
    aws: tuple[Any, Any], settings: Settings, clock: SettableClock
) -> None:
    documents: list[EmfDocument] = []
    lines_at_each_sleep: list[int] = []

    def sleep(seconds: float) -> None:
        # What had reached stdout (CloudWatch) when the loop went to sleep.
        lines_at_each_sleep.append(len(documents))
        clock.advance(timedelta(seconds=seconds))

    system = system_with(aws, settings, clock, documents, sleep=sleep)
    # Given the deployed tick's invocation for shard 1, with 30 s to live
    context = FakeLambdaContext(aws_request_id="invocation-1", remaining_millis=30_000)
    # When it runs its loop to the deadline
    result = system.tick({"shard": 1, "loop": True}, context)
    ticks = result["ticks"]
    assert result["ended"] == LoopEnd.DEADLINE.value
    assert ticks >= 10
    # Then each step printed exactly one line before the loop slept: a loop that
    # flushed only at its end would show zeros here, one printing more, more
    assert lines_at_each_sleep == list(range(1, ticks + 1))
    # And each line carries one heartbeat of shard 1, with the shard as dimension
    for document in documents:
        assert emitted([document])[(metric_names.TICK_HEARTBEAT, shard(1))] == [1.0]
    assert values_of(documents, metric_names.TICK_HEARTBEAT, shard="1") == [1.0] * ticks
    assert (
        dimensions_of(documents, metric_names.TICK_HEARTBEAT)
        == [[metric_names.SERVICE_DIMENSION, metric_names.SHARD_DIMENSION]] * ticks
    )
    assert units(documents)[metric_names.TICK_HEARTBEAT] == "Count"
    # And the tick's own metric keeps the service dimension alone
    assert values_of(documents, metric_names.QUEUE_DEPTH) == [0.0] * ticks


def test_a_tick_that_raises_is_no_heartbeat(
    aws: tuple[Any, Any], settings: Settings, clock: SettableClock
) -> None:
    documents: list[EmfDocument] = []
    faults = RaiseAt(Boundary.TICK_SENT_NOT_CLAIMED, times=3)
    system = system_with(aws, settings, clock, documents, faults=faults)
    # Given a task due every 5 s, and a tick of its shard that raises three times
    task = system.task_service.register(
        ALICE, TaskCreate(handler_url=HOOK, rate="5 seconds").to_spec()
    )
    shard = shard_for(task.task_id, settings.shard_count)
    context = FakeLambdaContext(aws_request_id="invocation-1", remaining_millis=40_000)
    # When the loop runs
    result = system.tick({"shard": shard, "loop": True}, context)
    # Then only the ticks that returned were heartbeats
    assert faults.left == 0
    assert result["failed_ticks"] == 3
    heartbeats = values_of(documents, metric_names.TICK_HEARTBEAT, shard=str(shard))
    assert len(heartbeats) == result["ticks"]
    assert values_of(documents, metric_names.TICK_FAILURES) == [1.0] * 3


def test_an_invocation_waiting_for_the_shard_sends_no_heartbeat(
    aws: tuple[Any, Any], settings: Settings, clock: SettableClock
) -> None:
    documents: list[EmfDocument] = []
    system = system_with(aws, settings, clock, documents)
    # Given shard 0 held by a live holder that is not this invocation
    now = clock.now()
    assert changes.acquire(system.leases, 0, "holder", now, now + timedelta(minutes=5))
    context = FakeLambdaContext(aws_request_id="newcomer", remaining_millis=20_000)
    # When this invocation waits until its deadline
    result = system.tick({"shard": 0, "loop": True}, context)
    # Then it never ticked, and said nothing for the shard: the holder does
    assert result["ticks"] == 0
    assert values_of(documents, metric_names.TICK_HEARTBEAT, shard="0") == []


# --- the worker ---------------------------------------------------------------------------


def registry_with(clock: SettableClock) -> HandlerRegistry:
    registry = HandlerRegistry()

    def slow(run: ExecutionContext) -> dict[str, int]:
        clock.advance(timedelta(seconds=2.5))  # the call takes 2.5 s of the test's clock
        return {"attempt": run.attempt}

    def broken(run: ExecutionContext) -> None:
        clock.advance(timedelta(seconds=0.5))
        raise RuntimeError("the report server is down")

    registry.register("slow", slow)
    registry.register("broken", broken)
    return registry


def received(system: Dynacron, aws: tuple[Any, Any]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    while (
        batch := aws[1]
        .receive_message(QueueUrl=system.settings.dispatch_queue_url, MaxNumberOfMessages=10)
        .get("Messages", [])
    ):
        messages += batch
    return messages


def sent_at(messages: list[dict[str, Any]], when: datetime) -> list[dict[str, Any]]:
    """The messages as if SQS had stamped them sent at ``when`` (moto stamps the
    machine's time, which the test clock does not follow)."""
    millis = str(int(when.timestamp() * 1000))
    return [
        {**m, "Attributes": {**m.get("Attributes", {}), "SentTimestamp": millis}} for m in messages
    ]


def test_the_worker_emits_the_handler_calls_duration_and_the_queue_latency(
    aws: tuple[Any, Any], settings: Settings, clock: SettableClock
) -> None:
    documents: list[EmfDocument] = []
    system = system_with(aws, settings, clock, documents, handlers=registry_with(clock))
    task = system.task_service.register(
        ALICE, TaskCreate(handler="slow", rate="1 minute").to_spec()
    )
    assert task.next_run_at is not None
    due = task.next_run_at
    # Given an occurrence sent 1 s after it was due, which a worker starts 3 s later
    clock.set(due + timedelta(seconds=1))
    assert sum(r.claimed for r in system.ticker.tick()) == 1
    messages = sent_at(received(system, aws), clock.now())
    clock.advance(timedelta(seconds=3))
    # When the worker runs it, and the handler takes 2.5 s
    result = system.worker(sqs_event(messages, DISPATCH_ARN), LocalContext("worker"))
    # Then the worker said how long it waited in the queue and how long the call took
    assert result == {"batchItemFailures": []}
    assert values_of(documents, metric_names.QUEUE_LATENCY) == [3.0]
    assert values_of(documents, metric_names.HANDLER_DURATION) == [2.5]
    assert values_of(documents, metric_names.SCHEDULING_LAG) == [4.0]
    unit_of = units(documents)
    assert unit_of[metric_names.QUEUE_LATENCY] == "Seconds"
    assert unit_of[metric_names.HANDLER_DURATION] == "Seconds"
    # With the service dimension alone, which is what the alarms ask for
    for name in (metric_names.QUEUE_LATENCY, metric_names.HANDLER_DURATION):
        assert dimensions_of(documents, name) == [[metric_names.SERVICE_DIMENSION]]
    # And one attempt ended, the execution SUCCEEDED
    assert values_of(documents, metric_names.ATTEMPTS) == [1.0]
    assert values_of(documents, metric_names.EXECUTIONS_FINISHED, outcome="SUCCEEDED") == [1.0]


def test_a_retry_waiting_in_the_queue_counts_from_its_due_time_not_its_send(
    aws: tuple[Any, Any], settings: Settings, clock: SettableClock
) -> None:
    documents: list[EmfDocument] = []
    system = system_with(aws, settings, clock, documents, handlers=registry_with(clock))
    task = system.task_service.register(
        ALICE, TaskCreate(handler="slow", rate="1 minute").to_spec()
    )
    assert task.next_run_at is not None
    clock.set(task.next_run_at)
    assert sum(r.claimed for r in system.ticker.tick()) == 1
    (message,) = received(system, aws)
    # Given a message that is not due for another 60 s (a retry's hop)
    not_before = clock.now() + timedelta(seconds=60)
    waiting = replace(dispatch_from_body(message["Body"]), not_before=not_before)
    (early,) = sent_at([{**message, "Body": dispatch_to_body(waiting)}], clock.now())
    # When a worker receives it before then, it is sent on: no latency is made up
    system.worker(sqs_event([early], DISPATCH_ARN), LocalContext("worker"))
    assert values_of(documents, metric_names.QUEUE_LATENCY) == []
    # And when one receives it 2 s after it was due, the latency is those 2 s
    clock.set(not_before + timedelta(seconds=2))
    system.worker(sqs_event([early], DISPATCH_ARN), LocalContext("worker"))
    assert values_of(documents, metric_names.QUEUE_LATENCY) == [2.0]


def test_failures_retries_and_finished_executions_have_a_denominator(
    aws: tuple[Any, Any], settings: Settings, clock: SettableClock
) -> None:
    documents: list[EmfDocument] = []
    system = system_with(aws, settings, clock, documents, handlers=registry_with(clock))
    at = "2026-11-30T12:00:01Z"
    # Given one execution that fails twice (its last attempt) and one that succeeds
    retry = RetryCreate(max_attempts=2)
    fails = system.task_service.register(
        ALICE, TaskCreate(handler="broken", at=at, retry=retry).to_spec()
    )
    system.task_service.register(ALICE, TaskCreate(handler="slow", at=at).to_spec())
    assert fails.next_run_at is not None
    clock.set(fails.next_run_at)
    failing_id = execution_id_for(fails.task_id, fails.next_run_at)
    assert sum(r.claimed for r in system.ticker.tick()) == 2
    # When the worker runs both, and then the failing one's retry
    messages = received(system, aws)
    outcomes = {system.runner.run(dispatch_from_body(m["Body"])) for m in messages}
    assert outcomes == {Outcome.RETRY_SCHEDULED, Outcome.SUCCEEDED}
    queued = system.executions.get(failing_id)
    assert queued is not None
    assert queued.status is ExecutionStatus.QUEUED
    assert queued.next_attempt_at is not None
    clock.set(queued.next_attempt_at)
    assert system.runner.run(queued.as_dispatch()) is Outcome.DEAD_LETTERED
    system.metrics.flush()
    # Then three attempts ended, two of them failed: a failure rate of 2/3
    assert sum(values_of(documents, metric_names.ATTEMPTS)) == 3
    assert sum(values_of(documents, metric_names.FAILURES)) == 2
    assert sum(values_of(documents, metric_names.RETRIES)) == 1
    # And two executions finished, one of each outcome, by the outcome dimension
    assert values_of(documents, metric_names.EXECUTIONS_FINISHED, outcome="SUCCEEDED") == [1.0]
    assert values_of(documents, metric_names.EXECUTIONS_FINISHED, outcome="FAILED") == [1.0]
    assert values_of(documents, metric_names.DEAD_LETTERS) == [1.0]
    assert (
        dimensions_of(documents, metric_names.EXECUTIONS_FINISHED)
        == [sorted([metric_names.OUTCOME_DIMENSION, metric_names.SERVICE_DIMENSION])] * 2
    )


@pytest.fixture(autouse=True)
def _no_stray_prints(capsys: pytest.CaptureFixture[str]) -> Any:
    """The seam keeps the documents: nothing is printed behind the test's back."""
    yield
    assert '"_aws"' not in capsys.readouterr().out
