"""Hostile connections to local mode's gateway and to the console proxy (issue 23).

Both run on ``BoundedHTTPServer``. A length that is not one, a body over the
limit and ``Transfer-Encoding`` are answered before any body is read; a request
trickled in is cut at its deadline; idle connections hold no thread, time out,
and beyond the cap make room; hundreds of them leave the API answering.
"""

from __future__ import annotations

import http.client
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from dynacron.console.bounded_server import BoundedHTTPServer
from dynacron.console.proxy import SESSION_HEADER, ConsoleProxy, Upstream
from dynacron.local.gateway import MAX_BODY_BYTES, ApiGateway
from tests.support import answer, closed_by_server

LIMITS = {"threads": 4, "max_connections": 32, "idle_seconds": 0.5, "request_seconds": 1.0}


@dataclass
class Edge:
    """One server under test, and what reached the API behind it."""

    server: BoundedHTTPServer
    headers: dict[str, str]
    forwarded: list[dict[str, Any]] = field(default_factory=list)

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def head(self, method: str, path: str, **extra: str) -> bytes:
        lines = [f"{method} {path} HTTP/1.1", *(f"{k}: {v}" for k, v in self.headers.items())]
        lines += [f"{k.replace('_', '-')}: {v}" for k, v in extra.items()]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def connect(self) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.port), timeout=10)


def _serve(server: BoundedHTTPServer) -> None:
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
    ).start()


def _stop(server: BoundedHTTPServer) -> None:
    server.shutdown()
    server.server_close()


@pytest.fixture(params=["gateway", "proxy"])
def edge(request: pytest.FixtureRequest) -> Iterator[Edge]:
    forwarded: list[dict[str, Any]] = []

    def api(event: dict[str, Any], context: Any) -> dict[str, Any]:
        forwarded.append(event)
        return {"statusCode": 200, "headers": {"Content-Type": "application/json"}, "body": "{}"}

    if request.param == "gateway":
        gateway = ApiGateway(("127.0.0.1", 0), api, **LIMITS)
        _serve(gateway)
        port = gateway.server_address[1]
        yield Edge(gateway, {"Host": f"127.0.0.1:{port}"}, forwarded)
        _stop(gateway)
        return
    upstream = ApiGateway(("127.0.0.1", 0), api, threads=1)
    _serve(upstream)
    proxy = ConsoleProxy(
        Upstream.open(f"http://127.0.0.1:{upstream.server_address[1]}"), port=0, **LIMITS
    )
    _serve(proxy)
    yield Edge(proxy, {"Host": proxy.authority, SESSION_HEADER: proxy.session.secret}, forwarded)
    _stop(proxy)
    _stop(upstream)


@pytest.mark.parametrize("length", ["-1", "abc", "1e3", "0x10", "+5", "5, 6", "\u00b2"])
def test_a_length_that_is_not_one_is_a_400_before_any_body_is_read(edge: Edge, length: str) -> None:
    with edge.connect() as sock:
        # Sent with no body at all: a server reading one would wait, not answer
        sock.sendall(edge.head("POST", "/tasks", Content_Length=length))
        status, problem = answer(sock)
    assert status == 400
    assert problem["title"] == "Bad Content-Length"
    assert edge.forwarded == []


def test_a_body_over_the_limit_is_a_413_before_it_is_sent(edge: Edge) -> None:
    with edge.connect() as sock:
        sock.sendall(edge.head("POST", "/tasks", Content_Length=str(MAX_BODY_BYTES + 1)))
        status, problem = answer(sock)
    assert status == 413
    assert f"at most {MAX_BODY_BYTES}" in problem["detail"]
    assert edge.forwarded == []


def test_a_large_body_sent_anyway_gets_its_413_not_a_reset(edge: Edge) -> None:
    body = b"x" * (3 * MAX_BODY_BYTES)
    with edge.connect() as sock:
        sock.sendall(edge.head("POST", "/tasks", Content_Length=str(len(body))) + body)
        status, _ = answer(sock)
    assert status == 413
    assert edge.forwarded == []


def test_transfer_encoding_is_refused_with_411(edge: Edge) -> None:
    chunked = b"2\r\n{}\r\n0\r\n\r\n"
    with edge.connect() as sock:
        sock.sendall(edge.head("POST", "/tasks", Transfer_Encoding="chunked") + chunked)
        status, problem = answer(sock)
        # and the chunks are never read as a request of their own
        assert closed_by_server(sock)
    assert status == 411
    assert "Content-Length" in problem["detail"]
    assert edge.forwarded == []


def statuses(sock: socket.socket, count: int) -> list[int]:
    """The statuses of the next ``count`` answers on ``sock``, read from one buffer."""
    stream = sock.makefile("rb")
    found = []
    for _ in range(count):
        found.append(int(stream.readline().split()[1]))
        headers = http.client.parse_headers(stream)
        stream.read(int(headers["Content-Length"]))
    return found


def test_requests_on_one_connection_are_answered_in_turn(edge: Edge) -> None:
    with edge.connect() as sock:
        # Two at once (pipelined), then one more after a pause
        sock.sendall(edge.head("GET", "/tasks") * 2)
        first_two = statuses(sock, 2)
        time.sleep(0.1)
        sock.sendall(edge.head("GET", "/tasks"))
        third = statuses(sock, 1)
    assert first_two + third == [200, 200, 200]
    assert len(edge.forwarded) == 3


def test_an_idle_connection_is_closed(edge: Edge) -> None:
    with edge.connect() as never_asks, edge.connect() as asked_once:
        asked_once.sendall(edge.head("GET", "/tasks"))
        assert answer(asked_once)[0] == 200
        assert closed_by_server(never_asks)
        assert closed_by_server(asked_once)


def test_a_request_trickled_in_is_cut_off_at_its_deadline(edge: Edge) -> None:
    with edge.connect() as sock:
        sock.sendall(edge.head("GET", "/tasks")[:-2])  # the head, not yet ended
        cut = False
        for _ in range(100):  # one byte every 0.1 s: each read alone is quick
            try:
                sock.sendall(b"X")
            except (BrokenPipeError, ConnectionResetError):
                cut = True
                break
            time.sleep(0.1)
        assert cut or closed_by_server(sock, within=1.0)
    assert edge.forwarded == []


def test_idle_connections_hold_no_thread_and_the_api_still_answers(edge: Edge) -> None:
    threads_before = threading.active_count()
    # Given 200 connections that send nothing (more than the cap of 32)
    idle = [edge.connect() for _ in range(200)]
    try:
        # When a client asks
        with edge.connect() as sock:
            sock.sendall(edge.head("GET", "/tasks"))
            status, _ = answer(sock)
        # Then it is answered, by a pool no larger than its bound
        assert status == 200
        # (and, behind the proxy, the one thread of the API's own stand-in)
        assert threading.active_count() - threads_before <= LIMITS["threads"] + 1
        assert edge.server.open_connections <= LIMITS["max_connections"]
    finally:
        for sock in idle:
            sock.close()


def test_past_the_cap_a_new_connection_closes_the_longest_idle(edge: Edge) -> None:
    cap = LIMITS["max_connections"]
    edge.server.idle_seconds = 60  # none times out meanwhile
    idle = [edge.connect() for _ in range(cap)]
    try:
        with edge.connect() as sock:
            sock.sendall(edge.head("GET", "/tasks"))
            assert answer(sock)[0] == 200
        assert closed_by_server(idle[0])
        assert not closed_by_server(idle[-1], within=0.2)
    finally:
        for sock in idle:
            sock.close()
