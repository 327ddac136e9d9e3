"""An HTTP/1.1 server whose connections cannot exhaust it: local mode's gateway,
the console proxy and ``dynacron try-handler`` run on it.

``http.server.ThreadingHTTPServer`` gives each connection a thread for as long as
it stays open and never times one out: 400 idle connections held 408 threads, and
at a 256-descriptor limit the API stopped answering (issue 23). Here:

- a connection waiting for a request holds no thread: one watcher thread selects
  over them all and hands a connection to a pool of at most ``threads`` threads
  when bytes arrive;
- a request must arrive whole, head and body, within ``request_seconds``, and each
  read or write of a socket gives up after ``io_seconds``;
- a connection idle for ``idle_seconds`` is closed, and at most ``max_connections``
  are open (half the process's descriptor limit, if lower): one more closes the
  longest idle one or, when every one is busy, is answered 503;
- a body is read only under a valid ``Content-Length`` within the handler's limit
  (``body_length``), so that a refusal is answered before any of it is read.
"""

from __future__ import annotations

import contextlib
import io
import queue
import re
import resource
import selectors
import socket
import threading
import time
from dataclasses import dataclass
from email.message import Message
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

# A refused body is read and dropped up to API Gateway's own limit, so that a
# client still sending reads the answer rather than a reset; beyond it, closed.
DISCARD_LIMIT_BYTES = 10 * 1024 * 1024
_DIGITS = re.compile(r"[0-9]+")
_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
    b"Retry-After: 1\r\nConnection: close\r\nContent-Length: 39\r\n\r\n"
    b"every connection is busy: retry shortly"
)


class BodyRefused(Exception):
    """A body the server will not read: ``status``, ``title`` and ``detail`` for a problem."""

    def __init__(self, status: int, title: str, detail: str) -> None:
        super().__init__(f"{status} {title}: {detail}")
        self.status = status
        self.title = title
        self.detail = detail


def body_length(headers: Message, limit: int) -> int:
    """The length of the body ``headers`` announce, or ``BodyRefused``.

    ``Transfer-Encoding`` (chunked) is 411: neither server reads it. A length that
    is not one plain decimal number (negative, ``abc``, ``²``, two different
    ones) is 400; one over ``limit`` is 413.
    """
    if headers.get_all("Transfer-Encoding"):
        raise BodyRefused(
            411,
            "Length required",
            "Transfer-Encoding is not read here: send the body with a Content-Length",
        )
    lengths = [value.strip() for value in headers.get_all("Content-Length") or []]
    if not lengths:
        return 0
    text = lengths[0]
    if len(set(lengths)) > 1 or not _DIGITS.fullmatch(text):
        shown = ", ".join(lengths)
        raise BodyRefused(400, "Bad Content-Length", f"{shown[:40]!r} is not a body length")
    if len(text) > 18 or int(text) > limit:
        raise BodyRefused(
            413,
            "Payload too large",
            f"the body is {text[:40]} bytes; at most {limit} are read",
        )
    return int(text)


@dataclass(eq=False)
class _Connection:
    sock: socket.socket
    address: Any
    handler: BoundedRequestHandler | None = None
    # Parked since (monotonic), while it waits for a request.
    since: float = 0.0
    # While a request is being read: the time by which it must have arrived.
    deadline: float | None = None
    # Cut off at its deadline: what was read of the request is not answered.
    cut: bool = False


class BoundedHTTPServer(HTTPServer):
    """See the module. Serve with ``serve_forever``; ``server_close`` ends every
    connection and thread."""

    request_queue_size = 128  # a page opens several connections at once

    def __init__(
        self,
        address: tuple[str, int],
        handler_class: type[BoundedRequestHandler],
        *,
        threads: int = 16,
        max_connections: int = 128,
        idle_seconds: float = 30.0,
        request_seconds: float = 30.0,
        io_seconds: float = 10.0,
    ) -> None:
        super().__init__(address, handler_class)
        self._handler_class = handler_class
        soft_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if soft_limit != resource.RLIM_INFINITY:
            max_connections = max(1, min(max_connections, soft_limit // 2))
        self.threads = threads
        self.max_connections = max_connections
        self.idle_seconds = idle_seconds
        self.request_seconds = request_seconds
        self.io_seconds = io_seconds
        self._lock = threading.Lock()
        self._arrivals: list[_Connection] = []
        self._busy: set[_Connection] = set()
        self._parked: dict[socket.socket, _Connection] = {}  # the longest idle first
        self._jobs: queue.SimpleQueue[_Connection | None] = queue.SimpleQueue()
        self._workers: list[threading.Thread] = []
        self._idle_workers = 0
        self._closing = False
        self._selector = selectors.DefaultSelector()
        self._wake_receiver, self._wake_sender = socket.socketpair()
        self._wake_receiver.setblocking(False)
        self._wake_sender.setblocking(False)
        self._selector.register(self._wake_receiver, selectors.EVENT_READ)
        self._watcher = threading.Thread(
            target=self._watch, name=f"{type(self).__name__}-watcher", daemon=True
        )
        self._watcher.start()

    @property
    def open_connections(self) -> int:
        with self._lock:
            return len(self._parked) + len(self._busy) + len(self._arrivals)

    def process_request(self, request: Any, client_address: Any) -> None:
        """Called by ``serve_forever`` for each accepted connection: the watcher
        takes it from here."""
        self._arrive(_Connection(request, client_address))

    def server_close(self) -> None:
        with self._lock:
            self._closing = True
        self._wake()
        self._watcher.join(timeout=5)
        if not self._watcher.is_alive():  # else it may still select on them
            self._wake_sender.close()
            self._wake_receiver.close()
        for _ in self._workers:
            self._jobs.put(None)
        super().server_close()

    def _arrive(self, connection: _Connection) -> None:
        with self._lock:
            self._arrivals.append(connection)
        self._wake()

    def _wake(self) -> None:
        # (Failing when the watcher has stopped, or has wake-ups pending already.)
        with contextlib.suppress(OSError):
            self._wake_sender.send(b"\0")

    # The watcher: the one thread that touches the selector and the parked connections.

    def _watch(self) -> None:
        while True:
            for key, _ in self._selector.select(self._next_timeout()):
                if key.fileobj is self._wake_receiver:
                    self._drain_wake_ups()
                else:
                    self._dispatch(key.data)
            with self._lock:
                arrivals, self._arrivals = self._arrivals, []
                closing = self._closing
            if closing:
                for connection in [*arrivals, *self._parked.values()]:
                    self._close(connection)
                self._parked.clear()
                self._selector.close()
                return
            now = time.monotonic()
            for connection in arrivals:
                self._admit(connection, now)
            for connection in list(self._parked.values()):
                if now - connection.since >= self.idle_seconds:
                    self._unpark(connection)
                    self._close(connection)
            with self._lock:
                stalled = [c for c in self._busy if c.deadline is not None and now > c.deadline]
            for connection in stalled:
                connection.deadline = None
                connection.cut = True
                # The worker's read returns at once, as if the client had closed.
                with contextlib.suppress(OSError):
                    connection.sock.shutdown(socket.SHUT_RDWR)

    def _next_timeout(self) -> float | None:
        """Until the next idle connection expires; at most a quarter of the request
        time while requests are read (their workers set deadlines as they go)."""
        waits = []
        if self._parked:
            oldest = next(iter(self._parked.values()))
            waits.append(oldest.since + self.idle_seconds - time.monotonic())
        with self._lock:
            if self._busy:
                waits.append(min(0.5, self.request_seconds / 4))
        return max(0.0, min(waits)) if waits else None

    def _drain_wake_ups(self) -> None:
        try:
            while self._wake_receiver.recv(4096):
                pass
        except BlockingIOError:
            pass

    def _admit(self, connection: _Connection, now: float) -> None:
        if connection.handler is None:  # new: within the cap, or it waits for nothing
            with self._lock:
                open_now = len(self._parked) + len(self._busy)
            if open_now >= self.max_connections:
                if self._parked:
                    longest_idle = next(iter(self._parked.values()))
                    self._unpark(longest_idle)
                    self._close(longest_idle)
                else:
                    self._refuse(connection)
                    return
        connection.since = now
        self._parked[connection.sock] = connection
        try:
            self._selector.register(connection.sock, selectors.EVENT_READ, connection)
        except (ValueError, OSError):  # closed meanwhile
            del self._parked[connection.sock]
            self._close(connection)

    def _unpark(self, connection: _Connection) -> None:
        del self._parked[connection.sock]
        self._selector.unregister(connection.sock)

    def _dispatch(self, connection: _Connection) -> None:
        self._unpark(connection)
        connection.deadline = time.monotonic() + self.request_seconds
        with self._lock:
            self._busy.add(connection)
            spawn = self._idle_workers == 0 and len(self._workers) < self.threads
            if spawn:
                worker = threading.Thread(
                    target=self._work,
                    name=f"{type(self).__name__}-{len(self._workers)}",
                    daemon=True,
                )
                self._workers.append(worker)
        if spawn:
            worker.start()
        self._jobs.put(connection)

    def _refuse(self, connection: _Connection) -> None:
        try:
            connection.sock.setblocking(False)
            connection.sock.send(_BUSY)
        except OSError:
            pass
        self._close(connection)

    # The workers.

    def _work(self) -> None:
        while True:
            with self._lock:
                self._idle_workers += 1
            connection = self._jobs.get()
            with self._lock:
                self._idle_workers -= 1
            if connection is None:
                return
            keep = self._serve(connection)
            with self._lock:
                self._busy.discard(connection)
                closing = self._closing
            if keep and not closing:
                self._arrive(connection)
            else:
                self._close(connection)

    def _serve(self, connection: _Connection) -> bool:
        """Answer the requests that have arrived; whether to keep the connection."""
        try:
            if connection.handler is None:
                connection.handler = self._handler_class(connection.sock, connection.address, self)
            handler = connection.handler
            handler.state = connection
            while True:
                if connection.deadline is None:
                    connection.deadline = time.monotonic() + self.request_seconds
                handler.close_connection = True
                handler.handle_one_request()
                connection.deadline = None
                if handler.close_connection:
                    return False
                if not handler.input_pending():
                    return True
        except OSError:
            return False  # the client went away, or was cut off
        except Exception:
            self.handle_error(connection.sock, connection.address)
            return False

    def _close(self, connection: _Connection) -> None:
        try:
            if connection.handler is not None:
                connection.handler.finish()
        except OSError:
            pass
        self.shutdown_request(connection.sock)


class BoundedRequestHandler(BaseHTTPRequestHandler):
    """A request handler of ``BoundedHTTPServer``: made once per connection, it
    answers one request per ``handle_one_request`` (the server calls it when bytes
    arrive). Read a body with ``read_body`` only."""

    server: BoundedHTTPServer
    state: _Connection
    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes: without TCP_NODELAY, Nagle's
    # algorithm and delayed ACKs stall every answer by tens of milliseconds.
    disable_nagle_algorithm = True

    def __init__(self, request: Any, client_address: Any, server: BoundedHTTPServer) -> None:
        # Unlike BaseRequestHandler's, answers nothing yet: the server drives it.
        self.request = request
        self.client_address = client_address
        self.server = server
        self.setup()

    def setup(self) -> None:
        self.connection_timeout = self.server.io_seconds
        super().setup()
        self.connection.settimeout(self.connection_timeout)

    def parse_request(self) -> bool:
        # A head cut off at the deadline ends as if complete: never answer it.
        if not super().parse_request():
            return False
        if self.state.cut:
            self.close_connection = True
            return False
        return True

    def read_body(self, limit: int) -> bytes:
        """The request's body (b"" for none), or ``BodyRefused`` before any of it is read."""
        length = body_length(self.headers, limit)
        body = self.rfile.read(length) if length else b""
        if len(body) < length:
            self.close_connection = True
            raise BodyRefused(400, "Incomplete body", f"{len(body)} of {length} bytes arrived")
        self.state.deadline = None  # read whole: what follows may take its time
        return body

    def discard_body(self) -> None:
        """After answering a refusal: read (up to ``DISCARD_LIMIT_BYTES``) and drop
        what the client still sends, then close: a client still sending would
        otherwise meet a reset, not the answer."""
        self.close_connection = True
        try:
            remaining = min(body_length(self.headers, DISCARD_LIMIT_BYTES), DISCARD_LIMIT_BYTES)
        except BodyRefused:
            return
        while remaining > 0 and (chunk := self.rfile.read(min(remaining, 65536))):
            remaining -= len(chunk)

    def input_pending(self) -> bool:
        """Whether another request's bytes are here already (pipelined), read or not."""
        assert isinstance(self.rfile, io.BufferedReader)
        self.connection.settimeout(0)
        try:
            return bool(self.rfile.peek(1))
        finally:
            self.connection.settimeout(self.connection_timeout)
