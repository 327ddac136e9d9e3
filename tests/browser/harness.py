"""The console in a real browser: Debian's Chromium driven by Playwright, against
`dynacron local` started on a free port with a data directory of its own.

Nothing here is skipped for a missing browser: a machine without Chromium or
axe-core fails the browser tests, saying what to install (`make test` installs
both where it can).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, BrowserContext, ConsoleMessage, Page, Playwright

from tests.support import ROOT, Sink
from tests.system.local_process import LocalMode

CHROMIUM = Path(os.environ.get("DYNACRON_CHROMIUM", "/usr/bin/chromium"))
AXE = Path(os.environ.get("DYNACRON_AXE", ROOT / "build" / "axe-core" / "axe.min.js"))
# Headless, and none of the background connections a closed network refuses.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
# What a person's browser might be: a time zone with daylight saving, a locale.
VIEWER = {"locale": "en-GB", "timezone_id": "Europe/Berlin"}
# axe-core's impacts that fail a page.
BLOCKING_IMPACTS = ("serious", "critical")


def launch(playwright: Playwright) -> Browser:
    if not CHROMIUM.exists():
        pytest.fail(
            f"the browser tests need Chromium at {CHROMIUM}: install Debian's package "
            "(apt-get install chromium), or set DYNACRON_CHROMIUM to another Chromium; "
            "`make test` installs it when run as root",
            pytrace=False,
        )
    return playwright.chromium.launch(
        executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
    )


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@dataclass
class ConsoleServer:
    """`dynacron local` with two loopback handlers: one that succeeds, one that fails."""

    local: LocalMode
    ok: Sink
    failing: Sink
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return self.local.api

    def call(self, method: str, path: str, body: Any = None, **params: Any) -> Any:
        response = _http.request(
            method,
            f"{self.url}{path}",
            json=body,
            params={k: v for k, v in params.items() if v is not None},
            headers=self.headers,
        )
        assert response.status_code < 300, response.text
        return response.json() if response.content else None

    def register(self, **fields: Any) -> dict[str, Any]:
        kinds = {"cron", "rate", "at", "fixed_delay", "after"}
        schedule = {} if kinds & set(fields) else {"rate": "1 day"}
        body = {**schedule, "handler_url": f"{self.ok.url}/hook", **fields}
        task: dict[str, Any] = self.call("POST", "/tasks", body)
        return task


_http = httpx.Client(timeout=10, trust_env=False)


@contextmanager
def console_server(data_dir: Path, *options: str) -> Iterator[ConsoleServer]:
    ok = Sink(body=b'{"ok": true, "rows_exported": 1284}').start()
    failing = Sink(status=500, body=b'{"error": "database is read-only"}').start()
    local = LocalMode(data_dir, *options)
    local.start()
    try:
        yield ConsoleServer(local, ok, failing)
    finally:
        local.stop()
        ok.stop()
        failing.stop()


@contextmanager
def viewer_page(browser: Browser, base_url: str) -> Iterator[Page]:
    """A fresh browser context (no stored key, no cache) on the console, with axe-core
    loaded in every document; page errors and refused content fail the test."""
    if not AXE.exists():
        pytest.fail(
            f"axe-core is missing at {AXE}: `make test` fetches it (npm pack axe-core), "
            "or set DYNACRON_AXE to an axe.min.js",
            pytrace=False,
        )
    context: BrowserContext = browser.new_context(
        base_url=base_url, viewport={"width": 1280, "height": 900}, **VIEWER
    )
    # Injected by the browser itself, not as an inline <script>: the console's
    # policy (script-src 'self') stays exactly as it is served.
    context.add_init_script(path=str(AXE))
    page = context.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))

    def on_console(message: ConsoleMessage) -> None:
        if "Content Security Policy" in message.text or "Refused to" in message.text:
            problems.append(f"refused by the policy: {message.text}")

    page.on("console", on_console)
    try:
        yield page
    finally:
        context.close()
    assert not problems, problems


def axe_violations(page: Page) -> list[dict[str, Any]]:
    """The serious and critical violations axe-core finds on the page as it is now."""
    violations: list[dict[str, Any]] = page.evaluate(
        """async () => {
            const result = await axe.run(document, { resultTypes: ["violations"] });
            return result.violations.map((v) => ({
                id: v.id, impact: v.impact, help: v.help,
                nodes: v.nodes.slice(0, 5).map((n) => n.target.join(" ")),
            }));
        }"""
    )
    return [v for v in violations if v["impact"] in BLOCKING_IMPACTS]
