"""HTTP delivery of one execution to its task's ``handler_url``."""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass

import httpx

from dynacron import __version__
from dynacron.domain.errors import InvalidRequest
from dynacron.domain.executions import Dispatch
from dynacron.domain.instants import format_instant
from dynacron.domain.tasks import Task
from dynacron.domain.urls import UrlPolicy

MAX_RESPONSE_BYTES = 64 * 1024


@dataclass(frozen=True)
class DeliveryResult:
    ok: bool
    status_code: int | None = None
    error: str | None = None


def request_body(task: Task, dispatch: Dispatch) -> bytes:
    return json.dumps(
        {
            "task_id": task.task_id,
            "execution_id": dispatch.execution_id,
            "scheduled_at": format_instant(dispatch.scheduled_at),
            "attempt": dispatch.attempt,
            "payload": task.payload,
        },
        separators=(",", ":"),
    ).encode()


class HttpDelivery:
    """POSTs an execution as JSON. 2xx is success; anything else is a failure with a reason.

    The URL policy is enforced here as well as at registration, against the
    addresses the host resolves to now, since DNS can change in between.
    """

    def __init__(self, policy: UrlPolicy, timeout_seconds: float) -> None:
        self._policy = policy
        self._client = httpx.Client(
            timeout=timeout_seconds,
            follow_redirects=False,
            trust_env=False,  # never route through an ambient proxy
            headers={"User-Agent": f"dynacron/{__version__}"},
        )

    def deliver(self, task: Task, dispatch: Dispatch) -> DeliveryResult:
        try:
            self._check_destination(task.handler_url)
        except InvalidRequest as refused:
            return DeliveryResult(ok=False, error=f"delivery refused: {refused.message}")
        try:
            with self._client.stream(
                "POST",
                task.handler_url,
                content=request_body(task, dispatch),
                headers={
                    "Content-Type": "application/json",
                    "Idempotency-Key": dispatch.execution_id,
                },
            ) as response:
                excerpt = _read_limited(response)
        except httpx.TimeoutException:
            return DeliveryResult(ok=False, error="handler timed out")
        except httpx.HTTPError as error:
            return DeliveryResult(ok=False, error=f"handler unreachable: {error}")
        if response.is_success:
            return DeliveryResult(ok=True, status_code=response.status_code)
        return DeliveryResult(
            ok=False,
            status_code=response.status_code,
            error=f"handler answered HTTP {response.status_code}: {excerpt[:500]}",
        )

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


def _read_limited(response: httpx.Response) -> str:
    received = bytearray()
    for chunk in response.iter_bytes():
        received += chunk
        if len(received) >= MAX_RESPONSE_BYTES:
            break
    return bytes(received[:MAX_RESPONSE_BYTES]).decode("utf-8", errors="replace")
