"""Callbacks authorised by the per-attempt token alone (decision 0023).

A handler that answered 202 calls ``POST /callbacks/{execution_id}/heartbeat`` and
``/complete`` with the ``Dynacron-Callback-Token`` its delivery carried, and no
AWS identity. These tests send exactly that: API Gateway proxy events with no
principal, to the real API handler, against moto, with deployed settings (no
default tenant, so any other route without an identity is a 401).
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from datetime import timedelta
from typing import Any
from urllib.request import Request, urlopen

import pytest

from dynacron.api.requests import TaskCreate
from dynacron.domain.clock import SettableClock
from dynacron.domain.executions.execution import ExecutionStatus
from dynacron.domain.tasks.task import execution_id_for, task_id_of
from dynacron.local.gateway import ApiGateway, LocalContext, proxy_event
from tests.conftest import START, build_pipeline
from tests.integration.api_client import ALICE, call
from tests.pipeline import Pipeline
from tests.support import Delivery, Sink, wait_until

BOB = "arn:aws:iam::000000000000:user/bob"
DUE = "2026-11-30T12:00:00Z"
TOKEN_HEADER = "Dynacron-Callback-Token"
API_URL = "http://127.0.0.1:8080"


@pytest.fixture
def pipeline(aws: tuple[Any, Any], clock: SettableClock) -> Pipeline:
    # Deployed settings, with the URL the worker is given to put in each delivery.
    return build_pipeline(aws, clock, api_base_url=API_URL)


def callback(
    pipeline: Pipeline,
    action: str,
    execution_id: str,
    token: str | None,
    body: Any = None,
    *,
    path: str | None = None,
) -> tuple[int, Any]:
    """A callback as API Gateway hands it over for a NONE-authorised method: no principal."""
    headers = {"content-type": "application/json"} if body is not None else {}
    if token is not None:
        headers[TOKEN_HEADER] = token
    data = json.dumps(body).encode() if body is not None else b""
    target = path or f"/callbacks/{execution_id}/{action}"
    event = proxy_event("POST", target, headers, data, "127.0.0.1")
    assert "userArn" not in event["requestContext"]["identity"]
    response = pipeline.app.api(event, LocalContext("test-api"))
    return response["statusCode"], json.loads(response["body"])


def accepted_run(pipeline: Pipeline, sink: Sink, principal: str = ALICE) -> tuple[str, Delivery]:
    """A one-time task of ``principal``'s, due now, whose handler answered 202."""
    sink.status = 202
    task = TaskCreate(at=DUE, handler_url=f"{sink.url}/{principal[-5:]}").to_spec()
    task_id = pipeline.app.task_service.register(principal, task).task_id
    before = len(sink.snapshot())
    pipeline.tick()
    pipeline.work()
    (delivery,) = sink.snapshot()[before:]
    return execution_id_for(task_id, START), delivery


def stored_item(pipeline: Pipeline, execution_id: str) -> dict[str, Any]:
    """The execution's item as a reader of the table sees it."""
    item: dict[str, Any] = pipeline.dynamodb.get_item(
        TableName=pipeline.settings.executions_table,
        Key={"task_id": {"S": task_id_of(execution_id)}, "execution_id": {"S": execution_id}},
        ConsistentRead=True,
    )["Item"]
    return item


def test_a_delivery_carries_absolute_callback_urls_on_the_token_route(
    pipeline: Pipeline, sink: Sink
) -> None:
    execution_id, delivery = accepted_run(pipeline, sink)
    assert delivery.body["callbacks"] == {
        "heartbeat": f"{API_URL}/callbacks/{execution_id}/heartbeat",
        "complete": f"{API_URL}/callbacks/{execution_id}/complete",
    }
    # 192 bits from `secrets`, URL-safe base64: 32 characters
    assert len(delivery.headers[TOKEN_HEADER]) == 32


def test_the_right_token_alone_heartbeats_and_completes(pipeline: Pipeline, sink: Sink) -> None:
    # Given a 202 job, and no identity on the callbacks (an identity-less call to
    # any other route is refused)
    execution_id, delivery = accepted_run(pipeline, sink)
    token = delivery.headers[TOKEN_HEADER]
    assert call(pipeline.app, "GET", f"/executions/{execution_id}", principal=None)[0] == 401
    # When it heartbeats with its token, five minutes on
    pipeline.clock.advance(timedelta(seconds=300))
    status, view = callback(pipeline, "heartbeat", execution_id, token)
    # Then the lease runs a callback lease from now
    assert status == 200, view
    assert view["lease_until"] == "2026-11-30T12:15:00.000Z"
    execution = pipeline.execution(execution_id)
    assert execution is not None
    assert execution.lease_until is not None
    assert execution.lease_until.isoformat() == "2026-11-30T12:15:00+00:00"
    # When it completes: SUCCEEDED
    status, view = callback(pipeline, "complete", execution_id, token, {"status": "SUCCEEDED"})
    assert status == 200, view
    assert view["status"] == "SUCCEEDED"
    execution = pipeline.execution(execution_id)
    assert execution is not None
    assert execution.status is ExecutionStatus.SUCCEEDED


def test_wrong_missing_and_unknown_are_one_refusal_and_change_nothing(
    pipeline: Pipeline, sink: Sink
) -> None:
    execution_id, delivery = accepted_run(pipeline, sink)
    token = delivery.headers[TOKEN_HEADER]
    before = stored_item(pipeline, execution_id)
    refusals = [
        callback(
            pipeline, "heartbeat", execution_id, token[:-1] + ("A" if token[-1] != "A" else "B")
        ),
        callback(pipeline, "heartbeat", execution_id, None),
        callback(pipeline, "heartbeat", execution_id, ""),
        callback(pipeline, "complete", execution_id, "x" * 32, {"status": "SUCCEEDED"}),
        # an unknown execution, with a real token, or with none
        callback(pipeline, "heartbeat", "0" * 32 + "_20261130T120000.000Z", token),
        callback(pipeline, "complete", "not-an-execution-id", token, {"status": "SUCCEEDED"}),
        callback(pipeline, "heartbeat", "nope_20261130T120000.000Z", None),
    ]
    # Then every one is the same 403 problem, word for word: no oracle for ids
    statuses = {status for status, _ in refusals}
    bodies = {json.dumps(body, sort_keys=True) for _, body in refusals}
    assert statuses == {403}
    assert len(bodies) == 1, bodies
    (problem,) = [body for _, body in refusals[:1]]
    assert problem["title"] == "Forbidden"
    assert "callback token" in problem["detail"]
    # And the execution is exactly as it was
    assert stored_item(pipeline, execution_id) == before


def test_the_table_holds_the_digest_never_the_token(pipeline: Pipeline, sink: Sink) -> None:
    execution_id, delivery = accepted_run(pipeline, sink)
    token = delivery.headers[TOKEN_HEADER]
    item = stored_item(pipeline, execution_id)
    assert item["callback_digest"]["S"] == hashlib.sha256(token.encode()).hexdigest()
    assert token not in json.dumps(item)
    # And what a reader of the table holds does not open the route
    for stolen in (item["callback_digest"]["S"], item["lease_token"]["S"]):
        assert callback(pipeline, "heartbeat", execution_id, stolen)[0] == 403


def test_a_token_opens_its_own_execution_only(pipeline: Pipeline, sink: Sink) -> None:
    # Given a 202 job of Alice's and one of Bob's
    alice_id, alice_delivery = accepted_run(pipeline, sink, ALICE)
    bob_id, _ = accepted_run(pipeline, sink, BOB)
    bob_before = stored_item(pipeline, bob_id)
    # When Alice's token is sent for Bob's execution
    alice_token = alice_delivery.headers[TOKEN_HEADER]
    status, problem = callback(pipeline, "complete", bob_id, alice_token, {"status": "FAILED"})
    # Then it is refused like any wrong token, and Bob's execution is untouched
    assert status == 403, problem
    assert stored_item(pipeline, bob_id) == bob_before
    # And the same token still completes Alice's
    status, view = callback(pipeline, "complete", alice_id, alice_token, {"status": "SUCCEEDED"})
    assert (status, view["status"]) == (200, "SUCCEEDED")


def test_a_replay_after_completion_changes_nothing(pipeline: Pipeline, sink: Sink) -> None:
    execution_id, delivery = accepted_run(pipeline, sink)
    token = delivery.headers[TOKEN_HEADER]
    assert callback(pipeline, "complete", execution_id, token, {"status": "SUCCEEDED"})[0] == 200
    ended = stored_item(pipeline, execution_id)
    pipeline.clock.advance(timedelta(seconds=60))
    # The same completion again, a different one, a heartbeat: the job is told it
    # ended (409), and the record stays as it was
    for action, body in (
        ("complete", {"status": "SUCCEEDED"}),
        ("complete", {"status": "FAILED", "error": "changed my mind"}),
        ("heartbeat", None),
    ):
        status, problem = callback(pipeline, action, execution_id, token, body)
        assert status == 409, problem
        assert "SUCCEEDED" in problem["detail"]
    assert stored_item(pipeline, execution_id) == ended


def test_an_earlier_attempts_token_is_refused_once_the_next_began(
    pipeline: Pipeline, sink: Sink
) -> None:
    # Given a 202 job that reports failure, and is retried
    execution_id, first = accepted_run(pipeline, sink)
    first_token = first.headers[TOKEN_HEADER]
    status, view = callback(
        pipeline, "complete", execution_id, first_token, {"status": "FAILED", "error": "disk full"}
    )
    assert (status, view["status"]) == (200, "QUEUED")
    # Before the retry begins, the first token hears that the attempt ended
    assert callback(pipeline, "heartbeat", execution_id, first_token)[0] == 409
    pipeline.clock.advance(timedelta(seconds=3600))
    pipeline.queue.release_due()
    pipeline.work()
    second = sink.snapshot()[-1]
    assert second.body["attempt"] == 2
    second_token = second.headers[TOKEN_HEADER]
    assert second_token != first_token
    running = stored_item(pipeline, execution_id)
    # When the first attempt's job calls back late: refused, nothing changes
    status, _ = callback(pipeline, "complete", execution_id, first_token, {"status": "SUCCEEDED"})
    assert status == 403
    assert stored_item(pipeline, execution_id) == running
    # The second attempt's token is the one that counts
    status, view = callback(
        pipeline, "complete", execution_id, second_token, {"status": "SUCCEEDED"}
    )
    assert (status, view["status"], view["attempt"]) == (200, "SUCCEEDED", 2)


def test_the_signed_routes_still_take_a_callback(pipeline: Pipeline, sink: Sink) -> None:
    """Callers who sign as the tenant keep the /executions routes (decision 0023)."""
    execution_id, delivery = accepted_run(pipeline, sink)
    token = delivery.headers[TOKEN_HEADER]
    headers = {TOKEN_HEADER: token}
    assert (
        call(pipeline.app, "POST", f"/executions/{execution_id}/heartbeat", headers=headers)[0]
        == 200
    )
    # ...but only signed: without an identity, that route is the tenant API's 401
    status, _ = call(
        pipeline.app,
        "POST",
        f"/executions/{execution_id}/heartbeat",
        principal=None,
        headers=headers,
    )
    assert status == 401


def test_the_token_is_never_logged(
    pipeline: Pipeline,
    sink: Sink,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Every log record (Powertools' too: they reach caplog) and all output, at any level."""
    caplog.set_level(logging.DEBUG)
    execution_id, delivery = accepted_run(pipeline, sink)
    token = delivery.headers[TOKEN_HEADER]
    callback(pipeline, "heartbeat", "nope_20261130T120000.000Z", token)
    callback(pipeline, "complete", execution_id, token, {"status": "SUCCEEDED"})
    callback(pipeline, "complete", execution_id, token, {"status": "SUCCEEDED"})
    out, err = capsys.readouterr()
    assert token not in out + err + caplog.text


def test_a_handler_on_loopback_calls_back_over_http_with_no_identity(
    aws: tuple[Any, Any], clock: SettableClock, sink: Sink
) -> None:
    # Given the API behind the local gateway stand-in on loopback (which passes no
    # identity, as API Gateway passes none for a NONE-authorised method), and a
    # worker told its URL
    holder: dict[str, Pipeline] = {}
    gateway = ApiGateway(("127.0.0.1", 0), lambda event, ctx: holder["p"].app.api(event, ctx))
    host, port = gateway.server_address[:2]
    serving = _serve(gateway)
    try:
        holder["p"] = pipeline = build_pipeline(aws, clock, api_base_url=f"http://{host!s}:{port}")
        answers: list[int] = []

        # And a handler that answers 202 and, once answered, calls the complete URL
        # its delivery named, with the token and nothing else
        def long_job(delivery: Delivery) -> tuple[int, dict[str, str]]:
            def finish() -> None:
                request = Request(
                    delivery.body["callbacks"]["complete"],
                    data=json.dumps({"status": "SUCCEEDED"}).encode(),
                    headers={
                        "Content-Type": "application/json",
                        TOKEN_HEADER: delivery.headers[TOKEN_HEADER],
                    },
                    method="POST",
                )
                with urlopen(request, timeout=10) as response:
                    answers.append(response.status)

            _after_answer(finish)
            return 202, {}

        sink.answer = long_job
        task_id = pipeline.register(at=DUE, handler_url=f"{sink.url}/long")
        execution_id = execution_id_for(task_id, START)
        # When it runs
        pipeline.tick()
        pipeline.work()

        # Then its own callback ends the execution SUCCEEDED
        def succeeded() -> bool:
            execution = pipeline.execution(execution_id)
            return execution is not None and execution.status is ExecutionStatus.SUCCEEDED

        assert wait_until(lambda: succeeded() and answers, timeout=10)
        assert answers == [200]
    finally:
        gateway.shutdown()
        gateway.server_close()
        serving.join(5)


def _serve(gateway: ApiGateway) -> threading.Thread:
    thread = threading.Thread(
        target=gateway.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
    )
    thread.start()
    return thread


def _after_answer(work: Any) -> None:
    """Run ``work`` shortly, in its own thread: after the 202 has gone back."""
    threading.Timer(0.05, work).start()


def test_the_document_states_the_callbacks_take_the_token_not_iam(pipeline: Pipeline) -> None:
    status, doc = call(pipeline.app, "GET", "/openapi.json", principal=None)
    assert status == 200
    # Every operation is SigV4-signed (the document's default)...
    assert doc["security"] == [{"sigv4": []}]
    scheme = doc["components"]["securitySchemes"]["callbackToken"]
    assert (scheme["type"], scheme["in"], scheme["name"]) == ("apiKey", "header", TOKEN_HEADER)
    overridden = {
        (path, method): operation["security"]
        for path, operations in doc["paths"].items()
        for method, operation in operations.items()
        if "security" in operation
    }
    # ...but the two callbacks, which take the token instead
    assert overridden == {
        ("/callbacks/{execution_id}/heartbeat", "post"): [{"callbackToken": []}],
        ("/callbacks/{execution_id}/complete", "post"): [{"callbackToken": []}],
    }
    complete = doc["paths"]["/callbacks/{execution_id}/complete"]["post"]
    assert {"200", "403", "409"} <= set(complete["responses"])
