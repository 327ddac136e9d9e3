"""Drive the real API handler with API Gateway proxy events, as Lambda would."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

import httpx

from dynacron.client.api_client import Client
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


def client_of(
    system: Dynacron, seen: Callable[[httpx.Request], None] = lambda request: None
) -> Client:
    """A client whose every request (each shown to ``seen`` first) is an API Gateway
    event for ``system``'s API, as Alice."""

    def handle(request: httpx.Request) -> httpx.Response:
        seen(request)
        target = request.url.raw_path.decode()
        event = proxy_event(
            request.method, target, dict(request.headers), request.content, "127.0.0.1"
        )
        event["requestContext"]["identity"]["userArn"] = ALICE
        answer = system.api(event, LocalContext("test-api"))
        return httpx.Response(
            answer["statusCode"],
            headers=answer.get("headers") or {},
            content=(answer.get("body") or "").encode(),
        )

    return Client("http://127.0.0.1:1", transport=httpx.MockTransport(handle))
