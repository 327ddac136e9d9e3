"""``dynacron console``: the console on loopback, in front of a deployed API.

Like ``kubectl proxy``: the browser talks to 127.0.0.1, and the proxy forwards
the console's API calls to the deployed API, signed with the user's own AWS
credentials (SigV4) or carrying an API key. A server that signs whatever reaches
it is a confused deputy, so this one (decision 0029):

1. listens on a loopback address only;
2. answers only requests whose ``Host`` is its own address (DNS rebinding);
3. refuses requests another site makes (``Origin``, ``Sec-Fetch-Site``);
4. answers API calls only with this run's session secret in a header
   (``X-Dynacron-Console``) that the console's own scripts add: the printed
   link carries it in its fragment (never sent to a server, never logged), the
   page keeps it in the tab's storage. No cookie: the browser would attach one
   to any page's request, and cookies are not kept apart by port, so any other
   server on 127.0.0.1 would receive it (issue 23); a header is sent only by
   this origin's scripts, and another origin cannot add it without a CORS
   preflight, which is never allowed;
5. forwards only the API's methods and resources, always to the configured API,
   with a few request headers it names (never the browser's ``Authorization``,
   ``X-Amz-*``, cookies or hop-by-hop headers) and no redirects followed, and
   keeps no cookie the API sets;
6. reads request bodies of at most ``MAX_BODY_BYTES``, on bounded, timed-out
   connections (``BoundedHTTPServer``);
7. answers everything with the console's security headers, and passes on no
   cookie or CORS header of the API's.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import Any
from urllib.parse import quote, unquote, unquote_plus, urlsplit

import httpx
from botocore.exceptions import BotoCoreError, ClientError

from dynacron.api.identity import API_KEY_HEADER
from dynacron.console.bounded_server import BodyRefused, BoundedHTTPServer, BoundedRequestHandler
from dynacron.console.serve import PREFIX, SECURITY_HEADERS, console_response, is_console_path

LOOPBACK = "127.0.0.1"
DEFAULT_PORT = 8081
# The header the console's scripts send this run's secret in, and the name it has
# in the printed link's fragment (``#session=...``).
SESSION_HEADER = "X-Dynacron-Console"
SESSION_FRAGMENT = "session"
# The scheme of the proxy's 401: the console tells it from the API's (which asks for a key).
SESSION_AUTH_SCHEME = "DynacronConsole"
# The API's own limit on a task's payload is 32 KiB; nothing the console sends is larger.
MAX_BODY_BYTES = 1024 * 1024
# The first segment of every path the API answers for a tenant, and its OpenAPI
# document. Not forwarded: /callbacks (a handler's, with its token, no IAM) and
# /docs (Swagger UI, a page with scripts of its own that would run with this
# origin's session; the content policy would block them anyway).
API_RESOURCES = frozenset(
    {
        "tasks",
        "executions",
        "dead-letters",
        "forecast",
        "schedules",
        "tenant",
        "calendars",
        "openapi.json",
    }
)
DOCS = "docs"
API_METHODS = ("GET", "HEAD", "POST", "PATCH", "DELETE")
# The only request headers forwarded; the proxy adds its own authorisation. A key
# the person typed in the console (x-api-key: a tenant's, where the API maps keys
# to tenants) goes on, unless the proxy was given one.
FORWARDED_HEADERS = (
    "accept",
    "accept-language",
    "content-type",
    "idempotency-key",
    API_KEY_HEADER,
)
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
# Not passed back: hop-by-hop, what this server sets itself (the body is decoded),
# cookies, which the API never sets and must not set on this origin, and CORS
# headers, which would let another origin's page read answers.
DROPPED_ANSWER_HEADERS = HOP_BY_HOP | {"content-length", "content-encoding", "set-cookie"}
_CORS_PREFIX = "access-control-"
PROBLEM_JSON = "application/problem+json"
_SEGMENT = re.compile(r"(?:[A-Za-z0-9\-._~!$&'()*+,;=:@]|%[0-9A-Fa-f]{2})+")
_SECURITY_NAMES = frozenset(name.lower() for name in SECURITY_HEADERS)
_QUERY = re.compile(r"[\x21-\x7e]*")
_EXECUTE_API_HOST = re.compile(r"[a-z0-9]+\.execute-api\.([a-z0-9-]+)\.amazonaws\.com(?:\.cn)?")


@dataclass(frozen=True)
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes = b""


class Refused(Exception):
    """A request the proxy will not answer: ``status`` and why, as a problem."""

    def __init__(self, status: int, title: str, detail: str, **headers: str) -> None:
        super().__init__(f"{status} {title}: {detail}")
        self.reply = problem(status, title, detail, headers)


def problem(status: int, title: str, detail: str, headers: dict[str, str] | None = None) -> Reply:
    body = {"type": "about:blank", "title": title, "status": status, "detail": detail}
    return Reply(
        status, {"Content-Type": PROBLEM_JSON, **(headers or {})}, json.dumps(body).encode()
    )


def api_base(url: str) -> str:
    """The deployed API's base URL, stage included, without a trailing slash.

    Raises ``ValueError`` saying what is wrong: only https (plain http for a
    loopback host, local mode or a test), no credentials, query or fragment.
    """
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{url!r} is not an http(s) URL: give the API's URL, its stage included")
    if parts.scheme == "http" and not _is_loopback(parts.hostname):
        raise ValueError(f"{url!r}: a deployed API is reached over https only")
    if parts.username or parts.password or parts.query or parts.fragment:
        raise ValueError(f"{url!r}: give the API's base URL alone (no user, query or fragment)")
    return f"{parts.scheme}://{parts.netloc}{parts.path.rstrip('/')}"


def region_of(url: str) -> str | None:
    """The region of an ``execute-api`` URL; None for any other host (a custom domain)."""
    match = _EXECUTE_API_HOST.fullmatch(urlsplit(url).hostname or "")
    return match[1] if match else None


def _is_loopback(host: str) -> bool:
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def api_target(path: str, query: str) -> str:
    """A console request's path and query as the API's, or ``Refused``.

    Each segment must be plain URL text; ``.`` and ``..`` (however encoded), an
    encoded slash or backslash and empty segments are refused rather than left to
    a normaliser that could climb out of the stage. The first segment must be one
    of the API's resources.
    """
    segments = path.split("/")[1:]
    for segment in segments:
        decoded = unquote(segment)
        plain = _SEGMENT.fullmatch(segment) and "/" not in decoded and "\\" not in decoded
        if not plain or decoded in (".", ".."):
            raise Refused(400, "Bad path", f"{path!r} is not a path this proxy forwards")
    if segments[0] == DOCS:
        raise Refused(
            404, "Not found", "the API's documentation page is not served here: /openapi.json is"
        )
    if segments[0] not in API_RESOURCES:
        resources = ", ".join(f"/{name}" for name in sorted(API_RESOURCES))
        raise Refused(404, "Not found", f"{path!r}: the proxy forwards only {resources}")
    if not _QUERY.fullmatch(query):
        raise Refused(400, "Bad query", "the query has characters a URL may not hold")
    query = signable_query(query)
    return path + (f"?{query}" if query else "")


def signable_query(query: str) -> str:
    """``query`` (as a browser writes it: ``+`` for a space) encoded as SigV4's
    canonical form encodes it: botocore signs the query as the URL spells it, and
    API Gateway checks it re-encoded, so only this spelling verifies."""
    pairs = [pair.partition("=") for pair in query.split("&") if pair]
    return "&".join(f"{_encode(key)}={_encode(value)}" for key, _, value in pairs)


def _encode(text: str) -> str:
    return quote(unquote_plus(text), safe="-_.~")


@dataclass
class Upstream:
    """The deployed API: every forwarded request goes to ``base_url`` and nowhere else."""

    base_url: str
    client: httpx.Client
    api_key: str | None = None

    @classmethod
    def open(
        cls,
        url: str,
        *,
        auth: httpx.Auth | None = None,
        api_key: str | None = None,
        timeout: float = 30.0,
    ) -> Upstream:
        """``auth`` signs each request (``SigV4Auth``); or ``api_key`` is sent with each."""
        client = httpx.Client(
            auth=auth,
            headers={"User-Agent": "dynacron-console"},
            # A jar whose policy takes no cookie: what the API sets is never sent back.
            cookies=CookieJar(DefaultCookiePolicy(allowed_domains=[])),
            timeout=timeout,
            follow_redirects=False,
            trust_env=False,
        )
        return cls(api_base(url), client, api_key or None)

    def forward(self, method: str, target: str, headers: dict[str, str], body: bytes) -> Reply:
        url = httpx.URL(self.base_url + target)
        base = httpx.URL(self.base_url)
        if (url.scheme, url.host, url.port) != (base.scheme, base.host, base.port):
            raise Refused(400, "Bad path", f"{target!r} does not stay on the API")
        if self.api_key:
            headers = {**headers, API_KEY_HEADER: self.api_key}
        try:
            response = self.client.request(method, url, content=body or None, headers=headers)
        except httpx.TimeoutException as error:
            return problem(504, "API timed out", f"{self.base_url} did not answer in time: {error}")
        except httpx.HTTPError as error:
            reason = str(error) or type(error).__name__
            return problem(502, "API unreachable", f"cannot reach {self.base_url} ({reason})")
        except (BotoCoreError, ClientError) as error:  # signing: an SSO session ended, ...
            return problem(
                502,
                "Could not sign",
                f"the request to {self.base_url} could not be signed: {error}. "
                "Refresh your AWS credentials (`aws sso login`?) and retry",
            )
        answer = {
            name: value
            for name, value in response.headers.items()
            if name.lower() not in DROPPED_ANSWER_HEADERS
            and not name.lower().startswith(_CORS_PREFIX)
        }
        return Reply(response.status_code, answer, response.content)

    def close(self) -> None:
        self.client.close()


@dataclass(frozen=True)
class Session:
    """This run's secret: the printed link's fragment carries it to the page, whose
    scripts send it with each API call."""

    secret: str = field(default_factory=lambda: secrets.token_urlsafe(32))

    def holds(self, sent: list[str]) -> bool:
        """Whether the request's ``SESSION_HEADER`` values are this secret, once."""
        return len(sent) == 1 and _same(sent[0], self.secret)


def _same(sent: str, secret: str) -> bool:
    # In constant time; bytes, as a string sent may hold any character.
    return hmac.compare_digest(sent.encode(), secret.encode())


class ConsoleProxy(BoundedHTTPServer):
    """Serves the console and forwards its API calls to ``upstream``; see the module."""

    def __init__(
        self,
        upstream: Upstream,
        port: int = DEFAULT_PORT,
        *,
        host: str = LOOPBACK,
        max_body_bytes: int = MAX_BODY_BYTES,
        on_refusal: Callable[[str], None] | None = None,
        **limits: Any,
    ) -> None:
        address = ipaddress.ip_address(host)
        if address.version != 4 or not address.is_loopback:
            raise ValueError(f"the console proxy listens on a loopback address only, not {host}")
        super().__init__((host, port), _ProxyRequestHandler, **limits)
        self.upstream = upstream
        self.max_body_bytes = max_body_bytes
        self.on_refusal = on_refusal
        self.session = Session()
        self.authority = f"{host}:{self.server_port}"
        self.origin = f"http://{self.authority}"

    @property
    def login_url(self) -> str:
        """The address to open: the console, with this run's secret in the fragment."""
        return f"{self.origin}{PREFIX}/#{SESSION_FRAGMENT}={self.session.secret}"

    def server_close(self) -> None:
        super().server_close()
        self.upstream.close()


class _ProxyRequestHandler(BoundedRequestHandler):
    server: ConsoleProxy

    def _handle(self) -> None:
        try:
            reply = self._answer()
        except Refused as refusal:
            # Whatever body it sent is unread: answered, then dropped and closed.
            self.close_connection = True
            if self.server.on_refusal is not None:
                self.server.on_refusal(f"refused {self.command} {self.path[:200]!r}: {refusal}")
            self._reply(refusal.reply)
            self.discard_body()
            return
        self._reply(reply)

    def _answer(self) -> Reply:
        proxy = self.server
        if self.command not in API_METHODS:
            raise Refused(
                405,
                "Method not allowed",
                f"{self.command} is not a method of the API",
                Allow=", ".join(API_METHODS),
            )
        if not self.path.startswith("/") or self.path.startswith("//"):
            raise Refused(400, "Not a path", "send a path of this origin, not a URL to proxy to")
        hosts = self.headers.get_all("Host") or []
        if [h.lower() for h in hosts] != [proxy.authority]:
            raise Refused(
                403,
                "Wrong host",
                f"this proxy answers requests for {proxy.authority} only, not {', '.join(hosts)!r}"
                f"; open {proxy.origin}{PREFIX}/",
            )
        fetch_site = self.headers.get("Sec-Fetch-Site")
        if fetch_site is not None and fetch_site not in ("same-origin", "none"):
            raise Refused(403, "Cross-site request", f"a {fetch_site!r} request is refused")
        origin = self.headers.get("Origin")
        if origin is not None and origin != proxy.origin:
            raise Refused(403, "Cross-site request", f"requests from {origin!r} are refused")
        parts = urlsplit(self.path)
        if is_console_path(parts.path):
            # The pages hold no secret (they are the package's files): any
            # navigation of this origin may load them; only their API calls need one.
            if self.command not in ("GET", "HEAD"):
                raise Refused(
                    405,
                    "Method not allowed",
                    "the console's pages are read only",
                    Allow="GET, HEAD",
                )
            asset = console_response(parts.path)
            assert asset is not None
            return Reply(asset.status, asset.headers, asset.body)
        if not proxy.session.holds(self.headers.get_all(SESSION_HEADER) or []):
            raise Refused(
                401,
                "No session",
                "this call lacks this run's console session: open the address "
                "`dynacron console` printed (its #session part opens the console in "
                "that tab); cookies are not accepted",
                **{"WWW-Authenticate": SESSION_AUTH_SCHEME},
            )
        target = api_target(parts.path, parts.query)
        body = self._read_body()
        headers = {
            name: value
            for name in FORWARDED_HEADERS
            if (value := self.headers.get(name)) is not None
        }
        return proxy.upstream.forward(self.command, target, headers, body)

    def _read_body(self) -> bytes:
        try:
            return self.read_body(self.server.max_body_bytes)
        except BodyRefused as refusal:
            raise Refused(refusal.status, refusal.title, refusal.detail) from None

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The server's own refusals (a request line too long, a method no one
        knows: 501) as problems, with the same headers as every other answer."""
        self.close_connection = True
        title = message or self.responses.get(code, ("Error",))[0]
        self._reply(problem(code, title, explain or title))

    def _reply(self, reply: Reply) -> None:
        self.send_response(reply.status)
        for name, value in reply.headers.items():
            if name.lower() not in _SECURITY_NAMES:
                self.send_header(name, value)
        for name, value in SECURITY_HEADERS.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(reply.body)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(reply.body)

    # Methods the API has, and those a proxy must refuse clearly (CONNECT, TRACE):
    # all meet the same checks. Any other gets the server's 501.
    do_GET = do_HEAD = do_POST = do_PATCH = do_DELETE = _handle
    do_PUT = do_OPTIONS = do_TRACE = do_CONNECT = do_QUERY = _handle

    def log_message(self, format: str, *args: Any) -> None:
        pass
