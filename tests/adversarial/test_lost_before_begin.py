"""Finding 2: a dispatch message that never begins is lost without a trace, and a
slot-holding task stalls forever.

A dispatch message has no execution record until a worker begins it. Here workers
fail before ``begin`` (their DynamoDB is unreachable) every time they receive it,
until SQS (moto, with the dispatch queue's real redrive policy) moves it on. Before
decision 0022 it landed in the dead-letter queue: not in ``GET /dead-letters``, not
redrivable, and a ``fixed_delay`` or ``overlap: skip`` task whose claim named it
never ran again.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import pytest
from botocore.exceptions import EndpointConnectionError

from dynacron.adapters.messages import dispatch_to_body
from dynacron.definitions import metric_names
from dynacron.definitions.resources import DISPATCH_QUEUE, UNDELIVERED_QUEUE
from dynacron.domain.executions.execution import Dispatch, ExecutionStatus
from dynacron.domain.tasks.task import TaskStatus, execution_id_for
from dynacron.entry.composition import Dynacron
from dynacron.local.aws import undelivered_queue_url
from dynacron.local.chaos import CrashAt, InjectedCrash
from dynacron.local.runtime import settle_undelivered
from dynacron.local.stores import SqsQueues
from dynacron.ports.faults import Boundary
from dynacron.services.undelivered import Settled
from tests.conftest import START
from tests.integration.api_client import ALICE, call
from tests.integration.test_control import execution, task
from tests.pipeline import Pipeline
from tests.support import Sink

# One call crashed at a time: its in-progress record expires after a 0.5 s timeout.
pytestmark = pytest.mark.handler_timeout(0.5)

RECEIVES = DISPATCH_QUEUE.max_receive_count or 0
VISIBILITY = timedelta(seconds=DISPATCH_QUEUE.visibility_timeout_seconds)
# Decision 0022's bound: SQS gives up after maxReceiveCount receives, each followed
# by a visibility timeout; the undelivered queue is read within seconds of that.
BOUND = RECEIVES * VISIBILITY + timedelta(minutes=1)


class Unreachable:
    """A DynamoDB endpoint a worker cannot reach: every call fails before anything
    is written, as a crash or an infrastructure error before ``begin`` would."""

    def __getattr__(self, name: str) -> Any:
        def fail(*args: Any, **kwargs: Any) -> Any:
            raise EndpointConnectionError(endpoint_url="http://127.0.0.1:9")

        return fail


def fail_before_begin(pipeline: Pipeline, rounds: int = RECEIVES) -> None:
    """Workers receive every waiting dispatch ``rounds`` times and never begin it;
    each time the message comes back after the visibility timeout."""
    broken = Dynacron(
        pipeline.settings,
        dynamodb=Unreachable(),
        sqs=pipeline.sqs,
        clock=pipeline.clock,
        emit_metrics=pipeline.metrics,
        dispatch_queue=pipeline.queue,
    )
    for _ in range(rounds):
        assert pipeline.work(broken, batches=1) >= 1
        pipeline.clock.advance(VISIBILITY)


def waiting(pipeline: Pipeline, queue_url: str) -> int:
    attributes = pipeline.sqs.get_queue_attributes(
        QueueUrl=queue_url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"]) + int(
        attributes["ApproximateNumberOfMessagesNotVisible"]
    )


def undelivered(pipeline: Pipeline) -> str:
    return undelivered_queue_url(pipeline.sqs)


def moved_on_by_sqs(pipeline: Pipeline) -> None:
    """The next receive finds the message past maxReceiveCount: SQS moves it."""
    assert pipeline.work() == 0
    assert waiting(pipeline, pipeline.settings.dispatch_queue_url) == 0
    assert waiting(pipeline, undelivered(pipeline)) == 1


def settle(pipeline: Pipeline, app: Dynacron | None = None) -> int:
    return settle_undelivered(
        app or pipeline.app,
        SqsQueues(pipeline.sqs, {UNDELIVERED_QUEUE.suffix: undelivered(pipeline)}),
    )


def dead_letter_copies(pipeline: Pipeline) -> list[dict[str, Any]]:
    messages = pipeline.sqs.receive_message(
        QueueUrl=pipeline.settings.dead_letter_queue_url,
        MaxNumberOfMessages=10,
        VisibilityTimeout=0,
        MessageAttributeNames=["All"],
    ).get("Messages", [])
    return [
        {**json.loads(m["Body"]), "attribute": m["MessageAttributes"]["execution_id"]}
        for m in messages
    ]


def step(pipeline: Pipeline, when: datetime) -> None:
    pipeline.clock.set(when)
    pipeline.tick()
    pipeline.work()


def test_a_message_that_never_began_is_listed_as_a_dead_letter_and_redrives_once(
    pipeline: Pipeline, sink: Sink
) -> None:
    """Finding 2: the message reaches the dead-letter side without a record; now it
    is in /dead-letters under its tenant, and a redrive runs it exactly once."""
    # Given a one-time task whose message workers receive 5 times without beginning
    task_id = pipeline.register(at="2026-11-30T12:00:00Z", handler_url=f"{sink.url}/hook")
    execution_id = execution_id_for(task_id, START)
    assert pipeline.tick() == 1
    fail_before_begin(pipeline)
    assert pipeline.execution(execution_id) is None
    # When SQS gives up on it (moto applies the redrive policy) and it is settled
    moved_on_by_sqs(pipeline)
    assert settle(pipeline) == 1
    # Then it is a dead letter of Alice's, saying why, with one copy for operators
    status, page = call(pipeline.app, "GET", "/dead-letters")
    assert status == 200
    (listed,) = page["items"]
    assert listed["execution_id"] == execution_id
    assert listed["status"] == "FAILED"
    assert listed["attempt"] == 1
    assert "never began" in listed["error"]
    assert f"received {RECEIVES} times" in listed["error"]
    assert (
        call(pipeline.app, "GET", "/dead-letters", principal="arn:aws:iam::1:user/bob")[1]["items"]
        == []
    )
    recorded = execution(pipeline, execution_id)
    assert recorded.tenant_id == ALICE
    assert recorded.lease_token is None  # the copy is sent: nothing owed
    (copy,) = dead_letter_copies(pipeline)
    assert copy["execution_id"] == execution_id
    assert copy["attribute"]["StringValue"] == execution_id
    assert waiting(pipeline, undelivered(pipeline)) == 0
    assert sink.snapshot() == []
    # When it is redriven
    status, redriven = call(pipeline.app, "POST", f"/dead-letters/{execution_id}/redrive")
    assert status == 202
    assert redriven["status"] == "QUEUED"
    assert redriven["attempt"] == 2
    pipeline.work()
    pipeline.work()
    # Then it ran exactly once, and left the dead letters and their queue
    assert sink.calls_by_key() == {execution_id: 1}
    assert execution(pipeline, execution_id).status is ExecutionStatus.SUCCEEDED
    assert call(pipeline.app, "GET", "/dead-letters")[1]["items"] == []
    assert dead_letter_copies(pipeline) == []


def test_reading_one_message_twice_records_it_once_and_leaves_other_copies_alone(
    pipeline: Pipeline, sink: Sink
) -> None:
    """Finding 2: idempotent, and the usual dead-letter copies are not disturbed."""
    # Given a usual dead letter (its handler answers 404) with its copy in the queue
    sink.status = 404
    failed_task = pipeline.register(at="2026-11-30T12:00:00Z", handler_url=f"{sink.url}/a")
    failed = execution_id_for(failed_task, START)
    pipeline.tick()
    pipeline.work()
    assert execution(pipeline, failed).status is ExecutionStatus.FAILED
    (usual_copy,) = dead_letter_copies(pipeline)
    # And a dispatch SQS delivered twice to the undelivered queue, plus one for the
    # dead letter above (a copy of its message that also ran out of receives)
    lost_task = pipeline.register(at="2026-11-30T12:00:00Z", handler_url=f"{sink.url}/b")
    lost = Dispatch(execution_id_for(lost_task, START), lost_task, START)
    for dispatch in (lost, lost, Dispatch(failed, failed_task, START)):
        pipeline.sqs.send_message(
            QueueUrl=undelivered(pipeline), MessageBody=dispatch_to_body(dispatch)
        )
    before = pipeline.metrics.total(metric_names.DEAD_LETTERS)
    # When they are settled, and read once more
    assert settle(pipeline) == 3
    assert pipeline.app.undelivered_dispatches.settle(lost) is Settled.MOVED_ON
    # Then the lost one is one dead letter with one copy; the usual one is unchanged
    listed = [e["execution_id"] for e in call(pipeline.app, "GET", "/dead-letters")[1]["items"]]
    assert sorted(listed) == sorted([failed, lost.execution_id])
    copies = dead_letter_copies(pipeline)
    assert sorted(c["execution_id"] for c in copies) == sorted([failed, lost.execution_id])
    assert usual_copy in copies
    assert "cannot succeed on a retry" in (execution(pipeline, failed).error or "")
    assert pipeline.metrics.total(metric_names.DEAD_LETTERS) == before + 1


def test_a_fixed_delay_task_whose_message_never_began_runs_again_within_the_bound(
    pipeline: Pipeline, sink: Sink
) -> None:
    """Finding 2: fixed_delay kept next_run_at = null forever; now its slot is freed
    when the message is dead-lettered, and it is due ``delay`` later."""
    task_id = pipeline.register(fixed_delay="30 seconds", handler_url=f"{sink.url}/h")
    first = execution_id_for(task_id, START)
    pipeline.tick()
    assert task(pipeline, task_id).running_execution == first
    fail_before_begin(pipeline)
    # Stalled until the message is settled: out of the due index, slot taken
    stalled = task(pipeline, task_id)
    assert (stalled.next_run_at, stalled.running_execution) == (None, first)
    moved_on_by_sqs(pipeline)
    settle(pipeline)
    freed = task(pipeline, task_id)
    assert freed.running_execution is None
    assert freed.status is TaskStatus.ACTIVE
    assert freed.next_run_at == pipeline.clock.now() + timedelta(seconds=30)
    assert freed.next_run_at <= START + BOUND
    step(pipeline, freed.next_run_at)
    second = execution_id_for(task_id, freed.next_run_at)
    assert sink.calls_by_key() == {second: 1}
    assert execution(pipeline, second).status is ExecutionStatus.SUCCEEDED
    assert execution(pipeline, first).status is ExecutionStatus.FAILED


def test_an_overlap_skip_task_whose_message_never_began_runs_again_within_the_bound(
    pipeline: Pipeline, sink: Sink
) -> None:
    """Finding 2: overlap skip recorded every later occurrence SKIPPED forever; now
    the slot is freed and the next occurrence runs."""
    task_id = pipeline.register(rate="1 minute", overlap="skip", handler_url=f"{sink.url}/h")
    first_at = START + timedelta(minutes=1)
    first = execution_id_for(task_id, first_at)
    pipeline.clock.set(first_at)
    pipeline.tick()
    assert task(pipeline, task_id).running_execution == first
    fail_before_begin(pipeline)
    # Meanwhile later occurrences are skipped: the slot names the lost one
    step(pipeline, pipeline.clock.now())
    due = task(pipeline, task_id).next_run_at
    assert due is not None
    skipped = execution_id_for(task_id, due - timedelta(minutes=1))
    assert execution(pipeline, skipped).status is ExecutionStatus.SKIPPED
    assert first in (execution(pipeline, skipped).error or "")
    moved_on_by_sqs(pipeline)
    settle(pipeline)
    assert task(pipeline, task_id).running_execution is None
    # The next occurrence runs, within the bound of the lost one
    next_run = task(pipeline, task_id).next_run_at
    assert next_run is not None
    assert next_run <= first_at + BOUND
    step(pipeline, next_run)
    assert sink.calls_by_key() == {execution_id_for(task_id, next_run): 1}


def test_a_buffer_one_task_whose_message_never_began_runs_its_buffered_occurrence(
    pipeline: Pipeline, sink: Sink
) -> None:
    """Finding 2: buffer_one held its buffered occurrence behind the lost one forever;
    now it starts as soon as the lost one is dead-lettered."""
    task_id = pipeline.register(rate="1 minute", overlap="buffer_one", handler_url=f"{sink.url}/h")
    first_at = START + timedelta(minutes=1)
    pipeline.clock.set(first_at)
    pipeline.tick()
    fail_before_begin(pipeline)
    step(pipeline, pipeline.clock.now())
    buffered_at = task(pipeline, task_id).buffered_at
    assert buffered_at is not None
    moved_on_by_sqs(pipeline)
    settle(pipeline)
    buffered = execution_id_for(task_id, buffered_at)
    assert task(pipeline, task_id).running_execution == buffered
    pipeline.work()
    assert sink.calls_by_key() == {buffered: 1}
    assert execution(pipeline, buffered).status is ExecutionStatus.SUCCEEDED
    assert task(pipeline, task_id).running_execution is None


def test_a_crash_between_the_record_and_its_copy_is_finished_by_the_reaper(
    pipeline: Pipeline, sink: Sink
) -> None:
    """Finding 2: the record holds a lease until its copy is sent and its slot freed."""
    task_id = pipeline.register(fixed_delay="30 seconds", handler_url=f"{sink.url}/h")
    first = execution_id_for(task_id, START)
    pipeline.tick()
    fail_before_begin(pipeline)
    moved_on_by_sqs(pipeline)
    crashing = pipeline.component(faults=CrashAt([Boundary.DEAD_LETTER_RECORDED_NOT_SENT]))
    with pytest.raises(InjectedCrash):
        settle(pipeline, crashing)
    recorded = execution(pipeline, first)
    assert recorded.status is ExecutionStatus.FAILED
    assert recorded.lease_token is not None
    assert task(pipeline, task_id).running_execution == first
    assert dead_letter_copies(pipeline) == []
    # When the lease runs out, the reaper does what the settler did not
    terms = pipeline.settings.lease_terms
    pipeline.clock.advance(terms.running + terms.clock_skew + timedelta(seconds=1))
    pipeline.reap()
    assert [c["execution_id"] for c in dead_letter_copies(pipeline)] == [first]
    assert task(pipeline, task_id).running_execution is None
    assert execution(pipeline, first).lease_token is None
    # And the message, read again (it was never deleted), adds nothing
    pipeline.sqs.send_message(
        QueueUrl=undelivered(pipeline),
        MessageBody=dispatch_to_body(Dispatch(first, task_id, START)),
    )
    settle(pipeline)
    assert len(dead_letter_copies(pipeline)) == 1


def test_a_queued_attempt_whose_message_never_began_becomes_a_dead_letter(
    pipeline: Pipeline, sink: Sink
) -> None:
    """Finding 2: a run recorded QUEUED first (trigger, buffered, retry) whose message
    runs out of receives is dead-lettered too, instead of being resent forever."""
    task_id = pipeline.register(rate="1 hour", handler_url=f"{sink.url}/h")
    status, view = call(pipeline.app, "POST", f"/tasks/{task_id}/trigger")
    assert status == 202, view
    execution_id = view["execution_id"]
    assert execution(pipeline, execution_id).status is ExecutionStatus.QUEUED
    fail_before_begin(pipeline)
    moved_on_by_sqs(pipeline)
    settle(pipeline)
    dead = execution(pipeline, execution_id)
    assert dead.status is ExecutionStatus.FAILED
    assert "never began" in (dead.error or "")
    listed = call(pipeline.app, "GET", "/dead-letters")[1]["items"]
    assert [e["execution_id"] for e in listed] == [execution_id]
    # The reaper, whose resends kept it circulating, now has nothing to resend
    pipeline.clock.advance(timedelta(hours=1))
    pipeline.reap()
    pipeline.work()
    assert sink.snapshot() == []


def test_a_message_that_guarded_a_running_attempt_takes_it_over(
    pipeline: Pipeline, sink: Sink
) -> None:
    """Finding 2 (and decision 0015's gap): the message of an attempt whose worker
    died after ``begin`` runs out of receives; the attempt is retried, not stranded
    RUNNING outside the reaper's index."""
    task_id = pipeline.register(at="2026-11-30T12:00:00Z", handler_url=f"{sink.url}/hook")
    execution_id = execution_id_for(task_id, START)
    pipeline.tick()
    # Given a worker that dies right after beginning, then workers that fail earlier
    pipeline.work(pipeline.component(faults=CrashAt([Boundary.WORKER_BEGAN])), batches=1)
    pipeline.clock.advance(VISIBILITY)
    began = execution(pipeline, execution_id)
    assert began.status is ExecutionStatus.RUNNING
    assert not began.lease_indexed
    fail_before_begin(pipeline, RECEIVES - 1)
    moved_on_by_sqs(pipeline)
    # When the undelivered message is settled, the lease (long run out) is taken over
    message = dispatch_to_body(Dispatch(execution_id, task_id, START))
    assert settle(pipeline) == 1
    retried = execution(pipeline, execution_id)
    assert retried.status is ExecutionStatus.QUEUED
    assert retried.attempt == 2
    assert "lease ran out" in (retried.error or "")
    # Then the retry runs, once; the same message read again changes nothing
    assert pipeline.app.undelivered_dispatches.settle_message(message) is Settled.MOVED_ON
    (done,) = pipeline.settle([execution_id])
    assert done.status is ExecutionStatus.SUCCEEDED
    assert sink.calls_by_key() == {execution_id: 1}


def test_a_body_that_is_not_a_dispatch_goes_on_to_the_dead_letter_queue(
    pipeline: Pipeline,
) -> None:
    """Finding 2: nothing read from the undelivered queue is dropped unseen."""
    for body in ("{}", "not json", json.dumps({"execution_id": "x", "task_id": "y"})):
        pipeline.sqs.send_message(QueueUrl=undelivered(pipeline), MessageBody=body)
    assert settle(pipeline) == 3
    messages = pipeline.sqs.receive_message(
        QueueUrl=pipeline.settings.dead_letter_queue_url,
        MaxNumberOfMessages=10,
        MessageAttributeNames=["All"],
    )["Messages"]
    assert sorted(m["Body"] for m in messages) == sorted(
        ["{}", "not json", json.dumps({"execution_id": "x", "task_id": "y"})]
    )
    assert waiting(pipeline, undelivered(pipeline)) == 0
