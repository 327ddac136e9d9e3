"""Schedule options over the API: validated, stored, returned, previewed; the CLI agrees."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from typer.testing import CliRunner

from dynacron.adapters.aws.task_items import task_from_item
from dynacron.cli.main import app as cli
from dynacron.domain.coordination.tenants import DEFAULT_TENANT
from dynacron.entry.composition import Dynacron
from tests.dst_cases import CASES, DstCase
from tests.integration.api_client import call

HOOK = "http://127.0.0.1:9/hook"


def create(system: Dynacron, **fields: Any) -> dict[str, Any]:
    status, task = call(system, "POST", "/tasks", {"handler_url": HOOK, **fields})
    assert status == 201, task
    return dict(task)


def stored_item(system: Dynacron, aws: tuple[Any, Any], task_id: str) -> dict[str, Any]:
    dynamodb, _ = aws
    item = dynamodb.get_item(
        TableName=system.settings.tasks_table, Key={"task_id": {"S": task_id}}
    )["Item"]
    return dict(item)


def cli_next(*args: str) -> list[str]:
    result = CliRunner().invoke(cli, ["next", *args])
    assert result.exit_code == 0, result.output
    return result.output.splitlines()


def test_every_option_is_stored_and_returned(system: Dynacron, aws: tuple[Any, Any]) -> None:
    task = create(
        system,
        cron="0 30 9 * * MON-FRI",
        timezone="Europe/Berlin",
        dst={"nonexistent": "skip", "ambiguous": "both"},
        start_at="2026-12-01T00:00:00",  # local: 2026-11-30T23:00Z
        end_at="2027-06-30T00:00:00Z",
        jitter_seconds=120,
        catchup="run_all",
        catchup_window_seconds=3600,
    )
    assert task["schedule"] == {"kind": "cron", "expression": "0 30 9 * * MON-FRI"}
    assert task["dst"] == {"nonexistent": "skip", "ambiguous": "both"}
    assert task["start_at"] == "2026-11-30T23:00:00.000Z"
    assert task["end_at"] == "2027-06-30T00:00:00.000Z"
    assert task["jitter_seconds"] == 120
    assert task["catchup"] == "run_all"
    assert task["catchup_window_seconds"] == 3600
    assert task["next_run_at"] == "2026-12-01T08:30:00.000Z"
    assert call(system, "GET", f"/tasks/{task['task_id']}") == (200, task)
    item = stored_item(system, aws, task["task_id"])
    schedule = item["schedule"]["M"]
    assert schedule["dst_nonexistent"] == {"S": "skip"}
    assert schedule["dst_ambiguous"] == {"S": "both"}
    assert schedule["seed"] == {"S": task["task_id"]}
    assert item["catchup"] == {"S": "run_all"}
    assert item["jitter_seconds"] == {"N": "120"}


def test_defaults_are_shown(system: Dynacron) -> None:
    task = create(system, rate="90 seconds", anchor="2026-11-30T11:00:15Z")
    assert task["anchor"] == "2026-11-30T11:00:15.000Z"
    assert task["next_run_at"] == "2026-11-30T12:00:15.000Z"  # 40 periods after the anchor
    assert task["dst"] is None
    assert task["catchup"] == "run_once"
    assert task["catchup_window_seconds"] is None
    assert task["jitter_seconds"] == 0
    cron = create(system, cron="@daily")
    assert cron["dst"] == {"nonexistent": "shift", "ambiguous": "first"}


def test_items_written_before_these_options_existed_still_load(
    system: Dynacron, aws: tuple[Any, Any]
) -> None:
    # Given an item exactly as the previous version stored it
    dynamodb, _ = aws
    dynamodb.put_item(
        TableName=system.settings.tasks_table,
        Item={
            "task_id": {"S": "old"},
            "name": {"S": "old"},
            "schedule": {
                "M": {
                    "kind": {"S": "cron"},
                    "expression": {"S": "0 9 * * *"},
                    "timezone": {"S": "Europe/Berlin"},
                }
            },
            "handler_url": {"S": HOOK},
            "payload": {"S": "{}"},
            "status": {"S": "ACTIVE"},
            "next_run_at": {"S": "2026-12-01T08:00:00.000Z"},
            "version": {"N": "1"},
            "created_at": {"S": "2026-11-01T00:00:00.000Z"},
            "updated_at": {"S": "2026-11-01T00:00:00.000Z"},
        },
    )
    # Then every new option reads as its default, the tenant too
    task = task_from_item(stored_item(system, aws, "old"))
    assert task.catchup.policy.value == "run_once"
    assert task.jitter_seconds == 0
    assert task.tenant_id == DEFAULT_TENANT
    # (a deployment that keeps a default tenant for callers without identity reads it)
    dynamodb, sqs = aws
    system = Dynacron(
        dataclasses.replace(system.settings, default_tenant=DEFAULT_TENANT),
        dynamodb=dynamodb,
        sqs=sqs,
        clock=system.clock,
    )
    assert call(system, "GET", "/tasks/old")[0] == 404  # not alice's
    status, view = call(system, "GET", "/tasks/old", principal=None)
    assert status == 200
    assert view["dst"] == {"nonexistent": "shift", "ambiguous": "first"}
    assert (view["start_at"], view["end_at"]) == (None, None)
    status, preview = call(system, "GET", "/tasks/old/next", count=2, principal=None)
    assert preview["occurrences"] == ["2026-12-01T08:00:00.000Z", "2026-12-02T08:00:00.000Z"]


def test_h_spreads_by_task_id_and_the_cli_agrees_given_the_id(system: Dynacron) -> None:
    tasks = [create(system, cron="H H * * *") for _ in range(8)]
    first_runs = {t["next_run_at"] for t in tasks}
    assert len(first_runs) > 1
    for task in tasks:
        _, preview = call(system, "GET", f"/tasks/{task['task_id']}/next", count=3)
        assert preview["occurrences"][0] == task["next_run_at"]
        assert (
            cli_next(
                "H H * * *",
                "--seed",
                task["task_id"],
                "--after",
                "2026-11-30T12:00:00Z",
                "--count",
                "3",
            )
            == preview["occurrences"]
        )


BAD_OPTIONS = [
    (
        {"cron": "* * * * *", "dst": {"nonexistent": "later"}},
        "dst.nonexistent",
        "'shift' or 'skip'",
    ),
    ({"cron": "* * * * *", "dst": {"ambiguous": "twice"}}, "dst.ambiguous", "'first', 'last'"),
    ({"cron": "* * * * *", "dst": {"when": "x"}}, "dst.when", "not a known field"),
    ({"rate": "1 hour", "dst": {"ambiguous": "both"}}, "dst", "a rate counts elapsed time"),
    ({"cron": "* * * * *", "anchor": "2026-11-30T12:00:00Z"}, "anchor", "'rate' schedules only"),
    ({"rate": "1 hour", "anchor": "soon"}, "anchor", "ISO 8601"),
    ({"rate": "1 hour", "jitter_seconds": 901}, "jitter_seconds", "less than or equal to 900"),
    ({"rate": "1 hour", "jitter_seconds": -1}, "jitter_seconds", "greater than or equal to 0"),
    ({"rate": "1 hour", "catchup": "sometimes"}, "catchup", "'skip', 'run_once' or 'run_all'"),
    ({"rate": "1 hour", "catchup_window_seconds": 60}, "catchup_window_seconds", "run_all"),
    (
        {"rate": "1 hour", "start_at": "2026-12-02T00:00:00Z", "end_at": "2026-12-01T00:00:00Z"},
        "end_at",
        "is before start_at",
    ),
    ({"cron": "0 9 * * *", "end_at": "2026-11-30T12:30:00Z"}, "end_at", "no occurrence"),
    (
        {"at": "2026-11-01T01:30:00", "timezone": "America/New_York", "dst": {"ambiguous": "both"}},
        "dst.ambiguous",
        "happens twice",
    ),
    (
        {
            "at": "2027-03-14T02:30:00",
            "timezone": "America/New_York",
            "dst": {"nonexistent": "skip"},
        },
        "at",
        "does not exist in America/New_York",
    ),
    ({"cron": "0 0 * * 5#6"}, "cron", "field 5 (day-of-week)"),
]


@pytest.mark.parametrize(("body", "field", "needle"), BAD_OPTIONS)
def test_bad_options_are_refused_naming_the_field(
    system: Dynacron, aws: tuple[Any, Any], body: dict[str, Any], field: str, needle: str
) -> None:
    status, problem = call(system, "POST", "/tasks", {"handler_url": HOOK, **body})
    assert status == 422, problem
    fields = {e["field"]: e["message"] for e in problem["errors"]}
    assert field in fields, problem
    assert needle in fields[field]
    dynamodb, _ = aws
    assert dynamodb.scan(TableName=system.settings.tasks_table)["Items"] == []


class TestPreview:
    def test_next_occurrences_of_a_task(self, system: Dynacron) -> None:
        task = create(system, cron="0 9 * * MON-FRI", timezone="America/New_York")
        status, preview = call(system, "GET", f"/tasks/{task['task_id']}/next", count=3)
        assert status == 200
        assert preview == {
            "task_id": task["task_id"],
            "timezone": "America/New_York",
            # Mon 30 Nov 2026 at 12:00Z is 07:00 EST: 09:00 EST is 14:00Z
            "occurrences": [
                "2026-11-30T14:00:00.000Z",
                "2026-12-01T14:00:00.000Z",
                "2026-12-02T14:00:00.000Z",
            ],
            "explanation": "At 09:00, on Monday, Tuesday, Wednesday, Thursday and Friday, "
            "on the wall clock of America/New_York. A time that daylight saving skips runs "
            "at the first instant after the gap; a time it repeats runs the first time only.",
            "dst_transitions": [],  # none before 8 March
            "skipped": [],  # no skip, no calendar
        }

    def test_after_without_an_offset_is_local_time(self, system: Dynacron) -> None:
        task = create(system, cron="0 9 * * *", timezone="Asia/Kathmandu")
        _, preview = call(
            system, "GET", f"/tasks/{task['task_id']}/next", count=1, after="2027-01-01T09:00:00"
        )
        assert preview["occurrences"] == ["2027-01-02T03:15:00.000Z"]

    def test_a_bounded_schedule_lists_fewer(self, system: Dynacron) -> None:
        task = create(system, rate="1 hour", end_at="2026-11-30T15:30:00Z")
        _, preview = call(system, "GET", f"/tasks/{task['task_id']}/next", count=10)
        assert preview["occurrences"] == [
            "2026-11-30T13:00:00.000Z",
            "2026-11-30T14:00:00.000Z",
            "2026-11-30T15:00:00.000Z",
        ]

    @pytest.mark.parametrize(
        ("query", "field"),
        [({"count": 0}, "count"), ({"count": 101}, "count"), ({"after": "later"}, "after")],
    )
    def test_bad_queries(self, system: Dynacron, query: dict[str, Any], field: str) -> None:
        task = create(system, rate="1 hour")
        status, problem = call(system, "GET", f"/tasks/{task['task_id']}/next", **query)
        assert status == 422
        assert problem["errors"][0]["field"] == field

    def test_unknown_task(self, system: Dynacron) -> None:
        assert call(system, "GET", "/tasks/nope/next")[0] == 404


def test_api_and_cli_agree_with_the_dst_table(system: Dynacron) -> None:
    # One system for the whole table: a fresh embedded AWS per case costs more
    # than the cases. Every disagreement is collected, named, and reported.
    disagreements = []
    for case in CASES:
        api, cli = api_and_cli_preview(system, case)
        if not (api == cli == case.expected):
            disagreements.append((case.name, case.expected, api, cli))
    assert disagreements == []


def api_and_cli_preview(system: Dynacron, case: DstCase) -> tuple[tuple[str, ...], ...]:
    task = create(system, cron=case.cron, timezone=case.zone, dst=case.dst)
    count = len(case.expected)
    status, preview = call(
        system, "GET", f"/tasks/{task['task_id']}/next", count=count, after=case.after
    )
    assert status == 200
    cli = cli_next(
        case.cron,
        "--tz",
        case.zone,
        "--after",
        case.after,
        "--count",
        str(count),
        "--nonexistent",
        case.nonexistent,
        "--ambiguous",
        case.ambiguous,
    )
    return tuple(preview["occurrences"]), tuple(cli)


class TestCommandLine:
    def test_explain_describes_then_lists(self) -> None:
        lines = cli_next(
            "30 2 * * *",
            "--tz",
            "America/New_York",
            "--after",
            "2026-03-07T12:00:00Z",
            "--count",
            "2",
            "--explain",
        )
        assert lines[0].startswith("At 02:30, every day, on the wall clock of America/New_York.")
        assert "skips runs at the first instant after the gap" in lines[0]
        assert lines[1:] == ["2026-03-08T07:00:00.000Z", "2026-03-09T06:30:00.000Z"]

    def test_rates_are_accepted(self) -> None:
        lines = cli_next("90 seconds", "--after", "2026-01-01T00:00:00Z", "--count", "2")
        assert lines == ["2026-01-01T00:01:30.000Z", "2026-01-01T00:03:00.000Z"]

    def test_a_bad_expression_points_at_the_field(self) -> None:
        result = CliRunner().invoke(cli, ["next", "0 25 * * *"])
        assert result.exit_code == 2
        assert "field 2 (hour) has invalid value '25'" in result.output
