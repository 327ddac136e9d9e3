"""HTTP delivery of one attempt: a signed POST to the task's handler URL, its
redirects followed by hand, its answer read into a ``DeliveryResult``; and
``HandlerDelivery``, which routes a task to HTTP or to its Python handler
(``python_delivery``).

Every connection goes through ``connections``: only to addresses the URL policy
allows, and within one deadline for the whole call, every redirect included. The
calls run on the process's delivery event loop (aiohttp): the caller's thread
waits for its answer, and many calls share the loop's thread and connections.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

import aiohttp

from dynacron.adapters.delivery.answers import failed_answer_error
from dynacron.adapters.delivery.connections import (
    MAX_CONNECTIONS,
    DeliveryLoop,
    PinnedResolver,
    PrivateNetworksOf,
    Resolver,
    check_destination,
    policy_for_tenant,
    system_resolver,
)
from dynacron.adapters.delivery.python_handlers import PythonDelivery
from dynacron.adapters.messages import upstream_to_map, upstreams_to_list
from dynacron.definitions.callbacks import CALLBACK_TOKEN_HEADER, callback_urls
from dynacron.domain.clock import Clock
from dynacron.domain.errors import InvalidRequest
from dynacron.domain.executions.execution import DeliveryResult, Dispatch
from dynacron.domain.executions.retry import AttemptFailure, failure_for_status
from dynacron.domain.executions.signing import SIGNATURE_HEADER, signature_header
from dynacron.domain.instants import format_instant
from dynacron.domain.tasks.task import Task
from dynacron.domain.tasks.urls import UrlPolicy
from dynacron.ports.delivery import Delivery
from dynacron.version import __version__

MAX_RESPONSE_BYTES = 64 * 1024
ATTEMPT_HEADER = "Dynacron-Attempt"
MAX_REDIRECTS = 3
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
# Longest a handler's Retry-After is honoured when no setting says otherwise.
DEFAULT_MAX_RETRY_AFTER_SECONDS = 3600
LOOP_MARGIN_SECONDS = 5.0


SecretsOf = Callable[[str], Sequence[str]]


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
        body["upstreams"] = upstreams_to_list(dispatch.upstream)
    if api_base_url:
        # The token-authorised routes: a handler calls them with the token alone.
        body["callbacks"] = callback_urls(api_base_url, dispatch.execution_id)
    return json.dumps(body, separators=(",", ":")).encode()


class PinnedSessions:
    """The sessions an adapter calls URLs through, one per URL policy: the shared
    policy, and one per distinct set of a tenant's private ranges (their connections
    pinned under that policy only). Each is made on the delivery loop on first use.

    A session connects only to checked addresses (``PinnedResolver``), looks each
    name up afresh for every new connection (nothing cached to rebind), takes no
    proxies from the environment and keeps no cookie jar: one session calls for every
    tenant, and a cookie kept from one tenant's call (a session a host handed out)
    would go along with any other tenant's call to that host, and act as that
    session. A call stands on its signature alone.

    ``raw_bodies``: answers as they come over the wire (``Accept-Encoding:
    identity``, nothing decompressed), for a caller that caps the bytes it reads.
    """

    def __init__(self, resolver: Resolver, *, raw_bodies: bool = False) -> None:
        self._resolver = resolver
        self._raw_bodies = raw_bodies
        self._sessions: dict[UrlPolicy, aiohttp.ClientSession] = {}

    def for_policy(self, policy: UrlPolicy) -> aiohttp.ClientSession:
        """The session whose connections ``policy`` pins; called on the delivery loop."""
        session = self._sessions.get(policy)
        if session is None:
            headers = {"User-Agent": f"dynacron/{__version__}"}
            if self._raw_bodies:
                headers["Accept-Encoding"] = "identity"
            connector = aiohttp.TCPConnector(
                resolver=PinnedResolver(policy, self._resolver),
                use_dns_cache=False,
                limit=MAX_CONNECTIONS,
            )
            session = aiohttp.ClientSession(
                connector=connector,
                cookie_jar=aiohttp.DummyCookieJar(),
                headers=headers,
                auto_decompress=not self._raw_bodies,
                timeout=aiohttp.ClientTimeout(total=None),
                trust_env=False,
            )
            DeliveryLoop.keep(self, session)
            self._sessions[policy] = session
        return session

    def close(self) -> None:
        """Closes every session made so far; a later call makes a new one."""
        for session in self._sessions.values():
            DeliveryLoop.submit(session.close()).result()
        self._sessions.clear()


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
        private_networks_of: PrivateNetworksOf | None = None,
    ) -> None:
        self._policy = policy
        self._private_networks_of = private_networks_of
        self._clock = clock
        self._api_base_url = api_base_url
        self._secrets_of = secrets_of
        self._follow_cross_host = follow_cross_host
        self._unix_time = unix_time
        self._timeout_seconds = timeout_seconds
        self._max_retry_after_seconds = max_retry_after_seconds
        # Bodies as they come over the wire: the response cap counts the bytes
        # received, so a small compressed answer cannot inflate into a large one
        # inside the worker.
        self._sessions = PinnedSessions(resolver, raw_bodies=True)

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
        try:
            policy = policy_for_tenant(self._policy, self._private_networks_of, task.tenant_id)
        except Exception as error:
            return DeliveryResult.failed(
                AttemptFailure(f"could not read the tenant's private networks: {error}")
            )
        body = request_body(task, dispatch, self._api_base_url)
        headers = {
            "Content-Type": "application/json",
            "Idempotency-Key": dispatch.execution_id,
            ATTEMPT_HEADER: str(dispatch.attempt),
            CALLBACK_TOKEN_HEADER: callback_token,
            SIGNATURE_HEADER: signature_header(secrets, int(self._unix_time()), body),
        }
        try:
            # The call ends by its deadline; the margin only guards against a stuck loop.
            call = DeliveryLoop.submit(self._call(policy, task.handler_url, body, headers))
            answer = call.result(self._timeout_seconds + LOOP_MARGIN_SECONDS)
        except InvalidRequest as refused:
            return DeliveryResult.failed(
                AttemptFailure(f"delivery refused: {refused.message}", retryable=False)
            )
        except TimeoutError:
            return DeliveryResult.failed(
                AttemptFailure(f"handler timed out (the call may take {self._timeout_seconds:g} s)")
            )
        except aiohttp.ClientError as error:
            return DeliveryResult.failed(AttemptFailure(f"handler unreachable: {error}"))
        if isinstance(answer, _Refusal):
            return DeliveryResult.failed(
                AttemptFailure(answer.reason, retryable=False), answer.status
            )
        status = answer.status
        if status == 202 and answer.left_home:
            return DeliveryResult.failed(
                AttemptFailure(
                    "handler answered 202 after a redirect to another host, which was not "
                    "given the callback token",
                    retryable=False,
                ),
                status,
            )
        if status == 202:
            return DeliveryResult.accepted()
        if 200 <= status < 300:
            return DeliveryResult.succeeded(status, answer.excerpt)
        failure = failure_for_status(
            status,
            failed_answer_error(status, answer.reason, answer.content_type, answer.excerpt),
            answer.retry_after,
            self._clock.now(),
            min(self._max_retry_after_seconds, task.retry.max_delay_seconds),
        )
        return DeliveryResult.failed(failure, status)

    async def _call(
        self, policy: UrlPolicy, url: str, body: bytes, headers: dict[str, str]
    ) -> _Answer | _Refusal:
        """The call on the delivery loop, redirects followed by hand, all of it within
        the deadline: the last answer, or why a redirect was refused."""
        left_home = False
        async with asyncio.timeout(self._timeout_seconds):
            for _ in range(MAX_REDIRECTS + 1):
                check_destination(policy, url)
                async with self._sessions.for_policy(policy).post(
                    url, data=body, headers=headers, allow_redirects=False
                ) as response:
                    answer = _Answer(
                        response.status,
                        response.reason or "",
                        response.headers.get("content-type", ""),
                        response.headers.get("Retry-After"),
                        await _read_limited(response),
                        left_home,
                    )
                    location = response.headers.get("location")
                if answer.status not in REDIRECT_STATUSES or not location:
                    return answer
                url, same_host, refusal = self._redirect_target(url, location)
                if refusal:
                    return _Refusal(refusal, answer.status)
                if not same_host:
                    left_home = True
                    headers = _without_secrets(headers)
        return _Refusal(f"more than {MAX_REDIRECTS} redirects")

    def _redirect_target(self, url: str, location: str) -> tuple[str, bool, str | None]:
        """Where a redirect leads, whether that is the same host, and why not, if not."""
        target = urljoin(url, location)
        before, after = urlsplit(url), urlsplit(target)
        same_host = (before.scheme, before.netloc) == (after.scheme, after.netloc)
        if same_host or self._follow_cross_host:
            return target, same_host, None
        return target, False, f"handler redirected to another host ({after.netloc}); not followed"

    def close(self) -> None:
        self._sessions.close()


def _without_secrets(headers: dict[str, str]) -> dict[str, str]:
    """The headers for another host than the task's: no callback token, no signature."""
    secret = {CALLBACK_TOKEN_HEADER.lower(), SIGNATURE_HEADER.lower()}
    return {name: value for name, value in headers.items() if name.lower() not in secret}


class HandlerDelivery:
    """Routes each task to its kind of handler: a URL, a Python handler, or an AWS
    target (``targets``; without one, this worker delivers no target)."""

    def __init__(
        self, http: HttpDelivery, python: PythonDelivery, targets: Delivery | None = None
    ) -> None:
        self._http = http
        self._python = python
        self._targets = targets

    def deliver(self, task: Task, dispatch: Dispatch, callback_token: str) -> DeliveryResult:
        if task.target is not None:
            if self._targets is None:
                return DeliveryResult.failed(
                    AttemptFailure("this worker calls no AWS targets", retryable=False)
                )
            return self._targets.deliver(task, dispatch, callback_token)
        route = self._python if task.handler_name is not None else self._http
        return route.deliver(task, dispatch, callback_token)


@dataclass(frozen=True)
class _Answer:
    """What a handler's answer says, read within the call's deadline."""

    status: int
    reason: str
    content_type: str
    retry_after: str | None
    excerpt: str
    left_home: bool


@dataclass(frozen=True)
class _Refusal:
    """A redirect not followed, and the status that asked for it."""

    reason: str
    status: int | None = None


# The excerpt quotes at most this much of a handler's Content-Encoding header.
ENCODING_SHOWN = 32


async def _read_limited(response: aiohttp.ClientResponse) -> str:
    """The body up to ``MAX_RESPONSE_BYTES`` received; a longer one is cut off and
    its connection closed rather than read to its end. A body sent encoded all the
    same (gzip, though asked for none) is not decoded: the excerpt says so."""
    received = bytearray()
    async for chunk in response.content.iter_any():
        received += chunk
        if len(received) >= MAX_RESPONSE_BYTES:
            response.close()
            break
    encoding = response.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        named = encoding if len(encoding) <= ENCODING_SHOWN else f"{encoding[:ENCODING_SHOWN]}..."
        return f"({len(received)} bytes of a {named}-encoded body, not decoded)"
    return bytes(received[:MAX_RESPONSE_BYTES]).decode("utf-8", errors="replace")
