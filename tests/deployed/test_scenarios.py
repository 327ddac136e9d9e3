"""End to end through the deployed entry points, as a user drives them: API requests
as API Gateway passes them on, the looping tick as its schedule starts it, the
worker and the undelivered function fed by their queues, the reaper on its
schedule; each function with the template's environment and its own role.

One stack serves the module (see conftest); each scenario registers its own tasks
under its own principal, and moves the stack's clock forward only.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode

import boto3
import pytest

from dynacron.definitions.resources import DISPATCH_QUEUE, UNDELIVERED_QUEUE
from dynacron.domain.executions.signing import SIGNATURE_HEADER, verify
from dynacron.local.aws import REGION
from tests.deployed.harness import Deployment
from tests.deployed.steps import delete_tasks, deliveries_of, executions, register, task_view
from tests.support import Sink

_tenants = itertools.count(1)


@pytest.fixture
def principal(deployed: Deployment) -> Iterator[str]:
    """A tenant of its own for each scenario; its tasks are deleted afterwards, so
    that they do not keep calling a sink that has stopped."""
    caller = f"arn:aws:iam::000000000000:user/scenario-{next(_tenants)}"
    yield caller
    for owner in (caller, caller + "-other"):
        delete_tasks(deployed, owner)


def run_next(deployed: Deployment, principal: str, task_id: str) -> datetime:
    """Move the clock to the task's next occurrence and let the stack run it."""
    due = datetime.fromisoformat(task_view(deployed, principal, task_id)["next_run_at"])
    if due > deployed.clock.now():
        deployed.clock.set(due)
    deployed.run_due(task_id)
    return due


def test_cron_in_a_time_zone_rate_and_a_one_time_task_run_when_due(
    deployed: Deployment, principal: str, sink: Sink
) -> None:
    # Given a cron task at minute 0 in Kolkata (UTC+5:30), a rate and a one-time task
    cron = register(
        deployed, principal, cron="0 * * * *", timezone="Asia/Kolkata", handler_url=sink.url
    )
    rate = register(deployed, principal, rate="1 minute", handler_url=sink.url)
    at = (deployed.clock.now() + timedelta(seconds=20)).isoformat()
    once = register(deployed, principal, at=at, handler_url=sink.url)

    # Then the cron task is due at half past the hour in UTC
    assert datetime.fromisoformat(cron["next_run_at"]).minute == 30

    # When each runs when due, the handler gets each occurrence
    run_next(deployed, principal, once["task_id"])
    assert len(deliveries_of(sink, once["task_id"])) == 1
    run_next(deployed, principal, rate["task_id"])
    run_next(deployed, principal, rate["task_id"])
    assert len(deliveries_of(sink, rate["task_id"])) == 2
    run_next(deployed, principal, cron["task_id"])
    (delivery,) = deliveries_of(sink, cron["task_id"])
    assert delivery.body["scheduled_at"].endswith(":30:00.000Z")

    # Then the one-time task is done
    assert task_view(deployed, principal, once["task_id"])["status"] == "COMPLETED"
    assert {e["status"] for e in executions(deployed, principal, rate["task_id"])} == {"SUCCEEDED"}


def test_a_fixed_delay_task_is_due_that_long_after_its_last_run_finished(
    deployed: Deployment, principal: str, sink: Sink
) -> None:
    task = register(deployed, principal, fixed_delay="30 seconds", handler_url=sink.url)
    first = run_next(deployed, principal, task["task_id"])
    # (Instants are kept to the millisecond.)
    finished = deployed.clock.now().replace(microsecond=0) + timedelta(
        milliseconds=deployed.clock.now().microsecond // 1000
    )
    next_run = datetime.fromisoformat(
        task_view(deployed, principal, task["task_id"])["next_run_at"]
    )
    assert next_run >= finished + timedelta(seconds=30) > first + timedelta(seconds=30)
    run_next(deployed, principal, task["task_id"])
    assert len(deliveries_of(sink, task["task_id"])) == 2


def test_a_dependent_runs_after_each_success_of_its_upstream(
    deployed: Deployment, principal: str, sink: Sink
) -> None:
    # Given B after A, and C after B (registering `after` marks the upstream)
    upstream = register(deployed, principal, rate="1 minute", handler_url=sink.url)
    middle = register(deployed, principal, after=upstream["task_id"], handler_url=sink.url)
    last = register(deployed, principal, after=middle["task_id"], handler_url=sink.url)

    # When A runs once, successfully
    run_next(deployed, principal, upstream["task_id"])
    deployed.run_due()  # the follow-ups the worker queued

    # Then B ran after it, and C after B, each once
    assert len(deliveries_of(sink, middle["task_id"])) == 1
    assert len(deliveries_of(sink, last["task_id"])) == 1
    (run,) = executions(deployed, principal, last["task_id"])
    assert run["status"] == "SUCCEEDED"
    assert run["upstream_execution_id"] is not None


def test_a_task_after_two_others_runs_once_both_have_ended_with_the_template_s_roles(
    deployed: Deployment, principal: str, sink: Sink
) -> None:
    # Given J after A and B (fan-in, decision 0058), K after A and B whatever their end,
    # and A's handler failing for good. A is due half a minute after B: a tick runs all
    # that is due in its shard, so were they due together, and A and B in one shard
    # (one run in the shard count), running B would run A too.
    b = register(deployed, principal, rate="1 minute", handler_url=sink.url)
    deployed.clock.advance(timedelta(seconds=30))
    a = register(deployed, principal, rate="1 minute", handler_url=f"{sink.url}/fails")
    ids = [a["task_id"], b["task_id"]]
    joined = register(deployed, principal, after=ids, handler_url=sink.url)
    either = register(deployed, principal, after=ids, when="always", handler_url=sink.url)
    assert joined["after"] == ids
    sink.answer = lambda delivery: (500 if delivery.path == "/fails" else 200, {})
    patched = {"retry": {"max_attempts": 1, "base_delay_seconds": 1, "max_delay_seconds": 1}}
    assert deployed.api("PATCH", f"/tasks/{a['task_id']}", patched, principal=principal)[0] == 200

    # When B succeeds alone, neither runs
    run_next(deployed, principal, b["task_id"])
    deployed.run_due()
    assert executions(deployed, principal, a["task_id"]) == []
    assert deliveries_of(sink, either["task_id"]) == []
    assert deliveries_of(sink, joined["task_id"]) == []
    # When A then fails for good (a dead letter)
    run_next(deployed, principal, a["task_id"])
    deployed.run_due()

    # Then the one counting any end ran once; the one waiting for successes did not
    assert [e["status"] for e in executions(deployed, principal, a["task_id"])] == ["FAILED"]
    assert len(deliveries_of(sink, either["task_id"])) == 1
    assert deliveries_of(sink, joined["task_id"]) == []
    # And a second set (B succeeds, then A) runs each once, when A's end completes it
    sink.answer = lambda delivery: (200, {})
    run_next(deployed, principal, b["task_id"])
    deployed.run_due()
    assert deliveries_of(sink, joined["task_id"]) == []
    assert len(deliveries_of(sink, either["task_id"])) == 1
    run_next(deployed, principal, a["task_id"])
    deployed.run_due()
    assert len(deliveries_of(sink, joined["task_id"])) == 1
    assert len(deliveries_of(sink, either["task_id"])) == 2


def test_a_failing_handler_is_retried_then_dead_lettered_and_a_redrive_replays_it(
    deployed: Deployment, principal: str, sink: Sink
) -> None:
    # Given a handler that fails, and a task with two attempts
    sink.status = 500
    task = register(
        deployed,
        principal,
        rate="1 hour",
        handler_url=sink.url,
        retry={"max_attempts": 2, "base_delay_seconds": 1, "max_delay_seconds": 1},
    )
    run_next(deployed, principal, task["task_id"])
    # When the retry's delay passes and the worker takes it again
    deployed.clock.advance(timedelta(seconds=5))
    deployed.run_due()

    # Then the execution is a dead letter, listed for its tenant
    (execution,) = executions(deployed, principal, task["task_id"])
    assert execution["status"] == "FAILED", execution
    assert execution["dead_lettered_at"] is not None
    assert len(deliveries_of(sink, task["task_id"])) == 2
    status, page = deployed.api("GET", "/dead-letters", principal=principal)
    assert status == 200
    assert [e["execution_id"] for e in page["items"]] == [execution["execution_id"]]

    # When the handler is fixed and the dead letter redriven
    sink.status = 200
    status, redriven = deployed.api(
        "POST", f"/dead-letters/{execution['execution_id']}/redrive", principal=principal
    )
    assert status == 202, redriven
    deployed.run_due()

    # Then it ran once more and succeeded, and is no dead letter any more
    (execution,) = executions(deployed, principal, task["task_id"])
    assert execution["status"] == "SUCCEEDED"
    assert deployed.api("GET", "/dead-letters", principal=principal)[1]["items"] == []


def test_a_redrive_leaves_the_other_dead_letters_where_they_are(
    deployed: Deployment, principal: str, sink: Sink
) -> None:
    # Given two executions dead-lettered at their first failure
    sink.status = 500
    once = {"max_attempts": 1, "base_delay_seconds": 1, "max_delay_seconds": 1}
    first, second = (
        register(deployed, principal, rate="1 hour", handler_url=sink.url, retry=once)
        for _ in range(2)
    )
    for task in (first, second):
        deployed.clock.set(max(deployed.clock.now(), datetime.fromisoformat(task["next_run_at"])))
    deployed.run_due(first["task_id"], second["task_id"])
    status, page = deployed.api("GET", "/dead-letters", principal=principal)
    assert len(page["items"]) == 2, page

    # When one is redriven (its copy is searched for among the others)
    sink.status = 200
    redriven, kept = page["items"]
    status, _ = deployed.api(
        "POST", f"/dead-letters/{redriven['execution_id']}/redrive", principal=principal
    )
    assert status == 202
    deployed.run_due()

    # Then only the other is still a dead letter, and it can be redriven in turn
    status, page = deployed.api("GET", "/dead-letters", principal=principal)
    assert [e["execution_id"] for e in page["items"]] == [kept["execution_id"]]
    status, _ = deployed.api(
        "POST", f"/dead-letters/{kept['execution_id']}/redrive", principal=principal
    )
    assert status == 202
    deployed.run_due()
    assert deployed.api("GET", "/dead-letters", principal=principal)[1]["items"] == []
    assert len(sink.snapshot()) == 4


def test_failed_executions_are_listed_across_the_tenants_tasks(
    deployed: Deployment, principal: str, sink: Sink
) -> None:
    # Given two tasks whose handler refuses (400: never retried) and one that succeeds
    sink.answer = lambda delivery: (400 if delivery.path.startswith("/refuse") else 200, {})
    once = {"max_attempts": 1, "base_delay_seconds": 1, "max_delay_seconds": 1}
    failing = [
        register(deployed, principal, rate="1 hour", handler_url=f"{sink.url}/refuse", retry=once)
        for _ in range(2)
    ]
    fine = register(deployed, principal, rate="1 hour", handler_url=f"{sink.url}/fine")
    started = deployed.clock.now()
    for task in (*failing, fine):
        deployed.clock.set(max(deployed.clock.now(), datetime.fromisoformat(task["next_run_at"])))
    deployed.run_due(*(task["task_id"] for task in (*failing, fine)))
    failed_ids = {executions(deployed, principal, t["task_id"])[0]["execution_id"] for t in failing}

    # When the tenant lists its failed executions across tasks since it began, a page
    # at a time (the API's own role queries the attention index and reads the items)
    listed: list[dict[str, Any]] = []
    token = None
    for _ in range(5):
        query = {"status": "FAILED", "since": started.isoformat(), "limit": 1}
        query |= {"next_token": token} if token else {}
        status, page = deployed.api("GET", f"/executions?{urlencode(query)}", principal=principal)
        assert status == 200, page
        listed += page["items"]
        token = page["next_token"]
        if token is None:
            break

    # Then both failures are listed, newest first, and the success is not
    assert {e["execution_id"] for e in listed} == failed_ids
    assert [e["attention_at"] for e in listed] == sorted(
        (e["attention_at"] for e in listed), reverse=True
    )
    assert deployed.api("GET", "/executions", principal=principal + "-other")[1]["items"] == []


def test_a_paused_task_does_not_run_until_resumed(
    deployed: Deployment, principal: str, sink: Sink
) -> None:
    task = register(deployed, principal, rate="1 minute", catchup="skip", handler_url=sink.url)
    status, paused = deployed.api(
        "POST", f"/tasks/{task['task_id']}/pause", {"note": "maintenance"}, principal=principal
    )
    assert status == 200, paused
    deployed.clock.advance(timedelta(minutes=2))
    deployed.run_due(task["task_id"])
    assert deliveries_of(sink, task["task_id"]) == []

    status, resumed = deployed.api("POST", f"/tasks/{task['task_id']}/resume", principal=principal)
    assert status == 200, resumed
    run_next(deployed, principal, task["task_id"])
    assert len(deliveries_of(sink, task["task_id"])) == 1


def test_a_backfill_runs_each_occurrence_of_the_range_once(
    deployed: Deployment, principal: str, sink: Sink
) -> None:
    task = register(deployed, principal, cron="0 * * * *", handler_url=sink.url)
    start = deployed.clock.now() - timedelta(hours=3)
    status, backfill = deployed.api(
        "POST",
        f"/tasks/{task['task_id']}/backfill",
        {"from": start.isoformat(), "to": (start + timedelta(hours=2)).isoformat()},
        principal=principal,
    )
    assert status == 202, backfill
    assert len(backfill["started"]) >= 2
    deployed.run_due()
    assert len(deliveries_of(sink, task["task_id"])) == len(backfill["started"])


def test_a_patch_changes_what_the_next_run_sends(
    deployed: Deployment, principal: str, sink: Sink
) -> None:
    task = register(deployed, principal, rate="1 minute", handler_url=sink.url, payload={"v": 1})
    status, patched = deployed.api(
        "PATCH",
        f"/tasks/{task['task_id']}",
        {"payload": {"v": 2}, "version": task["version"]},
        principal=principal,
    )
    assert status == 200, patched
    run_next(deployed, principal, task["task_id"])
    (delivery,) = deliveries_of(sink, task["task_id"])
    assert delivery.body["payload"] == {"v": 2}


def test_a_patch_moves_a_dependent_to_another_upstream(
    deployed: Deployment, principal: str, sink: Sink
) -> None:
    first, second = (
        register(deployed, principal, rate="1 hour", handler_url=sink.url) for _ in range(2)
    )
    dependent = register(deployed, principal, after=first["task_id"], handler_url=sink.url)
    status, patched = deployed.api(
        "PATCH",
        f"/tasks/{dependent['task_id']}",
        {"after": second["task_id"], "version": dependent["version"]},
        principal=principal,
    )
    assert status == 200, patched
    assert patched["after"] == second["task_id"]
    run_next(deployed, principal, second["task_id"])
    deployed.run_due()
    assert len(deliveries_of(sink, dependent["task_id"])) == 1


def test_a_rotated_secret_signs_the_next_delivery(
    deployed: Deployment, principal: str, sink: Sink
) -> None:
    # Given a tenant whose secret was rotated: two secrets sign, the new one first
    for _ in range(2):
        status, tenant = deployed.api("POST", "/tenant/signing-secrets/rotate", principal=principal)
        assert status == 200, tenant
    assert len(tenant["signing_secrets"]) == 2
    new_secret = tenant["signing_secrets"][0]
    task = register(deployed, principal, rate="1 minute", handler_url=sink.url)
    run_next(deployed, principal, task["task_id"])
    (delivery,) = deliveries_of(sink, task["task_id"])
    header = delivery.headers[SIGNATURE_HEADER]
    # Signatures carry the wall-clock time: the handler checks freshness by its own.
    assert verify(header, new_secret, delivery.raw, now=int(time.time()))
    assert not verify(header, "whsec_not-the-tenant-s", delivery.raw, now=int(time.time()))


def test_two_tenants_see_and_touch_only_their_own_tasks(
    deployed: Deployment, principal: str, sink: Sink
) -> None:
    other = principal + "-other"
    mine = register(deployed, principal, rate="1 minute", handler_url=sink.url)
    theirs = register(deployed, other, rate="1 minute", handler_url=sink.url)
    for path in (f"/tasks/{theirs['task_id']}", f"/tasks/{theirs['task_id']}/executions"):
        assert deployed.api("GET", path, principal=principal)[0] == 404
    assert deployed.api("DELETE", f"/tasks/{theirs['task_id']}", principal=principal)[0] == 404
    status, page = deployed.api("GET", "/tasks", principal=principal)
    assert status == 200
    assert [t["task_id"] for t in page["items"]] == [mine["task_id"]]
    assert deployed.api("DELETE", f"/tasks/{mine['task_id']}", principal=principal)[0] == 204
    assert deployed.api("GET", "/tasks", principal=principal)[1]["items"] == []
    # And a request API Gateway cannot authenticate never reaches the function
    assert deployed.api("GET", "/tasks", principal=None)[0] == 403


def test_tags_filter_a_tenants_listing_and_a_fire_keeps_them(
    deployed: Deployment, principal: str, sink: Sink
) -> None:
    # Given two tenants whose tasks carry the same tags, through the API's role
    other = principal + "-other"
    tags = {"env": "prod", "team": "billing"}
    mine = register(deployed, principal, rate="1 minute", handler_url=sink.url, tags=tags)
    plain = register(deployed, principal, rate="1 minute", handler_url=sink.url)
    theirs = register(deployed, other, rate="1 minute", handler_url=sink.url, tags=tags)

    def listed(owner: str, query: str) -> list[str]:
        status, page = deployed.api("GET", f"/tasks?{query}", principal=owner)
        assert status == 200, page
        return [t["task_id"] for t in page["items"]]

    # When the task has fired (its claim rewrote the item, not its tags)
    run_next(deployed, principal, mine["task_id"])
    assert deliveries_of(sink, mine["task_id"])
    assert task_view(deployed, principal, mine["task_id"])["tags"] == tags
    # Then each tenant's filtered listing holds its own tagged task only
    assert listed(principal, "tag=env:prod&tag=team") == [mine["task_id"]]
    assert listed(other, "tag=env:prod&tag=team") == [theirs["task_id"]]
    assert plain["task_id"] not in listed(principal, "tag=env")
    # And a PATCH that clears them takes the task out of the filtered listing
    status, patched = deployed.api(
        "PATCH", f"/tasks/{mine['task_id']}", {"tags": {}}, principal=principal
    )
    assert (status, patched["tags"]) == (200, {})
    assert listed(principal, "tag=env:prod") == []


def test_a_create_retried_with_its_idempotency_key_makes_one_task(
    deployed: Deployment, principal: str, sink: Sink
) -> None:
    body = {"rate": "1 hour", "handler_url": sink.url}
    key = {"Idempotency-Key": "deployed-create-1"}
    first = deployed.api("POST", "/tasks", body, principal=principal, headers=key)
    again = deployed.api("POST", "/tasks", body, principal=principal, headers=key)
    assert first[0] == again[0] == 201
    assert again[1]["task_id"] == first[1]["task_id"]
    other = deployed.api(
        "POST", "/tasks", body | {"rate": "2 hours"}, principal=principal, headers=key
    )
    assert other[0] == 422
    status, page = deployed.api("GET", "/tasks", principal=principal)
    assert status == 200
    assert [t["task_id"] for t in page["items"]] == [first[1]["task_id"]]


def test_a_batch_create_runs_within_the_api_s_grants_and_replays_by_its_keys(
    deployed: Deployment, principal: str, sink: Sink
) -> None:
    # A batch (its keys, chunked transaction and tenant count) under the API role's
    # own grants: a call outside them would fail here as AWS would fail it
    tasks = [
        {"rate": "1 hour", "handler_url": sink.url, "idempotency_key": f"deployed-batch-{n}"}
        for n in range(3)
    ]
    tasks.append({"handler_url": sink.url})  # no schedule
    status, first = deployed.api("POST", "/tasks/batch", {"tasks": tasks}, principal=principal)
    assert status == 200, first
    assert [i["outcome"] for i in first["items"]] == ["created"] * 3 + ["refused"]
    status, again = deployed.api("POST", "/tasks/batch", {"tasks": tasks}, principal=principal)
    assert status == 200, again
    assert [i["outcome"] for i in again["items"]] == ["replayed"] * 3 + ["refused"]
    status, page = deployed.api("GET", "/tasks", principal=principal)
    assert sorted(t["task_id"] for t in page["items"]) == sorted(
        i["task"]["task_id"] for i in first["items"][:3]
    )


def test_a_lost_retry_is_sent_again_by_the_reaper(
    deployed: Deployment, principal: str, sink: Sink
) -> None:
    # Given an execution whose first attempt failed, and whose retry message was lost
    sink.status = 500
    task = register(
        deployed,
        principal,
        rate="1 hour",
        handler_url=sink.url,
        retry={"max_attempts": 3, "base_delay_seconds": 1, "max_delay_seconds": 1},
    )
    deployed.clock.set(datetime.fromisoformat(task["next_run_at"]))
    deployed.tick(deployed.shards_of([task["task_id"]]).pop())
    # One batch: the retry, sent with a delay of up to a second, is not taken yet
    deployed.drain("worker", DISPATCH_QUEUE.env_var, batches=1)
    sink.status = 200
    deployed.clock.advance(timedelta(seconds=2))
    worker = deployed.function("worker")
    url = worker.environment[DISPATCH_QUEUE.env_var]
    (lost,) = worker.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    worker.sqs.delete_message(QueueUrl=url, ReceiptHandle=lost["ReceiptHandle"])
    (execution,) = executions(deployed, principal, task["task_id"])
    assert execution["status"] == "QUEUED"

    # When the pickup grace passes and the reaper runs on its schedule
    deployed.clock.advance(timedelta(seconds=deployed.settings.pickup_grace_seconds + 10))
    report = deployed.reap()
    assert report["reaped"] == 1, report
    deployed.run_due()

    # Then the retry ran after all
    assert [d.body["attempt"] for d in deliveries_of(sink, task["task_id"])] == [1, 2]
    (execution,) = executions(deployed, principal, task["task_id"])
    assert execution["status"] == "SUCCEEDED"


def test_a_dispatch_no_worker_survives_ends_as_a_dead_letter(
    deployed: Deployment, principal: str, sink: Sink
) -> None:
    # Given a due execution whose worker dies each time it takes the message, of a
    # task whose run slot it holds (no overlap)
    task = register(deployed, principal, rate="1 hour", overlap="skip", handler_url=sink.url)
    # and a task that runs after its failures (decision 0058)
    cleanup = register(
        deployed, principal, after=task["task_id"], when="failure", handler_url=sink.url
    )
    deployed.clock.set(datetime.fromisoformat(task["next_run_at"]))
    deployed.tick(deployed.shards_of([task["task_id"]]).pop())
    worker = deployed.function("worker")
    url = worker.environment[DISPATCH_QUEUE.env_var]
    assert DISPATCH_QUEUE.max_receive_count is not None
    # The template's own: six worker timeouts plus the batching window
    visibility = boto3.client("sqs", region_name=REGION).get_queue_attributes(
        QueueUrl=url, AttributeNames=["VisibilityTimeout"]
    )["Attributes"]["VisibilityTimeout"]
    for _ in range(DISPATCH_QUEUE.max_receive_count):
        assert worker.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
        deployed.clock.advance(timedelta(seconds=int(visibility) + 1))
    # SQS moves it on at the next receive past the last
    assert "Messages" not in worker.sqs.receive_message(QueueUrl=url)

    # When SQS moves it to the undelivered queue and its function reads it
    results = deployed.drain("undelivered", UNDELIVERED_QUEUE.env_var)
    assert results
    assert all(r == {"batchItemFailures": []} for r in results)

    # Then the execution is a dead letter its tenant can see and redrive, and the
    # task's run slot is free again
    (execution,) = executions(deployed, principal, task["task_id"])
    assert execution["dead_lettered_at"] is not None, execution
    assert task_view(deployed, principal, task["task_id"])["running_execution"] is None
    # And the failure started the task after it, once
    deployed.run_due(cleanup["task_id"])
    (after_failure,) = deliveries_of(sink, cleanup["task_id"])
    assert after_failure.body["upstreams"][0]["status"] == "FAILED"
    status, _ = deployed.api(
        "POST", f"/dead-letters/{execution['execution_id']}/redrive", principal=principal
    )
    assert status == 202
    deployed.run_due()
    assert len(deliveries_of(sink, task["task_id"])) == 1


def test_an_occurrence_due_while_the_last_still_waits_is_skipped_when_asked(
    deployed: Deployment, principal: str, sink: Sink
) -> None:
    # Given a task that skips an occurrence due while its previous one has not run
    task = register(deployed, principal, rate="1 minute", overlap="skip", handler_url=sink.url)
    shard = deployed.shards_of([task["task_id"]]).pop()
    deployed.clock.set(datetime.fromisoformat(task["next_run_at"]))
    deployed.tick(shard)

    # When the next one comes due before any worker took the first
    deployed.clock.advance(timedelta(minutes=1))
    deployed.tick(shard)
    deployed.run_due()

    # Then the second is recorded as skipped, and only the first ran
    statuses = sorted(e["status"] for e in executions(deployed, principal, task["task_id"]))
    assert statuses == ["SKIPPED", "SUCCEEDED"]
    assert len(deliveries_of(sink, task["task_id"])) == 1


def test_a_task_with_limits_on_its_host_runs_within_them(
    deployed: Deployment, principal: str, sink: Sink
) -> None:
    # Given a task limited to one delivery at a time, one a second, to its host
    task = register(
        deployed,
        principal,
        rate="1 minute",
        handler_url=sink.url,
        max_concurrency=1,
        rate_limit={"per_second": 1, "burst": 1, "max_in_flight": 1},
    )
    # When two occurrences run, then they ran, one after the other
    run_next(deployed, principal, task["task_id"])
    run_next(deployed, principal, task["task_id"])
    assert len(deliveries_of(sink, task["task_id"])) == 2
    assert sink.peak_concurrent == 1


def old_dispatch(task_id: str, scheduled_at: datetime) -> str:
    """A dispatch message as dynacron sent them before messages named the tenant."""
    stamp = scheduled_at.strftime("%Y%m%dT%H%M%S.000Z")
    return json.dumps(
        {
            "execution_id": f"{task_id}_{stamp}",
            "task_id": task_id,
            "scheduled_at": scheduled_at.strftime("%Y-%m-%dT%H:%M:%S.000Z"),
            "attempt": 1,
        }
    )


def test_an_old_message_for_a_deleted_task_is_recorded_for_its_tenant(
    deployed: Deployment, principal: str, sink: Sink
) -> None:
    # Given a task that ran once, then was deleted
    task = register(deployed, principal, rate="1 hour", handler_url=sink.url)
    run_next(deployed, principal, task["task_id"])
    assert deployed.api("DELETE", f"/tasks/{task['task_id']}", principal=principal)[0] == 204

    # When a message an earlier version sent for it (naming no tenant) reaches the worker
    url = deployed.function("worker").environment[DISPATCH_QUEUE.env_var]
    later = deployed.clock.now().replace(microsecond=0) + timedelta(hours=1)
    body = old_dispatch(task["task_id"], later)
    boto3.client("sqs", region_name=REGION).send_message(QueueUrl=url, MessageBody=body)
    deployed.drain("worker", DISPATCH_QUEUE.env_var)

    # Then it is recorded as skipped, for the tenant its earlier execution names
    status, execution = deployed.api(
        "GET", f"/executions/{json.loads(body)['execution_id']}", principal=principal
    )
    assert status == 200, execution
    assert execution["status"] == "SKIPPED"
    assert len(deliveries_of(sink, task["task_id"])) == 1


@pytest.mark.parametrize("reader", ["worker", "undelivered"])
def test_a_task_written_around_the_api_that_cannot_be_read_is_set_aside(
    deployed: Deployment, principal: str, sink: Sink, reader: str
) -> None:
    # Given a task that ran once, whose item was then changed by hand into nonsense
    task = register(deployed, principal, rate="1 hour", handler_url=sink.url)
    run_next(deployed, principal, task["task_id"])
    boto3.client("dynamodb", region_name=REGION).update_item(
        TableName=deployed.settings.tasks_table,
        Key={"task_id": {"S": task["task_id"]}},
        UpdateExpression="SET #schedule.#every = :nonsense",
        ExpressionAttributeNames={"#schedule": "schedule", "#every": "every_seconds"},
        ExpressionAttributeValues={":nonsense": {"S": "once in a blue moon"}},
    )

    # When a message for it (one an earlier version sent) reaches the reader
    queue = DISPATCH_QUEUE if reader == "worker" else UNDELIVERED_QUEUE
    url = deployed.function(reader).environment[queue.env_var]
    later = deployed.clock.now().replace(microsecond=0) + timedelta(hours=1)
    body = old_dispatch(task["task_id"], later)
    boto3.client("sqs", region_name=REGION).send_message(QueueUrl=url, MessageBody=body)
    results = deployed.drain(reader, queue.env_var)

    # Then the task is set aside, saying why, and the execution is recorded for its
    # tenant: skipped by the worker, a dead letter of the undelivered function
    assert results == [{"batchItemFailures": []}]
    view = task_view(deployed, principal, task["task_id"])
    assert view["status"] == "ERROR"
    assert "cannot be read" in view["status_reason"]
    status, execution = deployed.api(
        "GET", f"/executions/{json.loads(body)['execution_id']}", principal=principal
    )
    assert status == 200, execution
    assert "the task was set aside" in execution["error"]
    # ...and the set-aside is in the task's history, made by the scheduler
    status, changes = deployed.api("GET", f"/tasks/{task['task_id']}/changes", principal=principal)
    assert status == 200, changes
    assert (changes["items"][0]["what"], changes["items"][0]["who"]) == ("set_aside", "dynacron")
    if reader == "worker":
        assert execution["status"] == "SKIPPED"
    else:
        assert execution["dead_lettered_at"] is not None


def test_a_task_the_tick_cannot_read_is_set_aside_and_leaves_the_census(
    deployed: Deployment, principal: str, sink: Sink
) -> None:
    # Given a task, counted in its tenant's census, whose item was then changed by
    # hand into nonsense
    task = register(deployed, principal, rate="1 hour", handler_url=sink.url)
    dynamodb = boto3.client("dynamodb", region_name=REGION)
    key = {"task_id": {"S": task["task_id"]}}
    counted = dynamodb.get_item(TableName=deployed.settings.tasks_table, Key=key)["Item"]
    dynamodb.update_item(
        TableName=deployed.settings.tasks_table,
        Key=key,
        UpdateExpression="SET #schedule.#every = :nonsense",
        ExpressionAttributeNames={"#schedule": "schedule", "#every": "every_seconds"},
        ExpressionAttributeValues={":nonsense": {"S": "once in a blue moon"}},
    )

    # When it is due and its shard ticks
    run_next(deployed, principal, task["task_id"])

    # Then the tick sets it aside, saying why, and takes it off the census: its
    # entry, which counted it alone, is deleted (the tick role's census grants)
    view = task_view(deployed, principal, task["task_id"])
    assert view["status"] == "ERROR"
    assert "cannot be read" in view["status_reason"]
    assert deliveries_of(sink, task["task_id"]) == []
    entries = dynamodb.scan(
        TableName=deployed.settings.executions_table,
        FilterExpression="execution_id = :counted",
        ExpressionAttributeValues={":counted": counted["census"]},
    )["Items"]
    assert entries == []


def test_an_occurrence_due_while_the_last_still_waits_is_buffered_when_asked(
    deployed: Deployment, principal: str, sink: Sink
) -> None:
    # Given a task that keeps one occurrence due while its previous one has not run
    task = register(
        deployed, principal, rate="1 minute", overlap="buffer_one", handler_url=sink.url
    )
    shard = deployed.shards_of([task["task_id"]]).pop()
    deployed.clock.set(datetime.fromisoformat(task["next_run_at"]))
    deployed.tick(shard)
    deployed.clock.advance(timedelta(minutes=1))
    deployed.tick(shard)
    assert task_view(deployed, principal, task["task_id"])["buffered_at"] is not None

    # When the first runs, the worker starts the buffered one after it
    deployed.run_due()

    # Then both ran, one after the other
    assert len(deliveries_of(sink, task["task_id"])) == 2
    statuses = [e["status"] for e in executions(deployed, principal, task["task_id"])]
    assert statuses == ["SUCCEEDED", "SUCCEEDED"]


def test_a_burst_is_handed_out_to_the_claim_function_and_each_occurrence_runs_once(
    deployed: Deployment, principal: str, sink: Sink
) -> None:
    # Given more tasks due in the same second than a tick claims itself (a page of
    # tick_fanout_min_tasks or more goes to the claim function), each skipping an
    # occurrence due while its previous one has not run (two tenants of the
    # scenario's, each within its API rate burst)
    minimum = deployed.function("tick").app.settings.tick_fanout_min_tasks
    shards = deployed.settings.shard_count
    registered = [
        (owner, register(deployed, owner, rate="1 minute", overlap="skip", handler_url=sink.url))
        for owner in (principal, principal + "-other")
        for _ in range(minimum * shards)
    ]
    owners = {task["task_id"]: owner for owner, task in registered}
    ids = list(owners)
    (due,) = {task["next_run_at"] for _, task in registered}
    claims_before = deployed.claims_run

    # When they fall due: each shard's looping tick, with the template's claim
    # function named in its environment, invokes it (authorised by the tick's
    # role), and the claim function claims with its own environment and role
    deployed.clock.set(datetime.fromisoformat(due))
    for shard in sorted(deployed.shards_of(ids)):
        deployed.tick(shard)
    handed_out = deployed.claims_run - claims_before
    # And the next occurrences fall due before any worker took the first ones
    deployed.clock.advance(timedelta(minutes=1))
    for shard in sorted(deployed.shards_of(ids)):
        deployed.tick(shard)
    deployed.run_due()

    # Then pages were handed out both times (the second records the skips), and
    # each task ran its first occurrence exactly once and skipped the second
    assert handed_out > 0
    assert deployed.claims_run - claims_before > handed_out
    delivered = [len(deliveries_of(sink, task_id)) for task_id in ids]
    assert delivered == [1] * len(ids), sorted(delivered)
    for task_id in ids:
        statuses = sorted(e["status"] for e in executions(deployed, owners[task_id], task_id))
        assert statuses == ["SKIPPED", "SUCCEEDED"], (task_id, statuses)
    # (seconds pass: each tenant's API rate refills for the fixture's deletes)
    deployed.clock.advance(timedelta(seconds=10))


def test_a_handed_out_page_the_claim_function_cannot_read_is_set_aside_and_leaves_the_census(
    deployed: Deployment, principal: str, sink: Sink
) -> None:
    # Given enough tasks due in the same second that one shard's page goes to the
    # claim function (pigeonhole: tick_fanout_min_tasks per shard), all counted in
    # their tenant's census, whose items were then changed by hand into nonsense
    minimum = deployed.function("tick").app.settings.tick_fanout_min_tasks
    tasks = [
        register(deployed, principal, rate="1 hour", handler_url=sink.url)
        for _ in range(minimum * deployed.settings.shard_count)
    ]
    ids = [task["task_id"] for task in tasks]
    dynamodb = boto3.client("dynamodb", region_name=REGION)
    table = deployed.settings.tasks_table
    censuses = set()
    for task_id in ids:
        key = {"task_id": {"S": task_id}}
        censuses.add(dynamodb.get_item(TableName=table, Key=key)["Item"]["census"]["S"])
        dynamodb.update_item(
            TableName=table,
            Key=key,
            UpdateExpression="SET #schedule.#every = :nonsense",
            ExpressionAttributeNames={"#schedule": "schedule", "#every": "every_seconds"},
            ExpressionAttributeValues={":nonsense": {"S": "once in a blue moon"}},
        )
    by_shard = {
        shard: [i for i in ids if deployed.shards_of([i]) == {shard}]
        for shard in deployed.shards_of(ids)
    }
    fullest = max(by_shard, key=lambda shard: len(by_shard[shard]))
    assert len(by_shard[fullest]) >= minimum

    # When they fall due and the fullest shard ticks last: its page, the last of
    # them, is handed out, and the claim function sets its tasks aside with its own
    # role (reading each one's census key, updating the census in the set-aside's
    # transaction, deleting the entry left counting nothing)
    (due,) = {task["next_run_at"] for task in tasks}
    deployed.clock.set(datetime.fromisoformat(due))
    claims_before = deployed.claims_run
    for shard in sorted(by_shard, key=lambda shard: shard == fullest):
        deployed.tick(shard)
    assert deployed.claims_run > claims_before

    # Then every task is set aside, saying why, none ran, and the census counts
    # none of them: its entries are deleted
    for task_id in by_shard[fullest]:
        view = task_view(deployed, principal, task_id)
        assert view["status"] == "ERROR", view
        assert "cannot be read" in view["status_reason"]
    assert [d for d in sink.snapshot() if d.body.get("task_id") in ids] == []
    entries = dynamodb.scan(
        TableName=deployed.settings.executions_table,
        FilterExpression="execution_id IN ("
        + ", ".join(f":c{i}" for i in range(len(censuses)))
        + ")",
        ExpressionAttributeValues={f":c{i}": {"S": c} for i, c in enumerate(sorted(censuses))},
    )["Items"]
    assert entries == []
    # (seconds pass: the tenant's API rate refills for the fixture's deletes)
    deployed.clock.advance(timedelta(seconds=10))


def test_a_patch_writes_its_change_record_and_a_revert_restores_it(
    deployed: Deployment, principal: str, sink: Sink
) -> None:
    task = register(deployed, principal, rate="1 hour", handler_url=sink.url, name="before")
    path = f"/tasks/{task['task_id']}"
    status, patched = deployed.api(
        "PATCH", path, {"name": "after", "version": task["version"]}, principal=principal
    )
    assert status == 200, patched
    # The API's role wrote the record in the PATCH's transaction, and reads it back
    status, changes = deployed.api("GET", f"{path}/changes", principal=principal)
    assert status == 200, changes
    latest = changes["items"][0]
    assert (latest["what"], latest["who"]) == ("patch", principal)
    assert (latest["before"]["name"], latest["after"]["name"]) == ("before", "after")
    body = {"change_id": latest["change_id"], "version": patched["version"]}
    status, reverted = deployed.api("POST", f"{path}/revert", body, principal=principal)
    assert status == 200, reverted
    assert reverted["name"] == "before"
