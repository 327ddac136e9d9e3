"""Python handlers registered in code, chosen per task with ``"handler": "name"``.

    import dynacron

    @dynacron.handler("send-invoice")
    def send_invoice(run: dynacron.ExecutionContext) -> None:
        billing.send(run.payload["invoice"], idempotency_key=run.execution_id)

A handler runs at least once per occurrence, and again on retries; ``execution_id``
is the same on every run of one occurrence, so it is the key that makes the
handler's own effect happen once. Returning means success; raising means a failed
attempt, retried by the task's policy unless the exception is ``PermanentFailure``.
"""

from __future__ import annotations

import importlib
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")


@dataclass(frozen=True)
class ExecutionContext:
    """What a Python handler receives for one attempt of one occurrence."""

    execution_id: str
    task_id: str
    scheduled_at: datetime
    attempt: int
    payload: dict[str, Any]
    # A dependent task's run: the upstream execution id, status_code and excerpt.
    upstream: dict[str, Any] | None = None
    # Every upstream end that started it (a fan-in's set), each also with task_id, status.
    upstreams: list[dict[str, Any]] | None = None


class PermanentFailure(Exception):
    """Raise from a handler when trying again cannot help: no retry follows."""


HandlerFunction = Callable[[ExecutionContext], object]
F = TypeVar("F", bound=HandlerFunction)


class HandlerRegistry:
    """Handler names to functions; safe to use from several threads."""

    def __init__(self) -> None:
        self._handlers: dict[str, HandlerFunction] = {}
        self._lock = threading.Lock()

    def register(self, name: str, function: HandlerFunction) -> None:
        if not NAME_PATTERN.match(name):
            raise ValueError(
                f"handler name {name!r} must be 1-128 letters, digits, '_', '.', ':' or '-'"
            )
        with self._lock:
            existing = self._handlers.get(name)
            if existing is not None and existing is not function:
                raise ValueError(f"a different handler is already registered as {name!r}")
            self._handlers[name] = function

    def get(self, name: str) -> HandlerFunction | None:
        with self._lock:
            return self._handlers.get(name)

    def __contains__(self, name: object) -> bool:
        with self._lock:
            return name in self._handlers


# The registry ``@handler`` fills; the composition root passes it to the services.
default_registry = HandlerRegistry()


def handler(name: str, *, registry: HandlerRegistry | None = None) -> Callable[[F], F]:
    """Register the decorated function as the Python handler called ``name``."""

    def register(function: F) -> F:
        (registry or default_registry).register(name, function)
        return function

    return register


def import_handler_modules(modules: Iterable[str]) -> None:
    """Import the modules whose ``@dynacron.handler`` functions tasks may name."""
    for module in modules:
        importlib.import_module(module)
