"""A local stand-in for API Gateway: HTTP requests in, REST proxy events to a Lambda entry point."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from dynacron.console.bounded_server import BodyRefused, BoundedHTTPServer, BoundedRequestHandler
from dynacron.console.serve import console_response

ProxyEntryPoint = Callable[[dict[str, Any], Any], dict[str, Any]]
MAX_BODY_BYTES = 1024 * 1024  # well above any limit of ours, below API Gateway's 10 MB
PROBLEM_JSON = "application/problem+json"


@dataclass
class LocalContext:
    """Enough of a Lambda context for Powertools."""

    function_name: str
    memory_limit_in_mb: int = 512
    timeout_seconds: int = 30

    def __post_init__(self) -> None:
        self.aws_request_id = str(uuid.uuid4())
        self.invoked_function_arn = (
            f"arn:aws:lambda:us-east-1:000000000000:function:{self.function_name}"
        )
        self.function_version = "$LATEST"
        self.log_group_name = f"/aws/lambda/{self.function_name}"
        self.log_stream_name = "local"
        self._deadline = time.monotonic() + self.timeout_seconds

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


def proxy_event(
    method: str, target: str, headers: dict[str, str], body: bytes, source_ip: str
) -> dict[str, Any]:
    """An API Gateway REST (v1) proxy event for one HTTP request.

    As API Gateway does, ``path`` is percent-decoded: a route sees ``/tasks/a b``,
    and a length bound on a path parameter counts characters, not escapes.
    """
    parts = urlsplit(target)
    path = unquote(parts.path, errors="replace")
    query = parse_qs(parts.query, keep_blank_values=True)
    request_id = str(uuid.uuid4())
    return {
        "resource": path,
        "path": path,
        "httpMethod": method,
        "headers": headers,
        "multiValueHeaders": {k: [v] for k, v in headers.items()},
        "queryStringParameters": {k: v[-1] for k, v in query.items()} or None,
        "multiValueQueryStringParameters": query or None,
        "pathParameters": None,
        "stageVariables": None,
        "requestContext": {
            "resourcePath": path,
            "httpMethod": method,
            "path": path,
            "stage": "local",
            "requestId": request_id,
            "requestTimeEpoch": int(time.time() * 1000),
            "identity": {"sourceIp": source_ip},
        },
        "body": body.decode("utf-8", errors="replace") if body else None,
        "isBase64Encoded": False,
    }


class ApiGateway(BoundedHTTPServer):
    """Serves the API and the console on a bounded pool of threads (see
    ``BoundedHTTPServer``: timed out, capped connections)."""

    def __init__(
        self, address: tuple[str, int], entry_point: ProxyEntryPoint, **limits: Any
    ) -> None:
        self.entry_point = entry_point
        super().__init__(address, _RequestHandler, **limits)


class _RequestHandler(BoundedRequestHandler):
    server: ApiGateway

    def _forward(self) -> None:
        # The console's files are for any navigation to this server (a link from
        # elsewhere included); the API answers this server's own pages only.
        reading = self.command in ("GET", "HEAD")
        asset = console_response(urlsplit(self.path).path) if reading else None
        refused = self._foreign_host() or (None if asset else self._cross_site())
        if refused is not None:
            self.close_connection = True
            self._problem(403, "Forbidden", refused)
            self.discard_body()
            return
        if asset is not None:
            self._reply(asset.status, asset.headers, asset.body)
            return
        try:
            body = self.read_body(MAX_BODY_BYTES)
        except BodyRefused as refusal:
            # As the API answers its own 413s (problem+json), so the document holds;
            # answered before a byte of the body is read.
            self.close_connection = True
            self._problem(refusal.status, refusal.title, refusal.detail)
            self.discard_body()
            return
        event = proxy_event(
            self.command, self.path, dict(self.headers.items()), body, self.client_address[0]
        )
        response = self.server.entry_point(event, LocalContext("dynacron-api"))
        headers = dict(response.get("headers") or {})
        for name, values in (response.get("multiValueHeaders") or {}).items():
            headers[name] = ", ".join(values)
        self._reply(response["statusCode"], headers, (response.get("body") or "").encode())

    def _foreign_host(self) -> str | None:
        """Why the request is refused for its Host, or None.

        Local mode answers on loopback with no credentials, but a page of any site
        the user visits can reach it under a name of its own (DNS rebinding), and
        then read what it answers: the Host must name this server.
        """
        port = self.server.server_address[1]
        ours = {f"127.0.0.1:{port}", f"localhost:{port}"}
        host = (self.headers.get("Host") or "").strip().lower()
        if host in ours:
            return None
        names = " or ".join(sorted(ours))
        return f"the Host header names {host or 'nothing'!r}, not this server ({names})"

    def _cross_site(self) -> str | None:
        """Why an API request a web page sent is refused, or None.

        A page of another site can send requests here without reading the answer
        (a POST whose body declares no type needs no CORS preflight), so a
        browser's request must come from this server's own pages: a foreign
        ``Origin``, or a ``Sec-Fetch-Site`` other than same-origin or none, is
        refused. Clients that are not browsers (curl, the SDK, a handler's
        callback) send neither header.
        """
        host = (self.headers.get("Host") or "").strip().lower()
        origin = self.headers.get("Origin")
        if origin is not None and origin.strip().lower() != f"http://{host}":
            return f"a page of {origin!r} may not call this API; open http://{host}/console"
        fetch_site = self.headers.get("Sec-Fetch-Site")
        if fetch_site is not None and fetch_site not in ("same-origin", "none"):
            return f"a {fetch_site} request from a web page may not call this API"
        return None

    def _problem(self, status: int, title: str, detail: str) -> None:
        problem = {"type": "about:blank", "title": title, "status": status, "detail": detail}
        self._reply(status, {"Content-Type": PROBLEM_JSON}, json.dumps(problem).encode())

    def _reply(self, status: int, headers: dict[str, str], payload: bytes) -> None:
        self.send_response(status)
        for name, value in headers.items():
            if name.lower() != "content-length":
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":  # a HEAD response has the headers of a GET, no body
            self.wfile.write(payload)

    # Every method a resource may have goes to the API, which answers one that no
    # route declares with 405 and an Allow header (QUERY is the draft safe method
    # with a body). Any other method gets 501 from the server, as RFC 9110 says;
    # CONNECT is for proxies. Deployed, API Gateway passes DELETE, GET, HEAD,
    # OPTIONS, PATCH, POST and PUT on, and answers TRACE and QUERY itself.
    do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = _forward
    do_OPTIONS = do_TRACE = do_QUERY = _forward

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the runtime prints its own activity line
