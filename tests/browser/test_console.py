"""The console in headless Chromium against a real `dynacron local`: what an
operator does, end to end, by keyboard-reachable controls found by their labels."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from playwright.sync_api import Locator, Page, expect

from tests.browser.harness import ConsoleServer, axe_violations, unique
from tests.support import wait_until

pytestmark = [pytest.mark.system, pytest.mark.browser]


def heading(page: Page) -> Locator:
    return page.get_by_role("heading", level=1)


def main_nav(page: Page, name: str) -> Locator:
    return page.get_by_role("navigation", name="Main").get_by_role("link", name=name, exact=True)


def test_a_task_created_through_the_form_is_previewed_then_listed(
    page: Page, console: ConsoleServer
) -> None:
    name = unique("monthly-report")
    team = unique("finance")
    page.goto("/console/tasks/new")
    page.get_by_label("Name", exact=True).fill(name)
    page.get_by_label("Handler URL").fill("http://192.0.2.10/report")

    # Given a cron the API refuses: the preview shows its problem next to the field
    page.get_by_label("Cron expression").fill("0 25 * * *")
    page.get_by_role("button", name="Preview", exact=True).click()
    expect(page.locator("#err-cron")).to_contain_text("out of range")
    expect(page.get_by_label("Cron expression")).to_have_attribute("aria-invalid", "true")

    # When it is fixed: the occurrences, in words, with the DST changes marked
    page.get_by_label("Cron expression").fill("0 9 1 * *")
    page.get_by_label("Time zone").fill("Europe/Berlin")
    page.get_by_role("button", name="Preview", exact=True).click()
    preview = page.locator("#preview")
    expect(preview.locator(".explanation")).to_contain_text(
        "At 09:00, on day 1 of the month, on the wall clock of Europe/Berlin"
    )
    expect(preview.locator("tbody tr:not(.dst-row)")).to_have_count(10)
    # Ten months hold a daylight-saving change or two, whenever the test runs
    expect(preview.locator(".dst-row").first).to_contain_text("clocks in Europe/Berlin go")
    expect(page.locator("#err-cron")).to_be_hidden()

    page.get_by_role("button", name="Add a tag").click()
    page.get_by_label("Key", exact=True).fill("team")
    page.get_by_label("Value", exact=True).fill(team)

    # When saved with a handler this deployment refuses: the API's 422, by the field
    page.get_by_role("button", name="Create task").click()
    expect(page.locator(".error-summary")).to_be_focused()
    expect(page.locator("#err-handler_url")).to_be_visible()
    expect(page.get_by_label("Handler URL")).to_have_attribute("aria-invalid", "true")

    # Then, fixed, it is created, shown, and listed
    page.get_by_label("Handler URL").fill(f"{console.ok.url}/report")
    page.get_by_role("button", name="Create task").click()
    expect(heading(page)).to_have_text(name)
    task_id = page.url.rstrip("/").rsplit("/", 1)[1]
    task = console.call("GET", f"/tasks/{task_id}")
    assert task["schedule"] == {"kind": "cron", "expression": "0 9 1 * *"}
    assert (task["timezone"], task["tags"]) == ("Europe/Berlin", {"team": team})
    expect(page.locator(".explanation")).to_contain_text("on the wall clock of Europe/Berlin")

    main_nav(page, "Tasks").click()
    row = page.locator(f'tr[data-task-id="{task_id}"]')
    expect(row.get_by_role("link", name=name)).to_be_visible()
    expect(row).to_contain_text("0 9 1 * *")
    expect(row).to_contain_text("UTC")  # the next run in UTC beside the viewer's time


def test_a_triggered_execution_turns_succeeded_then_the_task_pauses_and_resumes(
    page: Page, console: ConsoleServer
) -> None:
    task = console.register(name=unique("export"))
    page.goto(f"/console/tasks/{task['task_id']}")
    expect(heading(page)).to_have_text(task["name"])

    page.get_by_role("button", name="Trigger now").click()
    expect(page.get_by_role("status")).to_contain_text("Triggered")
    latest = page.locator("#history-table tbody tr").first
    expect(latest.locator(".badge")).to_have_text("SUCCEEDED")
    expect(latest).to_contain_text("HTTP 200")
    expect(latest).to_contain_text("rows_exported")  # the handler's answer

    page.get_by_role("button", name="Pause…").click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_label("Note (optional): why it is paused").fill("warehouse migration")
    dialog.get_by_role("button", name="Pause task").click()
    expect(page.locator(".head-badge .badge")).to_have_text("PAUSED")
    expect(page.locator(".notice")).to_contain_text("warehouse migration")
    assert console.call("GET", f"/tasks/{task['task_id']}")["pause_note"] == "warehouse migration"

    page.get_by_role("button", name="Resume").click()
    expect(page.locator(".head-badge .badge")).to_have_text("ACTIVE")
    expect(page.get_by_role("status")).to_have_text("Task resumed.")


def test_filtering_by_tag_lists_only_the_tasks_with_it(page: Page, console: ConsoleServer) -> None:
    team = unique("billing")
    tagged = console.register(name=unique("invoices"), tags={"team": team})
    other = console.register(name=unique("cleanup"), tags={"team": unique("ops")})
    page.goto("/console/tasks")
    expect(page.get_by_role("link", name=other["name"])).to_be_visible()

    page.get_by_label("Tag", exact=True).fill(f"team:{team}")
    page.get_by_label("Tag", exact=True).press("Enter")

    expect(page.locator("#tasks-table tbody tr")).to_have_count(1)
    expect(page.get_by_role("link", name=tagged["name"])).to_be_visible()
    expect(page.get_by_role("link", name=other["name"])).to_have_count(0)
    assert f"tag=team%3A{team}" in page.url
    # And a search by name narrows what is shown
    page.get_by_label("Tag", exact=True).fill("")
    page.get_by_label("Tag", exact=True).press("Enter")
    page.get_by_label("Search by name").fill(other["name"])
    expect(page.locator("#tasks-table tbody tr")).to_have_count(1)
    # A column's header sorts by it, and says so
    page.get_by_role("button", name="Name", exact=True).click()
    name_column = page.get_by_role("columnheader", name="Name")
    expect(name_column).to_have_attribute("aria-sort", "ascending")
    assert "sort=name" in page.url


def test_a_failed_execution_is_found_across_tasks_and_redriven(
    page: Page, console: ConsoleServer
) -> None:
    # Given a task whose handler answers 500 and which tries once only
    task = console.register(
        name=unique("ledger-sync"),
        handler_url=f"{console.failing.url}/sync",
        retry={"max_attempts": 1},
    )
    execution_id = console.call("POST", f"/tasks/{task['task_id']}/trigger", {})["execution_id"]
    assert wait_until(
        lambda: console.call("GET", f"/executions/{execution_id}")["dead_lettered_at"], 20
    )

    page.goto("/console/executions")
    page.get_by_label("Status", exact=True).select_option("FAILED")
    row = page.locator(f'tr[data-execution-id="{execution_id}"]')
    expect(row).to_contain_text(task["name"])
    expect(row).to_contain_text("HTTP 500")
    expect(row.locator(".badge")).to_have_text("FAILED")
    assert "status=FAILED" in page.url

    deliveries = len(console.failing.snapshot())
    row.get_by_role("button", name=re.compile(r"^Redrive")).click()
    expect(page.get_by_role("status")).to_contain_text("Redriven")
    assert wait_until(lambda: len(console.failing.snapshot()) > deliveries, 30)

    # Failed again (the handler still answers 500), it is redriven from its task's page too
    assert wait_until(
        lambda: console.call("GET", f"/executions/{execution_id}")["status"] == "FAILED", 20
    )
    page.get_by_role("link", name=task["name"]).click()
    deliveries = len(console.failing.snapshot())
    page.get_by_role("button", name=f"Redrive {execution_id}").click()
    expect(page.get_by_role("status")).to_contain_text("Redriven")
    assert wait_until(lambda: len(console.failing.snapshot()) > deliveries, 30)


def test_an_edit_of_a_task_changed_meanwhile_is_refused_clearly(
    page: Page, console: ConsoleServer
) -> None:
    task = console.register(name=unique("digest"))
    page.goto(f"/console/tasks/{task['task_id']}/edit")
    page.get_by_label("Name", exact=True).fill("digest (renamed)")
    # Meanwhile someone else changes it
    console.call("PATCH", f"/tasks/{task['task_id']}", {"jitter_seconds": 5})

    page.get_by_role("button", name="Save changes").click()
    expect(page.get_by_role("alert")).to_contain_text("changed since you opened it")
    assert console.call("GET", f"/tasks/{task['task_id']}")["name"] == task["name"]

    page.get_by_role("button", name="Load the current version").click()
    expect(page.get_by_label("Jitter (s)")).to_have_value("5")
    page.get_by_label("Name", exact=True).fill("digest (renamed)")
    page.get_by_role("button", name="Save changes").click()
    expect(heading(page)).to_have_text("digest (renamed)")


def test_a_deleted_task_is_confirmed_first(page: Page, console: ConsoleServer) -> None:
    task = console.register(name=unique("old-job"))
    page.goto(f"/console/tasks/{task['task_id']}")
    page.get_by_role("button", name="Delete…").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("cannot be undone")
    expect(dialog.get_by_role("button", name="Cancel")).to_be_focused()  # the safe choice
    page.keyboard.press("Escape")
    expect(dialog).to_have_count(0)
    assert console.call("GET", f"/tasks/{task['task_id']}")["name"] == task["name"]

    page.get_by_role("button", name="Delete…").click()
    page.get_by_role("dialog").get_by_role("button", name="Delete task").click()
    expect(heading(page)).to_have_text("Tasks")
    expect(page.get_by_role("link", name=task["name"])).to_have_count(0)


def test_what_a_tenant_wrote_is_shown_as_text_never_run_as_markup(
    page: Page, console: ConsoleServer
) -> None:
    hostile = '<img src=x onerror="window.pwned=1">'
    task = console.register(
        name=f"{hostile} {unique('x')}",
        tags={"note": "<b>bold</b>"},
        payload={"html": "<script>window.pwned = 2</script>"},
    )
    for path in ("/console/tasks", f"/console/tasks/{task['task_id']}"):
        page.goto(path)
        expect(page.get_by_text(task["name"]).first).to_be_visible()
        expect(page.locator("main img, main b, main script")).to_have_count(0)
        assert page.evaluate("window.pwned") is None


def test_a_tasks_notifications_are_shown_on_its_page(page: Page, console: ConsoleServer) -> None:
    hook = f"{console.ok.url}/notify"
    task = console.register(
        name=unique("told"),
        notify={
            "on_failure": {"url": hook, "after": 3},
            "on_late": {"url": hook, "within_seconds": 600},
        },
    )
    page.goto(f"/console/tasks/{task['task_id']}")
    notify = page.locator("dl.facts.two-columns ul.notify li")
    expect(notify).to_have_text([f"on_failure after 3 → {hook}", f"on_late within 600 s → {hook}"])


def test_the_pages_pass_axe_core_and_work_from_the_keyboard(
    page: Page, console: ConsoleServer
) -> None:
    task = console.register(
        name=unique("axe"),
        cron="0 9 * * MON-FRI",
        timezone="Europe/Berlin",
        tags={"env": "qa"},
        notify={"on_failure": {"url": f"{console.ok.url}/notify", "after": 3}},
    )
    console.call("POST", f"/tasks/{task['task_id']}/trigger", {})
    pages = {
        "/console/tasks": "#tasks-table",
        f"/console/tasks/{task['task_id']}": "#history-table",
        f"/console/tasks/{task['task_id']}/edit": "#preview table",
        "/console/tasks/new": "form",
        "/console/executions": "main .summary",
        "/console/forecast": "svg.chart",
    }
    found = {}
    for path, ready in pages.items():
        page.goto(path)
        expect(page.locator(ready).first).to_be_visible()
        found[path] = axe_violations(page)
    # A dialog open, too
    page.goto(f"/console/tasks/{task['task_id']}")
    page.get_by_role("button", name="Pause…").click()
    expect(page.get_by_role("dialog")).to_be_visible()
    found["pause dialog"] = axe_violations(page)
    assert not any(found.values()), found

    # The skip link comes first and lands on the content
    page.keyboard.press("Escape")
    page.goto("/console/tasks")
    page.keyboard.press("Tab")
    expect(page.get_by_role("link", name="Skip to main content")).to_be_focused()
    page.keyboard.press("Enter")
    assert page.evaluate("document.activeElement.id") == "main"


def test_trigger_and_backfill_from_the_keyboard_alone(page: Page, console: ConsoleServer) -> None:
    # An hourly task: the last hour, the backfill dialog's default range, holds a run
    task = console.register(name=unique("hourly"), cron="0 * * * *")
    page.goto(f"/console/tasks/{task['task_id']}")
    expect(heading(page)).to_have_text(task["name"])

    def tab_to(name: str) -> None:
        for _ in range(40):
            page.keyboard.press("Tab")
            if page.evaluate("document.activeElement.textContent") == name:
                return
        raise AssertionError(f"no control named {name!r} is reachable with Tab")

    tab_to("Trigger now")
    page.keyboard.press("Enter")
    expect(page.get_by_role("status")).to_contain_text("Triggered")

    tab_to("Backfill…")
    page.keyboard.press("Enter")
    dialog = page.get_by_role("dialog")
    expect(dialog.get_by_label("From")).to_be_focused()
    page.keyboard.press("Enter")  # submits the dialog's form, as Enter in a form does
    # One top of the hour in the range, two when it is run at hh:00
    expect(page.get_by_role("status")).to_contain_text(re.compile(r"Backfill: started (\d) of \1"))
    backfilled = page.locator("#history-table tbody tr", has_text="backfill").first
    expect(backfilled.locator(".badge")).to_have_text("SUCCEEDED")


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
    expect(heading(page)).to_have_text(before)
    expect(changes.locator("tbody tr").first).to_contain_text("revert")
    assert console.call("GET", f"/tasks/{task_id}")["name"] == before


# Skips and calendars (decisions 0055, 0056), on this module's server: a task's next
# occurrences show the one skipped by hand and the day a calendar excludes, with why.
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
