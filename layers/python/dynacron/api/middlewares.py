"""Middlewares every route of the resolver runs through, in this order:
``authenticate`` (who is calling, within its rate), then ``refuse_unknown_query``,
then ``keep_fixed_paths``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response
from aws_lambda_powertools.event_handler.middlewares import NextMiddleware
from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError

from dynacron.api.caller import CALLER_CONTEXT_KEY, TENANT_CONTEXT_KEY
from dynacron.api.errors import fixed_path_methods, method_not_allowed
from dynacron.api.identity import caller_of, tenant_of
from dynacron.api.openapi import PUBLIC_PATHS, CallerIdentities
from dynacron.definitions.callbacks import is_callback_path
from dynacron.domain.coordination.quotas import TenantRateLimiter

Middleware = Callable[[APIGatewayRestResolver, NextMiddleware], Response[Any]]


def authenticate(settings: CallerIdentities, rate_limiter: TenantRateLimiter) -> Middleware:
    """A middleware that derives the caller's tenant, rate-limits it and stores it for
    ``caller_tenant()``: every route acts for one tenant, a route added later too.

    The callback routes under ``/callbacks/`` are the exception: a handler calls them
    with no identity at all; the per-attempt callback token is their whole
    authorisation (decision 0023), and the execution it opens names the tenant.
    """

    def middleware(app: APIGatewayRestResolver, next_middleware: NextMiddleware) -> Response[Any]:
        path = app.current_event.path
        # A callback route authorises by its token, in the route, and takes no tenant
        # from the caller; it never reads ``caller_tenant()``.
        if path not in PUBLIC_PATHS and not is_callback_path(path):
            tenant = tenant_of(
                app.current_event.raw_event, settings.api_keys, settings.default_tenant
            )
            rate_limiter.take(tenant)
            app.context[TENANT_CONTEXT_KEY] = tenant
            app.context[CALLER_CONTEXT_KEY] = caller_of(
                app.current_event.raw_event, tenant, api_keys=bool(settings.api_keys)
            )
        return next_middleware(app)

    return middleware


def refuse_unknown_query(
    app: APIGatewayRestResolver, next_middleware: NextMiddleware
) -> Response[Any]:
    """A query parameter no route declares is refused, not ignored: ``?tags=env:prod``
    (for ``?tag=``) would otherwise list every task as if filtered."""
    event = app.current_event
    sent = set(event.multi_value_query_string_parameters or {})
    sent |= set(event.query_string_parameters or {})
    route = app.context.get("_route")
    # Only a declared route's: a request no route takes (a 404 or 405) is a
    # stand-in route that declares nothing, and gets its own answer.
    declared = route in app._static_routes + app._dynamic_routes
    if sent and route is not None and declared and event.path not in PUBLIC_PATHS:
        known = sorted(param.alias for param in route.dependant.query_params)
        takes = ", ".join(known) or "none"
        message = f"is not a query parameter of {route.method} {route.path} (it takes {takes})"
        unknown = sorted(sent - set(known))
        if unknown:
            raise RequestValidationError(
                [
                    {"type": "unknown_query_parameter", "loc": ("query", name), "msg": message}
                    for name in unknown
                ]
            )
    return next_middleware(app)


def keep_fixed_paths(app: APIGatewayRestResolver, next_middleware: NextMiddleware) -> Response[Any]:
    """A path a route without parameters names (``POST /tasks/batch``) is that
    route's, though a route with one matches it too (``/tasks/<task_id>``): another
    method on it is answered 405 with the fixed routes' ``Allow``, as the OpenAPI
    document states the path, never taken as a task named ``batch``."""
    route = app.context.get("_route")
    if route in app._dynamic_routes:
        event = app.current_event
        fixed = fixed_path_methods(app, event.path)
        if fixed:
            return method_not_allowed(event.http_method.upper(), event.path, fixed)
    return next_middleware(app)
