"""Local mode's gateway answers its own pages and clients, not another site's pages.

It listens on loopback with no credentials; a page of any site the user visits
can still send it requests (a POST with an untyped body needs no CORS preflight)
or reach it under a name of its own through DNS rebinding.
"""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from dynacron.local.gateway import ApiGateway


class Gateway:
    def __init__(self) -> None:
        self.forwarded: list[dict[str, Any]] = []
        self.server = ApiGateway(("127.0.0.1", 0), self._handle)
        self.port = self.server.server_address[1]

    def _handle(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        self.forwarded.append(event)
        return {"statusCode": 200, "headers": {"Content-Type": "application/json"}, "body": "{}"}

    def send(
        self, method: str, path: str, headers: dict[str, str], body: bytes = b""
    ) -> tuple[int, dict[str, Any] | None]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        connection.putrequest(method, path, skip_host=True)
        for name, value in headers.items():
            connection.putheader(name, value)
        connection.putheader("Content-Length", str(len(body)))
        connection.endheaders(body)
        response = connection.getresponse()
        payload = response.read()
        connection.close()
        is_json = "json" in (response.getheader("Content-Type") or "")
        return response.status, json.loads(payload) if is_json and payload else None


@pytest.fixture
def gateway() -> Iterator[Gateway]:
    gateway = Gateway()
    thread = threading.Thread(target=gateway.server.serve_forever, daemon=True)
    thread.start()
    yield gateway
    gateway.server.shutdown()
    gateway.server.server_close()


def own(gateway: Gateway, **headers: str) -> dict[str, str]:
    return {"Host": f"127.0.0.1:{gateway.port}", **headers}


@pytest.mark.parametrize(
    "host", ["attacker.test", "attacker.test:{port}", "127.0.0.1", "127.0.0.1:1", None]
)
def test_a_host_that_does_not_name_this_server_is_refused(
    gateway: Gateway, host: str | None
) -> None:
    headers = {} if host is None else {"Host": host.format(port=gateway.port)}
    for method, path in (("GET", "/tasks"), ("POST", "/tasks"), ("GET", "/console")):
        status, problem = gateway.send(method, path, headers, b"{}" if method == "POST" else b"")
        assert status == 403, (method, path)
        assert problem is not None
        assert "Host" in problem["detail"]
    assert gateway.forwarded == []


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "http://attacker.test"},
        {"Origin": "null"},
        {"Origin": "http://127.0.0.1:1"},
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},
    ],
)
def test_a_request_another_site_s_page_sent_never_reaches_the_api(
    gateway: Gateway, headers: dict[str, str]
) -> None:
    # An untyped POST body: a request a page may send with no preflight
    status, problem = gateway.send("POST", "/tasks", own(gateway, **headers), b'{"rate": "1 hour"}')
    assert status == 403
    assert problem is not None
    assert problem["title"] == "Forbidden"
    assert gateway.forwarded == []


@pytest.mark.parametrize(
    "headers",
    [
        {},  # curl, the SDK, a handler's callback
        {"Origin": "http://127.0.0.1:{port}", "Sec-Fetch-Site": "same-origin"},  # the console
        {"Sec-Fetch-Site": "none"},  # typed into the address bar
    ],
)
def test_this_server_s_own_pages_and_clients_that_are_not_browsers_pass(
    gateway: Gateway, headers: dict[str, str]
) -> None:
    sent = {name: value.format(port=gateway.port) for name, value in headers.items()}
    status, _ = gateway.send("POST", "/tasks", own(gateway, **sent), b"{}")
    assert status == 200
    assert len(gateway.forwarded) == 1


def test_localhost_names_this_server_too(gateway: Gateway) -> None:
    headers = {"Host": f"localhost:{gateway.port}", "Origin": f"http://localhost:{gateway.port}"}
    assert gateway.send("GET", "/tasks", headers)[0] == 200


def test_the_console_opens_from_a_link_on_another_site_but_its_api_calls_stay_its_own(
    gateway: Gateway,
) -> None:
    status, _ = gateway.send("GET", "/console", own(gateway, **{"Sec-Fetch-Site": "cross-site"}))
    assert status == 200
    assert gateway.forwarded == []
    refused, _ = gateway.send("POST", "/console", own(gateway, **{"Sec-Fetch-Site": "cross-site"}))
    assert refused == 403


def test_a_refused_request_s_body_is_read_so_its_sender_gets_the_answer(gateway: Gateway) -> None:
    # Closing on a client still sending resets the connection: no answer at all
    body = b"x" * (4 * 1024 * 1024)
    status, problem = gateway.send("POST", "/tasks", {"Host": "attacker.test"}, body)
    assert status == 403
    assert problem is not None
    assert gateway.forwarded == []
