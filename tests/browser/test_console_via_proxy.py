"""The console served by `dynacron console` (the loopback proxy that signs its calls
for a deployed API) works as it does from local mode: same pages, same API paths,
the schedule preview included. Here the proxy forwards to local mode, unsigned."""

from __future__ import annotations

import pytest
from playwright.sync_api import Browser, expect

from dynacron.console.proxy import ConsoleProxy
from tests.browser.harness import ConsoleServer, unique, viewer_page

pytestmark = [pytest.mark.system, pytest.mark.browser]


def test_the_console_works_the_same_behind_the_signing_proxy(
    browser: Browser, console: ConsoleServer, proxied: ConsoleProxy
) -> None:
    name = unique("via-proxy")
    with viewer_page(browser, proxied.origin) as page:
        nav = page.get_by_role("navigation", name="Main")
        page.goto(proxied.login_url)  # the printed link: its fragment holds the session
        expect(page.get_by_role("heading", level=1)).to_have_text("Tasks")

        nav.get_by_role("link", name="New task").click()
        page.get_by_label("Name", exact=True).fill(name)
        page.get_by_label("Handler URL").fill(f"{console.ok.url}/hook")
        page.get_by_label("Cron expression").fill("0 9 1 * *")
        page.get_by_label("Time zone").fill("Europe/Berlin")
        page.get_by_role("button", name="Preview", exact=True).click()
        expect(page.locator("#preview .explanation")).to_contain_text("on day 1 of the month")
        page.get_by_role("button", name="Create task").click()
        expect(page.get_by_role("heading", level=1)).to_have_text(name)

        page.get_by_role("button", name="Trigger now").click()
        latest = page.locator("#history-table tbody tr").first
        expect(latest.locator(".badge")).to_have_text("SUCCEEDED")

        nav.get_by_role("link", name="Next 24 hours").click()
        expect(page.locator("svg.chart")).to_be_visible()
        nav.get_by_role("link", name="Executions").click()
        expect(page.locator("main .summary")).to_contain_text("execution")
