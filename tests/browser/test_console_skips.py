"""Skips and calendars in the console: a task's next occurrences show the one
skipped by hand and the day a calendar excludes, each with why (decisions 0055, 0056)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from playwright.sync_api import Page, expect

from tests.browser.harness import ConsoleServer, axe_violations, unique

pytestmark = [pytest.mark.system, pytest.mark.browser]


def test_a_skip_and_a_calendars_excluded_day_are_marked_in_the_preview(
    page: Page, console: ConsoleServer
) -> None:
    # Given a daily task, a calendar that excludes the day of its third occurrence,
    # and its next occurrence skipped by hand
    task = console.register(name=unique("daily-report"), cron="0 12 * * *")
    task_id = task["task_id"]
    upcoming = console.call("GET", f"/tasks/{task_id}/next", count=3)["occurrences"]
    third_day = datetime.fromisoformat(upcoming[2]).astimezone(UTC).date().isoformat()
    calendar = unique("holidays")
    console.call("PUT", f"/calendars/{calendar}", {"dates": [third_day]})
    console.call("PATCH", f"/tasks/{task_id}", {"exclude_calendars": [calendar]})
    console.call("POST", f"/tasks/{task_id}/skip", {"occurrences": 1, "note": "deploy freeze"})

    # When its page shows the next occurrences
    page.goto(f"/console/tasks/{task_id}")
    rows = page.locator("table.occurrences tbody tr")
    expect(rows).to_have_count(10)

    # Then the skipped one and the excluded one are marked, with why; the others run
    expect(rows.nth(0)).to_have_class("skipped-occurrence")
    expect(rows.nth(0)).to_contain_text("Skipped")
    expect(rows.nth(0)).to_contain_text("deploy freeze")
    expect(rows.nth(1)).not_to_have_class("skipped-occurrence")
    expect(rows.nth(1)).to_contain_text("Runs")
    expect(rows.nth(2)).to_have_class("skipped-occurrence")
    expect(rows.nth(2)).to_contain_text(f"excluded by calendar {calendar}")
    expect(page.locator("dl.facts").first).to_contain_text(f"Not on{calendar}")
    assert axe_violations(page) == []
