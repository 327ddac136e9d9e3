"""Local mode started with --api-key: the console asks for the key on the first
401, keeps it for the tab only, and sends it in the header the API reads."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser.harness import ConsoleServer, console_server, unique, viewer_page

KEY = "console-test-key"

pytestmark = [pytest.mark.system, pytest.mark.browser]


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleServer]:
    data_dir = tmp_path_factory.mktemp("keyed") / "data"
    with console_server(data_dir, "--api-key", f"{KEY}=ops") as server:
        server.headers = {"x-api-key": KEY}
        yield server


@pytest.fixture
def keyed_page(browser: Browser, keyed: ConsoleServer) -> Iterator[Page]:
    with viewer_page(browser, keyed.url) as page:
        yield page


def test_the_console_asks_for_a_key_once_and_keeps_it_for_the_tab(
    keyed_page: Page, keyed: ConsoleServer
) -> None:
    page = keyed_page
    task = keyed.register(name=unique("keyed"))
    page.goto("/console/tasks")

    # A wrong key is refused and asked for again
    dialog = page.get_by_role("dialog", name="API key needed")
    expect(dialog.get_by_label("API key")).to_be_focused()
    dialog.get_by_label("API key").fill("not-the-key")
    dialog.get_by_role("button", name="Use this key").click()
    expect(page.get_by_role("dialog")).to_contain_text("refused")

    page.get_by_role("dialog").get_by_label("API key").fill(KEY)
    page.get_by_role("dialog").get_by_role("button", name="Use this key").click()
    expect(page.get_by_role("link", name=task["name"])).to_be_visible()
    assert page.evaluate("sessionStorage.getItem('dynacron.apiKey')") == KEY

    # Another page of the same tab needs no second prompt; forgetting it asks again
    page.get_by_role("link", name=task["name"]).click()
    expect(page.get_by_role("heading", level=1)).to_have_text(task["name"])
    page.get_by_role("button", name="Forget API key").click()
    assert page.evaluate("sessionStorage.getItem('dynacron.apiKey')") is None
    page.reload()
    expect(page.get_by_role("dialog", name="API key needed")).to_be_visible()

    # Cancelled, the prompt does not come back with every refresh of the page
    page.keyboard.press("Escape")
    expect(page.get_by_role("alert")).to_contain_text("Unauthenticated")
    page.wait_for_timeout(6000)  # longer than the list's refresh
    expect(page.get_by_role("dialog")).to_have_count(0)
    page.get_by_role("button", name="Enter API key").click()
    page.get_by_role("dialog").get_by_label("API key").fill(KEY)
    page.get_by_role("dialog").get_by_role("button", name="Use this key").click()
    expect(page.get_by_role("heading", level=1)).to_have_text(task["name"])
