"""Drive the real API handler with API Gateway proxy events, as Lambda would."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

from dynacron.entry.composition import Dynacron
from dynacron.local.gateway import LocalContext, proxy_event

# The IAM principal API Gateway puts in a signed request's context.
ALICE = "arn:aws:iam::000000000000:user/alice"


def call(
    system: Dynacron,
    method: str,
    path: str,
    body: Any = None,
    *,
    raw: str | None = None,
    content_type: str | None = "application/json",
    principal: str | None = ALICE,
    headers: dict[str, str] | None = None,
    **query: Any,
) -> tuple[int, Any]:
    target = path + ("?" + urlencode(query) if query else "")
    data = raw if raw is not None else (json.dumps(body) if body is not None else "")
    sent = {"content-type": content_type} if data and content_type is not None else {}
    event = proxy_event(method, target, sent | (headers or {}), data.encode(), "127.0.0.1")
    if principal is not None:
        event["requestContext"]["identity"]["userArn"] = principal
    response = system.api(event, LocalContext("test-api"))
    text = response.get("body") or ""
    if text and not text.startswith(("{", "[")):
        return response["statusCode"], text
    return response["statusCode"], json.loads(text) if text else None
