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


def caller_tenant(router: BaseRouter) -> str:
    """The tenant of the request being handled: scope every read and write with it."""
    return str(router.context[TENANT_CONTEXT_KEY])


def caller_identity(router: BaseRouter) -> str:
    """Who the request comes from, to record as who asked: the IAM principal that
    signed it, else its tenant (an API key's, or local mode's default)."""
    identity = (router.current_event.raw_event.get("requestContext") or {}).get("identity") or {}
    principal = identity.get("userArn") or identity.get("caller")
    return str(principal) if principal else caller_tenant(router)


def sent_callback_token(router: BaseRouter) -> str | None:
    """The callback token the request carries, if any (the header is case-insensitive)."""
    return router.current_event.headers.get(CALLBACK_TOKEN_HEADER)


def callback_token(router: BaseRouter) -> str:
    """The callback token the request carries; ``CallbackRefused`` (403) without one."""
    token = sent_callback_token(router)
    if not token:
        raise CallbackRefused(f"send the token of the delivery in {CALLBACK_TOKEN_HEADER}")
    return token
