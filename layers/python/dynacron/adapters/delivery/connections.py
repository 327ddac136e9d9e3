"""Where a delivery may connect, and for how long.

Every HTTP connection goes through ``PinnedBackend``: it resolves the host with
the injected resolver, refuses the connection unless every address is allowed by
the ``UrlPolicy``, and connects to the address it checked. There is no second
lookup between the check and the connect, so DNS rebinding has no window, and
TLS still verifies the certificate against the host name (SNI), because httpcore
starts TLS with the URL's host after our backend returns the socket.

One deadline bounds a whole call, from the DNS lookup to the last byte read, every
redirect included: httpx's timeout bounds each socket operation, so a handler that
sends a byte now and then would hold a call for ever. ``DeadlineStream`` gives
every read and write on the connection at most the time left before the call's
deadline, and fails it once the deadline has passed.
"""

from __future__ import annotations

import contextvars
import functools
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpcore
import httpx

from dynacron.domain.errors import InvalidRequest
from dynacron.domain.tasks.urls import IpAddress, UrlPolicy

# A write on the connection goes in pieces this big, each within the deadline.
WRITE_CHUNK_BYTES = 16 * 1024


# The monotonic instant the call being made in this thread must end by.
_call_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "dynacron_call_deadline", default=None
)


@contextmanager
def call_deadline(seconds: float) -> Iterator[float]:
    """Every connection read and write in this block ends ``seconds`` from now at the
    latest; yields the deadline (``time.monotonic`` scale)."""
    deadline = time.monotonic() + seconds
    token = _call_deadline.set(deadline)
    try:
        yield deadline
    finally:
        _call_deadline.reset(token)


def time_left(timeout: float | None, deadline: float | None, late: type[Exception]) -> float | None:
    """``timeout`` shortened to what is left before ``deadline``; ``late`` once it passed."""
    if deadline is None:
        return timeout
    left = deadline - time.monotonic()
    if left <= 0:
        raise late("the call's deadline passed")
    return left if timeout is None else min(timeout, left)


def _resolve_by_deadline(resolver: Resolver, host: str, port: int) -> list[str]:
    """``resolver(host, port)``, given no longer than the current call's deadline.

    A tenant controls its handler's DNS, and a lookup can take as long as the
    system resolver's retries. The lookup runs in a thread that is left to finish
    on its own when the deadline comes first (it cannot be stopped).
    """
    deadline = _call_deadline.get()
    if deadline is None:
        return resolver(host, port)
    answer: list[list[str]] = []
    error: list[OSError] = []
    done = threading.Event()

    def look_up() -> None:
        try:
            answer.append(resolver(host, port))
        except OSError as failure:
            error.append(failure)
        finally:
            done.set()

    threading.Thread(target=look_up, name=f"resolve-{host}", daemon=True).start()
    if not done.wait(max(0.0, deadline - time.monotonic())):
        raise httpcore.ConnectTimeout(f"resolving {host!r} outlasted the call's deadline")
    if error:
        raise error[0]
    if not answer:
        raise OSError(f"resolving {host!r} failed")
    return answer[0]


class DeadlineStream(httpcore.NetworkStream):
    """A connection whose every operation ends by the current call's deadline.

    The deadline is read at each operation, not when the connection opened: a
    kept-alive connection serves calls with different deadlines.
    """

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        left = time_left(timeout, _call_deadline.get(), httpcore.ReadTimeout)
        return self._inner.read(max_bytes, left)

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        deadline = _call_deadline.get()
        for start in range(0, len(buffer), WRITE_CHUNK_BYTES):
            left = time_left(timeout, deadline, httpcore.WriteTimeout)
            self._inner.write(buffer[start : start + WRITE_CHUNK_BYTES], left)

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        left = time_left(timeout, _call_deadline.get(), httpcore.ConnectTimeout)
        return DeadlineStream(self._inner.start_tls(ssl_context, server_hostname, left))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


# host, port -> the addresses it resolves to, as text. Injected so that tests
# never send a DNS query off the machine.
Resolver = Callable[[str, int], list[str]]


def system_resolver(host: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


class DestinationRefused(InvalidRequest):
    """A handler URL whose host is, or resolves to, an address the policy refuses."""


def allowed_addresses(
    policy: UrlPolicy, resolver: Resolver, host: str, port: int
) -> list[IpAddress]:
    """The addresses ``host`` resolves to, if the policy allows every one of them.

    All, not any: a name with one public and one private address could be made
    to connect to the private one.
    """
    policy.check_host(host)
    literal = policy.literal_address(host)
    if literal is not None:
        return [literal]
    try:
        resolved = resolver(host, port)
    except OSError as error:
        raise DestinationRefused("handler_url", f"cannot resolve {host!r}: {error}") from None
    if not resolved:
        raise DestinationRefused("handler_url", f"{host!r} resolves to no address")
    addresses = []
    for text in resolved:
        address = policy.literal_address(text.split("%")[0])
        if address is None or not policy.allows(address):
            raise DestinationRefused(
                "handler_url", f"{host!r} resolves to {text}, which is not allowed"
            )
        addresses.append(address)
    return addresses


def check_handler_url(policy: UrlPolicy, resolver: Resolver, url: str) -> None:
    """Registration's check: the URL's form, then where its host resolves to now."""
    host, port = policy.check_url(url)
    allowed_addresses(policy, resolver, host, port)


@dataclass(frozen=True)
class HandlerUrlCheck:
    """``ports.delivery.HandlerUrls``: ``check_handler_url`` under one policy and resolver."""

    policy: UrlPolicy
    resolver: Resolver = system_resolver

    def check(self, url: str) -> None:
        check_handler_url(self.policy, self.resolver, url)


class PinnedBackend(httpcore.NetworkBackend):
    """Connects only to checked addresses, to exactly the address it checked."""

    def __init__(self, policy: UrlPolicy, resolver: Resolver) -> None:
        self._policy = policy
        self._resolver = resolver
        self._inner = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> httpcore.NetworkStream:
        host = host.strip("[]")
        resolver = functools.partial(_resolve_by_deadline, self._resolver)
        address = allowed_addresses(self._policy, resolver, host, port)[0]
        left = time_left(timeout, _call_deadline.get(), httpcore.ConnectTimeout)
        return DeadlineStream(
            self._inner.connect_tcp(str(address), port, left, local_address, socket_options)
        )

    def connect_unix_socket(self, *args: Any, **kwargs: Any) -> httpcore.NetworkStream:
        raise DestinationRefused("handler_url", "unix sockets are never a destination")

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


# Connections to handlers at once per worker process, each kept open between calls:
# a worker has 32 calls in flight (decision 0034), local mode's two 64, and a
# connection dropped after its call is a handshake again on the next.
DELIVERY_LIMITS = httpx.Limits(max_connections=100, max_keepalive_connections=100)


class PinnedTransport(httpx.HTTPTransport):
    def __init__(
        self, policy: UrlPolicy, resolver: Resolver, limits: httpx.Limits = DELIVERY_LIMITS
    ) -> None:
        super().__init__(trust_env=False, limits=limits)
        # httpx exposes no network backend option; its pool is rebuilt around ours,
        # with the TLS settings the transport just made and the same limits (the
        # pool's own default would allow 10 connections: 10 calls at once).
        ssl_context = self._pool._ssl_context
        self._pool = httpcore.ConnectionPool(
            ssl_context=ssl_context,
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=PinnedBackend(policy, resolver),
        )
