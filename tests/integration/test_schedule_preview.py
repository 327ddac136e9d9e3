"""``POST /schedules/preview`` and the explained ``GET /tasks/{task_id}/next``: what
the console shows before a task is saved and on its page."""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

from dynacron.cli.main import app as cli
from dynacron.entry.composition import Dynacron
from tests.integration.api_client import call

HOOK = "http://127.0.0.1:9/hook"
# The clock of the `system` fixture: 2026-11-30T12:00:00Z.
SPRING_FORWARD = {
    "at": "2027-03-28T01:00:00.000Z",
    "offset_before": "+01:00",
    "offset_after": "+02:00",
    "next_occurrence": "2027-04-01T07:00:00.000Z",
}


def preview(system: Dynacron, **body: Any) -> tuple[int, Any]:
    return call(system, "POST", "/schedules/preview", body)


def test_the_occurrences_are_explained_with_the_dst_changes_between_them(
    system: Dynacron,
) -> None:
    status, answer = preview(system, cron="0 9 1 * *", timezone="Europe/Berlin", count=6)

    assert status == 200, answer
    assert answer["occurrences"] == [
        "2026-12-01T08:00:00.000Z",
        "2027-01-01T08:00:00.000Z",
        "2027-02-01T08:00:00.000Z",
        "2027-03-01T08:00:00.000Z",
        "2027-04-01T07:00:00.000Z",  # 09:00 on the summer offset
        "2027-05-01T07:00:00.000Z",
    ]
    assert answer["dst_transitions"] == [SPRING_FORWARD]
    assert answer["timezone"] == "Europe/Berlin"
    # The same words as `dynacron next --explain`
    explained = CliRunner().invoke(cli, ["next", "0 9 1 * *", "--tz", "Europe/Berlin", "--explain"])
    assert answer["explanation"] == explained.output.splitlines()[0]


def test_a_task_s_next_occurrences_are_explained_too(system: Dynacron) -> None:
    _, task = call(
        system,
        "POST",
        "/tasks",
        {"cron": "0 9 1 * *", "timezone": "Europe/Berlin", "handler_url": HOOK},
    )
    status, answer = call(system, "GET", f"/tasks/{task['task_id']}/next", count=6)

    assert status == 200
    assert answer["task_id"] == task["task_id"]
    assert answer["occurrences"][4] == "2027-04-01T07:00:00.000Z"
    assert answer["dst_transitions"] == [SPRING_FORWARD]
    assert answer["explanation"].startswith("At 09:00, on day 1 of the month, on the wall clock")


@pytest.mark.parametrize(
    ("body", "first", "explanation"),
    [
        ({"rate": "90 minutes"}, "2026-11-30T13:30:00.000Z", "Every 90 minutes of elapsed time"),
        (
            {"at": "2026-12-24T18:00:00", "timezone": "Europe/Berlin"},
            "2026-12-24T17:00:00.000Z",
            "Once, at",
        ),
        (
            {"fixed_delay": "10 minutes"},
            "2026-11-30T12:00:00.000Z",
            "10 minutes after the previous",
        ),
    ],
)
def test_every_kind_previews_from_its_first_run_as_registering_computes_it(
    system: Dynacron, body: dict[str, Any], first: str, explanation: str
) -> None:
    status, answer = preview(system, **body, count=2)
    assert status == 200, answer
    assert answer["occurrences"][0] == first
    assert answer["explanation"].startswith(explanation)
    _, task = call(system, "POST", "/tasks", {**body, "handler_url": HOOK})
    assert task["next_run_at"] == first


def test_a_dependent_schedule_is_explained_and_has_no_times(system: Dynacron) -> None:
    _, upstream = call(system, "POST", "/tasks", {"rate": "1 hour", "handler_url": HOOK})
    status, answer = preview(system, after=upstream["task_id"])
    assert status == 200
    assert answer["occurrences"] == []
    assert upstream["task_id"] in answer["explanation"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"cron": "0 25 * * *"}, "cron"),
        ({"cron": "* * * * *", "rate": "5 minutes"}, "schedule"),
        ({}, "schedule"),
        ({"cron": "0 9 * * *", "timezone": "Mars/Olympus"}, "timezone"),
        ({"rate": "1 hour", "dst": {"nonexistent": "skip"}}, "dst"),
        ({"cron": "0 9 * * *", "anchor": "2027-01-01T00:00:00Z"}, "anchor"),
        ({"at": "2020-01-01T00:00:00Z"}, "at"),
        ({"cron": "0 9 * * *", "start_at": "2027-01-02", "end_at": "2027-01-01"}, "end_at"),
        ({"after": "no-such-task"}, "after"),
        ({"cron": "0 9 * * *", "count": 101}, "count"),
        ({"cron": "0 9 * * *", "handler_url": HOOK}, "handler_url"),
    ],
)
def test_a_schedule_is_refused_as_post_tasks_refuses_it(
    system: Dynacron, body: dict[str, Any], field: str
) -> None:
    status, problem = preview(system, **body)
    assert status == 422, problem
    assert field in [error["field"] for error in problem["errors"]]


def test_a_preview_stores_nothing_and_needs_a_tenant(system: Dynacron) -> None:
    preview(system, cron="*/5 * * * *")
    assert call(system, "GET", "/tasks")[1]["items"] == []
    status, problem = call(
        system, "POST", "/schedules/preview", {"cron": "*/5 * * * *"}, principal=None
    )
    assert status == 401, problem


def test_the_document_describes_the_preview(system: Dynacron) -> None:
    _, document = call(system, "GET", "/openapi.json")
    operation = document["paths"]["/schedules/preview"]["post"]
    assert {"200", "422", "401"} <= set(operation["responses"])
    body = operation["requestBody"]["content"]["application/json"]["schema"]
    schema = document["components"]["schemas"][body["$ref"].rsplit("/", 1)[1]]
    assert {"cron", "rate", "at", "timezone", "count"} <= set(schema["properties"])
    assert "handler_url" not in schema["properties"]
