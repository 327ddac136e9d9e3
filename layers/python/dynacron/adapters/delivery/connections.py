"""Where a delivery may connect, and the event loop its calls run on.

Every HTTP connection goes through ``PinnedResolver``: it resolves the host with
the injected resolver, refuses the connection unless every address is allowed by
the ``UrlPolicy``, and hands the connector exactly the addresses it checked. There
is no second lookup between the check and the connect, so DNS rebinding has no
window, and TLS still verifies the certificate against the host name (SNI): the
connector keeps the URL's host name beside each address. An address written in
the URL is never resolved: ``check_destination`` refuses it before the call.

A call's deadline is one ``asyncio.timeout`` around all of it, from the DNS
lookup to the last byte read, every redirect included (a handler that sends a
byte now and then cannot hold a call for ever). The calls of a process share one
event loop on a thread of its own (``DeliveryLoop``): a worker thread submits a
call and waits for its answer, so many calls are in flight at the cost of one
thread's sockets.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import socket
import threading
import weakref
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, ClassVar, TypeVar

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult

from dynacron.domain.clock import Clock
from dynacron.domain.errors import InvalidRequest
from dynacron.domain.tasks.urls import IpAddress, UrlPolicy

T = TypeVar("T")


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


# tenant -> the private ranges its handler URLs may reach (decision 0050).
PrivateNetworksOf = Callable[[str], tuple[str, ...]]


def policy_for_tenant(
    policy: UrlPolicy, private_networks_of: PrivateNetworksOf | None, tenant_id: str
) -> UrlPolicy:
    """``policy`` with the tenant's private ranges; ``policy`` itself when it has none."""
    if private_networks_of is None:
        return policy
    networks = private_networks_of(tenant_id)
    return replace(policy, private_networks=networks) if networks else policy


@dataclass(frozen=True)
class HandlerUrlCheck:
    """``ports.delivery.HandlerUrls``: ``check_handler_url`` under one policy and
    resolver, with the tenant's private ranges read afresh (``private_networks_of``)."""

    policy: UrlPolicy
    resolver: Resolver = system_resolver
    private_networks_of: PrivateNetworksOf | None = None

    def check(self, url: str, tenant_id: str) -> None:
        policy = policy_for_tenant(self.policy, self.private_networks_of, tenant_id)
        check_handler_url(policy, self.resolver, url)

    def with_private_networks(self, networks: tuple[str, ...]) -> HandlerUrlCheck:
        policy = replace(self.policy, private_networks=networks) if networks else self.policy
        return HandlerUrlCheck(policy, self.resolver)


# How long a worker keeps a tenant's private ranges: a grant withdrawn holds at
# most this long on a warm worker.
PRIVATE_NETWORKS_KEPT = timedelta(seconds=30)


class KeptPrivateNetworks:
    """``private_networks_of`` read once per tenant every ``kept`` (an empty answer
    too: most tenants have none, and a delivery should not pay a read for that)."""

    def __init__(
        self, read: PrivateNetworksOf, clock: Clock, kept: timedelta = PRIVATE_NETWORKS_KEPT
    ) -> None:
        self._read = read
        self._clock = clock
        self._kept = kept
        self._lock = threading.Lock()
        self._read_at: dict[str, tuple[datetime, tuple[str, ...]]] = {}

    def __call__(self, tenant_id: str) -> tuple[str, ...]:
        now = self._clock.now()
        with self._lock:
            kept = self._read_at.get(tenant_id)
        if kept is not None and now - kept[0] < self._kept:
            return kept[1]
        networks = self._read(tenant_id)
        with self._lock:
            self._read_at[tenant_id] = (now, networks)
        return networks


@functools.lru_cache(maxsize=4096)
def check_destination(policy: UrlPolicy, url: str) -> None:
    """Before each hop of a call: the URL's form, and its host unless it is a name
    (a name is checked where it is resolved, by ``PinnedResolver``).

    A check that passed is remembered (the policy and the URL decide it alone, and
    both are immutable): a task's every delivery does not parse its URL again. One
    that raised is not, and raises again."""
    host, _ = policy.check_url(url)
    policy.check_host(host.strip("[]"))


class PinnedResolver(AbstractResolver):
    """Resolves only to checked addresses: every address of the host must be allowed.

    The injected resolver is blocking (the system's, or a test's), so it runs on a
    thread of its own per lookup: a tenant controls its handler's DNS, and a lookup
    can take as long as the system resolver's retries. When the call's deadline
    comes first the thread is left to finish on its own (it cannot be stopped).
    """

    def __init__(self, policy: UrlPolicy, resolver: Resolver) -> None:
        self._policy = policy
        self._resolver = resolver

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[list[IpAddress]] = loop.create_future()

        def look_up() -> None:
            try:
                addresses = allowed_addresses(self._policy, self._resolver, host, port)
            except BaseException as error:
                loop.call_soon_threadsafe(_settle, answer, None, error)
            else:
                loop.call_soon_threadsafe(_settle, answer, addresses, None)

        threading.Thread(target=look_up, name=f"resolve-{host}", daemon=True).start()
        return [
            ResolveResult(
                hostname=host,
                host=str(address),
                port=port,
                family=socket.AF_INET6 if address.version == 6 else socket.AF_INET,
                proto=0,
                flags=socket.AI_NUMERICHOST,
            )
            for address in await answer
        ]

    async def close(self) -> None:
        return None


def _settle(
    answer: asyncio.Future[list[IpAddress]],
    addresses: list[IpAddress] | None,
    error: BaseException | None,
) -> None:
    if answer.done():
        return  # the call gave up waiting (its deadline came)
    if error is not None:
        answer.set_exception(error)
    else:
        answer.set_result(addresses or [])


class DeliveryLoop:
    """One event loop on a daemon thread of this process, started on first use.

    The sessions made on it are closed when their owner is collected, or when the
    process exits (aiohttp warns of every session left open)."""

    _lock = threading.Lock()
    _loop: asyncio.AbstractEventLoop | None = None
    _sessions: ClassVar[weakref.WeakSet[aiohttp.ClientSession]] = weakref.WeakSet()

    _closing: ClassVar[set[Future[None]]] = set()

    @classmethod
    def keep(cls, owner: object, session: aiohttp.ClientSession) -> None:
        """Close ``session`` when ``owner`` is collected, or at exit."""
        cls._sessions.add(session)
        weakref.finalize(owner, cls._close_soon, session)

    @classmethod
    def _close_soon(cls, session: aiohttp.ClientSession) -> None:
        # Not waited for: a collection may run on any thread, the loop's own too.
        if not session.closed:
            closing = cls.submit(session.close())
            cls._closing.add(closing)
            closing.add_done_callback(cls._closing.discard)

    @classmethod
    def _close_sessions(cls) -> None:
        for session in list(cls._sessions):
            if not session.closed:
                with contextlib.suppress(Exception):
                    cls.submit(session.close()).result(2)

    @classmethod
    def submit(cls, call: Coroutine[Any, Any, T]) -> Future[T]:
        """Run ``call`` on the loop; its answer comes in the returned future."""
        return asyncio.run_coroutine_threadsafe(call, cls._running())

    @classmethod
    def _running(cls) -> asyncio.AbstractEventLoop:
        with cls._lock:
            if cls._loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(
                    target=loop.run_forever, name="dynacron-delivery", daemon=True
                ).start()
                cls._loop = loop
                atexit.register(cls._close_sessions)
            return cls._loop


# Connections to handlers at once per process, and kept alive between calls.
MAX_CONNECTIONS = 100
