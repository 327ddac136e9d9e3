"""Safe retries of create: ``POST /tasks`` with an ``Idempotency-Key``."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

from dynacron.adapters.sqlite import sqlite_adapters
from dynacron.adapters.sqlite.database import Database
from dynacron.domain.clock import SettableClock
from dynacron.entry.composition import Dynacron
from dynacron.entry.settings import Settings
from dynacron.local.gateway import LocalContext, proxy_event
from tests.integration.api_client import ALICE, call

HOOK = "http://127.0.0.1:9/hook"
BODY = {"name": "nightly", "cron": "0 3 * * *", "handler_url": HOOK}
BOB = "arn:aws:iam::000000000000:user/bob"


def create(
    system: Dynacron, body: Any, key: str | None, principal: str = ALICE
) -> tuple[int, dict[str, Any], dict[str, str]]:
    """POST /tasks as a client sends it: the status, the body and the headers."""
    headers = {"content-type": "application/json"} | ({"Idempotency-Key": key} if key else {})
    event = proxy_event("POST", "/tasks", headers, json.dumps(body).encode(), "127.0.0.1")
    event["requestContext"]["identity"]["userArn"] = principal
    response = system.api(event, LocalContext("test-api"))
    headers = dict(response.get("headers") or {})
    headers |= {k: v[0] for k, v in (response.get("multiValueHeaders") or {}).items()}
    return response["statusCode"], json.loads(response["body"]), headers


def task_ids(system: Dynacron, principal: str = ALICE) -> list[str]:
    status, page = call(system, "GET", "/tasks", principal=principal)
    assert status == 200
    return [t["task_id"] for t in page["items"]]


def test_a_retried_create_returns_the_first_task_and_makes_no_second(
    system: Dynacron, clock: SettableClock
) -> None:
    # Given a create that succeeded, though its client never saw the answer
    status, first, headers = create(system, BODY, "7f1c-retry")
    assert status == 201
    assert "Idempotent-Replayed" not in headers
    # When the client retries it an hour later, with the same key and body in
    # another key order
    clock.advance(timedelta(hours=1))
    status, again, headers = create(system, dict(reversed(BODY.items())), "7f1c-retry")
    # Then it gets the same task, marked as replayed, and the tenant has one task
    assert status == 201
    assert again["task_id"] == first["task_id"]
    assert headers["Idempotent-Replayed"] == "true"
    assert task_ids(system) == [first["task_id"]]
    # And without a key, the same body makes a second task, as before
    assert create(system, BODY, None)[0] == 201
    assert len(task_ids(system)) == 2


def test_a_key_reused_with_another_body_is_refused_and_stores_nothing(system: Dynacron) -> None:
    _, first, _ = create(system, BODY, "key-a")
    status, problem, _ = create(system, BODY | {"cron": "0 4 * * *"}, "key-a")
    assert status == 422
    assert "Idempotency-Key" in problem["detail"]
    assert "another request" in problem["detail"]
    assert task_ids(system) == [first["task_id"]]


def test_a_key_is_free_again_after_a_day(system: Dynacron, clock: SettableClock) -> None:
    _, first, _ = create(system, BODY, "key-b")
    clock.advance(timedelta(hours=24))
    status, second, headers = create(system, BODY, "key-b")
    assert status == 201
    assert second["task_id"] != first["task_id"]
    assert "Idempotent-Replayed" not in headers


def test_a_retry_after_the_task_was_deleted_is_a_conflict_not_a_new_task(
    system: Dynacron,
) -> None:
    _, first, _ = create(system, BODY, "key-c")
    assert call(system, "DELETE", f"/tasks/{first['task_id']}")[0] == 204
    status, problem, _ = create(system, BODY, "key-c")
    assert status == 409
    assert "was deleted" in problem["detail"]
    assert task_ids(system) == []


def test_each_tenant_has_its_own_keys(system: Dynacron) -> None:
    _, alice_s, _ = create(system, BODY, "shared-key")
    status, bob_s, headers = create(system, BODY, "shared-key", principal=BOB)
    assert status == 201
    assert bob_s["task_id"] != alice_s["task_id"]
    assert "Idempotent-Replayed" not in headers
    assert task_ids(system, BOB) == [bob_s["task_id"]]


def test_a_malformed_key_or_body_is_refused_and_stores_nothing(system: Dynacron) -> None:
    for key in ("has space", "x" * 256, "naïve"):
        status, problem, _ = create(system, BODY, key)
        assert status == 422, key
        assert "printable ASCII" in problem["detail"], key
    # A body the API refuses anyway keeps the key free for the corrected request
    status, _, _ = create(system, BODY | {"cron": "not a cron"}, "key-d")
    assert status == 422
    status, made, _ = create(system, BODY, "key-d")
    assert status == 201
    assert task_ids(system) == [made["task_id"]]


def test_the_same_create_sent_eight_times_at_once_makes_one_task(
    settings: Settings, clock: SettableClock, tmp_path: Path
) -> None:
    # On the embedded set, which is safe for threads (moto is not)
    database = Database(tmp_path / "dynacron.sqlite3")
    system = Dynacron(
        settings, adapters=sqlite_adapters(database, clock, execution_retention=timedelta(days=7))
    )
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: create(system, BODY, "burst-key"), range(8)))
    assert {status for status, _, _ in answers} == {201}
    assert len({body["task_id"] for _, body, _ in answers}) == 1
    assert task_ids(system) == [answers[0][1]["task_id"]]
