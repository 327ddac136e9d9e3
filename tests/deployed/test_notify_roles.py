"""Notifications (decision 0057) with the template's roles: the worker's follow-up
stores the task's notification state and queues the notice, and the worker delivers
it, signed, each call judged against its function's own role."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest

from dynacron.definitions.resources import DISPATCH_QUEUE
from dynacron.domain.executions.signing import SIGNATURE_HEADER, verify
from tests.deployed.harness import Deployment
from tests.deployed.steps import delete_tasks, register, task_view
from tests.support import Delivery, Sink

PRINCIPAL = "arn:aws:iam::000000000000:user/notify-scenario"


@pytest.fixture
def principal(deployed: Deployment) -> Iterator[str]:
    yield PRINCIPAL
    delete_tasks(deployed, PRINCIPAL)


def run_next(deployed: Deployment, task_id: str) -> None:
    due = datetime.fromisoformat(task_view(deployed, PRINCIPAL, task_id)["next_run_at"])
    if due > deployed.clock.now():
        deployed.clock.set(due)
    deployed.run_due(task_id)


def notices(sink: Sink) -> list[Delivery]:
    return [d for d in sink.snapshot() if d.path.startswith("/notify/")]


def test_a_failure_and_its_recovery_are_notified_with_the_templates_roles(
    deployed: Deployment, principal: str, sink: Sink
) -> None:
    # Given a handler that fails, and a task told of failures and recoveries
    failing = {"yes": True}
    sink.answer = lambda d: (500 if d.path == "/hook" and failing["yes"] else 200, {})
    task = register(
        deployed,
        principal,
        rate="1 hour",
        handler_url=f"{sink.url}/hook",
        retry={"max_attempts": 1},
        notify={
            "on_failure": {"url": f"{sink.url}/notify/failure"},
            "on_recovery": {"url": f"{sink.url}/notify/recovery"},
        },
    )

    # When an occurrence fails for good, then the next succeeds
    run_next(deployed, task["task_id"])
    deployed.run_due()
    sent = notices(sink)
    failing["yes"] = False
    run_next(deployed, task["task_id"])
    deployed.run_due()

    # Then one signed on_failure, then one on_recovery
    assert [d.path for d in sent] == ["/notify/failure"], sent
    assert [d.path for d in notices(sink)] == ["/notify/failure", "/notify/recovery"]
    status, secret = deployed.api("GET", "/tenant", principal=principal)
    assert status == 200, secret
    for delivery in notices(sink):
        assert delivery.body["task_id"] == task["task_id"]
        assert any(
            verify(delivery.headers[SIGNATURE_HEADER], s, delivery.raw, int(time.time()))
            for s in secret["signing_secrets"]
        )


def test_a_late_timer_lost_with_its_worker_is_started_again_by_the_reaper(
    deployed: Deployment, principal: str, sink: Sink
) -> None:
    # Given an occurrence to be reported if not done within 60 s, whose handler took
    # the job (202) and never calls back
    sink.answer = lambda d: (202 if d.path == "/hook" else 200, {})
    task = register(
        deployed,
        principal,
        rate="1 hour",
        handler_url=f"{sink.url}/hook",
        retry={"max_attempts": 1},
        notify={"on_late": {"url": f"{sink.url}/notify/late", "within_seconds": 60}},
    )
    run_next(deployed, task["task_id"])
    # and whose worker died before its on_late timer was sent: the timer is lost
    deployed.clock.advance(timedelta(seconds=61))
    worker = deployed.function("worker")
    url = worker.environment[DISPATCH_QUEUE.env_var]
    (timer,) = worker.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    worker.sqs.delete_message(QueueUrl=url, ReceiptHandle=timer["ReceiptHandle"])
    assert notices(sink) == []

    # When the lease runs out and the reaper takes the attempt over, with its role
    terms = deployed.settings.lease_terms
    deployed.clock.advance(terms.awaiting_callback + terms.clock_skew + timedelta(seconds=1))
    assert deployed.reap()["reaped"] == 1
    deployed.run_due()

    # Then the timer was started again, and the owner is told once
    late = [d.body for d in notices(sink) if d.path == "/notify/late"]
    assert len(late) == 1, late
    assert late[0]["task_id"] == task["task_id"]
