"""A minimal loopback HTTP handler for benchmarks, and a bare client to compare with.

The handler is an asyncio server on its own thread: HTTP/1.1 with keep-alive,
answers 200 with no body (at once, or ``answer_after`` seconds later), and
records when each POST arrived and what its JSON body says (``execution_id``,
``scheduled_at``). A POST to ``/sleep-ms/<n>/...`` is answered ``n`` milliseconds
later: a handler that takes that long. asyncio turns Nagle's algorithm off on its
sockets; a ``http.server`` handler does not, and its delayed ACKs cap any client
near 180 requests a second here, so never measure against that.

``bare_posts`` is the baseline a scheduler's whole path is compared with: a
threaded httpx client posting the same bodies to the same handler, nothing else.

``Sink`` is the other loopback handler: a ``http.server`` one that records every
delivery whole (headers, raw body) and plays an idempotent handler, for what is
counted (deliveries, effects, write units), never for what is timed. The tests use
it too: they import it from here, and nothing in ``bench`` imports ``tests``.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

SLEEP_PREFIX = "/sleep-ms/"


def sleeping_path(seconds: float) -> str:
    """The path at which the loopback handler answers ``seconds`` late."""
    return f"{SLEEP_PREFIX}{round(seconds * 1000)}/"


@dataclass(frozen=True)
class Arrival:
    received_at: float
    path: str
    body: dict[str, Any]


@dataclass
class LoopbackHandler:
    arrivals: list[Arrival] = field(default_factory=list)
    port: int = 0
    # Seconds each call takes before its answer (a slow handler); calls overlap freely.
    answer_after: float = 0.0
    _loop: asyncio.AbstractEventLoop | None = None
    _server: asyncio.Server | None = None
    _ready: threading.Event = field(default_factory=threading.Event)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> LoopbackHandler:
        threading.Thread(target=self._serve, name="loopback-handler", daemon=True).start()
        if not self._ready.wait(10):
            raise RuntimeError("the loopback handler did not start")
        return self

    def stop(self) -> None:
        """Stop accepting; open connections idle until the process ends (a daemon
        thread serves them), so nothing is torn down under a client."""
        if self._loop is not None and self._server is not None:
            self._loop.call_soon_threadsafe(self._server.close)

    def count(self, path: str) -> int:
        return sum(1 for a in list(self.arrivals) if a.path == path)

    def _serve(self) -> None:
        loop = self._loop = asyncio.new_event_loop()
        server = self._server = loop.run_until_complete(
            asyncio.start_server(self._connection, "127.0.0.1", 0)
        )
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        loop.run_forever()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                path = lines[0].split(" ")[1]
                length = 0
                for line in lines[1:]:
                    name, _, value = line.partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value)
                raw = await reader.readexactly(length) if length else b""
                received_at = time.time()
                try:
                    body = json.loads(raw) if raw else {}
                except ValueError:
                    body = {}
                self.arrivals.append(Arrival(received_at, path, body))
                if path.startswith(SLEEP_PREFIX):
                    await asyncio.sleep(int(path.split("/")[2]) / 1000)
                if self.answer_after:
                    await asyncio.sleep(self.answer_after)
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def bare_posts(url: str, bodies: list[bytes], threads: int) -> float:
    """Posts/s of a threaded httpx client sending ``bodies`` to ``url``, one
    keep-alive client per thread."""
    local = threading.local()

    def post(body: bytes) -> None:
        client = getattr(local, "client", None)
        if client is None:
            client = local.client = httpx.Client(trust_env=False, timeout=10)
        client.post(url, content=body, headers={"Content-Type": "application/json"})

    began = time.perf_counter()
    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(post, bodies))
    return len(bodies) / (time.perf_counter() - began)


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
