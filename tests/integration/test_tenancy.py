"""Tenants: every endpoint, given another tenant's ids, answers exactly as for a missing id."""

from __future__ import annotations

import dataclasses
import sqlite3
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from dynacron.adapters.sqlite import sqlite_adapters
from dynacron.adapters.sqlite.database import Database
from dynacron.domain.clock import SettableClock
from dynacron.entry.composition import Dynacron
from dynacron.entry.settings import Settings
from tests.integration.api_client import ALICE, call
from tests.pipeline import Pipeline
from tests.support import Sink, wait_until

BOB = "arn:aws:sts::000000000000:assumed-role/Billing/session-1"
HOOK = "http://127.0.0.1:9/hook"
RETENTION = timedelta(days=7)

# Every route that takes a task id: (method, path template, body).
TASK_ROUTES = [
    ("GET", "/tasks/{id}", None),
    ("DELETE", "/tasks/{id}", None),
    ("GET", "/tasks/{id}/executions", None),
    ("GET", "/tasks/{id}/next", None),
    ("PATCH", "/tasks/{id}", {"payload": {"taken": True}}),
    ("POST", "/tasks/{id}/pause", {"note": "mine now"}),
    ("POST", "/tasks/{id}/resume", None),
    ("POST", "/tasks/{id}/trigger", None),
    (
        "POST",
        "/tasks/{id}/backfill",
        {"from": "2026-11-30T11:00:00Z", "to": "2026-11-30T11:03:00Z"},
    ),
    ("POST", "/tasks/{id}/skip", {"occurrences": 1, "note": "not yours"}),
    ("DELETE", "/tasks/{id}/skips", None),
    ("GET", "/tasks/{id}/changes", None),
    ("POST", "/tasks/{id}/revert", {"change_id": "20261130T120000.000Z-x", "version": 1}),
]


def shape(body: dict[str, Any], task_id: str) -> dict[str, Any]:
    """A problem body with the id taken out, to compare two answers' shapes."""
    return {k: (v.replace(task_id, "<id>") if isinstance(v, str) else v) for k, v in body.items()}


@pytest.mark.parametrize(("method", "path", "body"), TASK_ROUTES)
def test_another_tenants_task_is_indistinguishable_from_a_missing_one(
    system: Dynacron, method: str, path: str, body: Any
) -> None:
    # Given a task of Alice's
    _, task = call(system, "POST", "/tasks", {"rate": "1 minute", "handler_url": HOOK})
    theirs, missing = task["task_id"], "0" * 32
    # When Bob uses its id, and an id that exists nowhere
    status, answer = call(system, method, path.format(id=theirs), body, principal=BOB)
    missing_status, missing_answer = call(
        system, method, path.format(id=missing), body, principal=BOB
    )
    # Then both are the same 404 problem
    assert (status, missing_status) == (404, 404)
    assert shape(answer, theirs) == shape(missing_answer, missing)
    # And Alice's task is untouched
    assert call(system, "GET", f"/tasks/{theirs}")[1] == task


def test_lists_show_only_the_callers_tasks_and_pages_do_not_cross(system: Dynacron) -> None:
    alices = {
        call(system, "POST", "/tasks", {"rate": "1 hour", "handler_url": HOOK})[1]["task_id"]
        for _ in range(3)
    }
    bobs = {
        call(system, "POST", "/tasks", {"rate": "1 hour", "handler_url": HOOK}, principal=BOB)[1][
            "task_id"
        ]
        for _ in range(2)
    }
    seen, token = [], None
    while True:
        query = {"limit": 2} | ({"next_token": token} if token else {})
        status, page = call(system, "GET", "/tasks", **query)
        assert status == 200
        seen += [t["task_id"] for t in page["items"]]
        token = page["next_token"]
        if not token:
            break
    assert set(seen) == alices
    assert {t["task_id"] for t in call(system, "GET", "/tasks", principal=BOB)[1]["items"]} == bobs
    # A page token of Alice's is no use to Bob
    _, first = call(system, "GET", "/tasks", limit=1)
    status, problem = call(system, "GET", "/tasks", principal=BOB, next_token=first["next_token"])
    assert status == 422
    assert problem["errors"][0]["field"] == "next_token"


def test_concurrent_requests_of_two_tenants_each_see_only_their_own(
    settings: Settings, clock: SettableClock, tmp_path: Path
) -> None:
    # Local mode's gateway answers requests on threads, all through one Dynacron on
    # its embedded store: what one request learns of its caller must not reach
    # another's. (moto's backends are not safe for threads; the embedded set is.)
    database = Database(tmp_path / "dynacron.sqlite3")
    system = Dynacron(
        settings, adapters=sqlite_adapters(database, clock, execution_retention=RETENTION)
    )
    mine = {
        who: call(system, "POST", "/tasks", {"rate": "1 hour", "handler_url": HOOK}, principal=who)[
            1
        ]["task_id"]
        for who in (ALICE, BOB)
    }

    def read(number: int) -> tuple[str, int, Any]:
        who = (ALICE, BOB)[number % 2]
        path = "/tasks" if number % 3 else f"/tasks/{mine[who]}"
        status, body = call(system, "GET", path, principal=who)
        return who, status, body

    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(read, range(160)))  # within each burst
    for who, status, body in answers:
        assert status == 200, (who, body)
        seen = {t["task_id"] for t in body["items"]} if "items" in body else {body["task_id"]}
        assert seen == {mine[who]}, (who, body, mine)
    database.close()


def test_two_systems_in_one_process_answer_concurrent_requests_each_as_itself(
    settings: Settings, clock: SettableClock, tmp_path: Path
) -> None:
    # Powertools keeps the request being handled on the resolver's class, so two
    # Dynacron instances in one process (each with a lock of its own) would still
    # hand each other their callers: the lock is the process's.
    settings = dataclasses.replace(settings, tenant_rate_burst=10_000)
    systems = []
    for name in ("one", "two"):
        database = Database(tmp_path / f"{name}.sqlite3")
        systems.append(
            (
                Dynacron(
                    settings,
                    adapters=sqlite_adapters(database, clock, execution_retention=RETENTION),
                ),
                database,
            )
        )
    mine = {
        who: call(system, "POST", "/tasks", {"rate": "1 hour", "handler_url": HOOK}, principal=who)[
            1
        ]["task_id"]
        for (system, _), who in zip(systems, (ALICE, BOB), strict=True)
    }

    def read(number: int) -> tuple[str, int, Any]:
        system, who = (systems[0][0], ALICE) if number % 2 else (systems[1][0], BOB)
        status, body = call(system, "GET", "/tasks", principal=who)
        return who, status, body

    # Threads switched every microsecond, so requests interleave anywhere
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        with ThreadPoolExecutor(max_workers=8) as pool:
            answers = list(pool.map(read, range(400)))
    finally:
        sys.setswitchinterval(switch)
    for who, status, body in answers:
        assert status == 200, (who, body)
        assert {t["task_id"] for t in body["items"]} == {mine[who]}, (who, body, mine)
    for _, database in systems:
        database.close()


def embedded_system(settings: Settings, clock: SettableClock, path: Path) -> Dynacron:
    settings = dataclasses.replace(settings, tenant_rate_burst=10_000)
    database = Database(path)
    return Dynacron(
        settings, adapters=sqlite_adapters(database, clock, execution_retention=RETENTION)
    )


def test_batches_and_reads_of_two_tenants_interleaved_each_answer_as_their_caller(
    settings: Settings, clock: SettableClock, tmp_path: Path
) -> None:
    # A batch create is checked and stored with the API's lock released, and other
    # requests are routed meanwhile: each must still be answered as its own caller,
    # and its tasks stored as that caller's.
    system = embedded_system(settings, clock, tmp_path / "dynacron.sqlite3")

    def send(number: int) -> tuple[str, str, int, Any]:
        who = (ALICE, BOB)[number % 2]
        if number % 3:
            tasks = [
                {"rate": "1 hour", "handler_url": HOOK, "name": f"{number}-{n}"} for n in (1, 2)
            ]
            status, body = call(system, "POST", "/tasks/batch", {"tasks": tasks}, principal=who)
            return who, "batch", status, body
        status, body = call(system, "GET", "/tasks", principal=who, limit=100)
        return who, "read", status, body

    # Threads switched every microsecond, so requests interleave anywhere
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        with ThreadPoolExecutor(max_workers=8) as pool:
            answers = list(pool.map(send, range(90)))
    finally:
        sys.setswitchinterval(switch)
    made: dict[str, set[str]] = {ALICE: set(), BOB: set()}
    for who, kind, status, body in answers:
        assert status == 200, (who, kind, body)
        if kind == "batch":
            assert [item["outcome"] for item in body["items"]] == ["created"] * 2, body
            made[who] |= {item["task"]["task_id"] for item in body["items"]}
    for who in (ALICE, BOB):
        listed: set[str] = set()
        token = None
        while True:
            page = {"limit": 100} | ({"next_token": token} if token else {})
            status, body = call(system, "GET", "/tasks", principal=who, **page)
            listed |= {t["task_id"] for t in body["items"]}
            if not (token := body.get("next_token")):
                break
        assert listed == made[who]
        assert len(listed) == 2 * 30


def test_a_batch_waiting_for_the_store_lets_other_requests_through(
    settings: Settings, clock: SettableClock, tmp_path: Path
) -> None:
    path = tmp_path / "dynacron.sqlite3"
    system = embedded_system(settings, clock, path)
    _, first = call(system, "POST", "/tasks", {"rate": "1 hour", "handler_url": HOOK})
    # Given another process's write transaction holding the database file
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    batch: list[tuple[int, Any]] = []
    tasks = [{"rate": "1 hour", "handler_url": HOOK}] * 2
    sending = threading.Thread(
        target=lambda: batch.append(call(system, "POST", "/tasks/batch", {"tasks": tasks}))
    )
    try:
        # When a batch create waits for it, outside the API's lock
        sending.start()
        assert wait_until(lambda: _running_outside_the_lock(sending), timeout=30)
        # Then a read is answered meanwhile
        read: list[tuple[int, Any]] = []
        reading = threading.Thread(target=lambda: read.append(call(system, "GET", "/tasks")))
        reading.start()
        reading.join(timeout=20)
        assert [status for status, _ in read] == [200]
        assert [t["task_id"] for t in read[0][1]["items"]] == [first["task_id"]]
        assert sending.is_alive()
    finally:
        holder.execute("ROLLBACK")
        holder.close()
        sending.join(timeout=30)
    # And the batch is stored once the file is free
    assert batch[0][0] == 200
    assert batch[0][1]["created"] == 2


def _running_outside_the_lock(thread: threading.Thread) -> bool:
    """Whether ``thread`` is within ``LambdaEvents.outside_api_lock`` now."""
    frame = sys._current_frames().get(thread.ident or -1)
    while frame is not None:
        if frame.f_code.co_name == "outside_api_lock":
            return True
        frame = frame.f_back
    return False


def test_sessions_of_one_role_are_one_tenant(system: Dynacron) -> None:
    _, task = call(system, "POST", "/tasks", {"rate": "1 hour", "handler_url": HOOK}, principal=BOB)
    other_session = BOB.replace("session-1", "session-2")
    assert call(system, "GET", f"/tasks/{task['task_id']}", principal=other_session)[0] == 200
    _, tenant = call(system, "GET", "/tenant", principal=other_session)
    assert tenant["tenant_id"] == "arn:aws:iam::000000000000:role/Billing"
    assert tenant["task_count"] == 1


def test_a_caller_without_identity_is_refused_unless_a_default_tenant_exists(
    system: Dynacron, aws: tuple[Any, Any]
) -> None:
    status, problem = call(system, "GET", "/tasks", principal=None)
    assert status == 401
    assert problem["title"] == "Unauthenticated"
    dynamodb, sqs = aws
    local = Dynacron(
        dataclasses.replace(system.settings, default_tenant="default"),
        dynamodb=dynamodb,
        sqs=sqs,
        clock=system.clock,
    )
    assert call(local, "GET", "/tasks", principal=None)[0] == 200


def test_api_keys_map_to_tenants_and_an_unknown_key_is_401(
    system: Dynacron, aws: tuple[Any, Any]
) -> None:
    dynamodb, sqs = aws
    keyed = Dynacron(
        dataclasses.replace(system.settings, api_keys=(("k-alice", "alice"), ("k-bob", "bob"))),
        dynamodb=dynamodb,
        sqs=sqs,
        clock=system.clock,
    )
    as_alice = {"x-api-key": "k-alice"}
    _, task = call(
        keyed,
        "POST",
        "/tasks",
        {"rate": "1 hour", "handler_url": HOOK},
        principal=None,
        headers=as_alice,
    )
    assert (
        call(keyed, "GET", f"/tasks/{task['task_id']}", principal=None, headers=as_alice)[0] == 200
    )
    assert (
        call(
            keyed,
            "GET",
            f"/tasks/{task['task_id']}",
            principal=None,
            headers={"x-api-key": "k-bob"},
        )[0]
        == 404
    )
    assert call(keyed, "GET", "/tasks", principal=None, headers={"x-api-key": "nope"})[0] == 401
    assert call(keyed, "GET", "/tasks", principal=None)[0] == 401


def test_signing_secrets_are_per_tenant_and_rotation_keeps_the_previous_one(
    system: Dynacron,
) -> None:
    _, alice = call(system, "GET", "/tenant")
    _, bob = call(system, "GET", "/tenant", principal=BOB)
    assert len(alice["signing_secrets"]) == 1
    assert alice["signing_secrets"] != bob["signing_secrets"]
    assert call(system, "GET", "/tenant")[1]["signing_secrets"] == alice["signing_secrets"]
    status, rotated = call(system, "POST", "/tenant/signing-secrets/rotate")
    assert status == 200
    assert rotated["signing_secrets"][1:] == alice["signing_secrets"]
    assert rotated["signing_secrets"][0] not in alice["signing_secrets"]
    assert call(system, "GET", "/tenant", principal=BOB)[1] == bob


def test_another_tenants_executions_and_dead_letters_are_invisible(
    pipeline: Pipeline, sink: Sink
) -> None:
    # Given an execution of Alice's that was dead-lettered (a 400 is never retried)
    sink.status = 400
    pipeline.register(at="2026-11-30T12:00:00Z", handler_url=f"{sink.url}/hook")
    pipeline.tick()
    pipeline.work(batches=1)
    (delivery,) = sink.snapshot()
    execution_id = delivery.body["execution_id"]
    token = delivery.headers["Dynacron-Callback-Token"]
    _, alices = call(pipeline.app, "GET", "/dead-letters")
    assert [e["execution_id"] for e in alices["items"]] == [execution_id]
    # When Bob uses its id (even with the right callback token), or any missing id
    missing = execution_id.split("_")[0][::-1] + "_" + execution_id.split("_")[1]
    for method, path, body in [
        ("GET", "/executions/{id}", None),
        ("POST", "/executions/{id}/heartbeat", None),
        ("POST", "/executions/{id}/complete", {"status": "SUCCEEDED"}),
        ("POST", "/dead-letters/{id}/redrive", None),
    ]:
        answers = [
            call(
                pipeline.app,
                method,
                path.format(id=target),
                body,
                principal=BOB,
                headers={"Dynacron-Callback-Token": token},
            )
            for target in (execution_id, missing)
        ]
        # Then both answers are the same 404
        assert [status for status, _ in answers] == [404, 404], path
        assert shape(answers[0][1], execution_id) == shape(answers[1][1], missing)
    assert call(pipeline.app, "GET", "/dead-letters", principal=BOB)[1]["items"] == []
    # And Alice's dead letter is still hers to redrive
    assert call(pipeline.app, "GET", f"/executions/{execution_id}")[1]["status"] == "FAILED"
    assert call(pipeline.app, "POST", f"/dead-letters/{execution_id}/redrive")[0] == 202


def test_runs_started_outside_the_tick_belong_to_the_tasks_tenant(system: Dynacron) -> None:
    # Given Alice triggers her task and backfills it (records written by the API,
    # before any worker has seen them)
    _, task = call(system, "POST", "/tasks", {"cron": "* * * * *", "handler_url": HOOK})
    status, triggered = call(system, "POST", f"/tasks/{task['task_id']}/trigger")
    assert status == 202
    window = {"from": "2026-11-30T11:00:00Z", "to": "2026-11-30T11:01:00Z"}
    status, backfill = call(system, "POST", f"/tasks/{task['task_id']}/backfill", window)
    assert status == 202
    ids = [triggered["execution_id"], *backfill["started"]]
    assert len(ids) == 3
    for execution_id in ids:
        # Then each is Alice's to read, and Bob's answer is the 404 of a missing id
        assert call(system, "GET", f"/executions/{execution_id}")[0] == 200
        assert call(system, "GET", f"/executions/{execution_id}", principal=BOB)[0] == 404


def test_a_task_cannot_run_after_another_tenants_task(system: Dynacron) -> None:
    # Given a task of Alice's
    _, alices = call(system, "POST", "/tasks", {"rate": "1 minute", "handler_url": HOOK})
    # When Bob registers, or patches, a task to run after it
    refused, problem = call(
        system, "POST", "/tasks", {"after": alices["task_id"], "handler_url": HOOK}, principal=BOB
    )
    _, bobs = call(system, "POST", "/tasks", {"rate": "1 hour", "handler_url": HOOK}, principal=BOB)
    patched, patch_problem = call(
        system, "PATCH", f"/tasks/{bobs['task_id']}", {"after": alices["task_id"]}, principal=BOB
    )
    # Then both are refused as if the task did not exist
    assert (refused, patched) == (422, 422)
    for answer in (problem, patch_problem):
        assert answer["errors"] == [
            {"field": "after", "message": f"no task {alices['task_id']!r} exists"}
        ]
    # And Alice's task is untouched: not even marked as having dependents
    assert call(system, "GET", f"/tasks/{alices['task_id']}")[1] == alices


def test_the_forecast_counts_only_the_callers_tasks(system: Dynacron) -> None:
    for _ in range(3):
        call(system, "POST", "/tasks", {"cron": "0 0 * * *", "handler_url": HOOK})
    call(system, "POST", "/tasks", {"cron": "0 0 * * *", "handler_url": HOOK}, principal=BOB)
    assert call(system, "GET", "/forecast")[1]["tasks"] == 3
    assert call(system, "GET", "/forecast", principal=BOB)[1]["tasks"] == 1
