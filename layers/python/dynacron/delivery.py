"""Delivery of one attempt to its handler: an HTTP POST, or a registered Python function.

Every HTTP connection goes through ``PinnedBackend``: it resolves the host with
the injected resolver, refuses the connection unless every address is allowed by
the ``UrlPolicy``, and connects to the address it checked. There is no second
lookup between the check and the connect, so DNS rebinding has no window, and
TLS still verifies the certificate against the host name (SNI), because httpcore
starts TLS with the URL's host after our backend returns the socket.
"""

from __future__ import annotations

import json
import logging
import socket
import time
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpcore
import httpx

from dynacron import __version__
from dynacron.domain.clock import Clock
from dynacron.domain.errors import InvalidRequest
from dynacron.domain.executions import DeliveryResult, Dispatch
from dynacron.domain.instants import format_instant
from dynacron.domain.retry import AttemptFailure, failure_for_status
from dynacron.domain.signing import SIGNATURE_HEADER, signature_header
from dynacron.domain.tasks import Task
from dynacron.domain.urls import IpAddress, UrlPolicy
from dynacron.handlers import ExecutionContext, HandlerRegistry, PermanentFailure
from dynacron.queue import upstream_to_map

MAX_RESPONSE_BYTES = 64 * 1024
CALLBACK_TOKEN_HEADER = "Dynacron-Callback-Token"
ATTEMPT_HEADER = "Dynacron-Attempt"
logger = logging.getLogger("dynacron")
MAX_REDIRECTS = 3
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})

# host, port -> the addresses it resolves to, as text. Injected so that tests
# never send a DNS query off the machine.
Resolver = Callable[[str, int], list[str]]
SecretsOf = Callable[[str], Sequence[str]]


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
        address = allowed_addresses(self._policy, self._resolver, host, port)[0]
        return self._inner.connect_tcp(str(address), port, timeout, local_address, socket_options)

    def connect_unix_socket(self, *args: Any, **kwargs: Any) -> httpcore.NetworkStream:
        raise DestinationRefused("handler_url", "unix sockets are never a destination")

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


# Connections to handlers at once per worker process: as many as local mode's
# worker threads could want (a deployed worker calls one handler at a time).
DELIVERY_LIMITS = httpx.Limits(max_connections=100, max_keepalive_connections=20)


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


__all__ = [
    "CALLBACK_TOKEN_HEADER",
    "DeliveryResult",
    "HandlerDelivery",
    "HttpDelivery",
    "PythonDelivery",
    "Resolver",
    "check_handler_url",
    "request_body",
    "system_resolver",
]


def request_body(task: Task, dispatch: Dispatch, api_base_url: str | None = None) -> bytes:
    body = {
        "task_id": task.task_id,
        "execution_id": dispatch.execution_id,
        "scheduled_at": format_instant(dispatch.scheduled_at),
        "attempt": dispatch.attempt,
        "payload": task.payload,
    }
    if dispatch.upstream is not None:
        body["upstream"] = upstream_to_map(dispatch.upstream)
    if api_base_url:
        base = f"{api_base_url.rstrip('/')}/executions/{dispatch.execution_id}"
        body["callbacks"] = {"heartbeat": f"{base}/heartbeat", "complete": f"{base}/complete"}
    return json.dumps(body, separators=(",", ":")).encode()


class HttpDelivery:
    """POSTs an attempt as signed JSON.

    2xx is success, except 202 Accepted: the handler took the job and will call
    heartbeat/complete with the callback token sent in ``Dynacron-Callback-Token``.
    ``Idempotency-Key`` carries the execution id, the same on every attempt, and
    ``Dynacron-Signature`` an HMAC of the body under each of the tenant's secrets.

    Redirects are followed by hand (at most ``MAX_REDIRECTS``), each hop through the
    same pinned transport, and only to the same host unless ``follow_cross_host``.
    """

    def __init__(
        self,
        policy: UrlPolicy,
        timeout_seconds: float,
        clock: Clock,
        api_base_url: str | None = None,
        *,
        secrets_of: SecretsOf,
        resolver: Resolver = system_resolver,
        follow_cross_host: bool = False,
        unix_time: Callable[[], float] = time.time,
    ) -> None:
        self._policy = policy
        self._clock = clock
        self._api_base_url = api_base_url
        self._secrets_of = secrets_of
        self._follow_cross_host = follow_cross_host
        self._unix_time = unix_time
        self._client = httpx.Client(
            timeout=timeout_seconds,
            follow_redirects=False,
            transport=PinnedTransport(policy, resolver),
            headers={"User-Agent": f"dynacron/{__version__}"},
        )

    def deliver(self, task: Task, dispatch: Dispatch, callback_token: str) -> DeliveryResult:
        assert task.handler_url is not None, "an HTTP delivery needs a handler_url"
        try:
            secrets = self._secrets_of(task.tenant_id)
        except Exception as error:
            # A store hiccup is this attempt's failure, retried like any other, not
            # an error escaping the handler call (which would hold its idempotency
            # record until it expires).
            return DeliveryResult.failed(
                AttemptFailure(f"could not read the tenant's signing secrets: {error}")
            )
        if not secrets:
            return DeliveryResult.failed(
                AttemptFailure("the task's tenant has no signing secret", retryable=False)
            )
        body = request_body(task, dispatch, self._api_base_url)
        headers = {
            "Content-Type": "application/json",
            "Idempotency-Key": dispatch.execution_id,
            ATTEMPT_HEADER: str(dispatch.attempt),
            CALLBACK_TOKEN_HEADER: callback_token,
            SIGNATURE_HEADER: signature_header(secrets, int(self._unix_time()), body),
        }
        url = task.handler_url
        try:
            for _ in range(MAX_REDIRECTS + 1):
                self._policy.check_url(url)
                with self._client.stream("POST", url, content=body, headers=headers) as response:
                    excerpt = _read_limited(response)
                location = response.headers.get("location")
                if response.status_code not in REDIRECT_STATUSES or not location:
                    break
                url, refusal = self._redirect_target(url, location)
                if refusal:
                    return DeliveryResult.failed(
                        AttemptFailure(refusal, retryable=False), response.status_code
                    )
            else:
                return DeliveryResult.failed(
                    AttemptFailure(f"more than {MAX_REDIRECTS} redirects", retryable=False)
                )
        except InvalidRequest as refused:
            return DeliveryResult.failed(
                AttemptFailure(f"delivery refused: {refused.message}", retryable=False)
            )
        except httpx.TimeoutException:
            return DeliveryResult.failed(AttemptFailure("handler timed out"))
        except httpx.HTTPError as error:
            return DeliveryResult.failed(AttemptFailure(f"handler unreachable: {error}"))
        if response.status_code == 202:
            return DeliveryResult.accepted()
        if response.is_success:
            return DeliveryResult.succeeded(response.status_code, excerpt)
        failure = failure_for_status(
            response.status_code,
            f"handler answered HTTP {response.status_code}: {excerpt[:500]}",
            response.headers.get("Retry-After"),
            self._clock.now(),
        )
        return DeliveryResult.failed(failure, response.status_code)

    def _redirect_target(self, url: str, location: str) -> tuple[str, str | None]:
        target = urljoin(url, location)
        before, after = urlsplit(url), urlsplit(target)
        same_host = (before.scheme, before.netloc) == (after.scheme, after.netloc)
        if same_host or self._follow_cross_host:
            return target, None
        return target, f"handler redirected to another host ({after.netloc}); not followed"

    def close(self) -> None:
        self._client.close()


class PythonDelivery:
    """Calls a handler registered with ``@dynacron.handler`` in this process."""

    def __init__(self, registry: HandlerRegistry) -> None:
        self._registry = registry

    def deliver(self, task: Task, dispatch: Dispatch, callback_token: str) -> DeliveryResult:
        assert task.handler_name is not None, "a Python delivery needs a handler name"
        function = self._registry.get(task.handler_name)
        if function is None:
            # Registered when the task was created, so this process lacks the module:
            # a deployment mistake that a later attempt (on a fixed worker) may outlive.
            return DeliveryResult.failed(
                AttemptFailure(f"no handler named {task.handler_name!r} in this worker")
            )
        context = ExecutionContext(
            execution_id=dispatch.execution_id,
            task_id=task.task_id,
            scheduled_at=dispatch.scheduled_at,
            attempt=dispatch.attempt,
            payload=task.payload,
            upstream=upstream_to_map(dispatch.upstream) if dispatch.upstream else None,
        )
        try:
            returned = function(context)
        except PermanentFailure as error:
            return DeliveryResult.failed(
                AttemptFailure(f"handler failed permanently: {error}", retryable=False)
            )
        except Exception as error:
            logger.warning("python handler raised", exc_info=True)
            return DeliveryResult.failed(
                AttemptFailure(f"handler raised {type(error).__name__}: {error}")
            )
        return DeliveryResult.succeeded(excerpt=None if returned is None else _as_text(returned))


def _as_text(returned: object) -> str:
    try:
        return json.dumps(returned, separators=(",", ":"), default=str)
    except (TypeError, ValueError):
        return repr(returned)


class HandlerDelivery:
    """Routes each task to its kind of handler."""

    def __init__(self, http: HttpDelivery, python: PythonDelivery) -> None:
        self._http = http
        self._python = python

    def deliver(self, task: Task, dispatch: Dispatch, callback_token: str) -> DeliveryResult:
        route = self._python if task.handler_name is not None else self._http
        return route.deliver(task, dispatch, callback_token)


def _read_limited(response: httpx.Response) -> str:
    received = bytearray()
    for chunk in response.iter_bytes():
        received += chunk
        if len(received) >= MAX_RESPONSE_BYTES:
            break
    return bytes(received[:MAX_RESPONSE_BYTES]).decode("utf-8", errors="replace")
