"""Test helpers: a loopback HTTP sink, free ports, subprocess services, API calls."""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from dynacron.domain.executions.execution import Dispatch
from dynacron.entry.composition import Dynacron
from dynacron.ports import DispatchQueue
from dynacron.ports.faults import Boundary
from dynacron.services.tick import Ticker

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Delivery:
    received_at: float
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    raw: bytes = b""  # the body as sent: what a signature covers


Answer = tuple[int, dict[str, str]]


@dataclass
class Sink:
    """A loopback HTTP server that records every POST it receives.

    It also plays an idempotent handler that dedupes on the ``Idempotency-Key``
    header the way a real one does, check-then-act: a key already applied is not
    applied again. Two deliveries of one key *at the same time* defeat such a
    check, and are counted as ``applied_twice``: dynacron must never cause one.
    ``answer`` decides each response (default: ``status``, no headers); ``hold``
    is how long each request takes, so that overlaps would show, and a set ``gate``
    holds each request until the test opens it. With
    ``max_concurrent`` it plays a service that allows that many requests at once
    and answers 429 (Retry-After: 1) beyond; ``peak_concurrent`` is the most seen.
    """

    status: int = 200
    answer: Callable[[Delivery], Answer] | None = None
    # Sent with every answer (a handler's JSON, say); none by default.
    body: bytes = b""
    hold: float = 0.0
    gate: threading.Event | None = None
    deliveries: list[Delivery] = field(default_factory=list)
    effects: dict[str, int] = field(default_factory=dict)
    applied_twice: int = 0
    max_concurrent: int | None = None
    peak_concurrent: int = 0
    refused: int = 0
    _concurrent: int = 0
    _in_flight: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_port}"

    def start(self) -> Sink:
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                body = json.loads(raw or b"{}")
                delivery = Delivery(time.time(), self.path, dict(self.headers.items()), body, raw)
                status, headers = sink._handle(delivery)
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                if sink.body:
                    self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(sink.body)))
                self.end_headers()
                self.wfile.write(sink.body)

            def log_message(self, *args: Any) -> None:
                pass

        class Server(ThreadingHTTPServer):
            request_queue_size = 256  # a burst of workers connecting at once

        self._server = Server(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        # A short poll interval: stop() waits for it, once per test.
        threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        ).start()
        return self

    def _handle(self, delivery: Delivery) -> Answer:
        key = delivery.headers.get("Idempotency-Key", "")
        with self._lock:
            self._concurrent += 1
            self.peak_concurrent = max(self.peak_concurrent, self._concurrent)
        try:
            return self._answer(key, delivery)
        finally:
            with self._lock:
                self._concurrent -= 1

    def _answer(self, key: str, delivery: Delivery) -> Answer:
        with self._lock:
            self.deliveries.append(delivery)
            if self.max_concurrent is not None and self._concurrent > self.max_concurrent:
                self.refused += 1
                return 429, {"Retry-After": "1"}
            status, headers = self.answer(delivery) if self.answer else (self.status, {})
            applies = 200 <= status < 300 and status != 202 and self.effects.get(key, 0) == 0
            if applies and key in self._in_flight:
                self.applied_twice += 1  # a concurrent duplicate slipped past the check
            if applies:
                self._in_flight.add(key)
        if self.hold:
            time.sleep(self.hold)
        if self.gate is not None:
            self.gate.wait(30)
        with self._lock:
            if applies:
                self.effects[key] = self.effects.get(key, 0) + 1
                self._in_flight.discard(key)
        return status, headers

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    @property
    def concurrent(self) -> int:
        """Requests being answered right now."""
        with self._lock:
            return self._concurrent

    def snapshot(self) -> list[Delivery]:
        with self._lock:
            return list(self.deliveries)

    def calls_by_key(self) -> dict[str, int]:
        """How many times each execution's handler was called."""
        with self._lock:
            counts: dict[str, int] = {}
            for delivery in self.deliveries:
                key = delivery.headers.get("Idempotency-Key", "")
                counts[key] = counts.get(key, 0) + 1
            return counts


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_until(predicate: Any, timeout: float, interval: float = 0.05) -> bool:
    """Poll ``predicate`` until it is true or ``timeout`` seconds have passed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())


class Service:
    """A subprocess that prints a line containing its URL once it is ready."""

    def __init__(self, args: list[str], ready_marker: str, env: dict[str, str] | None = None):
        self.process = subprocess.Popen(
            [sys.executable, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=ROOT,
            env={**os.environ, **(env or {})},
        )
        self.output: list[str] = []
        self.ready_line = self._await(ready_marker)
        threading.Thread(target=self._drain, daemon=True).start()

    def _await(self, marker: str, timeout: float = 60) -> str:
        assert self.process.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line and self.process.poll() is not None:
                break
            self.output.append(line)
            if marker in line:
                return line
        self.stop()
        raise RuntimeError(f"service did not start: {''.join(self.output)}")

    def _drain(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.output.append(line)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()


# One client for every call: creating an httpx client (and its TLS context) per
# request costs far more than the request itself.
_http = httpx.Client(timeout=10, trust_env=False)


def api_call(
    base_url: str, method: str, path: str, body: Any = None, **params: Any
) -> httpx.Response:
    return _http.request(
        method,
        f"{base_url}{path}",
        json=body,
        params={k: v for k, v in params.items() if v is not None},
    )


@dataclass
class FakeLambdaContext:
    """The parts of a Lambda context the tick loop reads, with a fixed time left."""

    aws_request_id: str
    remaining_millis: int = 30_000

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_millis


class RecordingQueue:
    """A system's own dispatch queue (either set), remembering what it accepted, in order."""

    def __init__(self, queue: DispatchQueue) -> None:
        self._queue = queue
        self.accepted: list[Dispatch] = []

    def send(self, dispatches: list[Dispatch]) -> list[Dispatch]:
        accepted = self._queue.send(dispatches)
        self.accepted += accepted
        return accepted

    def depth(self) -> int:
        return self._queue.depth()

    def send_later(self, dispatch: Dispatch, delay_seconds: float) -> None:
        self._queue.send_later(dispatch, delay_seconds)


def recording_ticker(system: Dynacron, **settings: Any) -> tuple[Ticker, RecordingQueue]:
    """The real tick over a recording queue; ``settings`` override the system's."""
    queue = RecordingQueue(system.queue)
    ticker = Ticker(
        tasks=system.tasks,
        executions=system.executions,
        queue=queue,
        cursors=system.cursors,
        settings=dataclasses.replace(system.settings, **settings).tick_settings,
        clock=system.clock,
    )
    return ticker, queue


class RaiseAt:
    """A fault that raises a plain exception (a bug stand-in) at a boundary, ``times`` times."""

    def __init__(self, boundary: Boundary, times: int) -> None:
        self._boundary = boundary
        self.left = times

    def reached(self, boundary: Boundary) -> None:
        if boundary is self._boundary and self.left > 0:
            self.left -= 1
            raise RuntimeError("a bug in the tick")
