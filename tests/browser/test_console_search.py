"""The console's task list among thousands of tasks: search, tag filter and sort go
through the API (GET /tasks), so a task is found wherever it is, with no ceiling on
how many are loaded (decision 0045)."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from playwright.sync_api import Locator, Page, expect

from tests.browser.harness import ConsoleServer, console_server, unique
from tests.support import wait_until

pytestmark = [pytest.mark.system, pytest.mark.browser]

# More than the 1,000 the console once loaded, in batches of POST /tasks/batch.
SEEDED = 3000
BATCH = 100
FIRST_BATCH = re.compile(r"bulk-000\d\d")


def seed(server: ConsoleServer) -> None:
    """``SEEDED`` tasks named ``bulk-00000``..., due in a day, tagged by parity."""
    client = httpx.Client(timeout=60, trust_env=False)
    hook = f"{server.ok.url}/hook"
    for start in range(0, SEEDED, BATCH):
        body = {
            "tasks": [
                {
                    "name": f"bulk-{n:05d}",
                    "rate": "1 day",
                    "handler_url": hook,
                    "tags": {"parity": "even" if n % 2 == 0 else "odd"},
                }
                for n in range(start, start + BATCH)
            ]
        }
        while True:
            response = client.post(f"{server.url}/tasks/batch", json=body)
            if response.status_code != 429:
                break
            time.sleep(float(response.headers.get("Retry-After", "1")))
        assert response.status_code == 200, response.text
        outcomes = {item["outcome"] for item in response.json()["items"]}
        assert outcomes == {"created"}, response.text
    client.close()


@pytest.fixture(scope="module")
def crowded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleServer]:
    """A local mode holding thousands of tasks (a module of its own: other modules'
    pages stay small)."""
    with console_server(tmp_path_factory.mktemp("crowded") / "data") as server:
        seed(server)
        yield server


@pytest.fixture
def crowded_page(browser: Any, crowded: ConsoleServer) -> Iterator[Page]:
    from tests.browser.harness import viewer_page

    with viewer_page(browser, crowded.url) as page:
        yield page


def rows(page: Page) -> Locator:
    return page.locator("#tasks-table tbody tr")


def test_a_task_registered_after_thousands_is_found_by_name(
    crowded_page: Page, crowded: ConsoleServer
) -> None:
    page = crowded_page
    # Given thousands of tasks, and one registered after them all
    needle = crowded.register(name=f"Needle-{uuid.uuid4().hex[:8]}")
    page.goto("/console/tasks")
    # The list shows a page, says there are more, and offers them: no ceiling
    expect(rows(page)).to_have_count(100)
    summary = page.locator("#tasks-summary")
    expect(summary).to_contain_text("more on the next page")
    expect(summary).not_to_contain_text("1,000")
    page.get_by_role("button", name="Show more tasks").click()
    expect(rows(page)).to_have_count(200)

    # When the person searches the start of its name, in another case
    prefix = needle["name"][:12].lower()
    page.get_by_label("Search by name").fill(prefix)

    # Then the API finds it among them all, and the address keeps the search
    expect(rows(page)).to_have_count(1)
    expect(page.get_by_role("link", name=needle["name"])).to_be_visible()
    assert f"q={quote(prefix)}" in page.url
    # And a reload of that address shows the same search
    page.reload()
    expect(page.get_by_label("Search by name")).to_have_value(prefix)
    expect(rows(page)).to_have_count(1)
    # A prefix of thousands lists them by name, a page at a time
    page.get_by_label("Search by name").fill("BULK-029")
    expect(rows(page)).to_have_count(100)
    expect(rows(page).first).to_contain_text("bulk-02900")
    expect(page.get_by_role("button", name="Show more tasks")).to_be_hidden()


def test_the_tag_filter_and_the_sorts_go_through_the_api(
    crowded_page: Page, crowded: ConsoleServer
) -> None:
    page = crowded_page
    # Given, after the thousands, a task due soonest and first by name, and a tagged one
    team = unique("billing")
    soonest = crowded.register(name=unique("zz-soonest"), rate="1 minute")
    first = crowded.register(name=unique("aaa-first"))
    tagged = crowded.register(name=unique("tagged"), tags={"team": team})
    page.goto("/console/tasks")

    # Sorted by next run (the default): the one due soonest comes first
    expect(rows(page).first).to_contain_text(soonest["name"])
    # By name: the first name comes first, and the address says so
    page.get_by_label("Sort by").select_option("name")
    expect(rows(page).first).to_contain_text(first["name"])
    expect(page.get_by_role("columnheader", name="Name")).to_have_attribute(
        "aria-sort", "ascending"
    )
    assert "sort=name" in page.url
    # By creation: the thousands first, oldest first (a batch's tasks are created
    # at one instant, so the first is one of the first batch's)
    page.get_by_label("Sort by").select_option("created")
    expect(rows(page).first).to_contain_text(FIRST_BATCH)

    # A tag filter finds the tagged task among them all
    page.get_by_label("Tag", exact=True).fill(f"team:{team}")
    page.get_by_label("Tag", exact=True).press("Enter")
    expect(rows(page)).to_have_count(1)
    expect(page.get_by_role("link", name=tagged["name"])).to_be_visible()
    # and one that thousands have lists a page of them, every one with the tag
    page.get_by_label("Tag", exact=True).fill("parity:odd")
    page.get_by_label("Tag", exact=True).press("Enter")
    expect(rows(page)).to_have_count(100)
    expect(rows(page).first).to_contain_text(FIRST_BATCH)
    expect(rows(page).filter(has_text="parity: even")).to_have_count(0)
    # A status the tagged tasks do not have: none
    page.get_by_label("Status").select_option("PAUSED")
    expect(page.locator("#tasks-table tbody")).to_contain_text("No task matches these filters.")


def test_an_execution_across_tasks_is_named_whatever_the_number_of_tasks(
    crowded_page: Page, crowded: ConsoleServer
) -> None:
    page = crowded_page
    # Given, after the thousands, a task whose handler answers 500, tried once
    task = crowded.register(
        name=unique("ledger-sync"),
        handler_url=f"{crowded.failing.url}/sync",
        retry={"max_attempts": 1},
    )
    execution_id = crowded.call("POST", f"/tasks/{task['task_id']}/trigger", {})["execution_id"]
    assert wait_until(
        lambda: crowded.call("GET", f"/executions/{execution_id}")["dead_lettered_at"], 20
    )
    # Then the executions page names its task (read by id, not from a first page of tasks)
    page.goto("/console/executions?status=FAILED")
    row = page.locator(f'tr[data-execution-id="{execution_id}"]')
    expect(row.get_by_role("link", name=task["name"])).to_be_visible()


def test_a_task_to_run_after_is_found_by_name_among_thousands(
    crowded_page: Page, crowded: ConsoleServer
) -> None:
    page = crowded_page
    # Given, after the thousands, the task a new one is to follow
    upstream = crowded.register(name=unique("zz-warehouse-load"))
    page.goto("/console/tasks/new")
    name = unique("after-load")
    page.get_by_label("Name", exact=True).fill(name)
    page.get_by_label("Handler URL").fill(f"{crowded.ok.url}/report")
    page.get_by_label("After another task").check()
    # When the person searches it by the start of its name, in another case
    page.get_by_label("Find the task by name").fill(upstream["name"][:14].upper())
    choice = f"{upstream['name']} ({upstream['task_id'][:8]})"
    expect(page.get_by_label("After task").locator("option")).to_have_count(2)
    page.get_by_label("After task").select_option(label=choice)
    page.get_by_role("button", name="Create task").click()
    # Then the new task runs after it
    expect(page.get_by_role("heading", level=1)).to_have_text(name)
    task_id = page.url.rstrip("/").rsplit("/", 1)[1]
    assert crowded.call("GET", f"/tasks/{task_id}")["schedule"] == {
        "kind": "after",
        "expression": upstream["task_id"],
    }
    # And editing it offers the task it follows, though not among the first by name
    page.goto(f"/console/tasks/{task_id}/edit")
    expect(page.get_by_label("After task")).to_have_value(upstream["task_id"])
