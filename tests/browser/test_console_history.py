"""The task page's change history in headless Chromium against a real `dynacron
local`: a PATCH shows as its fields before → after, and Revert restores them."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.browser.harness import ConsoleServer, axe_violations, unique

pytestmark = [pytest.mark.system, pytest.mark.browser]


def test_a_patch_shows_its_diff_and_a_revert_restores_it(
    page: Page, console: ConsoleServer
) -> None:
    # Given a task renamed through the API
    before = unique("report")
    task = console.register(name=before)
    task_id = task["task_id"]
    after = f"{before} (renamed)"
    console.call("PATCH", f"/tasks/{task_id}", {"name": after})

    # When its page opens, the change shows who made it and the name before → after
    page.goto(f"/console/tasks/{task_id}")
    changes = page.get_by_role("table", name="Changes of this task, newest first")
    latest = changes.locator("tbody tr").first
    expect(latest).to_contain_text("patch")
    expect(latest.locator("dd").first).to_have_text(f"{before} → {after}")
    assert axe_violations(page) == []

    # When the operator reverts it (confirmed first)
    latest.get_by_role("button", name="Revert").click()
    page.get_by_role("dialog").get_by_role("button", name="Revert").click()

    # Then the old name is back, and the revert is itself the newest change
    expect(page.get_by_role("heading", level=1)).to_have_text(before)
    expect(changes.locator("tbody tr").first).to_contain_text("revert")
    assert console.call("GET", f"/tasks/{task_id}")["name"] == before
