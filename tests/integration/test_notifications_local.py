"""Notifications end to end in local mode (decision 0057): the SQLite store and
queue on the test's clock, the real worker, a loopback sink for the handler and
the notification URLs."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from dynacron.adapters.messages import notification_to_body
from dynacron.api.requests import TaskCreate
from dynacron.definitions.resources import DISPATCH_QUEUE
from dynacron.domain.clock import SettableClock
from dynacron.domain.executions.notifications import NoticeKind, NotificationMessage
from dynacron.domain.executions.signing import SIGNATURE_HEADER, verify
from dynacron.domain.tasks.task import execution_id_for
from dynacron.entry.composition import Dynacron
from dynacron.entry.settings import LOOPBACK_NETWORKS
from dynacron.local.gateway import LocalContext
from dynacron.local.runtime import sqs_event
from dynacron.local.stores import SqliteStore, StoreOptions
from tests.conftest import sleep_moving
from tests.support import Delivery, Sink

TENANT = "default"


class Local:
    """One local-mode system, driven by hand: a tick, then the worker until the queue is empty."""

    def __init__(self, store: SqliteStore, clock: SettableClock) -> None:
        settings = store.open(
            clock,
            delivery_allow_networks=LOOPBACK_NETWORKS,
            shard_count=1,
            # A handler that never answers is given up on soon (wall time).
            http_timeout_seconds=0.5,
        )
        self.store, self.clock = store, clock
        self.app = Dynacron(
            settings,
            adapters=store.adapters(settings, clock),
            clock=clock,
            sleep=sleep_moving(clock),
        )

    def register(self, **fields: Any) -> str:
        return self.app.task_service.register(TENANT, TaskCreate(**fields).to_spec()).task_id

    def run_until(self, seconds: float) -> None:
        """Move the clock by ``seconds``, a second at a time, ticking and working."""
        for _ in range(int(seconds)):
            self.clock.advance(timedelta(seconds=1))
            self.app.ticker.tick()
            self.work()

    def work(self, timeout_seconds: int = 30) -> None:
        queue = DISPATCH_QUEUE.suffix
        while messages := self.store.receive(queue, 10, wait_seconds=0):
            context = LocalContext("test-worker", timeout_seconds=timeout_seconds)
            result = self.app.worker(sqs_event(messages, self.store.queue_arn(queue)), context)
            failed = {f["itemIdentifier"] for f in result.get("batchItemFailures", [])}
            assert not failed, result
            self.store.delete(queue, messages)


@pytest.fixture
def local(tmp_path: Path, clock: SettableClock) -> Iterator[Local]:
    store = SqliteStore(StoreOptions(data_dir=tmp_path / "local"))
    yield Local(store, clock)
    store.close()


def notices(sink: Sink) -> list[Delivery]:
    return [d for d in sink.deliveries if d.path.startswith("/notify/")]


def test_a_failing_task_notifies_once_signed_then_recovers_once(local: Local, sink: Sink) -> None:
    # Given a handler that fails, and a task that dead-letters at its first failure
    failing = {"yes": True}
    sink.answer = lambda d: (500 if d.path == "/hook" and failing["yes"] else 200, {})
    task_id = local.register(
        rate="1 minute",
        handler_url=f"{sink.url}/hook",
        retry={"max_attempts": 1},
        notify={
            "on_failure": {"url": f"{sink.url}/notify/failure"},
            "on_recovery": {"url": f"{sink.url}/notify/recovery"},
            "on_dead_letter": {"url": f"{sink.url}/notify/dead"},
        },
    )

    # When two occurrences fail
    local.run_until(125)

    # Then one on_failure and one (rate-limited) on_dead_letter were sent, signed
    sent = notices(sink)
    assert sorted(d.path for d in sent) == ["/notify/dead", "/notify/failure"], sent
    secret = local.app.tenants.signing_secrets(TENANT)[0]
    for delivery in sent:
        assert verify(delivery.headers[SIGNATURE_HEADER], secret, delivery.raw, int(time.time()))
    failure = next(d.body for d in sent if d.path == "/notify/failure")
    assert failure["notification"] == "on_failure"
    assert (failure["task_id"], failure["status"], failure["count"]) == (task_id, "FAILED", 1)
    assert "HTTP 500" in failure["error"]
    assert failure["execution_id"].startswith(task_id)

    # When the handler answers again
    failing["yes"] = False
    local.run_until(60)

    # Then one on_recovery, counting the two failed executions; nothing more after
    local.run_until(60)
    recovered = [d.body for d in notices(sink) if d.path == "/notify/recovery"]
    assert [(r["notification"], r["count"], r["status"]) for r in recovered] == [
        ("on_recovery", 2, "SUCCEEDED")
    ]
    assert len(notices(sink)) == 3


def test_a_notification_that_fails_is_retried_and_never_touches_the_execution(
    local: Local, sink: Sink
) -> None:
    # Given a notification URL that answers 503 twice, then 200
    answers = iter([503, 503])
    sink.answer = lambda d: (next(answers, 200) if d.path.startswith("/notify/") else 500, {})
    task_id = local.register(
        rate="1 minute",
        handler_url=f"{sink.url}/hook",
        retry={"max_attempts": 1},
        notify={"on_dead_letter": {"url": f"{sink.url}/notify/dead"}},
    )

    # When its one occurrence fails, and the retries' backoff (10 s, 40 s) passes
    local.run_until(61 + 55)

    # Then the notification arrived on its third attempt, with the same notice id
    sent = notices(sink)
    assert len(sent) == 3, sent
    assert len({d.headers["Idempotency-Key"] for d in sent}) == 1
    dead = local.app.execution_service.dead_letters(TENANT, 10, None).items
    assert [(e.task_id, e.status.value, e.attempt) for e in dead] == [(task_id, "FAILED", 1)]

    # A repeat of the end's follow-up (the reaper's, after a crash) counts it once
    before = local.app.tasks.get(task_id)
    assert before is not None
    assert before.notification_state.consecutive_failures == 1
    local.app.follow_ups.follow_up(dead[0])
    local.work()
    after = local.app.tasks.get(task_id)
    assert after is not None
    assert after.notification_state == before.notification_state
    assert len(notices(sink)) == 3


def test_on_late_fires_once_for_an_occurrence_whose_handler_never_answers(
    local: Local, sink: Sink
) -> None:
    # Given a handler that never answers (the kernel accepts the connection; nobody
    # reads it), and a task to be told within 60 s
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(64)
    try:
        task_id = local.register(
            rate="10 minutes",
            handler_url=f"http://127.0.0.1:{silent.getsockname()[1]}/hook",
            retry={"max_attempts": 10, "base_delay_seconds": 30},
            notify={"on_late": {"url": f"{sink.url}/notify/late", "within_seconds": 60}},
        )
        scheduled = local.app.tasks.get(task_id)
        assert scheduled is not None
        assert scheduled.next_run_at is not None
        wait = (scheduled.next_run_at - local.clock.now()).total_seconds()

        # When its first occurrence is due, and 59 s pass: nothing yet
        local.run_until(wait + 59)
        assert notices(sink) == []

        # Then at 60 s one on_late notice, and no other for that occurrence
        local.run_until(120)
    finally:
        silent.close()
    late = [d.body for d in notices(sink)]
    assert len(late) == 1, late
    assert late[0]["notification"] == "on_late"
    assert late[0]["task_id"] == task_id
    assert late[0]["status"] in {"RUNNING", "QUEUED"}
    assert late[0]["count"] == 1
    assert "timed out" in late[0]["error"]


def test_on_late_sends_nothing_for_an_occurrence_that_succeeded_in_time(
    local: Local, sink: Sink
) -> None:
    local.register(
        rate="1 minute",
        handler_url=f"{sink.url}/hook",
        notify={"on_late": {"url": f"{sink.url}/notify/late", "within_seconds": 60}},
    )
    local.run_until(185)
    assert len([d for d in sink.deliveries if d.path == "/hook"]) >= 2
    assert notices(sink) == []


def test_a_notification_message_that_reaches_the_undelivered_queue_is_forwarded_not_settled(
    local: Local,
) -> None:
    # A notification's body has a dispatch's keys: read as one, it would be settled
    # as a duplicate of its ended execution and vanish without a word
    at = local.clock.now()
    body = notification_to_body(
        NotificationMessage(
            kind=NoticeKind.FAILURE,
            url="http://127.0.0.1:9/n",
            count=1,
            task_id="t1",
            task_name="t1",
            tenant_id=TENANT,
            execution_id=execution_id_for("t1", at),
            scheduled_at=at,
            status="FAILED",
            error=None,
            notified_at=at,
        )
    )
    settled = local.app.undelivered_dispatches.settle_message(body)
    assert settled.value == "FORWARDED"


def test_a_notification_with_no_time_left_in_the_invocation_is_sent_back_unused(
    local: Local, sink: Sink
) -> None:
    # Given two notifications on the queue (of a tenant with a signing secret), and a
    # worker invocation with time for one call only
    local.register(rate="1 hour", handler_url=f"{sink.url}/hook")
    at = local.clock.now()
    for number in (1, 2):
        local.app.queue.send_notification(
            NotificationMessage(
                kind=NoticeKind.DEAD_LETTER,
                url=f"{sink.url}/notify/{number}",
                count=1,
                task_id="t1",
                task_name="t1",
                tenant_id=TENANT,
                execution_id=execution_id_for("t1", at),
                scheduled_at=at,
                status="FAILED",
                error=None,
                notified_at=at,
            ),
            0,
        )
    queue = DISPATCH_QUEUE.suffix
    messages = local.store.receive(queue, 10, wait_seconds=0)
    assert len(messages) == 2
    local.app.worker(
        sqs_event(messages, local.store.queue_arn(queue)), LocalContext("w", timeout_seconds=1)
    )
    local.store.delete(queue, messages)
    # Then the first is delivered and the second sent back, not tried
    assert [d.path for d in notices(sink)] == ["/notify/1"]

    # When a worker with time takes it: it is delivered, as its first attempt
    local.work()
    assert [d.path for d in notices(sink)] == ["/notify/1", "/notify/2"]
