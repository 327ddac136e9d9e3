"""GET /executions: a tenant's failed, retrying and long-running executions across its
tasks, through the API on the AWS adapters (moto), from real fires."""

from __future__ import annotations

import base64
import json
from datetime import timedelta
from typing import Any

import pytest

from tests.integration.api_client import call
from tests.integration.test_tenancy import BOB
from tests.pipeline import Pipeline
from tests.support import Answer, Delivery, Sink

# Each handler path answers as its name says: 400 is never retried, 500 is. The
# flaky one fires last, so that no later work runs its retry.
ANSWERS = {"/refused": 400, "/fine": 200, "/long": 202, "/flaky": 500}


def by_path(delivery: Delivery) -> Answer:
    return ANSWERS[delivery.path], {}


@pytest.fixture
def fired(pipeline: Pipeline, sink: Sink) -> dict[str, str]:
    """One execution per handler path, a minute apart, in the order of ``ANSWERS``; the
    execution id of each, by path."""
    sink.answer = by_path
    ids: dict[str, str] = {}
    for path in ANSWERS:
        at = pipeline.clock.now() + timedelta(seconds=1)
        pipeline.register(
            at=at.isoformat(), handler_url=f"{sink.url}{path}", retry={"max_attempts": 3}
        )
        pipeline.clock.advance(timedelta(seconds=1))
        pipeline.tick()
        pipeline.work(batches=1)
        (delivery,) = [d for d in sink.snapshot() if d.path == path]
        ids[path] = delivery.body["execution_id"]
        pipeline.clock.advance(timedelta(minutes=1))
    return ids


def listing(pipeline: Pipeline, **query: Any) -> tuple[int, Any]:
    return call(pipeline.app, "GET", "/executions", **query)


def every_id(pipeline: Pipeline, principal: str | None = None, **query: Any) -> list[str]:
    ids: list[str] = []
    token = None
    for _ in range(20):
        extra = {"next_token": token} if token else {}
        kwargs = {"principal": principal} if principal else {}
        status, page = call(pipeline.app, "GET", "/executions", **kwargs, **query, **extra)
        assert status == 200, page
        ids += [item["execution_id"] for item in page["items"]]
        token = page["next_token"]
        if token is None:
            return ids
    raise AssertionError("the listing never ended")


def test_failed_retrying_and_long_running_are_listed_newest_first(
    pipeline: Pipeline, fired: dict[str, str]
) -> None:
    # Then the long job, the retrying one and the dead letter are listed, newest
    # first, and the one that succeeded is not
    status, page = listing(pipeline)
    assert status == 200
    assert [(e["execution_id"], e["status"]) for e in page["items"]] == [
        (fired["/flaky"], "QUEUED"),
        (fired["/long"], "RUNNING"),
        (fired["/refused"], "FAILED"),
    ]
    assert all(e["attention_at"] for e in page["items"])
    assert page["next_token"] is None
    # And a task's own history still shows the success
    succeeded = call(pipeline.app, "GET", f"/executions/{fired['/fine']}")[1]
    assert (succeeded["status"], succeeded["attention_at"]) == ("SUCCEEDED", None)


def test_filtered_by_status_and_range_and_paged(pipeline: Pipeline, fired: dict[str, str]) -> None:
    assert every_id(pipeline, status="FAILED") == [fired["/refused"]]
    assert every_id(pipeline, status="QUEUED") == [fired["/flaky"]]
    assert every_id(pipeline, status="RUNNING") == [fired["/long"]]
    # The refused one failed in the first minute, the others in later ones
    _, failed = listing(pipeline, status="FAILED")
    refused_at = failed["items"][0]["attention_at"]
    assert every_id(pipeline, until=refused_at) == [fired["/refused"]]
    assert every_id(pipeline, since=refused_at.replace("Z", "+00:00"), status="FAILED") == [
        fired["/refused"]
    ]
    assert fired["/refused"] not in every_id(pipeline, since="2026-11-30T12:01:00Z")
    # One a page, every one once, in the same order
    assert every_id(pipeline, limit=1) == [fired["/flaky"], fired["/long"], fired["/refused"]]


def test_another_tenant_sees_none_and_cannot_follow_a_token(
    pipeline: Pipeline, fired: dict[str, str]
) -> None:
    assert every_id(pipeline, principal=BOB) == []
    _, page = listing(pipeline, limit=1)
    token = page["next_token"]
    assert token is not None
    status, problem = call(pipeline.app, "GET", "/executions", principal=BOB, next_token=token)
    assert status == 422
    assert problem["errors"] == [
        {"field": "next_token", "message": "is not a token this API returned"}
    ]
    # Nor can a token edited to name another tenant's partition
    decoded = json.loads(base64.urlsafe_b64decode(token))
    decoded["key"]["attention_tenant"] = {"S": "arn:aws:iam::000000000000:role/Billing"}
    forged = base64.urlsafe_b64encode(json.dumps(decoded).encode()).decode()
    assert call(pipeline.app, "GET", "/executions", next_token=forged)[0] == 422
    # Or one whose key is not this index's: a key missing, one of another type, more
    for edit in (
        lambda key: key.pop("attention_at"),
        lambda key: key.update(attention_at={"N": "1"}),
        lambda key: key.update(attention_at={"S": ["x"]}),
        lambda key: key.update(status={"S": "FAILED"}),
    ):
        tampered = json.loads(base64.urlsafe_b64decode(token))
        edit(tampered["key"])
        forged = base64.urlsafe_b64encode(json.dumps(tampered).encode()).decode()
        status, problem = call(pipeline.app, "GET", "/executions", next_token=forged)
        assert (status, problem["errors"][0]["field"]) == (422, "next_token")
    # And a token of one filter is refused by another
    assert listing(pipeline, status="FAILED", next_token=token)[0] == 422


@pytest.mark.parametrize(
    ("query", "field", "says"),
    [
        ({"status": "SUCCEEDED"}, "status", "GET /tasks/{task_id}/executions"),
        ({"status": "SKIPPED"}, "status", "not indexed"),
        ({"since": "2026-11-30T12:00:00"}, "since", "with an offset"),
        ({"until": "last tuesday"}, "until", "ISO 8601"),
        ({"since": "2026-11-30T13:00:00Z", "until": "2026-11-30T12:00:00Z"}, "since", "until"),
        ({"limit": "101"}, "limit", ""),
        ({"limit": "0"}, "limit", ""),
        ({"next_token": "bm90LWEtdG9rZW4="}, "next_token", "not a token"),
    ],
)
def test_what_cannot_be_answered_is_a_422_naming_the_field(
    pipeline: Pipeline, query: dict[str, str], field: str, says: str
) -> None:
    status, problem = listing(pipeline, **query)
    assert status == 422, problem
    assert [error["field"] for error in problem["errors"]] == [field]
    assert says in problem["errors"][0]["message"]
