"""One browser and one `dynacron local` per test module (and xdist worker): each
test makes tasks of its own, under names no other test uses."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from dynacron.console.proxy import ConsoleProxy, Upstream
from tests.browser.harness import ConsoleServer, console_server, launch, viewer_page

# The pages poll every few seconds; an execution takes a tick and a delivery.
expect.set_options(timeout=20_000)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        browser = launch(playwright)
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleServer]:
    with console_server(tmp_path_factory.mktemp("console") / "data") as server:
        yield server


@pytest.fixture
def page(browser: Browser, console: ConsoleServer) -> Iterator[Page]:
    with viewer_page(browser, console.url) as page:
        yield page


@pytest.fixture(scope="module")
def proxied(console: ConsoleServer) -> Iterator[ConsoleProxy]:
    """`dynacron console` in front of the module's local mode (forwarding unsigned)."""
    proxy = ConsoleProxy(Upstream.open(console.url), port=0)
    threading.Thread(
        target=proxy.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
    ).start()
    yield proxy
    proxy.shutdown()
    proxy.server_close()
