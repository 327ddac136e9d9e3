"""A long job in the deployed stack: the handler answers 202 and calls back later,
with no AWS identity, on the URLs its delivery names (decision 0023).

The handler's calls go over HTTP to the API function served on loopback as API
Gateway serves it (per-method authorisation from the template); the delivered URLs
carry the stage (``/{stage}/callbacks/...``), which API Gateway strips before the
function sees the path, and so does ``call_back`` here. The executions that never
call back are the reaper's, on its schedule, once the callback lease has run out.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

import boto3
import httpx
import pytest
from botocore.exceptions import ClientError

from dynacron.definitions.callbacks import CALLBACK_TOKEN_HEADER
from dynacron.definitions.resources import DISPATCH_QUEUE
from dynacron.local.aws import REGION
from dynacron.local.gateway import ApiGateway
from tests.deployed.harness import Deployment
from tests.deployed.steps import (
    census_entries,
    count_under,
    counted_as,
    delete_tasks,
    deliveries_of,
    executions,
    register,
    task_view,
)
from tests.support import Delivery, Sink

_tenants = itertools.count(1)
ONE_ATTEMPT = {"max_attempts": 1, "base_delay_seconds": 1, "max_delay_seconds": 1}


@pytest.fixture
def principal(deployed: Deployment) -> Iterator[str]:
    """A tenant of its own per scenario; its tasks are deleted afterwards."""
    caller = f"arn:aws:iam::000000000000:user/long-job-{next(_tenants)}"
    yield caller
    delete_tasks(deployed, caller)


@pytest.fixture(scope="module")
def gateway(deployed: Deployment) -> Iterator[ApiGateway]:
    """The API as API Gateway serves it, to a caller with no AWS identity."""
    server = deployed.serve_api(principal=None)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def call_back(gateway: ApiGateway, url: str, token: str, body: Any = None) -> httpx.Response:
    """POST to a delivered callback URL as the handler would, without credentials:
    the stage URL is mapped to the served address, the stage stripped as API
    Gateway strips it."""
    parts = urlsplit(url)
    stage, _, path = parts.path.lstrip("/").partition("/")
    assert stage, url
    assert path.startswith("callbacks/"), url
    return httpx.post(
        f"http://127.0.0.1:{gateway.server_port}/{path}",
        json=body,
        headers={CALLBACK_TOKEN_HEADER: token},
    )


def dead_letters(deployed: Deployment, principal: str) -> list[str]:
    status, page = deployed.api("GET", "/dead-letters", principal=principal)
    assert status == 200, page
    return [e["execution_id"] for e in page["items"]]


def accepted(deployed: Deployment, principal: str, sink: Sink, task: dict[str, Any]) -> Delivery:
    """Run the task's next occurrence; its handler answers 202 (a long job begins)."""
    sink.status = 202
    deployed.clock.set(max(deployed.clock.now(), datetime.fromisoformat(task["next_run_at"])))
    deployed.run_due(task["task_id"])
    delivery = deliveries_of(sink, task["task_id"])[-1]
    (execution,) = [
        e
        for e in executions(deployed, principal, task["task_id"])
        if e["execution_id"] == delivery.body["execution_id"]
    ]
    assert execution["status"] == "RUNNING", execution
    return delivery


def lease_runs_out(deployed: Deployment) -> dict[str, Any]:
    """The callback lease (and the reaper's margin) passes; the reaper runs."""
    deployed.clock.advance(timedelta(seconds=deployed.settings.callback_lease_seconds + 120))
    return deployed.reap()


def test_a_long_job_heartbeats_and_completes_without_credentials_and_its_dependent_runs(
    deployed: Deployment, principal: str, sink: Sink, gateway: ApiGateway
) -> None:
    # Given a long job, and a task that runs after each of its successes
    upstream = register(deployed, principal, rate="1 hour", handler_url=sink.url)
    dependent = register(deployed, principal, after=upstream["task_id"], handler_url=sink.url)
    delivery = accepted(deployed, principal, sink, upstream)
    token = delivery.headers[CALLBACK_TOKEN_HEADER]
    callbacks = delivery.body["callbacks"]
    # The URLs are the deployed API's, under its stage
    assert urlsplit(callbacks["heartbeat"]).hostname != "127.0.0.1"

    # When, without a token, the handler is refused; with it, it heartbeats
    refused = call_back(gateway, callbacks["heartbeat"], "not-the-token-of-this-attempt")
    assert refused.status_code == 403, refused.text
    deployed.clock.advance(timedelta(minutes=5))
    beat = call_back(gateway, callbacks["heartbeat"], token)
    assert beat.status_code == 200, beat.text
    sink.status = 200
    done = call_back(gateway, callbacks["complete"], token, {"status": "SUCCEEDED"})
    assert done.status_code == 200, done.text

    # Then the execution succeeded, and its dependent was queued by the completion
    (execution,) = executions(deployed, principal, upstream["task_id"])
    assert execution["status"] == "SUCCEEDED", execution
    deployed.run_due()
    (run,) = executions(deployed, principal, dependent["task_id"])
    assert run["status"] == "SUCCEEDED", run
    assert run["upstream_execution_id"] == execution["execution_id"]
    assert len(deliveries_of(sink, dependent["task_id"])) == 1


def test_a_long_job_that_reports_failure_on_its_last_attempt_is_a_dead_letter(
    deployed: Deployment, principal: str, sink: Sink, gateway: ApiGateway
) -> None:
    # Given a long job with one attempt, whose dependent must not run
    task = register(deployed, principal, rate="1 hour", handler_url=sink.url, retry=ONE_ATTEMPT)
    dependent = register(deployed, principal, after=task["task_id"], handler_url=sink.url)
    delivery = accepted(deployed, principal, sink, task)

    # When the handler reports that it failed
    done = call_back(
        gateway,
        delivery.body["callbacks"]["complete"],
        delivery.headers[CALLBACK_TOKEN_HEADER],
        {"status": "FAILED", "error": "the export ran out of disk"},
    )
    assert done.status_code == 200, done.text

    # Then it is a dead letter (its copy in the dead-letter queue, listed for the tenant)
    (execution,) = executions(deployed, principal, task["task_id"])
    assert execution["status"] == "FAILED", execution
    assert execution["dead_lettered_at"] is not None
    assert dead_letters(deployed, principal) == [execution["execution_id"]]
    deployed.run_due()
    assert executions(deployed, principal, dependent["task_id"]) == []


def test_a_long_job_that_never_calls_back_is_retried_by_the_reaper(
    deployed: Deployment, principal: str, sink: Sink
) -> None:
    # Given a long job with two attempts, whose handler never calls back
    task = register(
        deployed,
        principal,
        rate="1 hour",
        handler_url=sink.url,
        retry={"max_attempts": 2, "base_delay_seconds": 1, "max_delay_seconds": 1},
    )
    accepted(deployed, principal, sink, task)

    # When the callback lease runs out, the reaper sends the next attempt
    report = lease_runs_out(deployed)
    assert report["reaped"] >= 1, report
    sink.status = 200
    deployed.clock.advance(timedelta(seconds=2))
    deployed.run_due()

    # Then the second attempt ran, and succeeded
    assert [d.body["attempt"] for d in deliveries_of(sink, task["task_id"])] == [1, 2]
    (execution,) = executions(deployed, principal, task["task_id"])
    assert execution["status"] == "SUCCEEDED", execution


def test_a_silent_last_attempt_is_dead_lettered_by_the_reaper_and_frees_its_fixed_delay(
    deployed: Deployment, principal: str, sink: Sink
) -> None:
    # Given a fixed-delay long job with one attempt, and a dependent
    task = register(
        deployed, principal, fixed_delay="10 minutes", handler_url=sink.url, retry=ONE_ATTEMPT
    )
    dependent = register(deployed, principal, after=task["task_id"], handler_url=sink.url)
    accepted(deployed, principal, sink, task)
    assert task_view(deployed, principal, task["task_id"])["running_execution"] is not None

    # When its handler never calls back and the reaper meets the expired lease
    report = lease_runs_out(deployed)
    reaped_at = deployed.clock.now()
    assert report["reaped"] >= 1, report

    # Then it is a dead letter, the run slot is free, the next run is due its delay
    # after this one ended, and the dependent (which runs after successes) did not run
    (execution,) = executions(deployed, principal, task["task_id"])
    assert execution["status"] == "FAILED", execution
    assert dead_letters(deployed, principal) == [execution["execution_id"]]
    view = task_view(deployed, principal, task["task_id"])
    assert view["running_execution"] is None
    assert datetime.fromisoformat(view["next_run_at"]) == reaped_at.replace(
        microsecond=reaped_at.microsecond // 1000 * 1000
    ) + timedelta(minutes=10)
    deployed.run_due()
    assert executions(deployed, principal, dependent["task_id"]) == []


def test_a_reaped_last_attempt_recounts_a_task_counted_under_a_stale_census_key(
    deployed: Deployment, principal: str, sink: Sink
) -> None:
    # Given a fixed-delay long job with one attempt, holding its run slot...
    task = register(
        deployed, principal, fixed_delay="10 minutes", handler_url=sink.url, retry=ONE_ATTEMPT
    )
    accepted(deployed, principal, sink, task)
    # ...counted under a census key its signature no longer gives (one an earlier
    # version computed, or a backfill wrote)
    stale = "an-earlier-signature-reaped"
    counted = count_under(deployed, task["task_id"], stale)

    # When its handler never calls back and the reaper dead-letters it, freeing the slot
    report = lease_runs_out(deployed)
    assert report["reaped"] >= 1, report

    # Then the task is counted under its own key again and the stale entry, now
    # counting nothing, is deleted (the census DeleteItem of the reaper's role)
    assert task_view(deployed, principal, task["task_id"])["running_execution"] is None
    assert counted_as(deployed, task["task_id"]) == counted
    assert census_entries(deployed, stale) == []


def test_a_silent_last_attempt_hands_its_slot_to_the_buffered_occurrence(
    deployed: Deployment, principal: str, sink: Sink
) -> None:
    # Given a buffer_one long job with one attempt, and an occurrence buffered behind it
    task = register(
        deployed,
        principal,
        rate="1 minute",
        overlap="buffer_one",
        handler_url=sink.url,
        retry=ONE_ATTEMPT,
    )
    accepted(deployed, principal, sink, task)
    deployed.clock.advance(timedelta(minutes=1))
    deployed.tick(deployed.shards_of([task["task_id"]]).pop())
    assert task_view(deployed, principal, task["task_id"])["buffered_at"] is not None

    # When the reaper dead-letters the silent one, it starts the buffered occurrence
    sink.status = 200
    lease_runs_out(deployed)
    deployed.drain("worker", DISPATCH_QUEUE.env_var)

    # Then the buffered one ran, and the first is a dead letter
    statuses = sorted(e["status"] for e in executions(deployed, principal, task["task_id"]))
    assert statuses[:2] == ["FAILED", "SUCCEEDED"], statuses
    assert len(deliveries_of(sink, task["task_id"])) >= 2


def test_a_completion_whose_follow_up_failed_has_its_dependent_started_by_the_reaper(
    deployed: Deployment, principal: str, sink: Sink, gateway: ApiGateway
) -> None:
    # Given a long job with a dependent, and DynamoDB throttling the API's read of
    # the dependents once the completion is recorded
    upstream = register(deployed, principal, rate="1 hour", handler_url=sink.url)
    dependent = register(deployed, principal, after=upstream["task_id"], handler_url=sink.url)
    # ...and a second dependent whose item was changed by hand into one no reader decodes
    unreadable = register(deployed, principal, after=upstream["task_id"], handler_url=sink.url)
    boto3.client("dynamodb", region_name=REGION).update_item(
        TableName=deployed.settings.tasks_table,
        Key={"task_id": {"S": unreadable["task_id"]}},
        UpdateExpression="SET #created = :nonsense",
        ExpressionAttributeNames={"#created": "created_at"},
        ExpressionAttributeValues={":nonsense": {"S": "the day before yesterday"}},
    )
    delivery = accepted(deployed, principal, sink, upstream)
    api = deployed.function("api").dynamodb
    # The first read decides that the end owes a follow-up; the second is the
    # follow-up's own, after the end is recorded.
    reads: list[str] = []

    def throttle_once(params: dict[str, Any], model: Any, **_: Any) -> None:
        if not params.get("IndexName", "").startswith("dependents"):
            return
        reads.append(model.name)
        if len(reads) == 2:
            raise ClientError(
                {"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"}},
                model.name,
            )

    api.meta.events.register_first("provide-client-params.dynamodb.Query", throttle_once)
    try:
        done = call_back(
            gateway,
            delivery.body["callbacks"]["complete"],
            delivery.headers[CALLBACK_TOKEN_HEADER],
            {"status": "SUCCEEDED"},
        )
    finally:
        api.meta.events.unregister("provide-client-params.dynamodb.Query", throttle_once)
    assert len(reads) == 2
    assert done.status_code >= 500, done.text
    (execution,) = executions(deployed, principal, upstream["task_id"])
    assert execution["status"] == "SUCCEEDED", execution
    assert executions(deployed, principal, dependent["task_id"]) == []

    # When the follow-up lease runs out and the reaper meets it
    sink.status = 200
    deployed.clock.advance(timedelta(seconds=deployed.settings.lease_seconds + 120))
    report = deployed.reap()
    assert report["reaped"] >= 1, report
    deployed.run_due()

    # Then the dependent ran after the upstream's success after all
    (run,) = executions(deployed, principal, dependent["task_id"])
    assert run["status"] == "SUCCEEDED", run
    assert run["upstream_execution_id"] == execution["execution_id"]
    # ...and the unreadable one was set aside, saying why
    view = task_view(deployed, principal, unreadable["task_id"])
    assert view["status"] == "ERROR", view
    assert "cannot be read" in view["status_reason"]
