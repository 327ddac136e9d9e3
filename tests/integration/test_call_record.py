"""The handler-call record on the execution item (decision 0016), write by write.

Each test puts an execution in a state, then checks what one store write does to
the attempt and to the record, against moto.
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from dynacron.adapters.aws.executions import DynamoExecutionStore
from dynacron.domain.clock import SettableClock
from dynacron.domain.executions.execution import (
    Dispatch,
    ExecutionStatus,
    HandlerCallRecord,
    ResultSummary,
)
from dynacron.domain.executions.retry import RetryPolicy
from dynacron.entry.composition import Dynacron
from dynacron.ports import BeginResult
from tests.conftest import START
from tests.contract import changes

EXECUTION = "task1_20261130T120000.000Z"
DAY = 24 * 3600


def now_ms() -> int:
    return int(time.time() * 1000)


def in_progress(until_ms: int) -> HandlerCallRecord:
    return HandlerCallRecord(
        HandlerCallRecord.IN_PROGRESS, int(time.time()) + DAY, in_progress_until_ms=until_ms
    )


@pytest.fixture
def store(system: Dynacron) -> DynamoExecutionStore:
    return system.executions


def begin(
    store: DynamoExecutionStore, clock: SettableClock, call: HandlerCallRecord, attempt: int = 1
) -> BeginResult:
    return changes.begin(
        store,
        Dispatch(EXECUTION, "task1", START, attempt=attempt),
        now=clock.now(),
        lease_until=clock.now() + timedelta(seconds=30),
        lease_token=f"token-{attempt}",
        callback_digest="digest",
        retry=RetryPolicy(),
        call=call,
        call_now_ms=now_ms(),
    )


def queue_attempt_2(store: DynamoExecutionStore, clock: SettableClock) -> None:
    assert changes.requeue(
        store,
        EXECUTION,
        "token-1",
        expected=ExecutionStatus.RUNNING,
        attempt=2,
        not_before=clock.now(),
        lease_until=clock.now() + timedelta(minutes=5),
        new_token="queued",
    )


def test_a_new_attempt_saves_its_record_in_the_same_write(
    store: DynamoExecutionStore, clock: SettableClock
) -> None:
    call = in_progress(now_ms() + 10_000)
    begun = begin(store, clock, call)
    assert begun.began
    assert begun.held_call is None
    assert store.held_call(EXECUTION) == call


def test_a_call_still_in_progress_is_held_and_the_attempt_begins_anyway(
    store: DynamoExecutionStore, clock: SettableClock
) -> None:
    # Given attempt 1's call in progress for 10 more seconds, and attempt 2 queued
    first = in_progress(now_ms() + 10_000)
    begin(store, clock, first)
    queue_attempt_2(store, clock)
    # When attempt 2 begins
    begun = begin(store, clock, in_progress(now_ms() + 20_000), attempt=2)
    # Then it holds the lease, and the first call's record still stands
    assert begun.began
    assert begun.current is not None
    assert (begun.current.status, begun.current.attempt) == (ExecutionStatus.RUNNING, 2)
    assert begun.held_call == first
    assert store.held_call(EXECUTION) == first


def test_a_call_in_progress_past_its_time_is_replaced(
    store: DynamoExecutionStore, clock: SettableClock
) -> None:
    begin(store, clock, in_progress(now_ms() - 1))
    queue_attempt_2(store, clock)
    second = in_progress(now_ms() + 10_000)
    begun = begin(store, clock, second, attempt=2)
    assert begun.began
    assert begun.held_call is None
    assert store.held_call(EXECUTION) == second


def test_a_success_kept_after_the_lease_was_lost_is_held_for_the_next_attempt(
    store: DynamoExecutionStore, clock: SettableClock
) -> None:
    first = in_progress(now_ms() + 10_000)
    begin(store, clock, first)
    queue_attempt_2(store, clock)  # taken over: the late worker's end is refused
    success = HandlerCallRecord(
        HandlerCallRecord.COMPLETED, int(time.time()) + DAY, response=ResultSummary(200, "ok")
    )
    assert not changes.finish(
        store, EXECUTION, "token-1", ExecutionStatus.SUCCEEDED, clock.now(), call=success
    )
    assert changes.keep_call(store, EXECUTION, success)
    begun = begin(store, clock, in_progress(now_ms() + 10_000), attempt=2)
    assert begun.began
    assert begun.held_call == success


def test_a_delete_removes_only_the_record_its_call_saved(
    store: DynamoExecutionStore, clock: SettableClock
) -> None:
    mine = in_progress(now_ms() - 1)
    begin(store, clock, mine)
    queue_attempt_2(store, clock)
    theirs = in_progress(now_ms() + 10_000)
    begin(store, clock, theirs, attempt=2)
    # The late first call failed: its delete must not free the second call's lock
    assert not changes.clear_call(store, EXECUTION, mine.in_progress_until_ms)
    assert store.held_call(EXECUTION) == theirs
    assert changes.clear_call(store, EXECUTION, theirs.in_progress_until_ms)
    assert store.held_call(EXECUTION) is None


def test_a_late_success_does_not_overwrite_an_execution_that_succeeded(
    store: DynamoExecutionStore, clock: SettableClock
) -> None:
    begin(store, clock, in_progress(now_ms() + 10_000))
    done = HandlerCallRecord(HandlerCallRecord.COMPLETED, int(time.time()) + DAY)
    assert changes.finish(
        store, EXECUTION, "token-1", ExecutionStatus.SUCCEEDED, clock.now(), call=done
    )
    assert not changes.keep_call(store, EXECUTION, done)
