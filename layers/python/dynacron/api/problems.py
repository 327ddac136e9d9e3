"""Errors as RFC 9457 problem details: mapped here, once, at the edge."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aws_lambda_powertools.event_handler import Response

from dynacron.api.json_body import NOT_AN_OBJECT
from dynacron.api.responses import Problem
from dynacron.domain.coordination.create_keys import HEADER as CREATE_KEY_HEADER
from dynacron.domain.coordination.create_keys import KEY_RULE
from dynacron.domain.executions.attention import STATUS_RULE

PROBLEM_JSON = "application/problem+json"

_PYDANTIC_MESSAGES = {
    "missing": "is required",
    "extra_forbidden": "is not a known field",
    "string_type": "must be a string",
    "dict_type": "must be a JSON object",
    "int_type": "must be an integer",
    "int_parsing": "must be an integer",
}

# Headers, named as their documents spell them, and what is wrong with any value
# refused: a pattern is no message for a person.
_HEADERS = {CREATE_KEY_HEADER.lower(): (CREATE_KEY_HEADER, KEY_RULE)}
# Query parameters whose rule a person needs spelled out, by where they are.
_QUERY_RULES = {("query", "status"): STATUS_RULE}


def problem(
    status: int,
    title: str,
    detail: str,
    errors: list[dict[str, Any]] | None = None,
    limit: str | None = None,
) -> Response[Any]:
    """A problem+json response; ``limit`` names the operator limit that refused the request."""
    body = Problem(title=title, status=status, detail=detail, errors=errors, limit=limit)
    return Response(
        status_code=status,
        content_type=PROBLEM_JSON,
        body=body.model_dump_json(exclude_none=True),
    )


def field_name(location: Sequence[Any]) -> str:
    """``("body", "payload", "x")`` -> ``payload.x``; ``("query", "limit")`` -> ``limit``;
    ``("header", "idempotency-key")`` -> ``Idempotency-Key``."""
    if len(location) == 2 and location[0] == "header" and location[1] in _HEADERS:
        return _HEADERS[location[1]][0]
    parts = [str(p) for p in location if p not in ("body", "query", "path")]
    return ".".join(parts) or "body"


def describe_validation_errors(errors: Sequence[Any]) -> list[dict[str, Any]]:
    described = []
    for error in errors:
        kind = error.get("type", "")
        message = _PYDANTIC_MESSAGES.get(kind, error.get("msg", "is invalid"))
        if kind == "json_invalid":
            reason = error.get("ctx", {}).get("error", "invalid JSON")
            message = reason if reason == NOT_AN_OBJECT else f"is not valid JSON ({reason})"
            described.append({"field": "body", "message": message})
            continue
        location = tuple(error.get("loc", ()))
        field = field_name(location)
        if location in _QUERY_RULES:
            message = _QUERY_RULES[location]
        elif field.lower() in _HEADERS:
            message = _HEADERS[field.lower()][1]
        described.append({"field": field, "message": message})
    return described
