"""Hostile connections to ``dynacron try-handler`` (issue 23): it ran on
``ThreadingHTTPServer``, a thread per connection for as long as it stayed open
and no timeout at all. On the bounded server of the local gateway and the
console, idle connections hold no thread, time out, and beyond the cap make
room; a body is refused before it is read."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from dynacron.cli.try_handler import MAX_BODY_BYTES, Answers, Secrets, TryServer
from dynacron.domain.executions.signing import signature_header
from tests.support import answer, closed_by_server

LIMITS = {"threads": 4, "max_connections": 32, "idle_seconds": 0.5, "request_seconds": 1.0}
SECRET = "whsec_try-handler-connections"


@pytest.fixture
def server(capsys: pytest.CaptureFixture[str]) -> Iterator[TryServer]:
    server = TryServer(("127.0.0.1", 0), Secrets([SECRET], None), Answers(), **LIMITS)
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
    ).start()
    yield server
    server.shutdown()
    server.server_close()


def connect(server: TryServer) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.server_address[1]), timeout=10)


def delivery(execution_id: str = "t1_2026-12-05T18:00:00Z", **extra: str) -> bytes:
    body = json.dumps({"execution_id": execution_id, "task_id": "t1", "attempt": 1}).encode()
    headers = {
        "Host": "127.0.0.1",
        "Content-Type": "application/json",
        "Content-Length": str(len(body)),
        "Dynacron-Signature": signature_header([SECRET], int(time.time()), body),
        **extra,
    }
    head = "POST /hook HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return (head + "\r\n").encode("latin-1") + body


def test_a_delivery_is_answered_and_the_connection_kept_for_the_next(server: TryServer) -> None:
    with connect(server) as sock:
        sock.sendall(delivery("t1_a"))
        assert answer(sock) == (200, {"received": "t1_a"})
        sock.sendall(delivery("t1_b"))  # keep-alive, as the worker's HTTP client does
        assert answer(sock) == (200, {"received": "t1_b"})


def test_idle_connections_hold_no_thread_and_deliveries_are_still_answered(
    server: TryServer,
) -> None:
    threads_before = threading.active_count()
    # Given 200 connections that send nothing (more than the cap of 32)
    idle = [connect(server) for _ in range(200)]
    try:
        # When a delivery arrives
        with connect(server) as sock:
            sock.sendall(delivery())
            status, _ = answer(sock)
        # Then it is answered, by a pool no larger than its bound
        assert status == 200
        assert threading.active_count() - threads_before <= LIMITS["threads"]
        assert server.open_connections <= LIMITS["max_connections"]
    finally:
        for sock in idle:
            sock.close()


def test_an_idle_connection_is_closed(server: TryServer) -> None:
    with connect(server) as never_asks, connect(server) as asked_once:
        asked_once.sendall(delivery())
        assert answer(asked_once)[0] == 200
        assert closed_by_server(never_asks)
        assert closed_by_server(asked_once)


def test_a_delivery_trickled_in_is_cut_off_at_its_deadline(server: TryServer) -> None:
    with connect(server) as sock:
        sock.sendall(delivery()[:40])  # the head begun, never ended
        cut = False
        for _ in range(100):  # one byte every 0.1 s: each read alone is quick
            try:
                sock.sendall(b"X")
            except (BrokenPipeError, ConnectionResetError):
                cut = True
                break
            time.sleep(0.1)
        assert cut or closed_by_server(sock, within=1.0)


@pytest.mark.parametrize(
    ("extra", "status"),
    [
        ({"Content-Length": str(MAX_BODY_BYTES + 1)}, 413),
        ({"Content-Length": "-1"}, 400),
        ({"Transfer-Encoding": "chunked"}, 411),
    ],
)
def test_a_body_is_refused_before_it_is_read(
    server: TryServer, extra: dict[str, str], status: int
) -> None:
    head = "POST /hook HTTP/1.1\r\nHost: 127.0.0.1\r\n" + "".join(
        f"{k}: {v}\r\n" for k, v in extra.items()
    )
    with connect(server) as sock:
        sock.sendall((head + "\r\n").encode("latin-1"))  # no body sent at all
        found, document = answer(sock)
        assert found == status
        assert "error" in document
        assert closed_by_server(sock)
