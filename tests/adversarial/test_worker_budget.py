"""A hostile tenant's slow handlers against the worker's time: finding 3 of issue 12.

The worker runs the records of a batch at once, ``worker_concurrency`` at a time,
inside one invocation (decision 0034). A record starts only while a whole handler
call and the margin fit in what is left; the rest go back as fresh messages,
unbegun. One deadline bounds a whole handler call, HTTP (connect to last byte) or
Python.
"""

from __future__ import annotations

import dataclasses
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from dynacron.adapters.delivery.http import HttpDelivery
from dynacron.adapters.delivery.python_handlers import PythonDelivery
from dynacron.adapters.delivery.registry import ExecutionContext, HandlerRegistry
from dynacron.api.requests import TaskCreate
from dynacron.domain.clock import SettableClock
from dynacron.domain.executions.execution import DeliveryResult, Dispatch, ExecutionStatus
from dynacron.domain.schedules.expressions import parse_rate
from dynacron.domain.tasks.task import Task, TaskStatus
from dynacron.domain.tasks.urls import UrlPolicy
from dynacron.entry.composition import Dynacron
from dynacron.local.gateway import LocalContext
from dynacron.local.runtime import sqs_event
from tests.integration.api_client import ALICE
from tests.support import Delivery, Sink, wait_until

BOB = "arn:aws:iam::000000000000:user/bob"
QUEUE_ARN = "arn:aws:sqs:us-east-1:123456789012:dynacron-dispatch"
NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)


@dataclass
class ScriptedInvocation(LocalContext):
    """A Lambda context whose remaining time the test spends by hand."""

    left_ms: int = 0

    def get_remaining_time_in_millis(self) -> int:
        return self.left_ms


def due_now(system: Dynacron, clock: SettableClock, owners: list[tuple[str, str]]) -> list[str]:
    """One one-time task per (tenant, handler URL), all due at once and ticked; their ids."""
    at = clock.now() + timedelta(seconds=1)
    ids = [
        system.task_service.register(
            tenant, TaskCreate(at=at.strftime("%Y-%m-%dT%H:%M:%SZ"), handler_url=url).to_spec()
        ).task_id
        for tenant, url in owners
    ]
    clock.set(at)
    assert sum(r.claimed for r in system.ticker.tick()) == len(ids)
    return ids


def receive_all(system: Dynacron, sqs: Any) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    while batch := sqs.receive_message(
        QueueUrl=system.settings.dispatch_queue_url,
        MaxNumberOfMessages=10,
        MessageSystemAttributeNames=["ApproximateReceiveCount"],
    ).get("Messages", []):
        messages += batch
    return messages


def delete_done(system: Dynacron, sqs: Any, messages: list[dict[str, Any]], result: Any) -> None:
    """What the SQS event source does with a batch's answer: delete what did not fail."""
    failed = {f["itemIdentifier"] for f in result["batchItemFailures"]}
    for message in messages:
        if message["MessageId"] not in failed:
            sqs.delete_message(
                QueueUrl=system.settings.dispatch_queue_url, ReceiptHandle=message["ReceiptHandle"]
            )


def executions_of(system: Dynacron, task_id: str) -> list[Any]:
    return system.executions.list_for_task(task_id, 10, None).items


def task_of(message: dict[str, Any]) -> str:
    import json

    return str(json.loads(message["Body"])["task_id"])


def overlapping(
    system: Dynacron, aws: tuple[Any, Any], clock: SettableClock, calls: int
) -> Dynacron:
    """Another worker on ``system``'s tables and queues, with ``calls`` records at once."""
    settings = dataclasses.replace(system.settings, worker_concurrency=calls)
    return Dynacron(settings, dynamodb=aws[0], sqs=aws[1], clock=clock)


def test_a_slow_tenant_cannot_make_another_tenants_records_spend_receives(
    system: Dynacron, aws: tuple[Any, Any], clock: SettableClock, sink: Sink
) -> None:
    """Finding 3: records at the back of a batch gained receive counts without ever
    running while slow handlers at the front used the invocation's time."""
    _, sqs = aws
    worker = overlapping(system, aws, clock, calls=2)
    # Given a batch: tenant A's three slow calls first, then tenant B's two
    invocation = ScriptedInvocation("dynacron-worker", left_ms=30_000)

    def slow(delivery: Delivery) -> tuple[int, dict[str, str]]:
        if "/slow" in delivery.path:
            invocation.left_ms -= 10_000  # each of A's calls takes its whole 10 s
        return 200, {}

    sink.answer, sink.gate = slow, threading.Event()
    slow_ids = due_now(system, clock, [(ALICE, f"{sink.url}/slow")] * 3)
    quick_ids = due_now(system, clock, [(BOB, f"{sink.url}/quick")] * 2)
    messages = receive_all(system, sqs)
    messages.sort(key=lambda m: task_of(m) not in slow_ids)  # A's first
    assert len(messages) == 5
    # When one invocation with 30 s works it, two calls at a time (10 s calls, 5 s
    # margin), and A's first two calls have both used their time before either ends
    results: list[dict[str, Any]] = []
    running = threading.Thread(
        target=lambda: results.append(worker.worker(sqs_event(messages, QUEUE_ARN), invocation))
    )
    running.start()
    assert wait_until(lambda: len(sink.snapshot()) == 2, timeout=30)
    sink.gate.set()
    running.join(30)
    (result,) = results
    delete_done(system, sqs, messages, result)
    # Then those two ran; the third and B's records were not begun, and none failed
    assert result == {"batchItemFailures": []}
    assert [d.path for d in sink.snapshot()] == ["/slow", "/slow"]
    unbegun = [t for t in slow_ids + quick_ids if not executions_of(system, t)]
    assert len(unbegun) == 3
    assert set(quick_ids) <= set(unbegun)
    # And they are back in the queue as fresh messages: this was their first receive
    again = receive_all(system, sqs)
    assert sorted(task_of(m) for m in again) == sorted(unbegun)
    assert {m["Attributes"]["ApproximateReceiveCount"] for m in again} == {"1"}
    # And the next invocation runs them, each at its first attempt
    fresh = ScriptedInvocation("dynacron-worker", left_ms=60_000)
    assert worker.worker(sqs_event(again, QUEUE_ARN), fresh) == {"batchItemFailures": []}
    for task_id in unbegun:
        (execution,) = system.executions.list_for_task(task_id, 10, None).items
        assert (execution.status, execution.attempt) == (ExecutionStatus.SUCCEEDED, 1)
    # And no handler was called twice
    assert set(sink.calls_by_key().values()) == {1}


def test_records_not_started_in_time_go_back_unbegun_and_none_runs_twice(
    system: Dynacron, aws: tuple[Any, Any], clock: SettableClock, sink: Sink
) -> None:
    """Three records at a time, each call using 4 s of an invocation with 40 s: which
    records start depends on when calls end, but none is lost and none runs twice."""
    _, sqs = aws
    worker = overlapping(system, aws, clock, calls=3)
    invocation = ScriptedInvocation("dynacron-worker", left_ms=40_000)

    def slow(delivery: Delivery) -> tuple[int, dict[str, str]]:
        invocation.left_ms -= 4_000  # the sink answers under its lock: one at a time
        return 200, {}

    sink.answer = slow
    task_ids = due_now(system, clock, [(ALICE, f"{sink.url}/slow")] * 12)
    messages = receive_all(system, sqs)
    # When one invocation runs the batch (a record needs 15 s left to start)
    result = worker.worker(sqs_event(messages, QUEUE_ARN), invocation)
    delete_done(system, sqs, messages, result)
    # Then the first three started (at least 32 s were left), and not all twelve
    assert result == {"batchItemFailures": []}
    begun = [t for t in task_ids if executions_of(system, t)]
    assert 3 <= len(begun) < 12
    assert len(sink.snapshot()) == len(begun)
    # And the others are back in the queue as fresh messages, unbegun
    again = receive_all(system, sqs)
    assert sorted(task_of(m) for m in again) == sorted(set(task_ids) - set(begun))
    assert {m["Attributes"]["ApproximateReceiveCount"] for m in again} == {"1"}
    # And the next invocation runs them: every task once, at its first attempt
    fresh = ScriptedInvocation("dynacron-worker", left_ms=600_000)
    assert worker.worker(sqs_event(again, QUEUE_ARN), fresh) == {"batchItemFailures": []}
    for task_id in task_ids:
        (execution,) = executions_of(system, task_id)
        assert (execution.status, execution.attempt) == (ExecutionStatus.SUCCEEDED, 1)
    assert sorted(sink.calls_by_key().values()) == [1] * 12


def test_local_modes_worker_follows_the_same_rule(
    system: Dynacron, aws: tuple[Any, Any], clock: SettableClock, sink: Sink
) -> None:
    """Finding 3, local mode: its worker passes a LocalContext with the worker's timeout;
    an invocation too short for a second call (12 s < 10 s + 5 s) runs one record."""
    _, sqs = aws
    task_ids = due_now(system, clock, [(ALICE, sink.url)] * 3)
    messages = receive_all(system, sqs)
    result = system.worker(
        sqs_event(messages, QUEUE_ARN), LocalContext("dynacron-worker", timeout_seconds=12)
    )
    assert result == {"batchItemFailures": []}
    assert len(sink.snapshot()) == 1
    delete_done(system, sqs, messages, result)
    assert len(receive_all(system, sqs)) == 2
    assert len([t for t in task_ids if executions_of(system, t)]) == 1


class DripServer:
    """A loopback HTTP server that answers 200, one byte every ``interval`` seconds:
    never silent long enough for a per-read timeout. Records how far it got."""

    RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\ndrip-drip-ok"

    def __init__(self, interval: float, *, drip_headers: bool) -> None:
        self.interval = interval
        self.drip_headers = drip_headers
        self.sent = 0
        self.done = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}/drip"

    def _serve(self) -> None:
        connection, _ = self._listener.accept()
        with connection:
            connection.recv(65536)  # the request (small: one read)
            head = 0 if self.drip_headers else self.RESPONSE.index(b"\r\n\r\n") + 4
            try:
                connection.sendall(self.RESPONSE[:head])
                self.sent = head
                for offset in range(head, len(self.RESPONSE)):
                    if self._stop.wait(self.interval):
                        break
                    connection.sendall(self.RESPONSE[offset : offset + 1])
                    self.sent = offset + 1
            except OSError:
                pass  # the client hung up
        self.done.set()

    def stop(self) -> None:
        self._stop.set()
        self._listener.close()


@pytest.fixture(params=[False, True], ids=["drips-body", "drips-headers"])
def drip(request: pytest.FixtureRequest) -> Iterator[DripServer]:
    server = DripServer(0.25, drip_headers=request.param)
    yield server
    server.stop()


def a_task(url: str | None = None, handler: str | None = None) -> Task:
    return Task(
        task_id="t1",
        name="t1",
        schedule=parse_rate("1 hour", anchor=NOW),
        handler_url=url,
        handler_name=handler,
        payload={},
        status=TaskStatus.ACTIVE,
        next_run_at=NOW,
        created_at=NOW,
        updated_at=NOW,
        tenant_id=ALICE,
    )


DISPATCH = Dispatch("t1_20261130T120000Z", "t1", NOW)


def error_of(result: DeliveryResult) -> str:
    assert result.failure is not None
    return result.failure.error


def test_a_handler_that_drips_bytes_is_cut_off_at_the_calls_deadline(drip: DripServer) -> None:
    """Finding 3: a handler that sends a byte every 2 s held a call with a 3 s timeout
    for 12 s, and it counted as a success. Here: 0.25 s a byte, a 1 s call."""
    delivery = HttpDelivery(
        UrlPolicy(("127.0.0.0/8",)),
        1.0,
        SettableClock(NOW),
        secrets_of=lambda _: ["s"],
    )
    result = delivery.deliver(a_task(drip.url), DISPATCH, "token")
    # Then the call failed as timed out, and the handler never got to finish its answer
    assert not result.ok
    assert "timed out" in error_of(result)
    assert result.failure is not None
    assert result.failure.retryable
    assert drip.done.wait(10)
    assert drip.sent < len(DripServer.RESPONSE)
    delivery.close()


def test_a_python_handler_that_overruns_fails_as_timed_out() -> None:
    """Finding 3: Python handlers had no timeout at all. The worker stops waiting at
    the deadline (the thread runs on: Python cannot stop it)."""
    registry = HandlerRegistry()
    release = threading.Event()
    finished = threading.Event()
    calls: list[int] = []

    def stuck(run: ExecutionContext) -> None:
        calls.append(run.attempt)
        release.wait(30)
        finished.set()

    registry.register("stuck", stuck)
    delivery = PythonDelivery(registry, timeout_seconds=0.2)
    result = delivery.deliver(a_task(handler="stuck"), DISPATCH, "token")
    assert not result.ok
    assert "timed out after 0.2 s" in error_of(result)
    assert result.failure is not None
    assert result.failure.retryable
    assert not finished.is_set()  # the worker did not wait for it
    # A retry in this process while it still runs does not run it a second time at once
    again = delivery.deliver(a_task(handler="stuck"), DISPATCH, "token")
    assert "still running from an earlier attempt" in error_of(again)
    assert calls == [1]
    release.set()
    assert finished.wait(5)
    # Once it returned, the next attempt calls it again
    assert delivery.deliver(a_task(handler="stuck"), DISPATCH, "token").ok
    assert calls == [1, 1]


def test_a_python_handler_within_its_deadline_still_answers() -> None:
    registry = HandlerRegistry()
    registry.register("quick", lambda run: {"n": run.attempt})
    result = PythonDelivery(registry, timeout_seconds=5).deliver(
        a_task(handler="quick"), DISPATCH, "token"
    )
    assert result.ok
    assert result.excerpt == '{"n":1}'


def test_a_handler_host_whose_dns_answers_slowly_is_cut_off_at_the_calls_deadline() -> None:
    """Finding 3 (same class): a tenant controls its handler's DNS; a lookup that
    takes longer than the call may is cut off at the deadline, as a timeout."""
    answer = threading.Event()
    looked_up: list[str] = []

    def slow_dns(host: str, port: int) -> list[str]:
        looked_up.append(host)
        answer.wait(5)
        return ["127.0.0.1"]  # refused by the public-only policy: no call goes anywhere

    delivery = HttpDelivery(
        UrlPolicy(),
        0.3,
        SettableClock(NOW),
        secrets_of=lambda _: ["s"],
        resolver=slow_dns,
    )
    result = delivery.deliver(a_task("http://slow-dns.test:9/h"), DISPATCH, "token")
    answer.set()
    assert looked_up == ["slow-dns.test"]
    assert not result.ok
    assert "timed out" in error_of(result)
    assert result.failure is not None
    assert result.failure.retryable
    delivery.close()
