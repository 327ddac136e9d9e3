"""``POST /tasks/batch``: up to 100 tasks in one request, each answered by its index,
idempotent per item, and within the tenant's quota as a whole, on DynamoDB (moto)
and on SQLite (local mode's store)."""

from __future__ import annotations

import json
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import pytest

from dynacron.api.requests import TaskCreate
from dynacron.api.responses import TaskIdView, TaskView
from dynacron.domain.clock import SettableClock
from dynacron.domain.errors import LimitExceeded
from dynacron.entry.composition import Dynacron
from dynacron.local.gateway import LocalContext, proxy_event
from dynacron.services.tasks import BatchItem, BatchOutcome
from tests.integration.api_client import ALICE, call, client_of
from tests.integration.conftest import Build

HOOK = "http://127.0.0.1:9/hook"
BOB = "arn:aws:iam::000000000000:user/bob"


def a_task(n: int, **fields: Any) -> dict[str, Any]:
    return {"name": f"task-{n}", "rate": "1 hour", "handler_url": HOOK} | fields


def batch(system: Dynacron, tasks: list[Any], principal: str = ALICE) -> tuple[int, dict[str, Any]]:
    status, body = call(system, "POST", "/tasks/batch", {"tasks": tasks}, principal=principal)
    return status, body


def stored_ids(system: Dynacron, principal: str = ALICE) -> set[str]:
    ids: set[str] = set()
    token = None
    while True:
        query = {"limit": 100} | ({"next_token": token} if token else {})
        status, page = call(system, "GET", "/tasks", principal=principal, **query)
        assert status == 200
        ids |= {task["task_id"] for task in page["items"]}
        token = page.get("next_token")
        if not token:
            return ids


def task_count(system: Dynacron, principal: str = ALICE) -> int:
    status, tenant = call(system, "GET", "/tenant", principal=principal)
    assert status == 200
    return int(tenant["task_count"])


def test_a_malformed_item_is_reported_by_its_index_and_the_others_are_created(
    build: Build,
) -> None:
    system = build(min_interval_seconds=60)
    # Given a batch whose items 1, 3 to 6 can never be created: one has no schedule,
    # one fires more often than allowed, one follows a task that does not exist, one
    # is no object, one has a field of the wrong type and one no field of a task
    tasks = [
        a_task(0),
        {"name": "no schedule", "handler_url": HOOK},
        a_task(2, tags={"team": "blue"}),
        a_task(3, rate="10 seconds"),
        {"name": "orphan", "after": "no-such-task", "handler_url": HOOK},
        "not an object",
        a_task(6, jitter_seconds="soon", colour="red"),
        a_task(7),
    ]
    # When it is sent
    status, answer = batch(system, tasks)
    # Then the request succeeds, and each item is answered in order by its index
    assert status == 200
    items = answer["items"]
    assert [item["index"] for item in items] == list(range(len(tasks)))
    outcomes = [item["outcome"] for item in items]
    assert outcomes == ["created", "refused", "created"] + ["refused"] * 4 + ["created"]
    assert answer["created"] == 3
    assert items[0]["status"] == items[2]["status"] == 201
    assert items[2]["task"]["tags"] == {"team": "blue"}
    # And each refusal is the problem POST /tasks would have answered
    assert items[1]["status"] == 422
    assert items[1]["problem"]["status"] == 422
    single = call(system, "POST", "/tasks", tasks[1])
    assert single[0] == 422
    assert items[1]["problem"]["detail"] == single[1]["detail"]
    assert items[3]["problem"]["limit"] == "min_interval_seconds"
    assert items[4]["problem"]["errors"] == [
        {"field": "after", "message": "no task 'no-such-task' exists"}
    ]
    assert items[5]["status"] == 422
    assert {(e["field"], e["message"]) for e in items[6]["problem"]["errors"]} == {
        ("jitter_seconds", "must be an integer"),
        ("colour", "is not a known field"),
    }
    # And only the valid items were stored and counted
    created = {items[n]["task"]["task_id"] for n in (0, 2, 7)}
    assert stored_ids(system) == created
    assert task_count(system) == 3


def test_the_same_batch_sent_twice_creates_nothing_the_second_time(
    build: Build, clock: SettableClock
) -> None:
    system = build()
    tasks = [a_task(n, idempotency_key=f"nightly-{n}") for n in range(5)]
    tasks.append(a_task(5))  # one without a key
    tasks.append({"handler_url": HOOK, "idempotency_key": "broken"})  # invalid: takes no key
    status, first = batch(system, tasks)
    assert status == 200
    assert [item["outcome"] for item in first["items"]] == ["created"] * 6 + ["refused"]
    before = stored_ids(system)
    assert len(before) == 6
    # When the client sends the keyed items again (in another key order), a minute later
    clock.advance(timedelta(minutes=1))
    again_tasks = [dict(reversed(task.items())) for task in tasks[:5]]
    # and the invalid one, now fixed
    again_tasks.append(a_task(6, idempotency_key="broken"))
    status, again = batch(system, again_tasks)
    assert status == 200
    # Then every keyed item is the task the first batch made, and nothing new is stored
    outcomes = [item["outcome"] for item in again["items"]]
    assert outcomes == ["replayed"] * 5 + ["created"]
    assert again["created"] == 1
    first_ids = [item["task"]["task_id"] for item in first["items"][:5]]
    assert [item["task"]["task_id"] for item in again["items"][:5]] == first_ids
    assert stored_ids(system) == before | {again["items"][5]["task"]["task_id"]}
    assert task_count(system) == 7
    # And sending the whole second batch once more creates nothing at all
    status, third = batch(system, again_tasks)
    assert [item["outcome"] for item in third["items"]] == ["replayed"] * 6
    assert third["created"] == 0
    assert task_count(system) == 7


def test_an_item_whose_keyed_task_was_deleted_is_a_conflict_not_a_new_task(
    build: Build,
) -> None:
    system = build()
    # Given a batch whose keyed item made a task, since deleted
    tasks = [a_task(0, idempotency_key="weekly-0"), a_task(1, idempotency_key="weekly-1")]
    status, first = batch(system, tasks)
    assert status == 200
    deleted = first["items"][0]["task"]["task_id"]
    assert call(system, "DELETE", f"/tasks/{deleted}")[0] == 204
    # When the same batch is sent again
    status, again = batch(system, tasks)
    # Then that item is refused as the single create's retry would be, and not
    # created again; the other is replayed
    assert status == 200
    assert [item["outcome"] for item in again["items"]] == ["refused", "replayed"]
    assert again["items"][0]["status"] == 409
    assert "was deleted" in again["items"][0]["problem"]["detail"]
    assert stored_ids(system) == {first["items"][1]["task"]["task_id"]}


def test_a_key_of_a_single_create_replays_in_a_batch_and_keys_are_checked(build: Build) -> None:
    system = build()
    body = a_task(0)
    status, single = call(system, "POST", "/tasks", body, headers={"Idempotency-Key": "k-1"})
    assert status == 201
    status, answer = batch(
        system,
        [
            body | {"idempotency_key": "k-1"},  # the single create, retried in a batch
            a_task(1, idempotency_key="k-1"),  # the same key for another task
            a_task(2, idempotency_key="k-2"),
            a_task(3, idempotency_key="k-2"),  # a key repeated within the batch
            a_task(4, idempotency_key="has space"),
            a_task(5, idempotency_key=7),
        ],
    )
    assert status == 200
    items = answer["items"]
    assert items[0]["outcome"] == "replayed"
    assert items[0]["task"]["task_id"] == single["task_id"]
    assert [item["outcome"] for item in items[1:]] == [
        "refused",
        "created",
        "refused",
        "refused",
        "refused",
    ]
    assert items[1]["problem"]["errors"][0]["field"] == "idempotency_key"
    assert "repeats item 2" in items[3]["problem"]["detail"]
    assert {
        items[4]["problem"]["errors"][0]["field"],
        items[5]["problem"]["errors"][0]["field"],
    } == {"idempotency_key"}
    assert task_count(system) == 2


def test_a_batch_fills_the_quota_and_refuses_the_rest_by_index(build: Build) -> None:
    system = build(max_tasks_per_tenant=5)
    status, answer = batch(system, [a_task(n) for n in range(8)])
    assert status == 200
    assert [item["outcome"] for item in answer["items"]] == ["created"] * 5 + ["refused"] * 3
    refused = answer["items"][5]["problem"]
    assert (refused["status"], refused["limit"]) == (422, "max_tasks_per_tenant")
    assert task_count(system) == 5
    assert len(stored_ids(system)) == 5
    # Another tenant has its own quota
    status, theirs = batch(system, [a_task(n) for n in range(3)], principal=BOB)
    assert theirs["created"] == 3


def test_a_full_batch_of_100_is_stored_in_chunks_within_the_quota(build: Build) -> None:
    system = build(max_tasks_per_tenant=150)
    status, first = batch(system, [a_task(n) for n in range(100)])
    assert (status, first["created"]) == (200, 100)
    status, second = batch(system, [a_task(n) for n in range(100, 200)])
    assert status == 200
    assert [item["outcome"] for item in second["items"]] == ["created"] * 50 + ["refused"] * 50
    assert task_count(system) == 150
    assert len(stored_ids(system)) == 150


# Rounds of the race, each on a tenant of its own: a quota checked apart from the
# write it guards overshoots in most single rounds, and in one of these nearly always.
RACE_ROUNDS = 3


def test_two_batches_racing_for_the_last_50_places_create_50(build: Build) -> None:
    system = build(max_tasks_per_tenant=60)
    for round_ in range(RACE_ROUNDS):
        tenant = f"racer-{round_}"
        # Given a tenant with 10 tasks, 50 places left
        first = system.task_service.register_many(tenant, batch_items(0, 10))
        assert all(o.task is not None for o in first)
        # When two batches of 50 are registered at the same moment, as two API
        # function instances would (one process answers one request at a time, so
        # the race is run on the service the route calls, from two threads)
        outcomes = race(system, tenant, batch_items(100, 50), batch_items(200, 50))
        # Then 50 are created in all, and the tenant is exactly at its quota
        assert sum(o.task is not None for o in outcomes) == 50
        refused = [o.error for o in outcomes if o.error is not None]
        assert len(refused) == 50
        assert all(isinstance(e, LimitExceeded) for e in refused)
        assert system.task_service.task_count(tenant) == 60
        assert len(system.task_service.page(tenant, 100, None).items) == 60


def batch_items(first: int, count: int) -> list[BatchItem]:
    return [
        BatchItem(TaskCreate.model_validate(a_task(n)).to_spec())
        for n in range(first, first + count)
    ]


def race(system: Dynacron, tenant: str, *batches: list[BatchItem]) -> list[BatchOutcome]:
    """``batches`` registered for ``tenant`` from one thread each, all at once."""
    start = threading.Barrier(len(batches))

    def register(items: list[BatchItem]) -> list[BatchOutcome]:
        start.wait()
        return system.task_service.register_many(tenant, items)

    # (threads switched as often as Python allows, so that they interleave finely)
    switch_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        with ThreadPoolExecutor(len(batches)) as pool:
            return [o for answer in pool.map(register, batches) for o in answer]
    finally:
        sys.setswitchinterval(switch_interval)


@pytest.mark.parametrize("size", [0, 101])
def test_an_empty_batch_or_one_over_100_is_refused_whole(build: Build, size: int) -> None:
    system = build()
    status, problem = batch(system, [a_task(n) for n in range(size)])
    assert status == 422
    assert problem["errors"][0]["field"] == "tasks"
    assert task_count(system) == 0
    status, problem = call(system, "POST", "/tasks/batch", [a_task(0)])
    assert status in (400, 422)
    status, problem = call(system, "POST", "/tasks/batch", {"items": [a_task(0)]})
    assert status == 422
    assert task_count(system) == 0


def test_tasks_batch_is_no_task_id_for_other_methods(build: Build) -> None:
    system = build()
    for method in ("GET", "PATCH", "DELETE", "PUT"):
        status, problem = call(system, method, "/tasks/batch", {} if method == "PATCH" else None)
        assert status == 405, (method, problem)
        assert problem["detail"] == f"/tasks/batch answers POST, not {method}"
    status, _ = call(system, "OPTIONS", "/tasks/batch")
    assert status == 204
    # A task's own path still answers its methods
    assert call(system, "GET", "/tasks/0123456789abcdef")[0] == 404


def batch_with(
    system: Dynacron, tasks: list[Any], prefer: str | None
) -> tuple[int, dict[str, Any], dict[str, str]]:
    """POST /tasks/batch with a ``Prefer`` header (or none): status, body and headers."""
    headers = {"content-type": "application/json"} | ({"Prefer": prefer} if prefer else {})
    body = json.dumps({"tasks": tasks}).encode()
    event = proxy_event("POST", "/tasks/batch", headers, body, "127.0.0.1")
    event["requestContext"]["identity"]["userArn"] = ALICE
    response = system.api(event, LocalContext("test-api"))
    answered = dict(response.get("headers") or {})
    answered |= {k: v[0] for k, v in (response.get("multiValueHeaders") or {}).items()}
    return response["statusCode"], json.loads(response["body"]), answered


def test_prefer_return_minimal_answers_each_task_by_its_id_and_status(build: Build) -> None:
    system = build()
    # Given a batch of a task, a keyed task and an invalid one
    tasks = [a_task(0), a_task(1, idempotency_key="minimal-1"), a_task(2, rate="soon")]
    # When it is sent asking for a minimal answer (among other preferences)
    status, answer, headers = batch_with(system, tasks, "respond-async, return=minimal")
    # Then each task is answered by its id and status only, the refusal in full
    assert status == 200
    assert headers["Preference-Applied"] == "return=minimal"
    items = answer["items"]
    assert [item["outcome"] for item in items] == ["created", "created", "refused"]
    assert [set(item["task"]) for item in items[:2]] == [{"task_id", "status"}] * 2
    assert [item["task"]["status"] for item in items[:2]] == ["ACTIVE"] * 2
    assert items[2]["task"] is None
    assert items[2]["problem"]["errors"][0]["field"] == "rate"
    assert answer["created"] == 2
    assert stored_ids(system) == {item["task"]["task_id"] for item in items[:2]}
    # And without the preference, or with another, each task is answered whole
    for prefer in (None, "return=representation"):
        status, whole, headers = batch_with(system, [a_task(3)], prefer)
        assert status == 200
        assert "Preference-Applied" not in headers
        assert whole["items"][0]["task"]["name"] == "task-3"
        assert whole["items"][0]["task"]["handler_url"] == HOOK


def test_a_minimal_batch_sent_again_replays_the_same_tasks(build: Build) -> None:
    system = build()
    tasks = [a_task(n, idempotency_key=f"again-{n}") for n in range(3)]
    status, first, _ = batch_with(system, tasks, "return=minimal")
    assert status == 200
    first_ids = [item["task"]["task_id"] for item in first["items"]]
    # When the same batch is sent again, minimal, then whole
    _, minimal, headers = batch_with(system, tasks, "return=minimal")
    _, whole, _ = batch_with(system, tasks, None)
    # Then both answer the first batch's tasks as replayed, and nothing new is stored
    assert headers["Preference-Applied"] == "return=minimal"
    for again in (minimal, whole):
        assert [item["outcome"] for item in again["items"]] == ["replayed"] * 3
        assert [item["task"]["task_id"] for item in again["items"]] == first_ids
        assert again["created"] == 0
    assert [item["task"]["status"] for item in minimal["items"]] == ["ACTIVE"] * 3
    assert [item["task"]["name"] for item in whole["items"]] == ["task-0", "task-1", "task-2"]
    assert stored_ids(system) == set(first_ids)


def test_the_client_asks_for_minimal_answers_and_reads_them(build: Build) -> None:
    system = build()
    sent: list[str | None] = []
    with client_of(system, seen=lambda request: sent.append(request.headers.get("Prefer"))) as c:
        # When the client creates tasks with and without minimal answers
        minimal = c.create_tasks([a_task(0), {"name": "no schedule"}], minimal=True)
        whole = c.create_tasks([a_task(1)])
    # Then it asked for them only when told, and reads either answer
    assert sent == ["return=minimal", None]
    created = minimal.items[0].task
    assert isinstance(created, TaskIdView)
    assert (created.status, minimal.items[1].outcome) == ("ACTIVE", "refused")
    assert isinstance(whole.items[0].task, TaskView)
    assert stored_ids(system) == {created.task_id, whole.items[0].task.task_id}


def test_the_document_declares_prefer_and_preference_applied(build: Build) -> None:
    status, document = call(build(), "GET", "/openapi.json")
    assert status == 200
    operation = document["paths"]["/tasks/batch"]["post"]
    prefer = [p for p in operation["parameters"] if p["name"].lower() == "prefer"]
    assert [(p["in"], "return=minimal" in p["description"]) for p in prefer] == [("header", True)]
    assert "Preference-Applied" in operation["responses"]["200"]["headers"]
    item = document["components"]["schemas"]["BatchItemView"]["properties"]["task"]
    shown = {ref["$ref"].rsplit("/", 1)[-1] for ref in item["anyOf"] if "$ref" in ref}
    assert shown == {"TaskView", "TaskIdView"}
