"""HTTP delivery of one attempt: a signed POST to the task's handler URL, its
redirects followed by hand, its answer read into a ``DeliveryResult``; and
``HandlerDelivery``, which routes a task to HTTP or to its Python handler
(``python_delivery``).

Every connection goes through ``safe_connections``: only to addresses the URL
policy allows, and within one deadline for the whole call, every redirect included.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from http.cookiejar import Cookie, CookieJar
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpx

from dynacron.adapters.delivery.answers import failed_answer_error
from dynacron.adapters.delivery.connections import (
    PinnedTransport,
    Resolver,
    call_deadline,
    system_resolver,
    time_left,
)
from dynacron.adapters.delivery.python_handlers import PythonDelivery
from dynacron.adapters.messages import upstream_to_map
from dynacron.definitions.callbacks import CALLBACK_TOKEN_HEADER, callback_urls
from dynacron.domain.clock import Clock
from dynacron.domain.errors import InvalidRequest
from dynacron.domain.executions.execution import DeliveryResult, Dispatch
from dynacron.domain.executions.retry import AttemptFailure, failure_for_status
from dynacron.domain.executions.signing import SIGNATURE_HEADER, signature_header
from dynacron.domain.instants import format_instant
from dynacron.domain.tasks.task import Task
from dynacron.domain.tasks.urls import UrlPolicy
from dynacron.version import __version__

MAX_RESPONSE_BYTES = 64 * 1024
ATTEMPT_HEADER = "Dynacron-Attempt"
MAX_REDIRECTS = 3
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
# Longest a handler's Retry-After is honoured when no setting says otherwise.
DEFAULT_MAX_RETRY_AFTER_SECONDS = 3600


SecretsOf = Callable[[str], Sequence[str]]


class NoCookies(CookieJar):
    """A cookie jar that keeps nothing. One client delivers for every tenant: a
    cookie kept from one tenant's delivery (a session a host handed out) would go
    along with any other tenant's delivery to that host, and act as that session.
    A delivery stands on its signature alone."""

    def extract_cookies(self, response: Any, request: Any) -> None:
        return None

    def set_cookie(self, cookie: Cookie) -> None:
        return None

    def add_cookie_header(self, request: Any) -> None:
        return None


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
            cookies=NoCookies(),
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
                    timeout = httpx.Timeout(time_left(None, deadline, httpx.PoolTimeout))
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
            failed_answer_error(
                response.status_code,
                response.reason_phrase,
                response.headers.get("content-type", ""),
                excerpt,
            ),
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
