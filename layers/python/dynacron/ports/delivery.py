"""Reaching a task's handler: calling it, and what registration checks of it.

``adapters.delivery`` implements these: HTTP handlers behind pinned, checked
connections (httpx), Python handlers from the registry.
"""

from __future__ import annotations

from typing import Protocol

from dynacron.domain.executions.execution import DeliveryResult, Dispatch
from dynacron.domain.executions.notifications import NoticeSent, NotificationMessage
from dynacron.domain.tasks.task import Task


class Delivery(Protocol):
    """Calls a task's handler for one attempt."""

    def deliver(self, task: Task, dispatch: Dispatch, callback_token: str) -> DeliveryResult:
        """The handler's answer; a failure to reach it is a failed result, not an exception."""
        ...


class Notifier(Protocol):
    """Delivers one notification (decision 0057)."""

    def send(self, message: NotificationMessage) -> NoticeSent:
        """How the attempt went; a failure to reach the URL is a result, not an exception."""
        ...


class HandlerUrls(Protocol):
    """Registration's check of a handler URL."""

    def check(self, url: str, tenant_id: str) -> None:
        """Raise ``InvalidRequest`` if ``url`` is malformed or its host is, or
        resolves now to, an address the delivery policy refuses (for ``tenant_id``:
        its private ranges, decision 0050)."""
        ...

    def with_private_networks(self, networks: tuple[str, ...]) -> HandlerUrls:
        """The same check with ``networks`` as the private ranges of whatever tenant
        is named, read by the caller once for many URLs (a batch create's)."""
        ...


class HandlerNames(Protocol):
    """The Python handlers this process can run, by name."""

    def __contains__(self, name: object) -> bool:
        """True if a handler is registered as ``name`` in this process now: registration
        refuses a Python task naming one that is not."""
        ...
