"""The API does what its OpenAPI document says, and the document says what the API does.

Finding 8 (schemathesis part): every route answered an undeclared method with
501 (local gateway) or 404 (the resolver), never 405 with ``Allow``; bodies valid
by the published document were refused for rules it did not state (one schedule
kind, one handler, which fields go together). tests/system/test_fuzz.py runs
schemathesis with every check; this module pins each class on its own.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
from jsonschema import Draft202012Validator

from dynacron.api.openapi import security_of
from dynacron.entry.composition import Dynacron
from dynacron.local.gateway import ApiGateway, LocalContext, proxy_event

HOOK = "http://127.0.0.1:9/hook"
PROBLEM_JSON = "application/problem+json"


def send(
    system: Dynacron, method: str, target: str, body: Any = None, raw: str | None = None
) -> tuple[int, dict[str, str], Any]:
    """One request through the API function, as API Gateway hands it over."""
    data = raw if raw is not None else (json.dumps(body) if body is not None else "")
    headers = {"content-type": "application/json"} if data else {}
    event = proxy_event(method, target, headers, data.encode(), "127.0.0.1")
    event["requestContext"]["identity"]["userArn"] = "arn:aws:iam::000000000000:user/alice"
    response = system.api(event, LocalContext("test-api"))
    sent_headers = {k.lower(): v for k, v in (response.get("headers") or {}).items()}
    for name, values in (response.get("multiValueHeaders") or {}).items():
        sent_headers[name.lower()] = ", ".join(values)
    text = response.get("body") or ""
    return response["statusCode"], sent_headers, json.loads(text) if text else None


def document(system: Dynacron) -> dict[str, Any]:
    status, _, doc = send(system, "GET", "/openapi.json")
    assert status == 200
    return doc  # type: ignore[no-any-return]


def request_validator(doc: dict[str, Any], method: str, path: str) -> Draft202012Validator:
    """The document's JSON Schema for the body of ``method path`` (OpenAPI 3.1 is 2020-12)."""
    body = doc["paths"][path][method]["requestBody"]["content"]["application/json"]["schema"]
    # The references point into the document: validate against it as the root.
    return Draft202012Validator({**body, "components": doc["components"]})


@pytest.fixture
def task_id(system: Dynacron) -> str:
    status, _, task = send(system, "POST", "/tasks", {"rate": "1 hour", "handler_url": HOOK})
    assert status == 201
    return str(task["task_id"])


# (method, path, the methods its routes declare)
UNDECLARED = [
    ("TRACE", "/tasks", "GET, POST"),
    ("PUT", "/tasks", "GET, POST"),
    ("DELETE", "/tasks", "GET, POST"),
    ("PUT", "/tasks/{id}", "DELETE, GET, PATCH"),
    ("POST", "/tasks/{id}", "DELETE, GET, PATCH"),
    ("TRACE", "/tasks/{id}/next", "GET"),
    ("GET", "/tasks/{id}/pause", "POST"),
    ("QUERY", "/executions/x_1", "GET"),
    ("DELETE", "/tenant", "GET"),
    ("HEAD", "/forecast", "GET"),
    ("PATCH", "/dead-letters/x_1/redrive", "POST"),
    ("POST", "/openapi.json", "GET"),
]


@pytest.mark.parametrize(("method", "path", "allowed"), UNDECLARED)
def test_an_undeclared_method_on_a_known_route_is_405_listing_the_declared_ones(
    system: Dynacron, task_id: str, method: str, path: str, allowed: str
) -> None:
    """Finding 8: 405 with ``Allow`` (RFC 9110), not 404 or 501, whether or not the
    resource exists; the declared methods still work."""
    status, headers, problem = send(system, method, path.replace("{id}", task_id))

    assert status == 405
    assert headers["allow"] == allowed
    assert headers["content-type"] == PROBLEM_JSON
    if method != "HEAD":
        assert method in problem["detail"]
        assert problem["status"] == 405


def test_options_lists_the_methods_and_an_unknown_path_is_still_404(
    system: Dynacron, task_id: str
) -> None:
    """Finding 8: OPTIONS answers with the same ``Allow``; a path no route has is 404."""
    status, headers, _ = send(system, "OPTIONS", f"/tasks/{task_id}")
    assert (status, headers["allow"]) == (204, "DELETE, GET, PATCH")

    for method in ("GET", "TRACE"):
        status, headers, problem = send(system, method, "/no-such-route")
        assert status == 404
        assert "allow" not in headers
        assert problem["title"] == "Not found"


@pytest.fixture
def gateway(system: Dynacron) -> Iterator[tuple[str, int]]:
    """The local HTTP gateway on loopback, in front of ``system``; every caller is alice."""

    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        event["requestContext"]["identity"]["userArn"] = "arn:aws:iam::000000000000:user/alice"
        return system.api(event, context)

    server = ApiGateway(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield "127.0.0.1", server.server_address[1]
    server.shutdown()
    server.server_close()


def test_the_local_gateway_passes_every_method_on_instead_of_answering_501(
    gateway: tuple[str, int],
) -> None:
    """Finding 8: local mode's gateway answered TRACE, OPTIONS and QUERY itself with
    501 (a server error) and an HTML page; HEAD's answer carries no body."""
    connection = http.client.HTTPConnection(*gateway, timeout=10)
    for method in ("TRACE", "QUERY", "PUT", "HEAD"):
        connection.request(method, "/tasks")
        response = connection.getresponse()
        body = response.read()
        assert response.status == 405, method
        assert response.getheader("Allow") == "GET, POST"
        assert response.getheader("Content-Type") == PROBLEM_JSON
        assert (body == b"") == (method == "HEAD")
    # The connection is still in step after HEAD: the next answer is read whole.
    connection.request("GET", "/tasks")
    response = connection.getresponse()
    assert response.status == 200
    assert json.loads(response.read())["items"] == []
    connection.close()


def test_a_path_parameter_is_read_percent_decoded_as_api_gateway_does(
    system: Dynacron,
) -> None:
    """Finding 8: the local gateway routed ``/tasks/%F0%9D...`` undecoded, so a 43
    character id (valid: at most 200) was refused as longer than 200 characters."""
    task_id = "\U0001d57f" * 43  # 43 characters, 516 once percent-encoded
    status, _, problem = send(system, "GET", "/tasks/" + quote(task_id))

    assert status == 404, problem
    assert task_id in problem["detail"]


# Bodies that break a rule between fields: the service refuses each with a 422
# naming the field, and the document's request schema refuses it too.
TWO_KINDS = {"cron": "*/5 * * * *", "rate": "5 minutes", "handler_url": HOOK}
BROKEN_RULES = [
    pytest.param(TWO_KINDS, "schedule", ["'cron'", "'rate'"], id="two-kinds"),
    pytest.param({"handler_url": HOOK}, "schedule", ["found none"], id="no-kind"),
    pytest.param(
        {"rate": "5 minutes", "handler_url": HOOK, "handler": "echo"},
        "handler",
        ["exactly one"],
        id="two-handlers",
    ),
    pytest.param({"rate": "5 minutes"}, "handler", ["exactly one"], id="no-handler"),
    pytest.param(
        {"cron": "0 * * * *", "anchor": "2026-12-01T00:00:00Z", "handler_url": HOOK},
        "anchor",
        ["rate"],
        id="anchor-without-rate",
    ),
    pytest.param(
        {"rate": "1 hour", "dst": {"nonexistent": "skip"}, "handler_url": HOOK},
        "dst",
        ["rate"],
        id="dst-with-rate",
    ),
    pytest.param(
        {"rate": "1 hour", "catchup_window_seconds": 60, "handler_url": HOOK},
        "catchup_window_seconds",
        ["run_all"],
        id="window-without-run-all",
    ),
    pytest.param(
        {"rate": "1 hour", "when": "failure", "handler_url": HOOK},
        "when",
        ["after"],
        id="when-without-after",
    ),
]


@pytest.mark.parametrize(("body", "field", "named"), BROKEN_RULES)
def test_a_rule_between_fields_is_refused_by_the_api_and_by_its_document(
    system: Dynacron, body: dict[str, Any], field: str, named: list[str]
) -> None:
    """Finding 8: the document let these bodies through (schemathesis counted each
    422 as a valid body refused); now it states the rule the API enforces."""
    status, headers, problem = send(system, "POST", "/tasks", body)

    assert status == 422
    assert headers["content-type"] == PROBLEM_JSON
    assert [e["field"] for e in problem["errors"]] == [field]
    for word in named:
        assert word in problem["detail"]
    validator = request_validator(document(system), "post", "/tasks")
    assert not validator.is_valid(body)


def test_the_document_accepts_what_the_api_accepts(system: Dynacron) -> None:
    """Finding 8: the rules are not a blanket refusal: each kind, alone, is valid."""
    validator = request_validator(document(system), "post", "/tasks")
    bodies = [
        {"cron": "0 * * * *", "dst": {"nonexistent": "skip"}, "handler_url": HOOK},
        {"rate": "1 hour", "anchor": "2026-12-01T00:00:00Z", "handler_url": HOOK},
        {"at": "2026-12-01T00:00:00Z", "handler_url": HOOK, "cron": None, "anchor": None},
        {"fixed_delay": "1 hour", "handler_url": HOOK},
        {"rate": "1 hour", "catchup": "run_all", "catchup_window_seconds": 60, "handler_url": HOOK},
    ]
    upstream = send(system, "POST", "/tasks", bodies[3])[2]["task_id"]
    # An after list (fan-in, decision 0058) with when, and a single id
    bodies += [
        {"after": [upstream], "when": "always", "handler_url": HOOK},
        {"after": upstream, "handler_url": HOOK},
    ]
    for body in bodies:
        assert validator.is_valid(body), body
        status, _, task = send(system, "POST", "/tasks", body)
        assert status == 201, task


def test_a_patch_gives_at_most_one_kind_and_never_a_null_one(
    system: Dynacron, task_id: str
) -> None:
    """Finding 8: ``{"handler": null}`` was valid by the document, and the API then
    dropped both handlers and refused the task; two kinds were valid as well. A null
    beside a given one is accepted, and the document says so."""
    validator = request_validator(document(system), "patch", "/tasks/{task_id}")
    for body, field in (
        ({"handler": None}, "handler"),
        ({"cron": None}, "schedule"),
        ({"cron": "0 * * * *", "rate": "1 hour"}, "schedule"),
    ):
        status, _, problem = send(system, "PATCH", f"/tasks/{task_id}", body)
        assert status == 422
        assert [e["field"] for e in problem["errors"]] == [field]
        assert not validator.is_valid(body), body

    # A null beside the one given is fine: the given one replaces the task's.
    changed = {"cron": "0 * * * *", "rate": None, "handler_url": HOOK, "handler": None}
    assert validator.is_valid(changed)
    status, _, task = send(system, "PATCH", f"/tasks/{task_id}", changed)
    assert (status, task["schedule"]["kind"]) == (200, "cron")


def test_a_delete_declares_no_body_and_sends_none(system: Dynacron, task_id: str) -> None:
    """Found by the deeper fuzz (finding 8): 204 was declared with an
    application/json body, and the 204 has none."""
    response = document(system)["paths"]["/tasks/{task_id}"]["delete"]["responses"]["204"]
    assert response.get("content", {}) == {}

    status, _, body = send(system, "DELETE", f"/tasks/{task_id}")
    assert (status, body) == (204, None)


def test_numbers_are_read_as_json_numbers(system: Dynacron, task_id: str) -> None:
    """Found on the way (finding 8): ``5.0`` is the integer 5 in JSON and in the
    document (``"type": "integer"``) but was refused as not an integer; a 5,000
    digit integer made a 500; NaN and 1e400 (not JSON) were stored as null."""
    body = {"rate": "1 hour", "handler_url": HOOK, "max_concurrency": 3.0, "payload": {"n": 2.5}}
    status, _, task = send(system, "POST", "/tasks", body)
    assert status == 201, task
    assert task["max_concurrency"] == 3
    assert task["payload"] == {"n": 2.5}
    status, _, task = send(system, "PATCH", f"/tasks/{task_id}", {"version": 1.0})
    assert (status, task["version"]) == (200, 2)

    for number, reason in (("9" * 5000, "digits"), ("NaN", "NaN"), ("1e400", "out of range")):
        raw = f'{{"rate": "1 hour", "handler_url": "{HOOK}", "payload": {{"n": {number}}}}}'
        status, _, problem = send(system, "POST", "/tasks", raw=raw)
        assert status == 400, problem
        assert problem["errors"][0]["field"] == "body"
        assert reason in problem["detail"]


def test_a_body_nested_past_the_parsers_stack_is_a_400_not_a_500(system: Dynacron) -> None:
    """Found while merging (finding 8 class): a payload nested some thousand levels
    deep made ``json.loads`` raise RecursionError, answered 500; a shallower one is
    the payload's own 422 (at most 32 levels)."""
    for depth, expected in ((40, 422), (5_000, 400), (200_000, 400)):
        nested = '{"a":' * depth + "1" + "}" * depth
        raw = f'{{"rate": "1 hour", "handler_url": "{HOOK}", "payload": {nested}}}'
        status, _, problem = send(system, "POST", "/tasks", raw=raw)
        assert status == expected, (depth, problem)
        if expected == 400:
            assert "nested too deeply" in problem["detail"]
    status, _, listing = send(system, "GET", "/tasks")
    assert (status, listing["items"]) == (200, [])


def test_every_operation_declares_the_problems_any_request_may_meet(system: Dynacron) -> None:
    """Finding 8: 413 (from the gateway, on any route) and 429 were answered where
    the document did not declare them; each is problem+json, 429 with Retry-After."""
    doc = document(system)
    operations = [op for item in doc["paths"].values() for op in item.values()]
    assert len(operations) >= 19
    for operation in operations:
        responses = operation["responses"]
        for status in ("400", "401", "413", "415", "422", "429"):
            content = responses[status]["content"]
            assert list(content) == [PROBLEM_JSON], (operation["operationId"], status)
        assert "Retry-After" in responses["429"]["headers"]


def test_a_body_over_the_gateway_limit_is_a_413_problem(gateway: tuple[str, int]) -> None:
    """Finding 8: local mode's 413 was ``{"message": "too large"}`` as JSON, not the
    problem+json the document declares."""
    connection = http.client.HTTPConnection(*gateway, timeout=10)
    body = b"[" + b"0," * (600 * 1024) + b"0]"
    connection.request("POST", "/tasks", body, {"Content-Type": "application/json"})
    response = connection.getresponse()
    problem = json.loads(response.read())
    connection.close()

    assert response.status == 413
    assert response.getheader("Content-Type") == PROBLEM_JSON
    assert (problem["status"], problem["title"]) == (413, "Payload too large")


def test_the_document_states_how_callers_authenticate(system: Dynacron) -> None:
    """Finding 8: the document declared no security, so schemathesis's ignored_auth
    had nothing to check although every operation needs a caller identity."""
    doc = document(system)
    assert doc["security"] == [{"sigv4": []}]
    assert doc["components"]["securitySchemes"]["sigv4"]["name"] == "Authorization"

    with_keys = security_of(dataclasses.replace(system.settings, api_keys=(("k", "t"),)))
    assert with_keys["security"] == [{"apiKey": []}]
    assert with_keys["security_schemes"]["apiKey"].name == "x-api-key"
    local = dataclasses.replace(system.settings, default_tenant="local")
    # local mode: every caller is the one tenant; only the callback routes name a scheme
    assert "security" not in security_of(local)
    assert set(security_of(local)["security_schemes"]) == {"callbackToken"}


def test_a_page_token_from_another_listing_is_a_422_not_a_500(system: Dynacron) -> None:
    """Found by the deeper fuzz (finding 8): GET /tasks's token names a task, so given
    to that task's executions it passed the partition check, and the query with the
    tasks index's key failed with a 500 (moto; DynamoDB would refuse the start key)."""
    for _ in range(2):
        send(system, "POST", "/tasks", {"rate": "1 hour", "handler_url": HOOK})
    status, _, page = send(system, "GET", "/tasks?limit=1")
    assert status == 200
    token, task_id = page["next_token"], page["items"][0]["task_id"]

    status, _, problem = send(system, "GET", f"/tasks/{task_id}/executions?next_token={token}")

    assert status == 422, problem
    assert problem["errors"][0]["field"] == "next_token"
    status, _, page = send(system, "GET", f"/tasks?limit=1&next_token={token}")
    assert (status, len(page["items"])) == (200, 1)  # where it came from, it still works


def test_a_body_is_a_json_object_never_a_list_of_one(system: Dynacron, task_id: str) -> None:
    """Found by the deeper fuzz (finding 8): ``[{}]`` paused a task, the resolver
    taking the list's first object for the body the document declares an object."""
    for path, raw in (
        (f"/tasks/{task_id}/pause", "[{}]"),
        (f"/tasks/{task_id}/pause", '[{"note": "x"}, []]'),
        ("/tasks", json.dumps([{"rate": "1 hour", "handler_url": HOOK}])),
        (f"/tasks/{task_id}", '[{"name": "renamed"}]'),
    ):
        method = "PATCH" if path == f"/tasks/{task_id}" else "POST"
        status, _, problem = send(system, method, path, raw=raw)
        assert status == 400, (path, raw, problem)
        assert problem["errors"] == [{"field": "body", "message": "must be a JSON object"}]

    status, _, task = send(system, "GET", f"/tasks/{task_id}")
    assert (task["status"], task["name"]) == ("ACTIVE", task_id)
    status, _, task = send(system, "POST", f"/tasks/{task_id}/pause", raw="null")
    assert (status, task["status"]) == (200, "PAUSED")  # an optional body may be null
