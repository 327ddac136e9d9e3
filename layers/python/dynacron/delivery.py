"""Delivery of one attempt to its handler: an HTTP POST, or a registered Python function.

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
deadline, and fails it once the deadline has passed. A Python handler runs in a
thread of its own, and the worker stops waiting for it at the same deadline.
"""

from __future__ import annotations

import contextvars
import functools
import json
import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpcore
import httpx

from dynacron.callbacks import CALLBACK_TOKEN_HEADER, callback_urls
from dynacron.domain.clock import Clock
from dynacron.domain.errors import InvalidRequest
from dynacron.domain.executions import DeliveryResult, Dispatch
from dynacron.domain.instants import format_instant
from dynacron.domain.retry import AttemptFailure, failure_for_status
from dynacron.domain.signing import SIGNATURE_HEADER, signature_header
from dynacron.domain.tasks import Task
from dynacron.domain.urls import IpAddress, UrlPolicy
from dynacron.handlers import ExecutionContext, HandlerRegistry, PermanentFailure
from dynacron.messages import upstream_to_map
from dynacron.version import __version__

MAX_RESPONSE_BYTES = 64 * 1024
ATTEMPT_HEADER = "Dynacron-Attempt"
logger = logging.getLogger("dynacron")
MAX_REDIRECTS = 3
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
# Longest a handler's Retry-After is honoured when no setting says otherwise.
DEFAULT_MAX_RETRY_AFTER_SECONDS = 3600
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


def _time_left(
    timeout: float | None, deadline: float | None, late: type[Exception]
) -> float | None:
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
        left = _time_left(timeout, _call_deadline.get(), httpcore.ReadTimeout)
        return self._inner.read(max_bytes, left)

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        deadline = _call_deadline.get()
        for start in range(0, len(buffer), WRITE_CHUNK_BYTES):
            left = _time_left(timeout, deadline, httpcore.WriteTimeout)
            self._inner.write(buffer[start : start + WRITE_CHUNK_BYTES], left)

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        left = _time_left(timeout, _call_deadline.get(), httpcore.ConnectTimeout)
        return DeadlineStream(self._inner.start_tls(ssl_context, server_hostname, left))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


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
        resolver = functools.partial(_resolve_by_deadline, self._resolver)
        address = allowed_addresses(self._policy, resolver, host, port)[0]
        left = _time_left(timeout, _call_deadline.get(), httpcore.ConnectTimeout)
        return DeadlineStream(
            self._inner.connect_tcp(str(address), port, left, local_address, socket_options)
        )

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
        # The token-authorised routes: a handler calls them with the token alone.
        body["callbacks"] = callback_urls(api_base_url, dispatch.execution_id)
    return json.dumps(body, separators=(",", ":")).encode()


class HttpDelivery:
    """POSTs an attempt as signed JSON.

    2xx is success, except 202 Accepted: the handler took the job and will call
    heartbeat/complete with the callback token sent in ``Dynacron-Callback-Token``.
    ``Idempotency-Key`` carries the execution id, the same on every attempt, and
    ``Dynacron-Signature`` an HMAC of the body under each of the tenant's secrets.

    The whole call, redirects included, ends within ``timeout_seconds``.

    Redirects are followed by hand (at most ``MAX_REDIRECTS``), each hop through the
    same pinned transport, and only to the same host unless ``follow_cross_host``.
    A hop to another host never carries the callback token or the signature: they
    are the tenant's, for the host the tenant named (a 202 from there cannot be
    called back, so it fails the attempt).

    ``Retry-After`` is honoured for at most the task's ``max_delay_seconds`` and
    ``max_retry_after_seconds``.
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
        max_retry_after_seconds: int = DEFAULT_MAX_RETRY_AFTER_SECONDS,
    ) -> None:
        self._policy = policy
        self._clock = clock
        self._api_base_url = api_base_url
        self._secrets_of = secrets_of
        self._follow_cross_host = follow_cross_host
        self._unix_time = unix_time
        self._timeout_seconds = timeout_seconds
        self._max_retry_after_seconds = max_retry_after_seconds
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
        left_home = False
        try:
            with call_deadline(self._timeout_seconds) as deadline:
                for _ in range(MAX_REDIRECTS + 1):
                    self._policy.check_url(url)
                    # Waiting for a pooled connection counts against the deadline too.
                    timeout = httpx.Timeout(_time_left(None, deadline, httpx.PoolTimeout))
                    with self._client.stream(
                        "POST", url, content=body, headers=headers, timeout=timeout
                    ) as response:
                        excerpt = _read_limited(response)
                    location = response.headers.get("location")
                    if response.status_code not in REDIRECT_STATUSES or not location:
                        break
                    url, same_host, refusal = self._redirect_target(url, location)
                    if refusal:
                        return DeliveryResult.failed(
                            AttemptFailure(refusal, retryable=False), response.status_code
                        )
                    if not same_host:
                        left_home = True
                        headers = _without_secrets(headers)
                else:
                    return DeliveryResult.failed(
                        AttemptFailure(f"more than {MAX_REDIRECTS} redirects", retryable=False)
                    )
        except InvalidRequest as refused:
            return DeliveryResult.failed(
                AttemptFailure(f"delivery refused: {refused.message}", retryable=False)
            )
        except httpx.TimeoutException:
            return DeliveryResult.failed(
                AttemptFailure(f"handler timed out (the call may take {self._timeout_seconds:g} s)")
            )
        except httpx.HTTPError as error:
            return DeliveryResult.failed(AttemptFailure(f"handler unreachable: {error}"))
        if response.status_code == 202 and left_home:
            return DeliveryResult.failed(
                AttemptFailure(
                    "handler answered 202 after a redirect to another host, which was not "
                    "given the callback token",
                    retryable=False,
                ),
                response.status_code,
            )
        if response.status_code == 202:
            return DeliveryResult.accepted()
        if response.is_success:
            return DeliveryResult.succeeded(response.status_code, excerpt)
        failure = failure_for_status(
            response.status_code,
            f"handler answered HTTP {response.status_code}: {excerpt[:500]}",
            response.headers.get("Retry-After"),
            self._clock.now(),
            min(self._max_retry_after_seconds, task.retry.max_delay_seconds),
        )
        return DeliveryResult.failed(failure, response.status_code)

    def _redirect_target(self, url: str, location: str) -> tuple[str, bool, str | None]:
        """Where a redirect leads, whether that is the same host, and why not, if not."""
        target = urljoin(url, location)
        before, after = urlsplit(url), urlsplit(target)
        same_host = (before.scheme, before.netloc) == (after.scheme, after.netloc)
        if same_host or self._follow_cross_host:
            return target, same_host, None
        return target, False, f"handler redirected to another host ({after.netloc}); not followed"

    def close(self) -> None:
        self._client.close()


def _without_secrets(headers: dict[str, str]) -> dict[str, str]:
    """The headers for another host than the task's: no callback token, no signature."""
    secret = {CALLBACK_TOKEN_HEADER.lower(), SIGNATURE_HEADER.lower()}
    return {name: value for name, value in headers.items() if name.lower() not in secret}


class PythonDelivery:
    """Calls a handler registered with ``@dynacron.handler`` in this process.

    The handler runs in a thread of its own, and the worker waits for it at most
    ``timeout_seconds``: then the attempt fails as timed out. Python cannot stop a
    thread, so a handler that overruns goes on in the background until it returns
    (its work may still happen: ``execution_id`` is the key that makes a later
    attempt's effect happen once). A worker process may hold several such threads;
    while one runs, this process does not call the handler again for the same
    execution (that attempt fails, to be retried), so it never runs twice at once
    here. Another process cannot know: the handler's own key must hold.
    """

    def __init__(self, registry: HandlerRegistry, timeout_seconds: float | None = None) -> None:
        self._registry = registry
        self._timeout_seconds = timeout_seconds
        self._overrunning: dict[str, _HandlerRun] = {}
        self._lock = threading.Lock()

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
        with self._lock:
            earlier = self._overrunning.get(dispatch.execution_id)
            if earlier is not None and not earlier.done.is_set():
                return DeliveryResult.failed(
                    AttemptFailure("the handler is still running from an earlier attempt")
                )
            self._overrunning.pop(dispatch.execution_id, None)
        run = _HandlerRun(function, context)
        thread = threading.Thread(
            target=contextvars.copy_context().run,
            args=(run,),
            name=f"handler-{dispatch.execution_id}",
            daemon=True,  # an overrunning handler must not keep the process alive
        )
        thread.start()
        if not run.done.wait(self._timeout_seconds):
            with self._lock:
                self._overrunning = {
                    key: other
                    for key, other in self._overrunning.items()
                    if not other.done.is_set()
                }
                self._overrunning[dispatch.execution_id] = run
            logger.warning(
                "python handler overran its timeout; left running in the background",
                extra={"execution_id": dispatch.execution_id, "handler": task.handler_name},
            )
            return DeliveryResult.failed(
                AttemptFailure(f"handler timed out after {self._timeout_seconds:g} s")
            )
        if isinstance(run.error, PermanentFailure):
            return DeliveryResult.failed(
                AttemptFailure(f"handler failed permanently: {run.error}", retryable=False)
            )
        if run.error is not None:
            error = run.error
            return DeliveryResult.failed(
                AttemptFailure(f"handler raised {type(error).__name__}: {error}")
            )
        returned = run.returned
        return DeliveryResult.succeeded(excerpt=None if returned is None else _as_text(returned))


class _HandlerRun:
    """One Python handler call, made in its own thread; ``done`` once it returned or raised."""

    def __init__(self, function: Callable[[ExecutionContext], object], context: ExecutionContext):
        self._function = function
        self._context = context
        self.done = threading.Event()
        self.returned: object = None
        self.error: Exception | None = None

    def __call__(self) -> None:
        try:
            self.returned = self._function(self._context)
        except PermanentFailure as error:
            self.error = error
        except Exception as error:
            logger.warning("python handler raised", exc_info=True)
            self.error = error
        finally:
            self.done.set()


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
