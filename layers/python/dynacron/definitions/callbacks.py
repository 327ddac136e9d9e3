"""Where a long job calls back: the token-authorised callback routes (decision 0023).

One definition for the three places that must agree: the delivery body that tells
a handler its callback URLs, the API routes that answer them, and the gateway
methods (``infra/constructs/api.py``) that let them through without IAM.
Standard library only, so the CDK app imports it without the runtime.
"""

from __future__ import annotations

import re
from urllib.parse import quote

# Sent by the worker with each delivery, read by the callback routes: the attempt's
# secret. It travels in a header, never in a URL, so that no access log holds it.
CALLBACK_TOKEN_HEADER = "Dynacron-Callback-Token"
# The first segment of every callback path; nothing else lives under it.
CALLBACKS_RESOURCE = "callbacks"
CALLBACK_ACTIONS = ("heartbeat", "complete")
# The route's path parameter, as the resolver and API Gateway name it.
EXECUTION_ID_PARAMETER = "execution_id"
# How the OpenAPI document names the token as a security scheme.
CALLBACK_TOKEN_SCHEME = "callbackToken"

_CALLBACK_PATH = re.compile(rf"^/{CALLBACKS_RESOURCE}/[^/]+/(?:{'|'.join(CALLBACK_ACTIONS)})$")


def callback_urls(api_base_url: str, execution_id: str) -> dict[str, str]:
    """The absolute heartbeat and complete URLs of one execution, for its delivery body."""
    base = f"{api_base_url.rstrip('/')}/{CALLBACKS_RESOURCE}/{quote(execution_id, safe='')}"
    return {action: f"{base}/{action}" for action in CALLBACK_ACTIONS}


def is_callback_path(path: str) -> bool:
    """Whether ``path`` is one of the token-authorised routes (which take no identity)."""
    return _CALLBACK_PATH.match(path) is not None


def callback_gateway_paths() -> list[str]:
    """The API Gateway resource paths of the callback methods (each takes POST)."""
    return [
        f"/{CALLBACKS_RESOURCE}/{{{EXECUTION_ID_PARAMETER}}}/{action}"
        for action in CALLBACK_ACTIONS
    ]
