"""A crash at every step boundary, and the faults AWS itself produces.

Each test lets a fault hit the pipeline, then runs healthy components until every
execution is final, and checks the promise: every occurrence in the window ran at
least once, and an idempotent handler's effect happened exactly once.
"""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest

from dynacron.definitions import metric_names
from dynacron.domain.clock import SettableClock
from dynacron.domain.executions.execution import ExecutionStatus
from dynacron.domain.tasks.task import execution_id_for
from dynacron.local.chaos import ChaosSettings, CrashAt
from dynacron.local.gateway import LocalContext
from dynacron.local.runtime import sqs_event
from dynacron.ports.faults import Boundary
from tests.conftest import START, build_pipeline
from tests.integration.api_client import ALICE
from tests.pipeline import QUEUE_ARN, Pipeline
from tests.support import Answer, Delivery, Sink

# One call crashed at a time: its in-progress record expires after a 0.5 s timeout.
pytestmark = pytest.mark.handler_timeout(0.5)

OCCURRENCES = 8


def due_now(pipeline: Pipeline, sink: Sink, count: int = OCCURRENCES, **fields: Any) -> list[str]:
    """One-time tasks due at START; their execution ids."""
    return [
        execution_id_for(
            pipeline.register(at="2026-11-30T12:00:00Z", handler_url=f"{sink.url}/h", **fields),
            START,
        )
        for _ in range(count)
    ]


def first_call_answers(status: int) -> Any:
    """The first delivery of each execution gets ``status``, later ones 200."""
    seen: set[str] = set()

    def answer(delivery: Delivery) -> Answer:
        key = delivery.headers["Idempotency-Key"]
        if key in seen:
            return 200, {}
        seen.add(key)
        return status, {}

    return answer


def taken_over_during_the_first_call(pipeline: Pipeline) -> Any:
    """While the first call of each execution runs, its lease runs out and the message,
    back after its visibility timeout, takes the attempt over; then the call succeeds.
    The only way a success is saved and the execution not ended with it (decision 0016)."""
    seen: set[str] = set()
    terms = pipeline.settings.lease_terms
    # Built ahead: the takeover must come while the first call's in-progress record
    # holds (the handler's 0.5 s timeout, in real time), even on a slow machine.
    taking_over = pipeline.component()

    def answer(delivery: Delivery) -> Answer:
        key = delivery.headers["Idempotency-Key"]
        if key not in seen:
            seen.add(key)
            running = pipeline.execution(key)
            assert running is not None
            pipeline.clock.advance(terms.running + terms.clock_skew + timedelta(seconds=1))
            taking_over.runner.run(running.as_dispatch())
        return 200, {}

    return answer


def assert_each_ran_and_applied_once(pipeline: Pipeline, sink: Sink, ids: list[str]) -> None:
    executions = pipeline.settle(ids)
    assert {e.status for e in executions} == {ExecutionStatus.SUCCEEDED}
    calls = sink.calls_by_key()
    assert all(calls.get(i, 0) >= 1 for i in ids), "an occurrence never reached its handler"
    assert sink.effects == dict.fromkeys(ids, 1)
    assert sink.applied_twice == 0


@pytest.mark.parametrize(
    ("boundary", "after"),
    [
        (Boundary.TICK_SENT_NOT_CLAIMED, 0),
        (Boundary.TICK_CLAIMED_ONE, 4),  # in the middle of a batch of claims
        (Boundary.WORKER_BEGAN, 0),
        (Boundary.WORKER_HANDLER_RETURNED, 0),
        (Boundary.WORKER_OUTCOME_NOT_RECORDED, 0),
        (Boundary.WORKER_RECORD_DONE, 3),  # in the middle of an SQS batch
        (Boundary.RETRY_RECORDED_NOT_SENT, 0),
        (Boundary.REAPER_TOOK_OVER, 0),
    ],
    ids=lambda v: str(v),
)
def test_a_crash_at_a_step_boundary_loses_nothing_and_applies_nothing_twice(
    pipeline: Pipeline,
    aws: tuple[Any, Any],
    clock: SettableClock,
    sink: Sink,
    boundary: Boundary,
    after: int,
) -> None:
    if boundary is Boundary.WORKER_OUTCOME_NOT_RECORDED:
        # Records one at a time: the takeover staged inside each first call runs under
        # the sink's lock, and calls at once would queue on it past the in-progress
        # record's second of real time, when a second call is allowed.
        pipeline = build_pipeline(aws, clock, worker_concurrency=1)
    # Given occurrences due now, and a handler that fails or defers first where needed
    if boundary is Boundary.RETRY_RECORDED_NOT_SENT:
        sink.answer = first_call_answers(500)
    if boundary is Boundary.REAPER_TOOK_OVER:
        sink.answer = first_call_answers(202)  # accepted, and never calls back
    if boundary is Boundary.WORKER_OUTCOME_NOT_RECORDED:
        sink.answer = taken_over_during_the_first_call(pipeline)
    ids = due_now(pipeline, sink, retry={"base_delay_seconds": 1, "max_delay_seconds": 5})
    faults = CrashAt([boundary], after=after)
    crashing = pipeline.component(faults=faults)

    # When the component that crosses the boundary dies there
    if boundary.value.startswith("tick"):
        pipeline.tick(crashing)
    pipeline.tick()
    if boundary.value.startswith(("worker", "retry")):
        pipeline.work(crashing)
    if boundary is Boundary.REAPER_TOOK_OVER:
        pipeline.work()
        terms = pipeline.settings.lease_terms
        pipeline.clock.advance(terms.awaiting_callback + terms.clock_skew + timedelta(seconds=1))
        pipeline.reap(crashing)
    assert faults.crashed == [boundary]

    # Then healthy components finish the job: all ran, each effect applied once
    assert_each_ran_and_applied_once(pipeline, sink, ids)
    if boundary is Boundary.WORKER_OUTCOME_NOT_RECORDED:
        # The handler's success was remembered: replayed, not called again
        assert sink.calls_by_key() == dict.fromkeys(ids, 1)
        assert pipeline.metrics.total(metric_names.DUPLICATES_SUPPRESSED) >= 1
    if boundary is Boundary.TICK_SENT_NOT_CLAIMED:
        assert pipeline.metrics.total(metric_names.DUPLICATES_SUPPRESSED) >= 1


@pytest.mark.parametrize(
    ("boundary", "after"),
    [
        (Boundary.WORKER_BEGAN, 0),
        (Boundary.WORKER_HANDLER_RETURNED, 2),  # mid-batch, the handler's effect applied
    ],
    ids=lambda v: str(v),
)
def test_a_worker_killed_outside_the_lease_index_is_recovered_by_its_messages(
    pipeline: Pipeline, sink: Sink, boundary: Boundary, after: int
) -> None:
    # Given running attempts begun from their messages: the reaper does not watch them
    ids = due_now(pipeline, sink, retry={"base_delay_seconds": 1, "max_delay_seconds": 5})
    pipeline.tick()
    faults = CrashAt([boundary], after=after)
    # When their worker dies, and every lease runs out before a message comes back
    pipeline.work(pipeline.component(faults=faults))
    assert faults.crashed == [boundary]
    # (the crashed attempt, and the others its batch began together and did not end)
    left_running = [
        i for i in ids if (e := pipeline.execution(i)) and e.status is ExecutionStatus.RUNNING
    ]
    assert left_running
    terms = pipeline.settings.lease_terms
    pipeline.clock.advance(terms.running + terms.clock_skew + timedelta(seconds=1))
    assert pipeline.reap() == {"expired": 0, "reaped": 0}
    # Then the messages coming back take the attempts over: all ran, each effect once
    assert_each_ran_and_applied_once(pipeline, sink, ids)
    assert pipeline.metrics.total(metric_names.LEASES_REAPED) == len(left_running)


def test_a_crash_after_dead_lettering_still_delivers_the_copy(
    pipeline: Pipeline, sink: Sink
) -> None:
    sink.status = 500
    ids = due_now(pipeline, sink, retry={"max_attempts": 1})
    pipeline.tick()
    faults = CrashAt([Boundary.DEAD_LETTER_RECORDED_NOT_SENT])
    pipeline.work(pipeline.component(faults=faults))
    assert faults.crashed == [Boundary.DEAD_LETTER_RECORDED_NOT_SENT]
    executions = pipeline.settle(ids)
    assert {e.status for e in executions} == {ExecutionStatus.FAILED}
    listed = pipeline.app.executions.dead_letters(ALICE, 100, None).items
    assert sorted(e.execution_id for e in listed) == sorted(ids)
    copies: list[str] = []
    while True:
        messages = pipeline.sqs.receive_message(
            QueueUrl=pipeline.settings.dead_letter_queue_url,
            MaxNumberOfMessages=10,
            MessageAttributeNames=["All"],
        ).get("Messages", [])
        if not messages:
            break
        copies += [m["MessageAttributes"]["execution_id"]["StringValue"] for m in messages]
    assert sorted(copies) == sorted(ids)  # every dead letter has exactly one copy


def test_a_crash_before_the_late_timer_is_sent_still_tells_the_owner(
    pipeline: Pipeline, sink: Sink
) -> None:
    # Given occurrences to be reported when not done within 60 s, picked up 61 s
    # late, whose handler fails for good
    sink.status = 500
    late_url = f"{sink.url}/notify/late"
    ids = due_now(
        pipeline,
        sink,
        count=2,
        retry={"max_attempts": 1},
        notify={"on_late": {"url": late_url, "within_seconds": 60}},
    )
    pipeline.tick()
    pipeline.clock.advance(timedelta(seconds=61))
    # When the worker dies once the attempt began, before its on_late timer is sent
    faults = CrashAt([Boundary.WORKER_BEGAN])
    pipeline.work(pipeline.component(faults=faults))
    assert faults.crashed == [Boundary.WORKER_BEGAN]

    # Then the attempt taken over starts the timer: each owner is told once
    executions = pipeline.settle(ids)
    assert {e.status for e in executions} == {ExecutionStatus.FAILED}
    pipeline.work()
    told = [d.body["execution_id"] for d in sink.snapshot() if d.path == "/notify/late"]
    assert sorted(told) == sorted(ids)


class MeetAfterSending:
    """Two ticks meet here: each has sent before either claims."""

    def __init__(self) -> None:
        self._barrier = threading.Barrier(2, timeout=5)

    def reached(self, boundary: Boundary) -> None:
        if boundary is Boundary.TICK_SENT_NOT_CLAIMED:
            self._barrier.wait()


def test_two_ticks_on_the_same_shard_at_once(pipeline: Pipeline, sink: Sink) -> None:
    ids = due_now(pipeline, sink)
    meeting = MeetAfterSending()
    ticks = [pipeline.component(faults=meeting) for _ in range(2)]
    claimed: list[int] = []
    threads = [threading.Thread(target=lambda t=t: claimed.append(pipeline.tick(t))) for t in ticks]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # Both sent every occurrence; the version condition let exactly one claim each
    assert sum(claimed) == OCCURRENCES
    assert_each_ran_and_applied_once(pipeline, sink, ids)
    assert sink.calls_by_key() == dict.fromkeys(ids, 1)
    assert pipeline.metrics.total(metric_names.DUPLICATES_SUPPRESSED) == OCCURRENCES


def test_sqs_delivering_messages_twice(
    aws: tuple[Any, Any], clock: SettableClock, sink: Sink
) -> None:
    # Three workers, moto and the sink share one busy process: a 0.5 s handler timeout
    # (the crash tests' choice) is sometimes hit by a 0.05 s call, and the timed-out
    # attempt is rightly retried, a second call. Here no call may time out.
    pipeline = build_pipeline(aws, clock, http_timeout_seconds=30)
    ids = due_now(pipeline, sink)
    pipeline.tick()
    sink.hold = 0.05  # duplicates arrive while the first delivery is still running
    chaos = ChaosSettings(seed=3, duplicate_rate=0.5)
    workers = [pipeline.component(chaos=chaos) for _ in range(3)]
    unreliable = [w.queue._client for w in workers]
    threads = [
        threading.Thread(target=lambda w=w, q=q: pipeline.work(w, sqs=q))
        for w, q in zip(workers, unreliable, strict=True)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(q.duplicated for q in unreliable) > 0
    assert_each_ran_and_applied_once(pipeline, sink, ids)
    assert sink.calls_by_key() == dict.fromkeys(ids, 1)


class DeliverAgainAt:
    """SQS delivers the message a second time, to another worker, exactly when the
    first one crosses ``boundary``: the interleaving a flaky run only sometimes hits."""

    def __init__(self, boundary: Boundary, deliver_again: Any) -> None:
        self._boundary = boundary
        self._deliver_again = deliver_again
        self.delivered_again = False

    def reached(self, boundary: Boundary) -> None:
        if boundary is self._boundary and not self.delivered_again:
            self.delivered_again = True
            self._deliver_again()


@pytest.mark.parametrize(
    "boundary",
    [
        Boundary.WORKER_BEGAN,  # the first delivery holds the lease, the handler not called yet
        Boundary.WORKER_HANDLER_RETURNED,  # the handler answered, nothing recorded yet
        # The success is recorded, the message not deleted yet. (A success remembered
        # and not recorded exists only when the lease was lost: decision 0016.)
        Boundary.WORKER_RECORD_DONE,
    ],
    ids=lambda v: str(v),
)
def test_a_duplicate_delivered_while_the_first_is_running_never_calls_the_handler(
    pipeline: Pipeline, sink: Sink, boundary: Boundary
) -> None:
    # Given one occurrence sent by the tick, received once
    [execution_id] = due_now(pipeline, sink, count=1)
    pipeline.tick()
    messages = pipeline.sqs.receive_message(
        QueueUrl=pipeline.settings.dispatch_queue_url, MaxNumberOfMessages=10
    )["Messages"]
    event = sqs_event(messages, QUEUE_ARN)
    second = pipeline.component()
    duplicate: list[dict[str, Any]] = []
    meeting = DeliverAgainAt(
        boundary, lambda: duplicate.append(second.worker(event, LocalContext("second")))
    )
    first = pipeline.component(faults=meeting)

    # When the same message reaches a second worker while the first is at the boundary
    answer = first.worker(event, LocalContext("first"))

    # Then the duplicate was dropped, and the handler was called once
    assert meeting.delivered_again
    assert duplicate == [{"batchItemFailures": []}]
    assert answer == {"batchItemFailures": []}
    execution = pipeline.execution(execution_id)
    assert execution is not None
    assert execution.status is ExecutionStatus.SUCCEEDED
    assert sink.calls_by_key() == {execution_id: 1}
    assert sink.effects == {execution_id: 1}
    assert pipeline.metrics.total(metric_names.DUPLICATES_SUPPRESSED) == 1


def test_dynamodb_throttling_anywhere(pipeline: Pipeline, sink: Sink) -> None:
    ids = due_now(pipeline, sink)
    throttled = pipeline.component(chaos=ChaosSettings(seed=7, throttle_rate=0.2))
    for _ in range(6):
        pipeline.tick(throttled)
        pipeline.work(throttled, batches=3)
        pipeline.clock.advance(timedelta(seconds=40))
        pipeline.reap(throttled)
    assert throttled.tasks._client.throttled > 0
    assert_each_ran_and_applied_once(pipeline, sink, ids)


@pytest.mark.handler_timeout(2)  # thirty records at once, none meant to time out
def test_sqs_partial_batch_failures(pipeline: Pipeline, sink: Sink) -> None:
    ids = due_now(pipeline, sink, count=30)
    # Sending: some entries of each SendMessageBatch fail; they are not claimed
    unreliable = pipeline.component(chaos=ChaosSettings(seed=11, send_failure_rate=0.4))
    assert pipeline.tick(unreliable) < 30
    # Working: some records of a batch fail (throttled) and only those come back
    throttled = pipeline.component(chaos=ChaosSettings(seed=5, throttle_rate=0.1))
    for _ in range(4):
        pipeline.tick(unreliable)
        pipeline.work(throttled, batches=2)
    assert pipeline.record_failures > 0
    assert_each_ran_and_applied_once(pipeline, sink, ids)
