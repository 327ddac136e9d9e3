"""Delivery of one attempt to its handler: an HTTP POST, or a registered Python function."""

from __future__ import annotations

import json
import logging
import socket

import httpx

from dynacron import __version__
from dynacron.domain.clock import Clock
from dynacron.domain.errors import InvalidRequest
from dynacron.domain.executions import DeliveryResult, Dispatch
from dynacron.domain.instants import format_instant
from dynacron.domain.retry import AttemptFailure, failure_for_status
from dynacron.domain.tasks import Task
from dynacron.domain.urls import UrlPolicy
from dynacron.handlers import ExecutionContext, HandlerRegistry, PermanentFailure
from dynacron.queue import upstream_to_map

MAX_RESPONSE_BYTES = 64 * 1024
CALLBACK_TOKEN_HEADER = "Dynacron-Callback-Token"
ATTEMPT_HEADER = "Dynacron-Attempt"
logger = logging.getLogger("dynacron")

__all__ = [
    "CALLBACK_TOKEN_HEADER",
    "DeliveryResult",
    "HandlerDelivery",
    "HttpDelivery",
    "PythonDelivery",
    "request_body",
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
    """POSTs an attempt as JSON.

    2xx is success, except 202 Accepted: the handler took the job and will call
    heartbeat/complete with the callback token sent in ``Dynacron-Callback-Token``.
    ``Idempotency-Key`` carries the execution id, the same on every attempt.

    The URL policy is enforced here as well as at registration, against the
    addresses the host resolves to now, since DNS can change in between.
    """

    def __init__(
        self,
        policy: UrlPolicy,
        timeout_seconds: float,
        clock: Clock,
        api_base_url: str | None = None,
    ) -> None:
        self._policy = policy
        self._clock = clock
        self._api_base_url = api_base_url
        self._client = httpx.Client(
            timeout=timeout_seconds,
            follow_redirects=False,
            trust_env=False,  # never route through an ambient proxy
            headers={"User-Agent": f"dynacron/{__version__}"},
        )

    def deliver(self, task: Task, dispatch: Dispatch, callback_token: str) -> DeliveryResult:
        assert task.handler_url is not None, "an HTTP delivery needs a handler_url"
        try:
            self._check_destination(task.handler_url)
        except InvalidRequest as refused:
            return DeliveryResult.failed(
                AttemptFailure(f"delivery refused: {refused.message}", retryable=False)
            )
        try:
            with self._client.stream(
                "POST",
                task.handler_url,
                content=request_body(task, dispatch, self._api_base_url),
                headers={
                    "Content-Type": "application/json",
                    "Idempotency-Key": dispatch.execution_id,
                    ATTEMPT_HEADER: str(dispatch.attempt),
                    CALLBACK_TOKEN_HEADER: callback_token,
                },
            ) as response:
                excerpt = _read_limited(response)
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

    def _check_destination(self, url: str) -> None:
        host, port = self._policy.check_url(url)
        self._policy.check_host(host)
        if self._policy.literal_address(host) is not None:
            return
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as error:
            raise InvalidRequest("handler_url", f"cannot resolve {host!r}: {error}") from None
        for info in infos:
            address = self._policy.literal_address(str(info[4][0]))
            if address is None or not self._policy.allows(address):
                raise InvalidRequest(
                    "handler_url", f"{host!r} resolves to {info[4][0]}, which is not allowed"
                )

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
