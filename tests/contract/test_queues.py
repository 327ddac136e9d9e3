"""The queue contracts: the dispatch queue and the dead-letter queue's copies.

The ports have no receive (a worker is fed by its event source), so what is sent
shows in ``depth``; every message here is sent ready, or delayed far past the test.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from dynacron.adapters.messages import (
    dispatch_only_from_body,
    dispatch_to_body,
    is_late_check,
    is_notification,
    late_check_from_body,
    late_check_to_body,
    notification_from_body,
    notification_to_body,
)
from dynacron.domain.executions.notifications import LateCheck, NoticeKind, NotificationMessage
from dynacron.ports import AdapterSet
from tests.contract.builders import START, a_dispatch

LONG_DELAY = 600


def test_dispatches_sent_wait_in_the_queue(adapters: AdapterSet) -> None:
    queue = adapters.queue
    assert queue.depth() == 0

    # When a batch is sent, all of it is accepted and waits
    batch = [a_dispatch(f"job-{n}") for n in range(12)]
    accepted = queue.send(batch)
    assert sorted(d.execution_id for d in accepted) == sorted(d.execution_id for d in batch)
    assert queue.depth() == 12
    assert queue.send([]) == []

    # One sent on to run now waits too
    queue.send_later(a_dispatch("retry", attempt=2), 0)
    assert queue.depth() == 13


def test_delayed_dispatches_are_not_waiting_yet(adapters: AdapterSet) -> None:
    queue = adapters.queue
    queue.send([a_dispatch("now")])

    # A dispatch sent on for later, or sent with its jitter delay, is accepted...
    queue.send_later(a_dispatch("later"), LONG_DELAY)
    jittered = dataclasses.replace(a_dispatch("jittered"), delay_seconds=LONG_DELAY)
    assert queue.send([jittered]) == [jittered]

    # ...but is not waiting for a worker until its delay ends
    assert queue.depth() == 1


def test_dead_letter_copies_are_removed_by_execution(adapters: AdapterSet) -> None:
    dead_letters = adapters.dead_letter_queue
    first = a_dispatch("job", tenant_id="acme")
    second = a_dispatch("job", at=START + timedelta(hours=1), tenant_id="acme")

    # Given two copies of one execution, one of another, and a forwarded message
    dead_letters.send(first, "no attempts left")
    dead_letters.send(first, "no attempts left (sent twice)")
    dead_letters.send(second, "not retryable")
    dead_letters.forward("{not a dispatch", "unreadable message")

    # When one execution's copies are removed, exactly those go
    assert dead_letters.remove(first.execution_id) == 2
    assert dead_letters.remove(first.execution_id) == 0
    # and the others are still there to be found
    assert dead_letters.remove(second.execution_id) == 1
    assert dead_letters.remove(second.execution_id) == 0
    assert dead_letters.remove("never_20261130T120000000Z") == 0


def test_notifications_and_late_checks_wait_in_the_dispatch_queue_as_dispatches_do(
    adapters: AdapterSet,
) -> None:
    # Decision 0057: a notice and an on_late timer share the dispatch queue
    queue = adapters.queue
    dispatch = a_dispatch("job")
    notice = NotificationMessage(
        kind=NoticeKind.FAILURE,
        url="http://127.0.0.1:9/notify",
        count=1,
        task_id=dispatch.task_id,
        task_name="job",
        tenant_id="acme",
        execution_id=dispatch.execution_id,
        scheduled_at=dispatch.scheduled_at,
        status="FAILED",
        error="handler answered HTTP 500",
        notified_at=START,
    )
    check = LateCheck(
        dispatch.task_id, dispatch.execution_id, dispatch.scheduled_at, START + timedelta(hours=1)
    )
    queue.send_notification(notice, 0)
    queue.send_late_check(check, 0)
    assert queue.depth() == 2

    # Delayed ones do not wait for a worker until their delay ends
    queue.send_notification(notice, LONG_DELAY)
    queue.send_late_check(check, LONG_DELAY)
    assert queue.depth() == 2

    # A fraction of a second is rounded up, not down to none: a timer sent early
    # would be sent on again with no delay until due, in a loop
    queue.send_later(dispatch, 0.2)
    queue.send_notification(notice, 0.2)
    queue.send_late_check(check, 0.2)
    assert queue.depth() == 2


def test_notification_bodies_read_back_and_are_never_read_as_dispatches() -> None:
    dispatch = a_dispatch("job")
    notice = NotificationMessage(
        kind=NoticeKind.LATE,
        url="http://127.0.0.1:9/notify",
        count=2,
        task_id=dispatch.task_id,
        task_name="job",
        tenant_id="acme",
        execution_id=dispatch.execution_id,
        scheduled_at=dispatch.scheduled_at,
        status="RUNNING",
        error=None,
        notified_at=START,
        attempt=3,
    )
    check = LateCheck(dispatch.task_id, dispatch.execution_id, START, START + timedelta(hours=1))
    assert notification_from_body(notification_to_body(notice)) == notice
    assert late_check_from_body(late_check_to_body(check)) == check
    for body in (notification_to_body(notice), late_check_to_body(check)):
        with pytest.raises(ValueError, match="not a dispatch"):
            dispatch_only_from_body(body)
    assert dispatch_only_from_body(dispatch_to_body(dispatch)) == dispatch
    assert not is_notification(dispatch_to_body(dispatch))
    assert not is_late_check(dispatch_to_body(dispatch))
