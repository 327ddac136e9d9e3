"""Errors as HTTP answers, in one place: each typed error a route may raise, the
status and RFC 9457 problem it is answered with, registered as the resolver's
exception handlers. A route raises; it never builds an error response itself."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response
from aws_lambda_powertools.event_handler.exceptions import NotFoundError
from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError

from dynacron.api.problems import describe_validation_errors, problem
from dynacron.api.responses import Problem
from dynacron.domain.errors import (
    CalendarNotFound,
    CallbackRefused,
    Conflict,
    ExecutionNotFound,
    InvalidRequest,
    LimitExceeded,
    RateLimited,
    TaskNotFound,
    Unauthenticated,
)
from dynacron.ports import StoreUnavailable
from dynacron.services.tasks import PayloadTooLarge

logger = Logger(service="dynacron-api")


@dataclass(frozen=True)
class ProblemType:
    """How one kind of error is answered; ``limit`` names the operator limit that
    refused the request where the error itself does not."""

    status: int
    title: str
    limit: str | None = None


# The most specific class an error is an instance of answers it (as the resolver
# picks its handler): a PayloadTooLarge is a LimitExceeded is an InvalidRequest.
ERROR_PROBLEMS: dict[type[Exception], ProblemType] = {
    PayloadTooLarge: ProblemType(413, "Payload too large"),
    LimitExceeded: ProblemType(422, "Limit exceeded"),
    InvalidRequest: ProblemType(422, "Invalid request"),
    TaskNotFound: ProblemType(404, "Not found"),
    ExecutionNotFound: ProblemType(404, "Not found"),
    CalendarNotFound: ProblemType(404, "Not found"),
    CallbackRefused: ProblemType(403, "Forbidden"),
    Conflict: ProblemType(409, "Conflict"),
    Unauthenticated: ProblemType(401, "Unauthenticated"),
    RateLimited: ProblemType(429, "Too many requests", limit="tenant_rate_per_second"),
}
# How soon a caller may try again after the store was busy, throttled or unreachable:
# a write that waited out its busy timeout, or DynamoDB throttling past the SDK's
# retries, usually clears within a second or two.
STORE_RETRY_AFTER_SECONDS = 2


def problem_of(error: Exception) -> Problem:
    """The problem an error of ``ERROR_PROBLEMS`` is answered with: an
    ``InvalidRequest`` names its field, a ``LimitExceeded`` its limit."""
    kind = next(ERROR_PROBLEMS[cls] for cls in type(error).__mro__ if cls in ERROR_PROBLEMS)
    fields = None
    if isinstance(error, InvalidRequest):
        fields = [{"field": error.field, "message": error.message}]
    limit = error.limit if isinstance(error, LimitExceeded) else kind.limit
    return Problem(
        title=kind.title, status=kind.status, detail=str(error), errors=fields, limit=limit
    )


def error_problem(error: Exception) -> Response[str]:
    """The problem answer of an error of ``ERROR_PROBLEMS`` (``problem_of``); a
    ``RateLimited`` says when to retry."""
    shown = problem_of(error)
    response = problem(shown.status, shown.title, shown.detail, shown.errors, limit=shown.limit)
    if isinstance(error, RateLimited):
        response.headers["Retry-After"] = str(error.retry_after_seconds)
    return response


def store_unavailable(error: StoreUnavailable) -> Response[str]:
    """503 with ``Retry-After`` while the store is busy, throttled or unreachable; a
    refusal that lasts (access denied) is the deployment's to fix: a 500."""
    if not error.transient:
        return unexpected(error)
    # The store's own words name files, tables and limits: logged, not answered.
    logger.warning("store unavailable", extra={"error": str(error)})
    detail = (
        f"the store is busy or unreachable; try again in {STORE_RETRY_AFTER_SECONDS} s "
        "(a create with an Idempotency-Key is safe to repeat)"
    )
    response = problem(503, "Service unavailable", detail)
    response.headers["Retry-After"] = str(STORE_RETRY_AFTER_SECONDS)
    return response


def invalid_request_shape(error: RequestValidationError) -> Response[str]:
    """What the resolver's validation refused: 400 for a body that is no JSON
    object, else 422; each field named with what is wrong with it."""
    errors = describe_validation_errors(error.errors())
    status = 400 if any(e["field"] == "body" for e in errors) else 422
    detail = "; ".join(f"{e['field']}: {e['message']}" for e in errors)
    return problem(status, "Invalid request", detail, errors)


def unexpected(error: Exception) -> Response[str]:
    """Any other error: logged, and answered without its details."""
    logger.exception("unhandled error")
    return problem(500, "Internal error", "the request failed on our side; it is safe to retry")


def map_errors_to_problems(app: APIGatewayRestResolver) -> None:
    """Answer every error a route raises (and a request no route takes) as a problem."""
    app.exception_handler(list(ERROR_PROBLEMS))(error_problem)
    app.exception_handler(StoreUnavailable)(store_unavailable)
    app.exception_handler(RequestValidationError)(invalid_request_shape)

    @app.not_found
    def route_not_found(error: NotFoundError) -> Response[Any]:
        event = app.current_event
        method = event.http_method.upper()
        allowed = allowed_methods(app, event.path)
        if not allowed:
            return problem(404, "Not found", f"no route for {method} {event.path}")
        return method_not_allowed(method, event.path, allowed)

    app.exception_handler(Exception)(unexpected)


def method_not_allowed(method: str, path: str, allowed: list[str]) -> Response[Any]:
    """RFC 9110: a known resource answers a method it does not support with 405 and
    the methods it does support; OPTIONS asks for exactly that list."""
    allow = ", ".join(allowed)
    if method == "OPTIONS":
        return Response(status_code=204, headers={"Allow": allow})
    response = problem(405, "Method not allowed", f"{path} answers {allow}, not {method}")
    response.headers["Allow"] = allow
    return response


def allowed_methods(app: APIGatewayRestResolver, path: str) -> list[str]:
    """The methods routed for ``path``, as an ``Allow`` header lists them; none if it is unknown.

    Matched with the resolver's own compiled routes, so a path is "known" exactly
    when some method would reach a route with it. A path a fixed route names is
    that route's alone (``/tasks/batch`` is no task id: ``fixed_path_methods``).
    """
    fixed = fixed_path_methods(app, path)
    if fixed:
        return fixed
    routes = app._static_routes + app._dynamic_routes
    return sorted({route.method for route in routes if route.rule.match(path)})


def fixed_path_methods(app: APIGatewayRestResolver, path: str) -> list[str]:
    """The methods of the routes without parameters that name ``path`` exactly."""
    return sorted({route.method for route in app._static_routes if route.rule.match(path)})
