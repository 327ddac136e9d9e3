from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from dynacron.domain.clock import SettableClock
from dynacron.entry.composition import Dynacron
from tests.conftest import START
from tests.integration.api_client import call

HOOK = "http://127.0.0.1:9/hook"


def stored_items(system: Dynacron, aws: tuple[Any, Any]) -> list[dict[str, Any]]:
    dynamodb, _ = aws
    return dynamodb.scan(TableName=system.settings.tasks_table)["Items"]


def test_create_then_get(system: Dynacron) -> None:
    status, task = call(
        system,
        "POST",
        "/tasks",
        {
            "name": "report",
            "cron": "0 9 * * *",
            "handler_url": HOOK,
            "timezone": "Europe/Berlin",
            "payload": {"n": 1.5},
        },
    )
    assert status == 201
    assert task["status"] == "ACTIVE"
    assert task["next_run_at"] == "2026-12-01T08:00:00.000Z"  # 09:00 Berlin, winter
    assert task["schedule"] == {"kind": "cron", "expression": "0 9 * * *"}
    assert task["timezone"] == "Europe/Berlin"
    status, fetched = call(system, "GET", f"/tasks/{task['task_id']}")
    assert status == 200
    assert fetched == task
    assert fetched["payload"] == {"n": 1.5}


def test_rate_and_one_time_next_run(system: Dynacron) -> None:
    _, rate = call(system, "POST", "/tasks", {"rate": "30 seconds", "handler_url": HOOK})
    assert rate["next_run_at"] == "2026-11-30T12:00:30.000Z"
    _, once = call(
        system, "POST", "/tasks", {"at": "2026-11-30T13:00:00+01:00", "handler_url": HOOK}
    )
    assert once["next_run_at"] == "2026-11-30T12:00:00.000Z"


def test_missing_task_is_404_problem(system: Dynacron) -> None:
    status, problem = call(system, "GET", "/tasks/nope")
    assert status == 404
    assert problem["title"] == "Not found"
    assert "nope" in problem["detail"]
    assert call(system, "DELETE", "/tasks/nope")[0] == 404
    assert call(system, "GET", "/tasks/nope/executions")[0] == 404


def test_unknown_route_is_404_problem(system: Dynacron) -> None:
    status, problem = call(system, "GET", "/nothing-here")
    assert status == 404
    assert "GET /nothing-here" in problem["detail"]


def test_delete(system: Dynacron) -> None:
    _, task = call(system, "POST", "/tasks", {"rate": "1 minute", "handler_url": HOOK})
    assert call(system, "DELETE", f"/tasks/{task['task_id']}") == (204, None)
    assert call(system, "GET", f"/tasks/{task['task_id']}")[0] == 404


def test_list_paginates_over_every_task_once(system: Dynacron) -> None:
    created = {
        call(system, "POST", "/tasks", {"rate": "1 minute", "handler_url": HOOK})[1]["task_id"]
        for _ in range(7)
    }
    seen: list[str] = []
    token = None
    pages = 0
    while True:
        status, page = call(
            system, "GET", "/tasks", limit=3, **({"next_token": token} if token else {})
        )
        assert status == 200
        assert len(page["items"]) <= 3
        seen += [t["task_id"] for t in page["items"]]
        pages += 1
        token = page["next_token"]
        if not token:
            break
    assert sorted(seen) == sorted(created)
    assert pages >= 3


def test_bad_page_token_and_limit(system: Dynacron) -> None:
    status, problem = call(system, "GET", "/tasks", next_token="!!garbage!!")
    assert status == 422
    assert problem["errors"][0]["field"] == "next_token"
    status, problem = call(system, "GET", "/tasks", limit=0)
    assert status == 422
    assert problem["errors"][0]["field"] == "limit"


BAD_REQUESTS = [
    ({"cron": "* 25 * * *", "handler_url": HOOK}, 422, "cron", "field 2 (hour)"),
    ({"cron": "* * *", "handler_url": HOOK}, 422, "cron", "expected 5 fields"),
    (
        {"cron": "* * * * *", "timezone": "Mars/Base", "handler_url": HOOK},
        422,
        "timezone",
        "unknown time zone",
    ),
    ({"rate": "3 fortnights", "handler_url": HOOK}, 422, "rate", "not a rate"),
    (
        {"cron": "* * * * *", "rate": "1 minute", "handler_url": HOOK},
        422,
        "schedule",
        "exactly one",
    ),
    ({"handler_url": HOOK}, 422, "schedule", "exactly one"),
    ({"at": "2026-11-30T11:50:00Z", "handler_url": HOOK}, 422, "at", "in the past"),
    ({"at": "next tuesday", "handler_url": HOOK}, 422, "at", "ISO 8601"),
    (
        {"rate": "1 minute", "handler_url": HOOK, "colour": "red"},
        422,
        "colour",
        "not a known field",
    ),
    ({"rate": 60, "handler_url": HOOK}, 422, "rate", "must be a string"),
    ({"rate": "1 minute", "handler_url": HOOK, "payload": "text"}, 422, "payload", "JSON object"),
    ({"rate": "1 minute", "handler_url": HOOK, "payload": [1, 2]}, 422, "payload", "JSON object"),
    (
        {"rate": "1 minute", "handler_url": "ftp://127.0.0.1/x"},
        422,
        "handler_url",
        "http:// or https://",
    ),
    ({"rate": "1 minute", "handler_url": "http://10.0.0.1/x"}, 422, "handler_url", "not allowed"),
    ({"rate": "1 minute"}, 422, "handler", "exactly one of 'handler_url', 'handler' or 'target'"),
    (
        {"rate": "1 minute", "handler_url": HOOK, "handler": "x"},
        422,
        "handler",
        "exactly one of 'handler_url', 'handler' or 'target'",
    ),
    ({"rate": "1 minute", "handler": "nobody-registered-me"}, 422, "handler", "no Python handler"),
    (
        {"rate": "1 minute", "handler_url": HOOK, "retry": {"max_attempts": 0}},
        422,
        "retry.max_attempts",
        "between 1 and 100",
    ),
    (
        {
            "rate": "1 minute",
            "handler_url": HOOK,
            "retry": {"base_delay_seconds": 60, "max_delay_seconds": 30},
        },
        422,
        "retry.max_delay_seconds",
        "between base_delay_seconds (60)",
    ),
    (
        {"rate": "1 minute", "handler_url": HOOK, "retry": {"tries": 3}},
        422,
        "retry.tries",
        "not a known field",
    ),
    (
        {"rate": "1 minute", "handler_url": HOOK, "payload": {"blob": "x" * 40_000}},
        413,
        "payload",
        "limit is 32768 bytes",
    ),
]


@pytest.mark.parametrize(("body", "status", "field", "needle"), BAD_REQUESTS)
def test_bad_input_is_refused_clearly_and_stores_nothing(
    system: Dynacron,
    aws: tuple[Any, Any],
    body: dict[str, Any],
    status: int,
    field: str,
    needle: str,
) -> None:
    got, problem = call(system, "POST", "/tasks", body)
    assert got == status
    assert problem["status"] == status
    fields = {e["field"]: e["message"] for e in problem["errors"]}
    assert field in fields, problem
    assert needle in fields[field] or needle in problem["detail"]
    assert stored_items(system, aws) == []


def test_a_body_that_is_not_json(system: Dynacron, aws: tuple[Any, Any]) -> None:
    status, problem = call(system, "POST", "/tasks", raw="{not json")
    assert status == 400
    assert "not valid JSON" in problem["detail"]
    assert stored_items(system, aws) == []


def test_a_json_array_body(system: Dynacron, aws: tuple[Any, Any]) -> None:
    status, _problem = call(system, "POST", "/tasks", raw="[1, 2]")
    assert 400 <= status < 500
    assert stored_items(system, aws) == []


def test_a_form_body_is_refused_with_a_hint(system: Dynacron, aws: tuple[Any, Any]) -> None:
    status, problem = call(system, "POST", "/tasks", raw="rate=1", content_type="text/plain")
    assert status == 415
    assert "application/json" in problem["detail"]
    assert stored_items(system, aws) == []


def test_problem_responses_use_problem_json(system: Dynacron) -> None:
    from dynacron.local.gateway import LocalContext, proxy_event

    event = proxy_event("GET", "/tasks/missing", {}, b"", "127.0.0.1")
    response = system.api(event, LocalContext("t"))
    headers = {k.lower(): v for k, v in (response.get("headers") or {}).items()}
    multi = {k.lower(): v for k, v in (response.get("multiValueHeaders") or {}).items()}
    content_type = headers.get("content-type") or multi["content-type"][0]
    assert content_type == "application/problem+json"


def test_one_time_a_little_late_fires_at_once(system: Dynacron, clock: SettableClock) -> None:
    late = (START - timedelta(minutes=2)).isoformat()
    status, task = call(system, "POST", "/tasks", {"at": late, "handler_url": HOOK})
    assert status == 201
    assert task["next_run_at"] == "2026-11-30T11:58:00.000Z"


@pytest.mark.parametrize(
    "content_type",
    [
        None,
        "text/plain; x=json",
        "application/jsonp",
        "multipart/form-data; boundary=json",
        "Application/JSON",
    ],
)
def test_a_body_not_declared_as_json_is_refused_before_anything_reads_it(
    system: Dynacron, aws: tuple[Any, Any], content_type: str | None
) -> None:
    # No type at all is what a page of another site can send without a preflight;
    # a type that merely mentions json is not JSON (it was a 500)
    body = json.dumps({"rate": "1 hour", "handler_url": "http://127.0.0.1:9/h"})
    status, problem = call(system, "POST", "/tasks", raw=body, content_type=content_type)
    assert status == 415
    assert "application/json" in problem["detail"]
    assert stored_items(system, aws) == []


def test_a_json_body_with_a_charset_is_read(system: Dynacron) -> None:
    body = json.dumps({"rate": "1 hour", "handler_url": "http://127.0.0.1:9/h"})
    content_type = "application/json; charset=utf-8"
    assert call(system, "POST", "/tasks", raw=body, content_type=content_type)[0] == 201


@pytest.mark.parametrize("path", ["/executions/%0A", "/tasks%0A", "/tasks/%0A", "/tenant%7F"])
def test_a_path_with_a_control_character_reaches_no_route(system: Dynacron, path: str) -> None:
    # The resolver's route patterns end with $, which also matches before a final
    # newline: /executions/%0A was answered as GET /executions
    status, problem = call(system, "GET", path)
    assert status == 404
    assert problem["title"] == "Not found"
