"""GET /tasks through the tenant index: pages show each task as GET shows it.

The tenant index projects keys and tags only (so claims do not rewrite it); a page's tasks
are read from the table. These tests pin that a listing still answers with whole,
current tasks, oldest first, in the caller's pages only.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from dynacron.definitions.resources import TENANT_INDEX
from dynacron.domain.clock import SettableClock
from dynacron.entry.composition import Dynacron
from tests.integration.api_client import call

BOB = "arn:aws:sts::000000000000:assumed-role/Billing/session-1"
HOOK = "http://127.0.0.1:9/hook"


def every_page(system: Dynacron, limit: int, principal: str | None = None) -> list[Any]:
    tasks: list[Any] = []
    token = None
    while True:
        query = {"limit": limit} | ({"next_token": token} if token else {})
        extra = {"principal": principal} if principal else {}
        status, page = call(system, "GET", "/tasks", **extra, **query)
        assert status == 200, page
        tasks += page["items"]
        token = page["next_token"]
        if not token:
            return tasks


def test_the_tenant_index_holds_keys_and_tags_only() -> None:
    # A claim changes next_run_at, version, last_scheduled_at: none may be projected.
    assert TENANT_INDEX.projection == "INCLUDE"
    assert TENANT_INDEX.non_key_attributes == ("tags",)


def test_a_listing_shows_whole_current_tasks_oldest_first_after_claims(
    system: Dynacron, clock: SettableClock
) -> None:
    # Given three tasks of Alice's, registered a second apart, and one of Bob's
    created = []
    for number in range(3):
        _, task = call(
            system,
            "POST",
            "/tasks",
            {"rate": "1 minute", "handler_url": HOOK, "name": f"job-{number}"},
        )
        created.append(task["task_id"])
        clock.advance(timedelta(seconds=1))
    _, bobs = call(
        system, "POST", "/tasks", {"rate": "1 minute", "handler_url": HOOK}, principal=BOB
    )
    # And every shard ticked after they fell due: each claimed once, so next_run_at
    # and version moved on the table item (and not in the index)
    clock.advance(timedelta(minutes=1, seconds=5))
    claimed = sum(
        system.ticker.tick_shard(shard).claimed for shard in range(system.settings.shard_count)
    )
    assert claimed == 4
    # When Alice lists her tasks two at a time
    listed = every_page(system, limit=2)
    # Then each is exactly what GET /tasks/{id} answers now, oldest first
    assert [task["task_id"] for task in listed] == created
    for task in listed:
        assert call(system, "GET", f"/tasks/{task['task_id']}")[1] == task
    assert all(task["version"] > 1 for task in listed)
    # And Bob sees only his own
    assert [t["task_id"] for t in every_page(system, limit=10, principal=BOB)] == [bobs["task_id"]]


def test_a_task_deleted_between_index_and_read_is_left_out(
    system: Dynacron, aws: tuple[Any, Any]
) -> None:
    # Given two tasks, one of which is deleted from the table behind the index
    # (as if between the page's Query and its BatchGetItem)
    ids = [
        call(system, "POST", "/tasks", {"rate": "1 hour", "handler_url": HOOK})[1]["task_id"]
        for _ in range(2)
    ]
    dynamodb, _ = aws
    dynamodb.delete_item(TableName=system.settings.tasks_table, Key={"task_id": {"S": ids[0]}})
    # When the tenant lists
    status, page = call(system, "GET", "/tasks")
    # Then the page holds the remaining task only, whole
    assert status == 200
    assert [task["task_id"] for task in page["items"]] == ids[1:]
    assert page["items"][0]["handler_url"] == HOOK
