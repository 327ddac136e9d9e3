"""A worker holds its batch's messages a little at a time (decision 0038), on SQS
(in-process moto, its clock the test's): the queue's hold, and the thread that
renews it while records run and stops when the invocation ends."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import moto.sqs.models
import pytest

from dynacron.adapters.aws.queue import SqsDispatchQueue
from dynacron.domain.clock import SettableClock
from dynacron.domain.executions.execution import LeaseTerms
from dynacron.entry.settings import Settings
from dynacron.services.message_holds import MessageHolds
from tests.contract.builders import a_dispatch
from tests.support import wait_until

# Renewed every 63 ms, held for 0.2 + 0.01 + 0.063 + 1 s (2 s on SQS).
SHORT = LeaseTerms(
    running=timedelta(seconds=0.2),
    awaiting_callback=timedelta(seconds=60),
    pickup_grace=timedelta(seconds=60),
    clock_skew=timedelta(seconds=0.01),
)


@pytest.fixture
def sqs_on_clock(
    aws: tuple[Any, Any], clock: SettableClock, monkeypatch: pytest.MonkeyPatch
) -> Any:
    """moto's SQS judging visibility by the test's clock."""
    monkeypatch.setattr(
        moto.sqs.models, "unix_time_millis", lambda dt=None: clock.now().timestamp() * 1000
    )
    monkeypatch.setattr(moto.sqs.models, "unix_time", lambda dt=None: clock.now().timestamp())
    return aws[1]


@pytest.fixture
def queue(sqs_on_clock: Any, settings: Settings) -> SqsDispatchQueue:
    return SqsDispatchQueue(sqs_on_clock, settings.dispatch_queue_url)


def receive_all(sqs: Any, url: str) -> list[str]:
    """Every visible message's receipt handle (the queue's own visibility timeout)."""
    handles: list[str] = []
    while batch := sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages"):
        handles += [m["ReceiptHandle"] for m in batch]
    return handles


def sent_and_received(queue: SqsDispatchQueue, sqs: Any, url: str, count: int) -> list[str]:
    queue.send([a_dispatch(f"job-{n}") for n in range(count)])
    handles = receive_all(sqs, url)
    assert len(handles) == count
    return handles


def test_a_hold_sets_the_visibility_of_received_messages_whatever_the_queues(
    queue: SqsDispatchQueue, sqs_on_clock: Any, settings: Settings, clock: SettableClock
) -> None:
    url = settings.dispatch_queue_url
    # Given twelve messages received (the queue hides them for six minutes)
    handles = sent_and_received(queue, sqs_on_clock, url, 12)
    # When they are held for 45 s (two calls of at most ten)
    assert queue.hold(handles, 44.3) == 12
    # Then they come back after 45 s, not six minutes
    clock.advance(timedelta(seconds=44))
    assert receive_all(sqs_on_clock, url) == []
    clock.advance(timedelta(seconds=2))
    again = receive_all(sqs_on_clock, url)
    assert len(again) == 12
    # And a hold of 0 gives a message back at once; a handle of a deleted message is
    # skipped
    sqs_on_clock.delete_message(QueueUrl=url, ReceiptHandle=again[0])
    assert queue.hold(again, 0) == 11
    clock.advance(timedelta(milliseconds=1))  # (moto: visible once past its instant)
    assert len(receive_all(sqs_on_clock, url)) == 11


class CountingQueue:
    """The real queue, with every hold it was asked for remembered."""

    def __init__(self, queue: SqsDispatchQueue) -> None:
        self._queue = queue
        self.holds: list[tuple[list[str], float]] = []
        self.fail = False
        self._lock = threading.Lock()

    def hold(self, receipt_handles: Sequence[str], seconds: float) -> int:
        with self._lock:
            self.holds.append((list(receipt_handles), seconds))
        if self.fail:
            raise ConnectionError("SQS unreachable")
        return self._queue.hold(receipt_handles, seconds)

    def calls(self) -> int:
        with self._lock:
            return len(self.holds)


@pytest.fixture
def counting(queue: SqsDispatchQueue) -> CountingQueue:
    return CountingQueue(queue)


def test_holds_are_renewed_until_each_record_ends_and_stop_with_the_invocation(
    counting: CountingQueue, sqs_on_clock: Any, settings: Settings, clock: SettableClock
) -> None:
    url = settings.dispatch_queue_url
    handles = sent_and_received(counting._queue, sqs_on_clock, url, 3)
    holds = MessageHolds(counting, SHORT)  # type: ignore[arg-type]
    with holds.holding(handles) as release:
        # At once, every message of the batch is held for the lease, the skew, one
        # interval and a second
        assert wait_until(lambda: counting.calls() >= 1, timeout=5, interval=0.01)
        assert counting.holds[0] == (handles, SHORT.message_hold.total_seconds())
        # Renewed while records run; a record that ended is held no more
        release(handles[0])
        seen = counting.calls()
        assert wait_until(lambda: counting.calls() >= seen + 2, timeout=5, interval=0.01)
        assert counting.holds[-1][0] == handles[1:]
        # A renewal that fails is tried again at the next interval
        counting.fail = True
        seen = counting.calls()
        assert wait_until(lambda: counting.calls() >= seen + 2, timeout=5, interval=0.01)
        counting.fail = False
    # Once the invocation ends, nothing more is held: a dead worker's messages come
    # back when the last hold ends
    ended_with = counting.calls()
    threading.Event().wait(0.3)
    assert counting.calls() == ended_with
    clock.advance(timedelta(seconds=3))
    assert len(receive_all(sqs_on_clock, url)) == 3


def test_a_long_record_stays_hidden_past_the_hold_while_it_runs(
    counting: CountingQueue, sqs_on_clock: Any, settings: Settings, clock: SettableClock
) -> None:
    url = settings.dispatch_queue_url
    handles = sent_and_received(counting._queue, sqs_on_clock, url, 1)
    holds = MessageHolds(counting, SHORT)  # type: ignore[arg-type]
    with holds.holding(handles):
        # Across four holds' worth of time, each step shorter than one hold, the
        # message is renewed between the steps and never comes back
        for _ in range(8):
            renewed = counting.calls() + 1
            assert wait_until(lambda: counting.calls() >= renewed, timeout=5, interval=0.01)  # noqa: B023
            clock.advance(timedelta(seconds=1))
            assert receive_all(sqs_on_clock, url) == []
