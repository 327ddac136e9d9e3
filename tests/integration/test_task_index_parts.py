"""A tenant's tasks over the tenant and name indexes' parts (decision 0053).

Each task is written to one of ``TENANT_INDEX_PARTS`` partitions of each index, so
that one tenant's import is not capped by one partition's writes; a listing merges
the parts. These tests walk whole listings a few tasks a page and hold every order
the API offers to the one a single partition gave: each task once, in order.
"""

from __future__ import annotations

import base64
import json
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from typer.testing import CliRunner

from dynacron.adapters.aws.task_items import tenant_part
from dynacron.adapters.aws.task_listing import backfill_tenant_part_pages, backfill_tenant_parts
from dynacron.adapters.aws.tasks import DynamoTaskStore
from dynacron.cli.main import app
from dynacron.definitions.resources import NAME_INDEX, TENANT_INDEX_PARTS, TENANT_PART_ATTRIBUTE
from dynacron.domain.errors import InvalidRequest
from dynacron.domain.schedules.signatures import CENSUS_KEY
from dynacron.domain.tasks.listing import TaskListing, TaskOrder, name_key
from dynacron.domain.tasks.tags import TagFilter
from dynacron.domain.tasks.task import Task
from dynacron.entry.composition import Dynacron
from tests.contract.builders import START, a_task
from tests.integration.api_client import call

TENANT = "acme"
OTHER = "umbrella"
HOOK = "http://127.0.0.1:9/hook"
WORDS = ("backup", "Billing", "cleanup", "digest", "export", "backfill", "report")


class CountingClient:
    def __init__(self, client: Any) -> None:
        self._client = client
        self.queries = 0

    def query(self, **kwargs: Any) -> Any:
        self.queries += 1
        return self._client.query(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


@pytest.fixture
def counting(aws: tuple[Any, Any]) -> CountingClient:
    return CountingClient(aws[0])


@pytest.fixture
def store(system: Dynacron, counting: CountingClient) -> DynamoTaskStore:
    settings = system.settings
    return DynamoTaskStore(
        counting,
        settings.tasks_table,
        settings.coordination_table,
        census_table=settings.executions_table,
    )


def seed(store: DynamoTaskStore, tenant: str, count: int, *, same_time: bool = False) -> list[Task]:
    """``count`` tasks of ``tenant``, a second apart (or all at once), named so that
    name order is not creation order, every third tagged env=prod."""
    tasks = []
    for n in range(count):
        task = replace(
            a_task(
                f"{tenant}-{n:03}",
                tenant_id=tenant,
                created_at=START if same_time else START + timedelta(seconds=n),
                tags={"env": "prod" if n % 3 == 0 else "dev"},
            ),
            name=f"{WORDS[(n * 5) % len(WORDS)]} {(n * 37) % 101}",
        )
        store.create_within_quota(task, None, 1000, "s")
        tasks.append(task)
    return tasks


def walk(
    store: DynamoTaskStore,
    limit: int,
    listing: TaskListing,
    tags: tuple[TagFilter, ...] = (),
    tenant: str = TENANT,
) -> list[str]:
    ids: list[str] = []
    token = None
    for _ in range(1000):
        page = store.page_owned(tenant, limit, token, tags, listing)
        ids += [task.task_id for task in page.items]
        token = page.next_token
        if token is None:
            return ids
    raise AssertionError("the listing never ended")


def by_name(tasks: list[Task]) -> list[str]:
    return [t.task_id for t in sorted(tasks, key=lambda t: name_key(t.name, t.task_id))]


def test_a_tenant_s_tasks_are_spread_over_the_parts_and_listed_in_global_order(
    store: DynamoTaskStore, aws: tuple[Any, Any], system: Dynacron
) -> None:
    # Given 40 tasks of one tenant and a few of another's
    tasks = seed(store, TENANT, 40)
    seed(store, OTHER, 5)
    # Then they lie in most of the tenant's parts, each item carrying its part
    item = aws[0].get_item(
        TableName=system.settings.tasks_table, Key={"task_id": {"S": tasks[0].task_id}}
    )["Item"]
    assert item[TENANT_PART_ATTRIBUTE] == {"S": tenant_part(TENANT, tasks[0].task_id)}
    assert len({tenant_part(TENANT, t.task_id) for t in tasks}) >= TENANT_INDEX_PARTS - 2
    created = [t.task_id for t in tasks]
    named = by_name(tasks)
    prod = (TagFilter("env", "prod"),)
    backups = [t.task_id for t in sorted(tasks, key=lambda t: name_key(t.name, t.task_id))]
    backups = [
        i for i in backups if next(t for t in tasks if t.task_id == i).name.startswith("back")
    ]
    assert 5 < len(backups) < 30
    expected = {
        "created": (TaskListing(), (), created),
        "newest first": (TaskListing(descending=True), (), created[::-1]),
        "by name": (TaskListing(order=TaskOrder.NAME), (), named),
        "by name, descending": (
            TaskListing(order=TaskOrder.NAME, descending=True),
            (),
            named[::-1],
        ),
        "by prefix": (TaskListing(name_prefix="BACK"), (), backups),
        "by prefix, descending": (
            TaskListing(name_prefix="back", descending=True),
            (),
            backups[::-1],
        ),
        "tagged": (TaskListing(), prod, created[::3]),
        "tagged, newest first": (TaskListing(descending=True), prod, created[::3][::-1]),
    }
    # When each listing is walked a page at a time, in pages of several sizes
    for what, (listing, tags, ids) in expected.items():
        for limit in (1, 3, 7, 100):
            # Then it holds every one of the tenant's tasks it should, once, in order
            assert walk(store, limit, listing, tags) == ids, (what, limit)


def test_a_filtered_walk_with_few_queries_a_page_still_lists_every_match_in_order(
    system: Dynacron, counting: CountingClient
) -> None:
    # Given a store allowed 3 Queries of at most 4 entries a filtered page (fewer
    # than the parts), and 60 tasks of which every third matches
    settings = system.settings
    store = DynamoTaskStore(
        counting,
        settings.tasks_table,
        settings.coordination_table,
        filtered_queries=3,
        evaluated_per_query=4,
        census_table=settings.executions_table,
    )
    tasks = seed(store, TENANT, 60)
    prod = (TagFilter("env", "prod"),)
    matches = [t.task_id for t in tasks][::3]
    for descending in (False, True):
        # When the filtered listing is walked, five a page
        ids: list[str] = []
        token = None
        for _ in range(500):
            counting.queries = 0
            page = store.page_owned(TENANT, 5, token, prod, TaskListing(descending=descending))
            # Then no page made more than its 3 Queries
            assert counting.queries <= 3
            ids += [task.task_id for task in page.items]
            if (token := page.next_token) is None:
                break
        # and the pages, short or empty as they may be, hold every match once, in order
        assert ids == (matches[::-1] if descending else matches)


def test_tasks_created_at_one_instant_are_listed_by_task_id_each_once(
    store: DynamoTaskStore,
) -> None:
    # Given 30 tasks created at the same instant (a batch of an import), in most parts
    tasks = seed(store, TENANT, 30, same_time=True)
    by_id = sorted(t.task_id for t in tasks)
    # When their listing is walked four at a time, either way
    # Then every task comes once, ties in order of task id (as one partition had them)
    assert walk(store, 4, TaskListing()) == by_id
    assert walk(store, 4, TaskListing(descending=True)) == by_id[::-1]


def test_a_page_of_fifty_queries_each_part_about_once(
    store: DynamoTaskStore, counting: CountingClient
) -> None:
    # Given 200 tasks of one tenant
    seed(store, TENANT, 200)
    # When three pages of 50 are read in creation order, and by name
    for listing in (TaskListing(), TaskListing(order=TaskOrder.NAME)):
        token = None
        for _ in range(3):
            counting.queries = 0
            page = store.page_owned(TENANT, 50, token, (), listing)
            token = page.next_token
            # Then a page is 50 tasks from a Query of each part and few more
            assert len(page.items) == 50
            assert TENANT_INDEX_PARTS <= counting.queries <= TENANT_INDEX_PARTS + 3


def test_a_token_is_refused_for_another_tenant_or_when_forged(store: DynamoTaskStore) -> None:
    # Given pages of two tenants, each with a token
    seed(store, TENANT, 12)
    seed(store, OTHER, 12)
    listings = (TaskListing(), TaskListing(order=TaskOrder.NAME), TaskListing(name_prefix="b"))
    for listing in listings:
        token = store.page_owned(OTHER, 2, None, (), listing).next_token
        assert token is not None
        # When Acme presents Umbrella's token, Then it is refused
        with pytest.raises(InvalidRequest):
            store.page_owned(TENANT, 2, token, (), listing)
        # And a token rewritten to say something else of the same listing is too
        payload = json.loads(base64.urlsafe_b64decode(token))
        for key in ({"parts": [0]}, {"parts": [[["x"], None]] * 8}, {"after": ""}, {"after": 7}):
            forged = base64.urlsafe_b64encode(
                json.dumps({"listing": payload["listing"], "key": key}).encode()
            ).decode()
            with pytest.raises(InvalidRequest):
                store.page_owned(OTHER, 2, forged, (), listing)


def test_a_forged_position_reads_the_caller_s_own_parts_only(store: DynamoTaskStore) -> None:
    # Given Umbrella's tasks and Acme's token, its positions rewritten to name
    # Umbrella's first task in every part
    theirs = seed(store, OTHER, 12)
    seed(store, TENANT, 3)
    token = store.page_owned(TENANT, 1, None, ()).next_token
    assert token is not None
    payload = json.loads(base64.urlsafe_b64decode(token))
    first = theirs[0]
    at = [first.created_at.isoformat().replace("+00:00", "Z"), first.task_id]
    payload["key"] = {"parts": [[None, None]] * 4 + [[at, None]] * 4}
    forged = base64.urlsafe_b64encode(json.dumps(payload).encode()).decode()
    # When Acme lists with it, Then it sees its own tasks only
    try:
        page = store.page_owned(TENANT, 50, forged, ())
    except InvalidRequest:
        return
    assert {task.tenant_id for task in page.items} <= {TENANT}


def before_the_parts(client: Any, table: str, task_id: str) -> None:
    """Put ``task_id``'s item back as it was before decision 0053: without its part."""
    item = client.get_item(TableName=table, Key={"task_id": {"S": task_id}})["Item"]
    del item[TENANT_PART_ATTRIBUTE]
    client.put_item(TableName=table, Item=item)


def created(system: Dynacron, name: str) -> str:
    status, task = call(
        system, "POST", "/tasks", {"rate": "1 hour", "handler_url": HOOK, "name": name}
    )
    assert status == 201, task
    return str(task["task_id"])


def listed_names(system: Dynacron, **query: str) -> list[str]:
    status, page = call(system, "GET", "/tasks", limit=100, **query)
    assert status == 200, page
    return [task["name"] for task in page["items"]]


def test_the_backfill_gives_old_tasks_their_part_once(
    system: Dynacron, aws: tuple[Any, Any]
) -> None:
    # Given three tasks stored before the parts, and a newer one
    client, table = aws[0], system.settings.tasks_table
    for n in range(3):
        before_the_parts(client, table, created(system, f"Old {n}"))
    created(system, "New")
    assert listed_names(system) == ["New"]
    assert listed_names(system, name_prefix="old") == []
    # When the operator's command runs, two items a Scan page
    result = CliRunner().invoke(
        app,
        ["admin", "backfill-tenant-parts", "--tasks-table", table, "--page-size", "2"],
    )
    assert result.exit_code == 0, result.output
    # Then it gave the three their part, and both indexes list every task
    summary = json.loads(result.stdout)
    assert summary == {"tasks_table": table, "scanned": 4, "given": 3, "changed_meanwhile": 0}
    assert "gave 3 a tenant part" in result.stderr.splitlines()[-1]
    assert sorted(listed_names(system)) == ["New", "Old 0", "Old 1", "Old 2"]
    assert listed_names(system, name_prefix="old") == ["Old 0", "Old 1", "Old 2"]
    # And a second run has nothing left to do
    assert backfill_tenant_parts(client, table) == 0


def test_the_backfill_leaves_a_task_changed_or_deleted_while_it_runs(
    system: Dynacron, aws: tuple[Any, Any]
) -> None:
    # Given two tasks stored before the parts
    client, table = aws[0], system.settings.tasks_table
    renamed, deleted = created(system, "Before"), created(system, "Doomed")
    for task_id in (renamed, deleted):
        before_the_parts(client, table, task_id)

    # When, after the Scan read them and before its first write, the API renames one
    # (its PATCH writes the whole task, part and all) and deletes the other
    def meanwhile() -> None:
        item = client.get_item(TableName=table, Key={"task_id": {"S": renamed}})["Item"]
        if item["name"]["S"] == "Before":
            assert call(system, "PATCH", f"/tasks/{renamed}", {"name": "After"})[0] == 200
            assert call(system, "DELETE", f"/tasks/{deleted}")[0] == 204

    pages = list(backfill_tenant_part_pages(client, table, before_write=meanwhile))
    # Then the backfill wrote neither: the PATCH's item stands, the deleted task is
    # not made again
    assert sum(page.given for page in pages) == 0
    assert sum(page.changed_meanwhile for page in pages) == 2
    item = client.get_item(TableName=table, Key={"task_id": {"S": renamed}})["Item"]
    assert item["name"] == {"S": "After"}
    assert item[TENANT_PART_ATTRIBUTE] == {"S": tenant_part(item["tenant_id"]["S"], renamed)}
    assert "Item" not in client.get_item(TableName=table, Key={"task_id": {"S": deleted}})
    assert listed_names(system) == ["After"]


def test_a_part_key_is_the_same_size_for_every_tenant_and_a_shared_part_shows_no_one_else(
    store: DynamoTaskStore, aws: tuple[Any, Any], system: Dynacron
) -> None:
    # A part's key does not grow with the tenant's id (an IAM principal's ARN)
    principal = "arn:aws:sts::123456789012:assumed-role/platform-team-deployer/session-" + "x" * 40
    assert len(tenant_part(principal, "t")) == len(tenant_part("a", "t")) == 18
    # Given a tenant's tasks, and another tenant's task in the same part (two
    # tenants whose digests collide: written here around the API)
    tasks = seed(store, TENANT, 12)
    client, table = aws[0], system.settings.tasks_table
    stranger = client.get_item(TableName=table, Key={"task_id": {"S": tasks[0].task_id}})["Item"]
    stranger |= {"task_id": {"S": "stranger-task"}, "tenant_id": {"S": OTHER}}
    stranger.pop(CENSUS_KEY)  # not counted yet: the census walk would count it
    client.put_item(TableName=table, Item=stranger)
    # Then no listing of the tenant shows it, in any order, and its census counts
    # only its own tasks
    mine = sorted(t.task_id for t in tasks)
    for listing in (TaskListing(), TaskListing(order=TaskOrder.NAME)):
        assert sorted(walk(store, 5, listing)) == mine
    assert sorted(walk(store, 5, TaskListing(), (TagFilter("env", "prod"),))) == sorted(
        t.task_id for t in tasks if t.tags["env"] == "prod"
    )
    page = store.count_uncounted(TENANT, 100, None)
    assert "stranger-task" not in page.items


def test_a_listing_whose_index_is_not_there_yet_is_a_503_to_retry(
    system: Dynacron, aws: tuple[Any, Any]
) -> None:
    # Given a stack between two deploys of its upgrade: the name index not built yet
    created(system, "Anything")
    aws[0].update_table(
        TableName=system.settings.tasks_table,
        GlobalSecondaryIndexUpdates=[{"Delete": {"IndexName": NAME_INDEX.name}}],
    )
    # When a tenant lists its tasks by name
    status, problem = call(system, "GET", "/tasks?sort=name")
    # Then it is told to try again later, not that the service failed
    assert status == 503, problem
    assert "try again" in problem["detail"]
    # And the listings whose index is there still answer
    assert listed_names(system) == ["Anything"]
