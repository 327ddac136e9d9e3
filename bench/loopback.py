"""A minimal loopback HTTP handler for benchmarks, and a bare client to compare with.

The handler is an asyncio server on its own thread: HTTP/1.1 with keep-alive,
answers 200 with no body, and records when each POST arrived and what its JSON
body says (``execution_id``, ``scheduled_at``). asyncio turns Nagle's algorithm
off on its sockets; a ``http.server`` handler does not, and its delayed ACKs cap
any client near 180 requests a second here, so never measure against that.

``bare_posts`` is the baseline a scheduler's whole path is compared with: a
threaded httpx client posting the same bodies to the same handler, nothing else.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx


@dataclass(frozen=True)
class Arrival:
    received_at: float
    path: str
    body: dict[str, Any]


@dataclass
class LoopbackHandler:
    arrivals: list[Arrival] = field(default_factory=list)
    port: int = 0
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
