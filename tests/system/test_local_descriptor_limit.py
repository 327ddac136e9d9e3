"""`dynacron local` and `dynacron try-handler` under a 256-descriptor limit keep
answering while 400 idle connections are open (issue 23: with a thread and a
descriptor held by each, the API stopped answering)."""

from __future__ import annotations

import socket
import textwrap
from pathlib import Path

import httpx
import pytest

from tests.support import Service, free_port

pytestmark = pytest.mark.system

DESCRIPTOR_LIMIT = 256

LIMITED_LOCAL_MODE = textwrap.dedent(
    f"""
    import resource, sys
    resource.setrlimit(resource.RLIMIT_NOFILE, ({DESCRIPTOR_LIMIT}, {DESCRIPTOR_LIMIT}))
    from dynacron.cli.main import main
    sys.argv = ["dynacron", "local", *sys.argv[1:]]
    main()
    """
)


def test_four_hundred_idle_connections_leave_the_api_answering(tmp_path: Path) -> None:
    port = free_port()
    service = Service(
        ["-c", LIMITED_LOCAL_MODE, "--port", str(port), "--data-dir", str(tmp_path / "data")],
        "is running",
    )
    idle: list[socket.socket] = []
    try:
        # Given 400 connections that never send a byte, more than the process may hold
        for _ in range(400):
            try:
                idle.append(socket.create_connection(("127.0.0.1", port), timeout=5))
            except TimeoutError:
                break  # no longer accepted: the API's own call below says what that means
        # When a client calls the API
        with httpx.Client(trust_env=False, timeout=20) as client:
            answer = client.get(f"http://127.0.0.1:{port}/tasks")
        # Then it is answered
        assert answer.status_code == 200, answer.text
        assert answer.json()["items"] == []
    finally:
        for sock in idle:
            sock.close()
        service.stop()


LIMITED_TRY_HANDLER = LIMITED_LOCAL_MODE.replace('"local"', '"try-handler"')


def test_four_hundred_idle_connections_leave_try_handler_answering() -> None:
    """The same for `dynacron try-handler`, which ran on ThreadingHTTPServer: a
    thread per connection, never timed out."""
    port = free_port()
    service = Service(
        ["-c", LIMITED_TRY_HANDLER, "--port", str(port), "--secret", "whsec_x"], "listening on"
    )
    idle: list[socket.socket] = []
    try:
        for _ in range(400):
            try:
                idle.append(socket.create_connection(("127.0.0.1", port), timeout=5))
            except TimeoutError:
                break
        with httpx.Client(trust_env=False, timeout=20) as client:
            answer = client.get(f"http://127.0.0.1:{port}/")
        assert answer.status_code == 200, answer.text
        assert "try_handler" in answer.json()
    finally:
        for sock in idle:
            sock.close()
        service.stop()
