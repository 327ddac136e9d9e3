"""What the OpenAPI document says beyond the routes: the problem answers each
route may give, and how callers authenticate."""

from __future__ import annotations

from typing import Any, Protocol

from aws_lambda_powertools.event_handler.openapi.models import APIKey, APIKeyIn
from aws_lambda_powertools.event_handler.openapi.types import OpenAPIResponse, OpenAPIResponseHeader

from dynacron.api.identity import API_KEY_HEADER
from dynacron.api.problems import PROBLEM_JSON
from dynacron.api.responses import Problem
from dynacron.definitions.callbacks import CALLBACK_TOKEN_HEADER, CALLBACK_TOKEN_SCHEME

OPENAPI_PATH = "/openapi.json"
DOCS_PATH = "/docs"
# The document and its page: served to anyone, no tenant derived.
PUBLIC_PATHS = frozenset({OPENAPI_PATH, DOCS_PATH})

# The callback routes' only authorisation: the token sent with the delivery.
CALLBACK_SECURITY: list[dict[str, list[str]]] = [{CALLBACK_TOKEN_SCHEME: []}]

_PROBLEM_DESCRIPTIONS = {
    400: "The body is not valid JSON or not the expected shape",
    401: "No tenant could be derived from the caller's identity",
    403: "Refused before the route: a Host that does not name this API, or (local mode) a "
    "request another site's page sent; on a callback route, a token that is not the current "
    "attempt's (or no such execution)",
    404: "Not found for this tenant (another tenant's id looks exactly like a missing one)",
    409: "The state moved on concurrently; retry",
    413: "The body or its payload is over the size limit",
    415: "The body was not sent as JSON",
    422: "A field is invalid or a limit is exceeded (the problem names it)",
    429: "Too many requests from this tenant; see Retry-After",
    503: "The store was busy, throttled or unreachable; nothing was changed; see Retry-After",
}
# Any request may meet these: the gateway refuses a body over its size limit on
# every route (413) and a Host not its own (403: API Gateway's answer too), every
# route authenticates and rate-limits (401, 429), and any store may be busy (503).
_COMMON = (400, 401, 403, 413, 415, 422, 429, 503)


# GET /tasks: which filters and orders go together, on which store (decision 0045).
TASK_LISTING_DESCRIPTION = """A page of the tenant's tasks. Follow next_token until it is absent:
a filtered page may hold fewer than limit tasks, even none.

Orders and the filters each combines with:

| sort | reads | tag | status, kind | name_prefix | DynamoDB | local (SQLite) |
|---|---|---|---|---|---|---|
| created_at (default) | the tenant index | yes (on the index) | yes | no (422) | yes | yes |
| name (default with name_prefix) | the name index | yes | yes | yes | yes | yes |
| next_run_at | by next run | yes | yes | no (422) | no (422) | yes |

order=desc reverses any of them. On DynamoDB no index orders a tenant's tasks by
next run (one would be rewritten by every fire): sort=next_run_at is refused there with a
422 naming sort. On SQLite a tag filter reads the tasks that have the tag, not the
whole tenant. A combination refused is answered 422 with the parameter to change."""


# A task's change history (decision 0054).
CHANGES_DESCRIPTION = """Who changed the task, when, and each field it changed, before and
after (with the version), newest first: create, patch, pause (with its note), resume,
trigger, backfill, delete, revert, and set_aside by the scheduler ("dynacron").
Who is the IAM principal that signed the request, or the API key's tenant. Records
are kept after the task is deleted, until the history retention (90 days). Follow
next_token until it is absent. Another tenant's task answers 404, as a missing one."""

REVERT_DESCRIPTION = """Send a change's fields "before" back through PATCH, if the task is
still at version (409 if it moved on: read it again). The revert is itself a change.
A change of status alone (pause, resume, trigger) is not reverted here: 422, pause or
resume instead; so is a change_id the task has none of. A deleted task answers 404."""


_RETRY_AFTER: OpenAPIResponseHeader = {
    "description": "Seconds until this tenant may send again",
    "schema": {"type": "integer", "minimum": 1},
}
_RETRY_BUSY: OpenAPIResponseHeader = {
    "description": "Seconds until the store is worth asking again",
    "schema": {"type": "integer", "minimum": 1},
}


# POST /tasks/batch: said when the answer is minimal, as ``Prefer`` asked (RFC 7240).
PREFERENCE_APPLIED = "Preference-Applied"
_PREFERENCE_APPLIED: OpenAPIResponseHeader = {
    "description": "return=minimal when each item's task is only its task_id and status",
    "schema": {"type": "string", "enum": ["return=minimal"]},
}


def batch_answers() -> dict[int, OpenAPIResponse]:
    """``POST /tasks/batch``'s responses: its 200 may say ``Preference-Applied``."""
    answers = problems(ok=(200, "Each item answered"))
    answers[200]["headers"] = {PREFERENCE_APPLIED: _PREFERENCE_APPLIED}
    return answers


def problems(*statuses: int, ok: tuple[int, str] = (200, "OK")) -> dict[int, OpenAPIResponse]:
    """OpenAPI responses: the success ``ok`` (status, description; its body is the
    route's return type) and the problem+json errors the route can answer with."""
    success: dict[int, OpenAPIResponse] = {ok[0]: {"description": ok[1]}}
    if ok[0] == 204:
        success[204]["content"] = {}  # no body (else the return type's JSON is declared)
    errors: dict[int, OpenAPIResponse] = {
        status: {
            "description": _PROBLEM_DESCRIPTIONS[status],
            "content": {PROBLEM_JSON: {"model": Problem}},
        }
        for status in sorted({*_COMMON, *statuses})
    }
    errors[429]["headers"] = {"Retry-After": _RETRY_AFTER}
    errors[503]["headers"] = {"Retry-After": _RETRY_BUSY}
    return success | errors


class CallerIdentities(Protocol):
    """Who a caller can be: the API keys configured, and the tenant of a caller
    with no identity at all (``Settings`` has both)."""

    @property
    def api_keys(self) -> tuple[tuple[str, str], ...]: ...
    @property
    def default_tenant(self) -> str | None: ...


def security_of(settings: CallerIdentities) -> dict[str, Any]:
    """How callers authenticate, as the OpenAPI document states it: an API key where
    keys are configured, else a SigV4 signature where there is no default tenant
    (deployed: API Gateway checks it), else nothing (local mode: one tenant).

    The callback routes say their own: the callback token, whatever the rest needs.
    """
    token = {
        CALLBACK_TOKEN_SCHEME: APIKey(
            name=CALLBACK_TOKEN_HEADER,
            in_=APIKeyIn.header,
            description="The token the delivery of the execution's current attempt carried",
        )
    }
    if settings.api_keys:
        scheme = "apiKey"
        schemes = {scheme: APIKey(name=API_KEY_HEADER, in_=APIKeyIn.header)}
    elif settings.default_tenant is None:
        scheme = "sigv4"
        # API Gateway's own name for IAM authorisation, as its OpenAPI import reads it.
        schemes = {
            scheme: APIKey.model_validate(
                {
                    "type": "apiKey",
                    "name": "Authorization",
                    "in": "header",
                    "description": "AWS Signature Version 4 (IAM)",
                    "x-amazon-apigateway-authtype": "awsSigv4",
                }
            )
        }
    else:
        return {"security_schemes": token}
    return {"security_schemes": schemes | token, "security": [{scheme: []}]}
