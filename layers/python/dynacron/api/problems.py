"""Errors as RFC 9457 problem details: mapped here, once, at the edge."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aws_lambda_powertools.event_handler import Response

from dynacron.api.json_body import NOT_AN_OBJECT
from dynacron.views import Problem

PROBLEM_JSON = "application/problem+json"

_PYDANTIC_MESSAGES = {
    "missing": "is required",
    "extra_forbidden": "is not a known field",
    "string_type": "must be a string",
    "dict_type": "must be a JSON object",
    "int_type": "must be an integer",
    "int_parsing": "must be an integer",
}


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
    """``("body", "payload", "x")`` -> ``payload.x``; ``("query", "limit")`` -> ``limit``."""
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
        described.append({"field": field_name(error.get("loc", ())), "message": message})
    return described
