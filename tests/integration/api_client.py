"""Drive the real API handler with API Gateway proxy events, as Lambda would."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

from dynacron.app import Dynacron
from dynacron.local.gateway import LocalContext, proxy_event


def call(
    system: Dynacron,
    method: str,
    path: str,
    body: Any = None,
    *,
    raw: str | None = None,
    content_type: str = "application/json",
    **query: Any,
) -> tuple[int, Any]:
    target = path + ("?" + urlencode(query) if query else "")
    data = raw if raw is not None else (json.dumps(body) if body is not None else "")
    headers = {"content-type": content_type} if data else {}
    event = proxy_event(method, target, headers, data.encode(), "127.0.0.1")
    response = system.api(event, LocalContext("test-api"))
    text = response.get("body") or ""
    return response["statusCode"], json.loads(text) if text else None
