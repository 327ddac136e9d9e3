"""The Python client and the CLI against local mode, and against an API stand-in for
the routes another branch adds (pause, resume, trigger, dead letters, redrive)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from typer.testing import CliRunner

import dynacron
from dynacron.cli import app
from dynacron.client import ApiError, ApiUnreachable
from dynacron.local.runtime import LocalOptions, LocalRuntime
from tests.support import Sink, free_port, wait_until

pytestmark = pytest.mark.system
runner = CliRunner()


@pytest.fixture(scope="module")
def local() -> Iterator[str]:
    runtime = LocalRuntime(
        LocalOptions(port=0, shards=2, workers=2, api_keys=(("k1", "team-a"), ("k2", "team-b")))
    ).start()
    yield runtime.api_url
    runtime.stop()


def cli(*args: str) -> Any:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout) if "--json" in args else result.stdout


def test_the_client_drives_local_mode_and_a_task_fires_signed(local: str, sink: Sink) -> None:
    with dynacron.Client(local, api_key="k1") as client:
        task = client.create_task(rate="1 second", handler_url=f"{sink.url}/hook", name="tick")
        assert client.get_task(task.task_id) == task
        assert [t.task_id for t in client.iter_tasks()] == [task.task_id]
        secret = client.tenant().signing_secrets[0]
        assert wait_until(lambda: sink.snapshot(), timeout=10)
        assert wait_until(lambda: client.list_executions(task.task_id).items, timeout=10)
        client.delete_task(task.task_id)
        with pytest.raises(ApiError) as missing:
            client.get_task(task.task_id)
        assert missing.value.status == 404
    from dynacron.domain.signing import verify

    delivery = sink.snapshot()[0]
    body = json.dumps(delivery.body, separators=(",", ":")).encode()
    header = delivery.headers["Dynacron-Signature"]
    assert verify(header, secret, body, now=int(header.split(",")[0][2:]))
    with dynacron.Client(local, api_key="k2") as other, pytest.raises(ApiError) as hidden:
        other.get_task(task.task_id)
    assert hidden.value.status == 404


def test_the_cli_creates_lists_gets_and_deletes_with_json_and_tables(local: str) -> None:
    target = ["--url", local, "--api-key", "k2"]
    created = cli(
        "tasks",
        *target,
        "--json",
        "create",
        "--cron",
        "0 9 * * MON-FRI",
        "--tz",
        "Europe/Berlin",
        "--handler-url",
        "http://127.0.0.1:9/h",
        "--name",
        "report",
    )
    assert created["schedule"] == {"kind": "cron", "expression": "0 9 * * MON-FRI"}
    listed = cli("tasks", *target, "--json", "list")
    assert [t["task_id"] for t in listed["items"]] == [created["task_id"]]
    table = cli("tasks", *target, "list")
    assert "report" in table
    assert "MON-FRI" in table
    assert cli("tasks", *target, "--json", "get", created["task_id"]) == created
    assert cli("executions", *target, "--json", "list", created["task_id"])["items"] == []
    assert "deleted" in cli("tasks", *target, "delete", created["task_id"])


def test_cli_errors_say_what_to_do(local: str) -> None:
    result = runner.invoke(app, ["tasks", "--url", local, "--api-key", "k1", "get", "nope"])
    assert result.exit_code == 1
    assert "404 Not found" in result.output
    assert "dynacron tasks list" in result.output
    result = runner.invoke(app, ["tasks", "--url", local, "--api-key", "bad", "list"])
    assert result.exit_code == 1
    assert "401" in result.output
    assert "--api-key" in result.output
    closed = f"http://127.0.0.1:{free_port()}"
    result = runner.invoke(app, ["tasks", "--url", closed, "list"])
    assert result.exit_code == 1
    assert "is dynacron local running? start it with `make run`" in result.output
    with pytest.raises(ApiUnreachable):
        dynacron.Client(closed).list_tasks()
    result = runner.invoke(
        app, ["tasks", "--url", local, "--api-key", "k1", "create", "--handler-url", "x"]
    )
    assert result.exit_code == 1
    assert "schedule: give exactly one of 'cron', 'rate' or 'at'" in result.output


TASK_VIEW = {
    "task_id": "t1",
    "name": "t1",
    "schedule": {"kind": "rate", "expression": "1 hour"},
    "timezone": "UTC",
    "dst": None,
    "anchor": None,
    "start_at": None,
    "end_at": None,
    "jitter_seconds": 0,
    "catchup": "run_once",
    "catchup_window_seconds": None,
    "handler_url": "http://127.0.0.1:9/h",
    "handler": None,
    "retry": {"max_attempts": 5, "base_delay_seconds": 5, "max_delay_seconds": 600},
    "payload": {},
    "status": "PAUSED",
    "next_run_at": None,
    "last_scheduled_at": None,
    "version": 2,
    "created_at": "2026-11-30T12:00:00.000Z",
    "updated_at": "2026-11-30T12:00:00.000Z",
}
EXECUTION_VIEW = {
    "execution_id": "t1_x",
    "task_id": "t1",
    "scheduled_at": "2026-11-30T12:00:00.000Z",
    "status": "RUNNING",
    "attempt": 1,
    "started_at": None,
    "completed_at": None,
    "error": None,
    "next_attempt_at": None,
    "lease_until": None,
    "dead_lettered_at": None,
}


@pytest.fixture
def api_stand_in() -> Iterator[tuple[str, list[tuple[str, str, Any]]]]:
    """Plays the routes issue 4 (part 2) and issue 3 add, recording what it was sent."""
    requests: list[tuple[str, str, Any]] = []
    answers = {
        "/tasks/t1/pause": TASK_VIEW,
        "/tasks/t1/resume": TASK_VIEW | {"status": "ACTIVE"},
        "/tasks/t1/trigger": EXECUTION_VIEW,
        "/dead-letters?limit=50": {"items": [EXECUTION_VIEW], "next_token": None},
        "/dead-letters/t1_x/redrive": EXECUTION_VIEW,
    }

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            requests.append((self.command, self.path, body))
            payload = json.dumps(answers[self.path]).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = _answer

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}", requests
    server.shutdown()


def test_pause_resume_trigger_and_dead_letters_call_the_expected_routes(
    api_stand_in: tuple[str, list[tuple[str, str, Any]]],
) -> None:
    url, requests = api_stand_in
    target = ["--url", url]
    assert cli("tasks", *target, "--json", "pause", "t1", "--note", "deploy")["status"] == "PAUSED"
    assert cli("tasks", *target, "--json", "resume", "t1")["status"] == "ACTIVE"
    assert cli("tasks", *target, "--json", "trigger", "t1")["execution_id"] == "t1_x"
    assert cli("dead-letters", *target, "--json", "list")["items"][0]["execution_id"] == "t1_x"
    assert "t1_x" in cli("dead-letters", *target, "redrive", "t1_x")
    assert requests == [
        ("POST", "/tasks/t1/pause", {"note": "deploy"}),
        ("POST", "/tasks/t1/resume", {}),
        ("POST", "/tasks/t1/trigger", {}),
        ("GET", "/dead-letters?limit=50", None),
        ("POST", "/dead-letters/t1_x/redrive", {}),
    ]
