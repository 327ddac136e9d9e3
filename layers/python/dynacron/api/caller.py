"""Who a request acts for, as its routes read it.

The ``authenticate`` middleware (``api/middlewares.py``) stores the caller's
tenant in the resolver's per-request ``context``; a route reads it with
``caller_tenant(router)``. A ``Router`` included in the resolver reads the
resolver's context and event, so every route of every router sees the request
being handled (one at a time per process: see ``entry/composition.py``).
"""

from __future__ import annotations

from aws_lambda_powertools.event_handler.api_gateway import BaseRouter

from dynacron.definitions.callbacks import CALLBACK_TOKEN_HEADER
from dynacron.domain.errors import CallbackRefused

TENANT_CONTEXT_KEY = "tenant"
CALLER_CONTEXT_KEY = "caller"


def caller_tenant(router: BaseRouter) -> str:
    """The tenant of the request being handled: scope every read and write with it."""
    return str(router.context[TENANT_CONTEXT_KEY])


def caller_identity(router: BaseRouter) -> str:
    """Who the request's changes are recorded as made by (``identity.caller_of``)."""
    return str(router.context.get(CALLER_CONTEXT_KEY) or caller_tenant(router))


def sent_callback_token(router: BaseRouter) -> str | None:
    """The callback token the request carries, if any (the header is case-insensitive)."""
    return router.current_event.headers.get(CALLBACK_TOKEN_HEADER)


def callback_token(router: BaseRouter) -> str:
    """The callback token the request carries; ``CallbackRefused`` (403) without one."""
    token = sent_callback_token(router)
    if not token:
        raise CallbackRefused(f"send the token of the delivery in {CALLBACK_TOKEN_HEADER}")
    return token
