"""Requests answered before the resolver routes them: what it would misread."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.event_handler import Response

from dynacron.api.problems import PROBLEM_JSON, problem


def unroutable_path(event: dict[str, Any]) -> dict[str, Any] | None:
    """A 404 for a path holding a control character, else None.

    The resolver matches routes with ``$``, which also matches before a final
    newline: ``/executions/%0A`` reached ``GET /executions``. No route of ours has
    such a character, so none is routed.
    """
    path = str(event.get("path") or "")
    if not any(ord(character) < 0x20 or ord(character) == 0x7F for character in path):
        return None
    return _proxy_answer(problem(404, "Not found", f"no route for {path!r}"))


def unsupported_body(event: dict[str, Any]) -> dict[str, Any] | None:
    """A 415 response for a body that is not declared as JSON, else None.

    Checked before routing: the resolver would otherwise parse a form-encoded
    body as a form and answer with field errors that hide the real mistake.
    """
    headers = {k.lower(): v for k, v in (event.get("headers") or {}).items()}
    content_type = headers.get("content-type")
    # Exactly what the resolver parses as JSON (it matches the type as spelled)
    media_type = (content_type or "").split(";")[0].strip()
    if not event.get("body") or media_type == "application/json":
        return None
    # A body that declares no type is refused too: it is what a page of another
    # site can send to a local API without a CORS preflight.
    sent = f"not {content_type!r}" if content_type else "and it was sent with no Content-Type"
    return _proxy_answer(
        problem(
            415,
            "Unsupported media type",
            f"the body must be JSON, sent with 'Content-Type: application/json', {sent}",
        )
    )


def _proxy_answer(response: Response[str]) -> dict[str, Any]:
    """A problem answered before routing, as the resolver's answers are shaped."""
    return {
        "statusCode": response.status_code,
        "headers": {"Content-Type": PROBLEM_JSON},
        "body": response.body,
        "isBase64Encoded": False,
    }
