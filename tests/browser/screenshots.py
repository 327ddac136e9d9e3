"""Pictures of the console for the README: `make screenshots`.

Starts `dynacron local` on a fresh data directory with loopback handlers,
registers a few tasks a small team might run, runs some of them (one handler
fails), and writes PNGs of the tasks list, a task's page, the next 24 hours and
the create form to docs/images/.
"""

from __future__ import annotations

import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from playwright.sync_api import Page, expect, sync_playwright

from tests.browser.harness import ConsoleServer, console_server, launch, viewer_page
from tests.support import ROOT, wait_until

OUT = ROOT / "docs" / "images"
VIEWPORT = {"width": 1360, "height": 860}


def tasks_of(console: ConsoleServer) -> dict[str, dict[str, Any]]:
    ok, failing = f"{console.ok.url}/hooks", f"{console.failing.url}/hooks"
    specs: list[dict[str, Any]] = [
        {
            "name": "nightly-billing-export",
            "cron": "0 2 * * *",
            "timezone": "Europe/Berlin",
            "tags": {"team": "billing", "env": "prod"},
        },
        {
            "name": "monthly-invoicing",
            "cron": "0 9 1 * *",
            "timezone": "Europe/Berlin",
            "tags": {"team": "billing", "env": "prod"},
            "payload": {"format": "pdf", "send_to": "customers"},
            "retry": {"max_attempts": 2, "base_delay_seconds": 1, "max_delay_seconds": 1},
        },
        {
            "name": "invoice-reminders",
            "cron": "0 9 * * MON-FRI",
            "timezone": "America/New_York",
            "tags": {"team": "billing"},
        },
        {"name": "cache-warmup", "rate": "5 minutes", "tags": {"team": "platform"}},
        {"name": "search-reindex", "cron": "0 * * * *", "tags": {"team": "search", "env": "prod"}},
        {"name": "session-cleanup", "cron": "0 * * * *", "tags": {"team": "platform"}},
        {"name": "metrics-rollup", "cron": "*/15 * * * *", "tags": {"team": "observability"}},
        {
            "name": "ledger-sync",
            "rate": "30 minutes",
            "handler_url": failing,
            "retry": {"max_attempts": 1},
            "tags": {"team": "finance", "env": "prod"},
        },
        {"name": "db-backup-eu", "cron": "0 0 * * *", "tags": {"team": "platform", "region": "eu"}},
        {"name": "db-backup-us", "cron": "0 0 * * *", "tags": {"team": "platform", "region": "us"}},
        {
            "name": "weekly-digest",
            "cron": "0 8 * * MON",
            "timezone": "Europe/London",
            "tags": {"team": "growth"},
        },
        {"name": "sitemap-refresh", "cron": "30 4 * * *", "tags": {"team": "web"}},
    ]
    tasks = {}
    for spec in specs:
        task = console.call("POST", "/tasks", {"handler_url": ok, **spec})
        tasks[task["name"]] = task
    return tasks


def run_some(console: ConsoleServer, tasks: dict[str, dict[str, Any]]) -> None:
    def trigger(name: str) -> str:
        execution_id: str = console.call("POST", f"/tasks/{tasks[name]['task_id']}/trigger", {})[
            "execution_id"
        ]
        return execution_id

    def finished(execution_id: str) -> bool:
        status = console.call("GET", f"/executions/{execution_id}")["status"]
        return status in ("SUCCEEDED", "FAILED")

    invoicing = tasks["monthly-invoicing"]["task_id"]
    now = datetime.now(UTC)
    backfill = console.call(
        "POST",
        f"/tasks/{invoicing}/backfill",
        {"from": (now - timedelta(days=92)).isoformat(), "to": now.isoformat()},
    )
    started = list(backfill["started"])
    assert wait_until(lambda: all(finished(e) for e in started), 30)
    # One run of it meets a handler having a bad day
    console.ok.status, console.ok.body = 502, b'{"error": "upstream mail service unavailable"}'
    bad = trigger("monthly-invoicing")
    assert wait_until(lambda: finished(bad), 30)
    console.ok.status, console.ok.body = 200, b'{"ok": true, "invoices_sent": 1284}'
    started.append(trigger("monthly-invoicing"))
    for name in (
        "nightly-billing-export",
        "cache-warmup",
        "search-reindex",
        "ledger-sync",
        "db-backup-eu",
    ):
        started.append(trigger(name))
    assert wait_until(lambda: all(finished(e) for e in started), 30)
    console.call(
        "POST",
        f"/tasks/{tasks['sitemap-refresh']['task_id']}/pause",
        {"note": "Waiting for the CDN migration (OPS-1423)"},
    )


def settle(page: Page) -> None:
    """Wait until the page shows its data, not its placeholders."""
    expect(page.locator("main")).not_to_contain_text("Loading…")
    expect(page.locator("main .result-cell .pending")).to_have_count(0)
    page.wait_for_timeout(300)


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    with (
        tempfile.TemporaryDirectory() as scratch,
        console_server(Path(scratch) / "data") as console,
    ):
        tasks = tasks_of(console)
        run_some(console, tasks)
        with sync_playwright() as playwright:
            browser = launch(playwright)
            with viewer_page(browser, console.url) as page:
                page.set_viewport_size(VIEWPORT)
                page.goto("/console/tasks")
                expect(page.locator("#tasks-table tbody tr")).to_have_count(len(tasks))
                settle(page)
                page.screenshot(path=OUT / "console-tasks.png", full_page=True)

                page.goto(f"/console/tasks/{tasks['monthly-invoicing']['task_id']}")
                expect(page.locator("#history-table tbody tr").nth(3)).to_be_visible()
                expect(page.locator(".dst-row").first).to_be_visible()
                settle(page)
                page.screenshot(path=OUT / "console-task.png", full_page=True)

                page.goto("/console/forecast")
                expect(page.locator("svg.chart .bar").first).to_be_visible()
                settle(page)
                page.screenshot(path=OUT / "console-forecast.png", full_page=True)

                page.goto("/console/tasks/new")
                page.get_by_label("Name", exact=True).fill("quarterly-report")
                page.get_by_label("Handler URL").fill("http://127.0.0.1:9000/reports/quarterly")
                page.get_by_label("Cron expression").fill("0 6 1 1,4,7,10 *")
                page.get_by_label("Time zone").fill("Europe/Berlin")
                # Previewed as it is typed (a click on Preview would also announce it)
                expect(page.locator("#preview .dst-row").first).to_be_visible()
                page.get_by_label("Cron expression").blur()
                settle(page)
                page.screenshot(path=OUT / "console-new-task.png", full_page=True)
            browser.close()
    for picture in sorted(OUT.glob("console-*.png")):
        print(f"wrote {picture.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
