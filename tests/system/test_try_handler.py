"""`dynacron try-handler` as a newcomer runs it: a process of its own on a loopback
port, a local-mode task pointed at it, each delivery printed with its signature
checked; and what a handler that is no handler (`python3 -m http.server`) answers,
shown as words in the CLI."""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from rich.console import Console
from typer.testing import CliRunner

import dynacron
from dynacron.cli import connection as cli_output
from dynacron.cli.main import app
from dynacron.domain.executions.signing import signature_header
from dynacron.local.runtime import LocalOptions, LocalRuntime
from tests.support import Service, free_port, wait_until

pytestmark = pytest.mark.system
# Fires on 1 January only: each test triggers the runs it watches.
YEARLY = "0 0 1 1 *"


@pytest.fixture(scope="module")
def local() -> Iterator[str]:
    runtime = LocalRuntime(LocalOptions(port=0, shards=1, workers=2)).start()
    yield runtime.api_url
    runtime.stop()


def start_try_handler(*options: str) -> tuple[Service, str]:
    port = free_port()
    service = Service(
        ["-m", "dynacron.cli.main", "try-handler", "--port", str(port), *options], "listening on"
    )
    return service, f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def try_handler(local: str) -> Iterator[tuple[Service, str]]:
    service, url = start_try_handler("--api", local)
    yield service, url
    service.stop()


def printed(service: Service) -> str:
    return "".join(service.output)


def test_a_triggered_run_is_printed_with_its_signature_checked_and_succeeds(
    local: str, try_handler: tuple[Service, str]
) -> None:
    service, url = try_handler
    banner = "signatures  checked with your tenant's secret"
    assert wait_until(lambda: banner in printed(service), timeout=5), printed(service)
    with dynacron.Client(local) as client:
        # Given a task pointed at the try-handler
        task = client.create_task(
            cron=YEARLY, handler_url=f"{url}/hook", name="first", payload={"greeting": "hello"}
        )
        # When it is triggered
        execution_id = client.trigger_task(task.task_id).execution_id

        def ended() -> Any:
            found = client.get_execution(execution_id)
            return found if found.status == "SUCCEEDED" else None

        assert wait_until(ended, timeout=15), client.get_execution(execution_id)
        done = client.get_execution(execution_id)
    # Then the delivery is printed, signature checked, and answered 200
    assert wait_until(lambda: execution_id in printed(service), timeout=5)
    lines = printed(service).splitlines()
    first = next(i for i, line in enumerate(lines) if "POST /hook" in line)
    assert "signature ok  -> answered 200" in lines[first]
    assert lines[first + 1 : first + 6] == [
        f"  task        {task.task_id}",
        f"  execution   {execution_id}",
        f"  scheduled   {done.scheduled_at}",
        "  attempt     1",
        '  payload     {"greeting": "hello"}',
    ]
    assert done.result_excerpt == json.dumps({"received": execution_id})


def test_a_forged_signature_is_answered_401_and_printed_as_bad(
    try_handler: tuple[Service, str],
) -> None:
    service, url = try_handler
    body = b'{"task_id":"forged","execution_id":"forged_1","attempt":1,"payload":{}}'
    forged = signature_header(["whsec_not-the-tenants"], int(time.time()), body)
    answer = httpx.post(f"{url}/hook", content=body, headers={"Dynacron-Signature": forged})
    assert answer.status_code == 401
    assert "BAD SIGNATURE" in answer.json()["error"]
    unsigned = httpx.post(f"{url}/unsigned", content=body)
    assert unsigned.status_code == 401
    assert wait_until(lambda: "POST /unsigned" in printed(service), timeout=5)
    lines = printed(service).splitlines()
    assert any(
        "POST /hook  BAD SIGNATURE: no signing secret of the tenant verifies it  -> answered 401"
        in line
        for line in lines
    ), lines
    assert any(
        "POST /unsigned  BAD SIGNATURE: no Dynacron-Signature header  -> answered 401" in line
        for line in lines
    ), lines


def test_with_a_secret_given_it_needs_no_api_fails_as_asked_and_stops_on_ctrl_c() -> None:
    service, url = start_try_handler(
        "--secret", "whsec_mine", "--api", "http://127.0.0.1:9", "--fail-rate", "1"
    )
    try:
        banner = "checked with the 1 secret(s) given"
        assert wait_until(lambda: banner in printed(service), timeout=5), printed(service)
        body = b'{"task_id":"t","execution_id":"t_1","attempt":2,"payload":{"n":1}}'
        signed = signature_header(["whsec_mine"], int(time.time()), body)
        answer = httpx.post(f"{url}/hook", content=body, headers={"Dynacron-Signature": signed})
        assert answer.status_code == 500
        assert answer.json() == {"error": "try-handler answers 500 as asked (--fail-rate)"}
        # Ctrl-C: the socket closed, a last word, exit status 0.
        service.process.send_signal(signal.SIGINT)
        assert service.process.wait(timeout=10) == 0
        assert wait_until(lambda: "stopped" in printed(service), timeout=5)
        assert "signature ok  -> answered 500 (--fail-rate)" in printed(service)
        with pytest.raises(httpx.ConnectError):
            httpx.post(f"{url}/hook", content=body)
    finally:
        service.stop()


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.10", "example.com"])
def test_it_refuses_to_listen_beyond_the_loopback_interface(host: str) -> None:
    result = CliRunner().invoke(app, ["try-handler", "--host", host, "--port", "0"])
    assert result.exit_code == 2
    assert "no loopback address" in result.output


class NoHandler(BaseHTTPRequestHandler):
    """What `python3 -m http.server` is to a delivery: no do_POST, so its 501 page."""

    def do_GET(self) -> None:
        self.send_error(404)

    def log_message(self, *args: Any) -> None:
        return None


@pytest.fixture
def http_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), NoHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


def test_the_cli_shows_an_html_error_page_as_its_status_and_title(
    local: str, http_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli_output, "out", Console(highlight=False, width=300))
    with dynacron.Client(local) as client:
        task = client.create_task(cron=YEARLY, handler_url=f"{http_server}/hook", name="static")
        execution_id = client.trigger_task(task.task_id).execution_id
        assert wait_until(lambda: client.get_execution(execution_id).error, timeout=15)
        error = client.get_execution(execution_id).error
    expected = (
        "handler answered HTTP 501 Unsupported method ('POST'): "
        'an HTML page titled "Error response"'
    )
    assert error == expected
    result = CliRunner().invoke(app, ["executions", "--url", local, "list", task.task_id])
    assert result.exit_code == 0, result.output
    assert expected in result.stdout
    assert "<" not in result.stdout
