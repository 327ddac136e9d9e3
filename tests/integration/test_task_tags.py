"""Tags over the API: set on create and PATCH, shown, filtered in GET /tasks.

The API runs on moto (DynamoDB), so a filtered listing is the tenant index's
Query with a FilterExpression; the last test pins its bound on Query calls.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

import pytest
from jsonschema import Draft202012Validator

from dynacron.adapters.aws.task_listing import FILTERED_QUERIES
from dynacron.adapters.aws.tasks import DynamoTaskStore
from dynacron.definitions.resources import TENANT_INDEX_PARTS
from dynacron.domain.clock import SettableClock
from dynacron.domain.tasks.tags import TagFilter
from dynacron.entry.composition import Dynacron
from tests.adversarial.test_api_conformance import document, request_validator
from tests.contract.builders import START, a_task
from tests.integration.api_client import call

BOB = "arn:aws:sts::000000000000:assumed-role/Billing/session-1"
HOOK = "http://127.0.0.1:9/hook"


def create(system: Dynacron, principal: str | None = None, **fields: Any) -> dict[str, Any]:
    """A task registered a second after the previous one (listings are oldest first)."""
    assert isinstance(system.clock, SettableClock)
    system.clock.advance(timedelta(seconds=1))
    extra = {"principal": principal} if principal else {}
    status, task = call(
        system, "POST", "/tasks", {"rate": "1 minute", "handler_url": HOOK, **fields}, **extra
    )
    assert status == 201, task
    return task


def listed(system: Dynacron, *tags: str, principal: str | None = None, limit: int = 2) -> Any:
    """Every page of ``GET /tasks?tag=...`` (repeated), following ``next_token``."""
    extra = {"principal": principal} if principal else {}
    ids: list[str] = []
    token = None
    while True:
        query = [("tag", t) for t in tags] + [("limit", str(limit))]
        query += [("next_token", token)] if token else []
        status, page = call(system, "GET", "/tasks?" + urlencode(query), **extra)
        assert status == 200, page
        ids += [task["task_id"] for task in page["items"]]
        token = page["next_token"]
        if not token:
            return ids


def test_tags_are_set_on_create_shown_and_default_to_none(system: Dynacron) -> None:
    task = create(system, tags={"env": "prod", "team": "billing"})
    assert task["tags"] == {"env": "prod", "team": "billing"}
    assert call(system, "GET", f"/tasks/{task['task_id']}")[1]["tags"] == task["tags"]
    assert create(system)["tags"] == {}


def test_patch_replaces_the_whole_map_and_an_empty_one_clears_it(system: Dynacron) -> None:
    task = create(system, tags={"env": "prod", "team": "billing"})
    path = f"/tasks/{task['task_id']}"

    status, patched = call(system, "PATCH", path, {"tags": {"env": "dev"}})
    assert status == 200
    assert patched["tags"] == {"env": "dev"}

    # A PATCH that does not name tags leaves them
    assert call(system, "PATCH", path, {"name": "renamed"})[1]["tags"] == {"env": "dev"}

    status, cleared = call(system, "PATCH", path, {"tags": {}, "version": patched["version"] + 1})
    assert status == 200
    assert cleared["tags"] == {}
    assert listed(system, "env") == []


BAD_TAGS = [
    ({f"k{n}": "v" for n in range(21)}, "tags", "at most 20"),
    ({"bad key": "v"}, "tags", "'bad key'"),
    ({"x" * 64: "v"}, "tags", "1-63 characters"),
    ({"env": "x" * 257}, "tags.env", "at most 256"),
    ({"env": "a\u0000b"}, "tags.env", "no control characters"),
    ({"env\n": "v"}, "tags", "1-63 characters"),
    ({"env": "v\n"}, "tags.env", "no control characters"),
    ({"env": 5}, "tags.env", "must be a string"),
    ({"env": None}, "tags.env", "must be a string"),
    (["env", "prod"], "tags", "JSON object"),
]


@pytest.mark.parametrize(("tags", "field", "says"), BAD_TAGS)
def test_bad_tags_on_create_are_a_422_naming_the_field_and_store_nothing(
    system: Dynacron, tags: Any, field: str, says: str
) -> None:
    body = {"rate": "1 minute", "handler_url": HOOK, "tags": tags}
    status, problem = call(system, "POST", "/tasks", body)
    assert status == 422, problem
    assert problem["errors"][0]["field"] == field
    assert says in problem["errors"][0]["message"]
    assert call(system, "GET", "/tasks")[1]["items"] == []


@pytest.mark.parametrize(("tags", "field", "says"), BAD_TAGS)
def test_bad_tags_on_patch_are_a_422_and_leave_the_task_as_it_was(
    system: Dynacron, tags: Any, field: str, says: str
) -> None:
    task = create(system, tags={"env": "prod"})
    path = f"/tasks/{task['task_id']}"
    status, problem = call(system, "PATCH", path, {"tags": tags, "name": "renamed"})
    assert status == 422, problem
    assert problem["errors"][0]["field"] == field
    assert says in problem["errors"][0]["message"]
    assert call(system, "GET", path)[1] == task


def test_list_filters_by_every_tag_given_and_by_key(system: Dynacron) -> None:
    # Given tasks of Alice's with tags that differ a little, and Bob's with the same
    a = create(system, tags={"env": "prod", "team": "billing"})["task_id"]
    b = create(system, tags={"env": "prod"})["task_id"]
    c = create(system, tags={"env": "staging", "team": "billing"})["task_id"]
    create(system)
    d = create(system, tags={"env": "prod", "team": "billing", "url": "http://x:1/?a=b&c"})
    bobs = create(system, principal=BOB, tags={"env": "prod", "team": "billing"})

    # Then each filter keeps what it says, oldest first, page by page
    assert listed(system, "env:prod") == [a, b, d["task_id"]]
    assert listed(system, "env:prod", "team:billing") == [a, d["task_id"]]
    assert listed(system, "team") == [a, c, d["task_id"]]
    assert listed(system, "url:http://x:1/?a=b&c") == [d["task_id"]]
    assert listed(system, "env:prod", "team:nobody") == []
    # And a filter never reaches another tenant's tasks, either way
    assert listed(system, "env:prod", principal=BOB) == [bobs["task_id"]]
    assert bobs["task_id"] not in listed(system, "team:billing")


@pytest.mark.parametrize(
    ("query", "says"),
    [
        ([("tag", "")], "1-63 characters"),
        ([("tag", "bad key:v")], "'bad key'"),
        ([("tag", "env:" + "x" * 257)], "at most 256"),
        ([("tag", "env:a\nb")], "no control characters"),
        ([("tag", f"k{n}") for n in range(21)], "at most 20"),
    ],
)
def test_a_bad_tag_filter_is_a_422_naming_the_parameter(
    system: Dynacron, query: list[tuple[str, str]], says: str
) -> None:
    status, problem = call(system, "GET", "/tasks?" + urlencode(query))
    assert status == 422, problem
    assert problem["errors"] == [{"field": "tag", "message": problem["errors"][0]["message"]}]
    assert says in problem["detail"]


class CountingClient:
    """A DynamoDB client that counts its Query calls."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.queries = 0

    def query(self, **kwargs: Any) -> Any:
        self.queries += 1
        return self._client.query(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def test_a_filtered_page_makes_a_bounded_number_of_queries_and_resumes_where_it_stopped(
    system: Dynacron, aws: tuple[Any, Any]
) -> None:
    assert FILTERED_QUERIES <= 2 * TENANT_INDEX_PARTS
    dynamodb, _ = aws
    settings = system.settings
    counting = CountingClient(dynamodb)
    # Given a store that reads two index entries per Query, at most three Queries a page
    store = DynamoTaskStore(
        counting,
        settings.tasks_table,
        settings.coordination_table,
        filtered_queries=3,
        evaluated_per_query=2,
        census_table=settings.executions_table,
    )
    # and 15 tasks of one tenant, of which only the 1st, 8th, 9th and 15th match
    matching = {0, 7, 8, 14}
    for n in range(15):
        tags = {"env": "prod"} if n in matching else {"env": "dev"}
        created = START.replace(minute=n)
        store.create_within_quota(
            a_task(f"t{n:02}", tenant_id="acme", created_at=created, tags=tags), None, 100, "s"
        )
    filters = (TagFilter("env", "prod"),)

    # When the tenant's listing is followed page by page (up to 10 a page)
    pages: list[list[str]] = []
    token = None
    while True:
        counting.queries = 0
        page = store.page_owned("acme", 10, token, filters)
        # Then no page made more than three Query calls
        assert counting.queries <= 3
        pages.append([t.task_id for t in page.items])
        token = page.next_token
        if token is None:
            break

    # And every match came once, in order, over several pages (three calls cannot
    # read the tenant index's parts at once): each page as far as its calls read
    assert [task for page in pages for task in page] == ["t00", "t07", "t08", "t14"]
    assert len(pages) > 2

    # A page that fills up mid-call ends at its last item, and the next starts right
    # after it, a task at a time too
    walked: list[str] = []
    token = None
    while True:
        counting.queries = 0
        page = store.page_owned("acme", 1, token, filters)
        assert counting.queries <= 3
        walked += [t.task_id for t in page.items]
        token = page.next_token
        if token is None:
            break
    assert walked == ["t00", "t07", "t08", "t14"]


def test_the_document_states_the_bounds_the_api_enforces(system: Dynacron) -> None:
    doc = document(system)
    create_body = request_validator(doc, "post", "/tasks")
    patch_body = request_validator(doc, "patch", "/tasks/{task_id}")
    body = {"rate": "1 minute", "handler_url": HOOK}
    # Refused by the API and by the document alike (all but a lone surrogate, which
    # no JSON Schema pattern states)
    for tags, _, _ in BAD_TAGS:
        assert not create_body.is_valid(body | {"tags": tags}), tags
        assert not patch_body.is_valid({"tags": tags}), tags
    good = {"k8s.io/app-name_v2": "", "env": "größe: 10 €", **{f"k{n}": "v" for n in range(18)}}
    assert create_body.is_valid(body | {"tags": good})
    assert patch_body.is_valid({"tags": {}})
    assert create(system, tags=good)["tags"] == good
    # The filter's grammar and bound, stated on the array form of ?tag=
    (tag,) = [p for p in doc["paths"]["/tasks"]["get"]["parameters"] if p["name"] == "tag"]
    filters = Draft202012Validator(tag["schema"])
    assert filters.is_valid(["env:prod", "team", "url:http://x:1/?a", "empty:"])
    refusals = (["bad key"], [""], [":v"], ["env:a\nb"], ["env\n"], ["env:v\n"])
    for refused in (*refusals, [f"k{n}" for n in range(21)]):
        assert not filters.is_valid(refused), refused


@pytest.mark.parametrize(
    ("target", "field", "takes"),
    [
        (
            "/tasks?tags=env:prod",
            "tags",
            "GET /tasks (it takes kind, limit, name_prefix, next_token, order, sort, status, tag)",
        ),
        (
            "/tasks?tag=env&Tag=env",
            "Tag",
            "(it takes kind, limit, name_prefix, next_token, order, sort, status, tag)",
        ),
        ("/tenant?verbose=1", "verbose", "GET /tenant (it takes none)"),
    ],
)
def test_a_query_parameter_no_route_declares_is_refused_not_ignored(
    system: Dynacron, target: str, field: str, takes: str
) -> None:
    # A misspelt filter would otherwise list every task as if it were filtered
    create(system, tags={"env": "dev"})
    status, problem = call(system, "GET", target)
    assert status == 422, problem
    assert [e["field"] for e in problem["errors"]] == [field]
    assert takes in problem["detail"]
    # The documents take theirs (Swagger UI's ?format=json), and a request no route
    # takes gets its own answer, whatever its query
    assert call(system, "GET", "/docs?format=json")[0] == 200
    assert call(system, "GET", "/nothing-here?tag=env")[0] == 404
    assert call(system, "PUT", "/tasks?tag=env")[0] == 405
