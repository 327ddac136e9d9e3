"""Retries, dead letters, idempotency, leases and callbacks, through the real handlers."""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from typing import Any

import pytest

from dynacron.adapters.messages import dispatch_to_body
from dynacron.definitions import metric_names
from dynacron.domain.executions.execution import Dispatch, ExecutionStatus
from dynacron.domain.tasks.task import execution_id_for
from dynacron.local.chaos import CrashAt
from dynacron.ports.faults import Boundary
from tests.conftest import START
from tests.contract import changes
from tests.integration.api_client import ALICE, call
from tests.pipeline import Pipeline
from tests.support import Delivery, Sink, wait_until

# One call crashed at a time: its in-progress record expires after a 0.5 s timeout.
pytestmark = pytest.mark.handler_timeout(0.5)

DUE = "2026-11-30T12:00:00Z"


def one_time_task(pipeline: Pipeline, sink: Sink, **fields: Any) -> str:
    task_id = pipeline.register(at=DUE, handler_url=f"{sink.url}/hook", **fields)
    return execution_id_for(task_id, START)


def first_attempt(pipeline: Pipeline, sink: Sink, **fields: Any) -> str:
    """A one-time task due now, ticked and run once; its execution id."""
    execution_id = one_time_task(pipeline, sink, **fields)
    pipeline.tick()
    pipeline.work(batches=1)
    return execution_id


def dead_letter_copies(pipeline: Pipeline) -> list[dict[str, Any]]:
    messages = pipeline.sqs.receive_message(
        QueueUrl=pipeline.settings.dead_letter_queue_url,
        MaxNumberOfMessages=10,
        VisibilityTimeout=0,
        MessageAttributeNames=["All"],
    ).get("Messages", [])
    return [json.loads(m["Body"]) for m in messages]


def callback(
    pipeline: Pipeline, action: str, execution_id: str, token: str | None, body: Any = None
) -> tuple[int, Any]:
    from dynacron.local.gateway import LocalContext, proxy_event

    headers = {"content-type": "application/json"}
    if token is not None:
        headers["Dynacron-Callback-Token"] = token
    data = json.dumps(body).encode() if body is not None else b""
    event = proxy_event("POST", f"/executions/{execution_id}/{action}", headers, data, "127.0.0.1")
    event["requestContext"]["identity"]["userArn"] = ALICE  # handlers call back as the tenant
    response = pipeline.app.api(event, LocalContext("test-api"))
    return response["statusCode"], json.loads(response["body"])


def test_an_execution_runs_once_and_a_duplicate_message_is_dropped(
    pipeline: Pipeline, sink: Sink
) -> None:
    execution_id = one_time_task(pipeline, sink)
    assert pipeline.tick() == 1
    # SQS delivers the same message again (or a tick sent it twice)
    dispatch = Dispatch(execution_id, execution_id.split("_")[0], START)
    pipeline.sqs.send_message(
        QueueUrl=pipeline.settings.dispatch_queue_url, MessageBody=dispatch_to_body(dispatch)
    )
    assert pipeline.work() == 2
    assert sink.calls_by_key() == {execution_id: 1}
    (delivery,) = sink.snapshot()
    assert delivery.body["attempt"] == 1
    assert delivery.headers["Dynacron-Attempt"] == "1"
    execution = pipeline.execution(execution_id)
    assert execution is not None
    assert execution.status is ExecutionStatus.SUCCEEDED
    assert execution.lease_token is None  # out of the lease index
    assert pipeline.metrics.total(metric_names.DUPLICATES_SUPPRESSED) == 1
    # Scheduling lag: the handler started when the clock said, due at START.
    assert pipeline.metrics.total(metric_names.SCHEDULING_LAG) == 0.0
    assert pipeline.metrics.count(metric_names.SCHEDULING_LAG) == 1


def test_failures_are_retried_with_jittered_backoff_then_dead_lettered(
    pipeline: Pipeline, sink: Sink
) -> None:
    sink.status = 500
    policy = {"max_attempts": 4, "base_delay_seconds": 10, "max_delay_seconds": 600}
    execution_id = one_time_task(pipeline, sink, retry=policy)
    pipeline.tick()
    for attempt in (1, 2, 3):
        pipeline.work(batches=1)
        execution = pipeline.execution(execution_id)
        assert execution is not None
        assert execution.status is ExecutionStatus.QUEUED
        assert execution.attempt == attempt + 1
        assert execution.error is not None
        assert "HTTP 500" in execution.error
        # The delay asked of SQS is the policy's seeded full-jitter draw
        dispatch, delay = pipeline.queue.delays[-1]
        ceiling = 10 * 2 ** (attempt - 1)
        assert 0 <= delay <= ceiling
        assert dispatch.attempt == attempt + 1
        assert dispatch.not_before == pipeline.clock.now() + timedelta(seconds=delay)
        assert execution.next_attempt_at == dispatch.not_before
        pipeline.clock.advance(timedelta(seconds=delay))
    pipeline.work()
    assert [d.body["attempt"] for d in sink.snapshot()] == [1, 2, 3, 4]
    execution = pipeline.execution(execution_id)
    assert execution is not None
    assert execution.status is ExecutionStatus.FAILED
    assert execution.error is not None
    assert "all 4 attempts failed" in execution.error
    status, page = call(pipeline.app, "GET", "/dead-letters")
    assert status == 200
    assert [item["execution_id"] for item in page["items"]] == [execution_id]
    assert page["items"][0]["dead_lettered_at"] is not None
    (copy,) = dead_letter_copies(pipeline)
    assert copy["execution_id"] == execution_id
    assert copy["attempt"] == 4
    assert pipeline.metrics.total(metric_names.RETRIES) == 3
    assert pipeline.metrics.total(metric_names.FAILURES) == 4
    assert pipeline.metrics.total(metric_names.DEAD_LETTERS) == 1


def test_a_message_early_for_its_attempt_is_sent_on(pipeline: Pipeline, sink: Sink) -> None:
    """A retry waits longer than SQS can delay a message (15 minutes): it hops."""
    sink.answer = lambda delivery: (503, {"Retry-After": "3000"})
    execution_id = one_time_task(pipeline, sink, retry={"max_delay_seconds": 3000})
    pipeline.tick()
    pipeline.work(batches=1)  # attempt 1 fails; attempt 2 is due much later
    execution = pipeline.execution(execution_id)
    assert execution is not None
    assert execution.next_attempt_at is not None
    # When the message for attempt 2 arrives after SQS's longest delay, still early
    pipeline.clock.advance(timedelta(seconds=900))
    early = Dispatch(
        execution_id, execution.task_id, START, attempt=2, not_before=execution.next_attempt_at
    )
    pipeline.sqs.send_message(
        QueueUrl=pipeline.settings.dispatch_queue_url, MessageBody=dispatch_to_body(early)
    )
    sink.answer = None
    pipeline.work(batches=1)
    # Then it is sent on for the rest of the wait, and nothing runs
    dispatch, delay = pipeline.queue.delays[-1]
    assert dispatch == early
    assert delay == 2100
    assert len(sink.snapshot()) == 1
    pipeline.clock.set(execution.next_attempt_at)
    pipeline.work(batches=1)
    assert [d.body["attempt"] for d in sink.snapshot()] == [1, 2]
    assert pipeline.execution(execution_id).status is ExecutionStatus.SUCCEEDED  # type: ignore[union-attr]


def test_retry_after_from_the_handler_is_honoured(pipeline: Pipeline, sink: Sink) -> None:
    sink.answer = lambda delivery: (429, {"Retry-After": "45"})
    one_time_task(pipeline, sink, retry={"base_delay_seconds": 1, "max_delay_seconds": 600})
    pipeline.tick()
    pipeline.work()
    _, delay = pipeline.queue.delays[-1]
    assert delay == 45


def test_a_client_error_is_dead_lettered_at_once_and_a_redrive_replays_it(
    pipeline: Pipeline, sink: Sink
) -> None:
    sink.status = 404
    execution_id = first_attempt(pipeline, sink)
    execution = pipeline.execution(execution_id)
    assert execution is not None
    assert execution.status is ExecutionStatus.FAILED
    assert "cannot succeed on a retry" in (execution.error or "")
    assert len(dead_letter_copies(pipeline)) == 1
    # When the handler is fixed and the dead letter is redriven
    sink.status = 200
    status, redriven = call(pipeline.app, "POST", f"/dead-letters/{execution_id}/redrive")
    assert status == 202
    assert redriven["status"] == "QUEUED"
    assert redriven["attempt"] == 2
    assert dead_letter_copies(pipeline) == []  # the copy left the dead-letter queue
    assert call(pipeline.app, "GET", "/dead-letters")[1]["items"] == []
    pipeline.work()
    # Then it ran again under the same execution id, and succeeded
    assert [d.headers["Idempotency-Key"] for d in sink.snapshot()] == [execution_id] * 2
    assert [d.body["attempt"] for d in sink.snapshot()] == [1, 2]
    assert pipeline.execution(execution_id).status is ExecutionStatus.SUCCEEDED  # type: ignore[union-attr]
    status, problem = call(pipeline.app, "POST", f"/dead-letters/{execution_id}/redrive")
    assert status == 409
    assert "SUCCEEDED" in problem["detail"]
    assert call(pipeline.app, "POST", "/dead-letters/t_20261130T000000.000Z/redrive")[0] == 404
    assert call(pipeline.app, "POST", "/dead-letters/nonsense/redrive")[0] == 404


def test_a_redriven_execution_gets_a_fresh_retry_budget(pipeline: Pipeline, sink: Sink) -> None:
    sink.status = 500
    execution_id = first_attempt(pipeline, sink, retry={"max_attempts": 1})
    assert pipeline.execution(execution_id).status is ExecutionStatus.FAILED  # type: ignore[union-attr]
    call(pipeline.app, "POST", f"/dead-letters/{execution_id}/redrive")
    pipeline.work()
    execution = pipeline.execution(execution_id)
    assert execution is not None
    assert execution.status is ExecutionStatus.FAILED
    assert execution.attempt == 2
    assert len(sink.snapshot()) == 2


def test_dead_letters_are_listed_newest_first_in_pages(pipeline: Pipeline, sink: Sink) -> None:
    sink.status = 400
    ids = []
    for _ in range(3):
        ids.append(one_time_task(pipeline, sink))
        pipeline.tick()
        pipeline.work()
        pipeline.clock.advance(timedelta(seconds=1))
    seen: list[str] = []
    token = None
    while True:
        query = {"limit": 2} | ({"next_token": token} if token else {})
        status, page = call(pipeline.app, "GET", "/dead-letters", **query)
        assert status == 200
        seen += [item["execution_id"] for item in page["items"]]
        token = page["next_token"]
        if token is None:
            break
    assert seen == list(reversed(ids))
    status, problem = call(pipeline.app, "GET", "/dead-letters", next_token="garbage!")
    assert status == 422
    assert problem["errors"][0]["field"] == "next_token"


def test_a_long_job_reports_through_heartbeat_and_complete(pipeline: Pipeline, sink: Sink) -> None:
    sink.status = 202
    execution_id = first_attempt(pipeline, sink)
    (delivery,) = sink.snapshot()
    token = delivery.headers["Dynacron-Callback-Token"]
    execution = pipeline.execution(execution_id)
    assert execution is not None
    assert execution.status is ExecutionStatus.RUNNING
    assert execution.lease_until == START + timedelta(
        seconds=pipeline.settings.callback_lease_seconds
    )
    # Only the token of this attempt is accepted
    assert callback(pipeline, "heartbeat", execution_id, None)[0] == 403
    assert callback(pipeline, "heartbeat", execution_id, token + "x")[0] == 403
    pipeline.clock.advance(timedelta(minutes=5))
    status, view = callback(pipeline, "heartbeat", execution_id, token)
    assert status == 200
    assert view["lease_until"] == "2026-11-30T12:15:00.000Z"
    status, view = callback(pipeline, "complete", execution_id, token, {"status": "SUCCEEDED"})
    assert status == 200
    assert view["status"] == "SUCCEEDED"
    status, problem = callback(pipeline, "complete", execution_id, token, {"status": "SUCCEEDED"})
    assert status == 409
    assert problem["title"] == "Conflict"
    assert callback(pipeline, "heartbeat", "t_20261130T000000.000Z", token)[0] == 404
    assert callback(pipeline, "complete", execution_id, token, {"status": "DONE"})[0] == 422


def test_a_failed_completion_is_retried(pipeline: Pipeline, sink: Sink) -> None:
    sink.status = 202
    execution_id = first_attempt(pipeline, sink)
    token = sink.snapshot()[0].headers["Dynacron-Callback-Token"]
    status, view = callback(
        pipeline, "complete", execution_id, token, {"status": "FAILED", "error": "disk full"}
    )
    assert status == 200
    assert view["status"] == "QUEUED"
    assert view["attempt"] == 2
    assert "disk full" in view["error"]


def test_a_long_job_that_never_calls_back_is_retried_by_the_reaper(
    pipeline: Pipeline, sink: Sink
) -> None:
    sink.status = 202
    execution_id = first_attempt(pipeline, sink)
    first_token = sink.snapshot()[0].headers["Dynacron-Callback-Token"]
    terms = pipeline.settings.lease_terms
    pipeline.clock.advance(terms.awaiting_callback + terms.clock_skew)
    assert pipeline.reap()["reaped"] == 0  # not before the skew margin has passed too
    pipeline.clock.advance(timedelta(milliseconds=1))
    assert pipeline.reap()["reaped"] == 1
    execution = pipeline.execution(execution_id)
    assert execution is not None
    assert execution.status is ExecutionStatus.QUEUED
    assert "without a callback" in (execution.error or "")
    _, delay = pipeline.queue.delays[-1]
    pipeline.clock.advance(timedelta(seconds=delay))
    pipeline.work()
    second = sink.snapshot()[1]
    assert second.body["attempt"] == 2
    assert second.headers["Dynacron-Callback-Token"] != first_token
    # The first attempt's job calls back too late: refused, the second attempt owns it
    status, _ = callback(pipeline, "complete", execution_id, first_token, {"status": "SUCCEEDED"})
    assert status == 403
    assert pipeline.metrics.total(metric_names.LEASES_REAPED) == 1


def test_a_crashed_worker_is_reaped_after_its_lease_and_the_margin(
    pipeline: Pipeline, sink: Sink
) -> None:
    execution_id = one_time_task(pipeline, sink)
    pipeline.tick()
    crashing = pipeline.component(faults=CrashAt([Boundary.WORKER_BEGAN]))
    pipeline.work(crashing)
    assert pipeline.crashes == 1
    # The message comes back (visibility timeout) but the lease is held: dropped
    pipeline.work()
    assert sink.snapshot() == []
    execution = pipeline.execution(execution_id)
    assert execution is not None
    assert execution.status is ExecutionStatus.RUNNING
    assert execution.lease_until is not None
    terms = pipeline.settings.lease_terms
    pipeline.clock.set(execution.lease_until + terms.clock_skew)
    assert pipeline.reap()["reaped"] == 0
    pipeline.clock.advance(timedelta(milliseconds=1))
    assert pipeline.reap()["reaped"] == 1
    pipeline.settle([execution_id])
    assert sink.calls_by_key() == {execution_id: 1}
    assert pipeline.execution(execution_id).attempt == 2  # type: ignore[union-attr]


def test_a_deleted_task_is_skipped(pipeline: Pipeline, sink: Sink) -> None:
    execution_id = one_time_task(pipeline, sink)
    pipeline.tick()
    pipeline.app.task_service.delete(ALICE, execution_id.split("_")[0])
    pipeline.work()
    execution = pipeline.execution(execution_id)
    assert execution is not None
    assert execution.status is ExecutionStatus.SKIPPED
    assert sink.snapshot() == []


@pytest.mark.parametrize("outcome", ["SUCCEEDED", "PERMANENT", "RETRY"])
def test_python_handlers_are_chosen_by_name(aws: tuple[Any, Any], clock: Any, outcome: str) -> None:
    import dynacron
    from dynacron.adapters.delivery.registry import HandlerRegistry
    from dynacron.local.aws import provision

    registry = HandlerRegistry()
    calls: list[dynacron.ExecutionContext] = []

    @dynacron.handler("charge", registry=registry)
    def charge(run: dynacron.ExecutionContext) -> None:
        calls.append(run)
        if outcome == "PERMANENT":
            raise dynacron.PermanentFailure("card expired")
        if outcome == "RETRY":
            raise ConnectionError("bank offline")

    settings = provision(*aws, shard_count=2)
    pipeline = Pipeline(aws, settings, clock, handlers=registry)
    status, task = call(
        pipeline.app,
        "POST",
        "/tasks",
        {"at": DUE, "handler": "charge", "payload": {"cents": 100}},
    )
    assert status == 201
    assert task["handler"] == "charge"
    assert task["handler_url"] is None
    pipeline.tick()
    pipeline.work(batches=1)
    (run,) = calls
    assert run.execution_id == execution_id_for(task["task_id"], START)
    assert run.payload == {"cents": 100}
    execution = pipeline.execution(run.execution_id)
    assert execution is not None
    expected = {
        "SUCCEEDED": ExecutionStatus.SUCCEEDED,
        "PERMANENT": ExecutionStatus.FAILED,
        "RETRY": ExecutionStatus.QUEUED,
    }[outcome]
    assert execution.status is expected


def deliver_again(pipeline: Pipeline, execution_id: str, attempt: int = 1) -> None:
    """The message of ``execution_id``'s attempt arrives again (SQS redelivers it after its
    visibility timeout, or sends it twice) and a second worker receives it."""
    dispatch = Dispatch(execution_id, execution_id.split("_")[0], START, attempt=attempt)
    pipeline.sqs.send_message(
        QueueUrl=pipeline.settings.dispatch_queue_url, MessageBody=dispatch_to_body(dispatch)
    )
    assert pipeline.work(pipeline.component(), batches=1) == 1


# As below: the held call must outlast the take-over on a loaded machine.
@pytest.mark.handler_timeout(5)
def test_the_reaper_and_a_late_worker_cannot_both_win(pipeline: Pipeline, sink: Sink) -> None:
    """The worker's handler is slow; its lease runs out and the reaper takes over while
    the handler is still running. The late worker's outcome write is refused; the
    handler's success is not lost: the next attempt replays it without a second call."""
    execution_id = one_time_task(pipeline, sink)
    pipeline.tick()
    sink.gate = threading.Event()  # the handler runs until the reaper has acted
    outcomes: list[Any] = []
    # One batch: the retry, if due at once, is left for settle() below
    late = threading.Thread(target=lambda: outcomes.append(pipeline.work(batches=1)))
    late.start()
    assert wait_until(sink.snapshot, timeout=30)
    # A copy of the message arrives while the handler runs: the live lease is handed
    # to the reaper's index (the lease began outside it, guarded by the message)
    deliver_again(pipeline, execution_id)
    # The handler is running; time jumps past the lease and its margin
    terms = pipeline.settings.lease_terms
    pipeline.clock.advance(terms.running + terms.clock_skew + timedelta(seconds=1))
    assert pipeline.reap()["reaped"] == 1
    sink.gate.set()
    late.join()
    execution = pipeline.execution(execution_id)
    assert execution is not None
    assert execution.status is ExecutionStatus.QUEUED  # the reaper's write stands
    assert execution.attempt == 2
    pipeline.settle([execution_id])
    assert sink.calls_by_key() == {execution_id: 1}
    assert sink.effects == {execution_id: 1}
    assert pipeline.metrics.total(metric_names.DUPLICATES_SUPPRESSED) >= 1  # the replay


# The held call must outlast the take-over (a clock move, a reap, a redelivery)
# however loaded the machine: a call that timed out would leave no success to replay.
@pytest.mark.handler_timeout(5)
def test_a_redelivered_message_and_a_late_worker_cannot_both_win(
    pipeline: Pipeline, sink: Sink
) -> None:
    """As above, but nothing put the lease in the reaper's index: the message comes back
    after its visibility timeout, finds the lease run out and takes it over."""
    execution_id = one_time_task(pipeline, sink)
    pipeline.tick()
    sink.gate = threading.Event()
    late = threading.Thread(target=lambda: pipeline.work(batches=1))
    late.start()
    assert wait_until(sink.snapshot, timeout=30)
    terms = pipeline.settings.lease_terms
    pipeline.clock.advance(terms.running + terms.clock_skew + timedelta(seconds=1))
    assert pipeline.reap()["reaped"] == 0  # the reaper does not watch this lease
    deliver_again(pipeline, execution_id)
    sink.gate.set()
    late.join()
    execution = pipeline.execution(execution_id)
    assert execution is not None
    assert execution.status is ExecutionStatus.QUEUED  # the redelivery's take-over stands
    assert execution.attempt == 2
    assert "the lease ran out" in (execution.error or "")
    pipeline.settle([execution_id])
    assert sink.calls_by_key() == {execution_id: 1}
    assert sink.effects == {execution_id: 1}
    assert pipeline.metrics.total(metric_names.LEASES_REAPED) == 1
    assert pipeline.metrics.total(metric_names.DUPLICATES_SUPPRESSED) >= 1  # the replay


@pytest.mark.parametrize(
    "boundary",
    [Boundary.WORKER_BEGAN, Boundary.WORKER_HANDLER_RETURNED],
    ids=lambda v: str(v),
)
def test_a_killed_worker_is_recovered_by_its_message_coming_back(
    pipeline: Pipeline, sink: Sink, boundary: Boundary
) -> None:
    # Given an execution begun from its message: running, its lease outside the index
    execution_id = one_time_task(pipeline, sink)
    pipeline.tick()
    crashing = pipeline.component(faults=CrashAt([boundary]))
    # When the worker dies before or after calling the handler, recording nothing
    pipeline.work(crashing)
    assert pipeline.crashes == 1
    execution = pipeline.execution(execution_id)
    assert execution is not None
    assert execution.status is ExecutionStatus.RUNNING
    assert not execution.lease_indexed
    assert execution.lease_until is not None
    # Then the reaper never sees it, however late
    terms = pipeline.settings.lease_terms
    pipeline.clock.set(execution.lease_until + terms.clock_skew + timedelta(milliseconds=1))
    assert pipeline.reap()["reaped"] == 0
    # And the message, back after its visibility timeout, takes the lease over:
    # the attempt failed, and the next one is queued (and may already have run)
    pipeline.work()
    taken = pipeline.execution(execution_id)
    assert taken is not None
    assert taken.attempt == 2
    assert pipeline.metrics.total(metric_names.LEASES_REAPED) == 1
    # And the retry runs: one business effect
    (done,) = pipeline.settle([execution_id])
    assert (done.status, done.attempt) == (ExecutionStatus.SUCCEEDED, 2)
    assert sink.effects == {execution_id: 1}
    assert sink.applied_twice == 0
    expected_calls = 1 if boundary is Boundary.WORKER_BEGAN else 2  # same Idempotency-Key
    assert sink.calls_by_key() == {execution_id: expected_calls}


def test_a_call_still_in_progress_postpones_the_attempt_that_took_over(
    aws: tuple[Any, Any], clock: Any, sink: Sink
) -> None:
    from tests.conftest import build_pipeline

    # Given a worker killed after its handler answered, before anything was saved:
    # the in-progress record of that call counts for the handler's timeout (30 s)
    pipeline = build_pipeline(aws, clock, http_timeout_seconds=30)
    execution_id = one_time_task(pipeline, sink)
    pipeline.tick()
    pipeline.work(pipeline.component(faults=CrashAt([Boundary.WORKER_HANDLER_RETURNED])))
    terms = pipeline.settings.lease_terms
    pipeline.clock.advance(terms.running + terms.clock_skew + timedelta(seconds=1))
    # When its message comes back, takes over, and the retry's message arrives
    pipeline.work(batches=1)
    pipeline.clock.advance(timedelta(seconds=pipeline.settings.lease_seconds))
    pipeline.work(batches=1)
    # Then the retry began, found the call in progress, and waits for it to expire
    execution = pipeline.execution(execution_id)
    assert execution is not None
    assert (execution.status, execution.attempt) == (ExecutionStatus.QUEUED, 2)
    _, waited = pipeline.queue.delays[-1]
    assert waited == 30 + 5  # the handler's timeout, and the margin to record its outcome
    assert sink.calls_by_key() == {execution_id: 1}
    assert pipeline.metrics.total(metric_names.DUPLICATES_SUPPRESSED) == 1


def test_a_message_arriving_while_its_attempt_runs_hands_the_lease_to_the_reaper(
    pipeline: Pipeline, sink: Sink
) -> None:
    execution_id = one_time_task(pipeline, sink)
    pipeline.tick()
    pipeline.work(pipeline.component(faults=CrashAt([Boundary.WORKER_BEGAN])))
    running = pipeline.execution(execution_id)
    assert running is not None
    assert not running.lease_indexed
    # The message comes back while the lease is alive: dropped, the lease watched
    assert pipeline.work() == 1
    watched = pipeline.execution(execution_id)
    assert watched is not None
    assert watched.lease_indexed
    assert (watched.status, watched.lease_token) == (ExecutionStatus.RUNNING, running.lease_token)
    assert pipeline.metrics.total(metric_names.DUPLICATES_SUPPRESSED) == 1
    assert sink.snapshot() == []


def test_a_renewed_lease_cannot_be_taken_over(pipeline: Pipeline, sink: Sink) -> None:
    execution_id = one_time_task(pipeline, sink)
    pipeline.tick()
    pipeline.work(pipeline.component(faults=CrashAt([Boundary.WORKER_BEGAN])))
    execution = pipeline.execution(execution_id)
    assert execution is not None
    assert execution.lease_token is not None
    assert execution.lease_until is not None
    terms = pipeline.settings.lease_terms
    late = execution.lease_until + terms.clock_skew + timedelta(seconds=1)
    # The holder renews just before the reaper writes
    assert changes.renew(
        pipeline.app.executions, execution_id, execution.lease_token, late + terms.running
    )
    taken = changes.take_over(
        pipeline.app.executions,
        execution_id,
        execution.lease_token,
        cutoff=terms.abandoned_before(late),
        new_token="reaper",
        lease_until=late + terms.running,
    )
    assert not taken
    assert changes.finish(
        pipeline.app.executions,
        execution_id,
        execution.lease_token,
        ExecutionStatus.SUCCEEDED,
        late,
        follow_up_token="follow-up",
        follow_up_until=late + terms.running,
    )


def test_executions_can_be_read_by_id(pipeline: Pipeline, sink: Sink) -> None:
    execution_id = first_attempt(pipeline, sink)
    status, view = call(pipeline.app, "GET", f"/executions/{execution_id}")
    assert status == 200
    assert view["status"] == "SUCCEEDED"
    assert call(pipeline.app, "GET", "/executions/nope")[0] == 404


def test_deliveries_carry_the_attempt_and_callback_urls(
    aws: tuple[Any, Any], clock: Any, sink: Sink
) -> None:
    from dynacron.entry.settings import LOOPBACK_NETWORKS
    from dynacron.local.aws import provision

    settings = provision(
        *aws,
        delivery_allow_networks=LOOPBACK_NETWORKS,
        api_base_url="http://127.0.0.1:8080",
    )
    pipeline = Pipeline(aws, settings, clock)
    execution_id = first_attempt(pipeline, sink)
    delivery: Delivery = sink.snapshot()[0]
    assert delivery.body["callbacks"] == {
        # The token-authorised routes (decision 0023), not the signed /executions ones
        "heartbeat": f"http://127.0.0.1:8080/callbacks/{execution_id}/heartbeat",
        "complete": f"http://127.0.0.1:8080/callbacks/{execution_id}/complete",
    }
    assert delivery.headers["Idempotency-Key"] == execution_id
    assert len(delivery.headers["Dynacron-Callback-Token"]) >= 32


def test_the_indexes_hold_only_what_is_owed(pipeline: Pipeline, sink: Sink) -> None:
    """Sparse: a finished execution leaves the lease index; a redriven one the dead
    letters; only the long job, the dead letter (then redriven) are listed across tasks."""
    from dynacron.definitions.resources import EXECUTIONS, LEASE_SHARDS
    from dynacron.domain.executions.attention import AttentionQuery

    assert {index.name for index in EXECUTIONS.indexes} == {
        "lease-index",
        "dead-letter-index",
        "attention-index",
    }
    store = pipeline.app.executions
    far_future = START + timedelta(days=365)

    def leased() -> set[str]:
        return {
            i for shard in range(LEASE_SHARDS) for i in store.expired_leases(shard, far_future, 100)
        }

    sink.status = 202
    waiting = first_attempt(pipeline, sink)
    sink.status = 400
    dead = first_attempt(pipeline, sink)
    sink.status = 200
    done = first_attempt(pipeline, sink)
    assert leased() == {waiting}
    assert [e.execution_id for e in store.dead_letters(ALICE, 10, None).items] == [dead]
    pipeline.app.execution_service.redrive(ALICE, dead)
    assert leased() == {waiting, dead}
    assert store.dead_letters(ALICE, 10, None).items == []
    assert done not in leased()
    listed = store.needing_attention(ALICE, AttentionQuery(), 10, None).items
    assert sorted(e.execution_id for e in listed) == sorted([waiting, dead])
