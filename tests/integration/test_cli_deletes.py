"""``dynacron tasks delete`` and ``dynacron calendars delete`` (one shared helper,
``cli.connection.delete``) against the real API behind the local gateway."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from typer.testing import CliRunner

from dynacron.cli.main import app
from dynacron.entry.composition import Dynacron
from dynacron.local.gateway import ApiGateway
from tests.integration.api_client import ALICE, call
from tests.support import Sink


@pytest.fixture
def url(system: Dynacron) -> Iterator[str]:
    """The local HTTP gateway on loopback, in front of ``system``; every caller is alice."""

    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        event["requestContext"]["identity"]["userArn"] = ALICE
        return system.api(event, context)

    server = ApiGateway(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def cli(group: str, url: str, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, [group, "--url", url, *args])
    return result.exit_code, result.stdout, result.stderr


def a_task(system: Dynacron, sink: Sink, **fields: Any) -> str:
    status, task = call(
        system, "POST", "/tasks", {"rate": "1 hour", "handler_url": sink.url, **fields}
    )
    assert status == 201, task
    return str(task["task_id"])


def a_calendar(system: Dynacron, name: str) -> None:
    status, calendar = call(
        system, "PUT", f"/calendars/{name}", {"timezone": "UTC", "dates": [{"from": "2026-12-25"}]}
    )
    assert status == 200, calendar


def test_a_task_deleted_is_said_deleted_and_is_gone(system: Dynacron, sink: Sink, url: str) -> None:
    task_id = a_task(system, sink)
    assert cli("tasks", url, "delete", task_id) == (0, f"deleted {task_id}\n", "")
    assert call(system, "GET", f"/tasks/{task_id}")[0] == 404


def test_a_calendar_deleted_is_said_deleted_in_json_and_is_gone(system: Dynacron, url: str) -> None:
    a_calendar(system, "holidays")
    code, printed, _ = cli("calendars", url, "--json", "delete", "holidays")
    assert (code, json.loads(printed)) == (0, {"deleted": "holidays"})
    assert call(system, "GET", "/calendars/holidays")[0] == 404


def test_a_delete_the_api_refuses_says_why_and_not_deleted(
    system: Dynacron, sink: Sink, url: str
) -> None:
    # Given a calendar a task keeps to
    a_calendar(system, "holidays")
    a_task(system, sink, exclude_calendars=["holidays"])
    # When it is deleted, then the CLI fails with the API's reason, and prints no "deleted"
    code, printed, errors = cli("calendars", url, "delete", "holidays")
    assert (code, printed) == (1, "")
    assert errors.startswith("error: 409")
    assert call(system, "GET", "/calendars/holidays")[0] == 200
