"""A notification (decision 0057) delivered: a signed POST of a small JSON body to
the notification's URL, through the same checked connections as a handler's.

The body (documented in docs/notifications.md)::

    {"notification": "on_failure", "task_id": ..., "task_name": ..., "execution_id": ...,
     "scheduled_at": ..., "status": "FAILED", "error": ..., "count": 3,
     "notified_at": ..., "links": {"task": ..., "execution": ..., "console": ...}}

signed as a delivery is (``Dynacron-Signature`` over the body with each of the
tenant's secrets), with ``Idempotency-Key`` the notice's id (the same on every
attempt). A redirect is not followed: a notification URL answers itself.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from urllib.parse import quote

import aiohttp

from dynacron.adapters.delivery.connections import (
    DeliveryLoop,
    PrivateNetworksOf,
    Resolver,
    check_destination,
    policy_for_tenant,
    system_resolver,
)
from dynacron.adapters.delivery.http import LOOP_MARGIN_SECONDS, PinnedSessions, SecretsOf
from dynacron.domain.errors import InvalidRequest
from dynacron.domain.executions.notifications import NoticeSent, NotificationMessage
from dynacron.domain.executions.signing import SIGNATURE_HEADER, signature_header
from dynacron.domain.instants import format_instant
from dynacron.domain.tasks.urls import UrlPolicy

NOTIFICATION_HEADER = "Dynacron-Notification"
# A notification's answer is not read: only its status counts.
ERROR_SHOWN = 200


def notification_body(message: NotificationMessage, api_base_url: str | None) -> bytes:
    """What a notification URL receives, as JSON."""
    body: dict[str, object] = {
        "notification": message.kind.value,
        "task_id": message.task_id,
        "task_name": message.task_name,
        "execution_id": message.execution_id,
        "scheduled_at": format_instant(message.scheduled_at),
        "status": message.status,
        "error": message.error,
        "count": message.count,
        "notified_at": format_instant(message.notified_at),
    }
    if api_base_url:
        base = api_base_url.rstrip("/")
        task = quote(message.task_id, safe="")
        body["links"] = {
            "task": f"{base}/tasks/{task}",
            "execution": f"{base}/executions/{quote(message.execution_id, safe='')}",
            "console": f"{base}/console/tasks/{task}",
        }
    return json.dumps(body, separators=(",", ":")).encode()


class HttpNotifier:
    """POSTs notifications, signed, to addresses the URL policy allows."""

    def __init__(
        self,
        policy: UrlPolicy,
        timeout_seconds: float,
        api_base_url: str | None = None,
        *,
        secrets_of: SecretsOf,
        resolver: Resolver = system_resolver,
        private_networks_of: PrivateNetworksOf | None = None,
        unix_time: Callable[[], float] = time.time,
    ) -> None:
        self._policy = policy
        self._timeout_seconds = timeout_seconds
        self._api_base_url = api_base_url
        self._secrets_of = secrets_of
        self._private_networks_of = private_networks_of
        self._unix_time = unix_time
        # A notification's answer is not read: its body comes as aiohttp hands it.
        self._sessions = PinnedSessions(resolver)

    def send(self, message: NotificationMessage) -> NoticeSent:
        """One attempt; never raises for what the receiver or the network did."""
        try:
            secrets = self._secrets_of(message.tenant_id)
            policy = policy_for_tenant(self._policy, self._private_networks_of, message.tenant_id)
        except Exception as error:
            return NoticeSent(f"could not read the tenant's secrets or networks: {error}")
        if not secrets:
            return NoticeSent("the task's tenant has no signing secret", retryable=False)
        body = notification_body(message, self._api_base_url)
        headers = {
            "Content-Type": "application/json",
            "Idempotency-Key": message.notice_id,
            NOTIFICATION_HEADER: message.kind.value,
            SIGNATURE_HEADER: signature_header(secrets, int(self._unix_time()), body),
        }
        try:
            call = DeliveryLoop.submit(self._post(policy, message.url, body, headers))
            status = call.result(self._timeout_seconds + LOOP_MARGIN_SECONDS)
        except InvalidRequest as refused:
            return NoticeSent(f"notification refused: {refused.message}", retryable=False)
        except TimeoutError:
            return NoticeSent(f"no answer within {self._timeout_seconds:g} s")
        except aiohttp.ClientError as error:
            return NoticeSent(f"unreachable: {error}"[:ERROR_SHOWN])
        if 200 <= status < 300:
            return NoticeSent()
        return NoticeSent(f"answered HTTP {status}")

    async def _post(self, policy: UrlPolicy, url: str, body: bytes, headers: dict[str, str]) -> int:
        async with asyncio.timeout(self._timeout_seconds):
            check_destination(policy, url)
            async with self._sessions.for_policy(policy).post(
                url, data=body, headers=headers, allow_redirects=False
            ) as response:
                return response.status
