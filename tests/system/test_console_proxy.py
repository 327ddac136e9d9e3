"""``dynacron console`` against a deployed API's stand-in on loopback (decision 0029).

The stand-in (``signed_gateway``) verifies SigV4 as API Gateway does, with fixed
test credentials, and hands what verifies to the real API (local mode). No
request leaves this machine.
"""

from __future__ import annotations

import http.client
import json
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from email.message import Message
from pathlib import Path
from typing import Any

import httpx
import pytest
from botocore.credentials import Credentials
from botocore.exceptions import TokenRetrievalError
from typer.testing import CliRunner

from dynacron.cli.main import app
from dynacron.console.proxy import (
    MAX_BODY_BYTES,
    SESSION_FRAGMENT,
    SESSION_HEADER,
    ConsoleProxy,
    Session,
    Upstream,
)
from dynacron.console.serve import SECURITY_HEADERS, console_response
from dynacron.local.runtime import LocalOptions, LocalRuntime
from tests.support import Service, free_port, wait_until
from tests.system.signed_gateway import (
    AWS_VARIABLES,
    CREDENTIALS,
    REGION,
    SignedGateway,
    credential_env,
    signer,
)

pytestmark = pytest.mark.system

TASK = {"name": "nightly", "cron": "0 2 * * *", "handler_url": "http://127.0.0.1:9/hook"}


@pytest.fixture(scope="module")
def config_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("aws-config")


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SignedGateway]:
    runtime = LocalRuntime(
        LocalOptions(port=0, data_dir=tmp_path_factory.mktemp("data"), components=("api",))
    ).start()
    assert runtime.api_url is not None
    gateway = SignedGateway(runtime.api_url, CREDENTIALS, REGION).start()
    yield gateway
    gateway.stop()
    runtime.stop()


def serve(proxy: ConsoleProxy) -> ConsoleProxy:
    threading.Thread(
        target=proxy.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
    ).start()
    return proxy


@pytest.fixture(scope="module")
def proxy(gateway: SignedGateway, config_dir: Path) -> Iterator[ConsoleProxy]:
    proxy = serve(ConsoleProxy(Upstream.open(gateway.url, auth=signer(config_dir)), port=0))
    yield proxy
    proxy.shutdown()
    proxy.server_close()


@dataclass
class Answer:
    status: int
    headers: Message
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def send(
    proxy: ConsoleProxy,
    method: str,
    target: str,
    headers: dict[str, str] | None = None,
    body: bytes = b"",
    *,
    host: str | None = "",
) -> Answer:
    """One request as written, byte for byte (no client normalises its path or
    adds headers): ``host`` "" sends the proxy's own Host, None none at all."""
    connection = http.client.HTTPConnection("127.0.0.1", proxy.server_port, timeout=10)
    try:
        connection.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
        if host is not None:
            connection.putheader("Host", host or proxy.authority)
        for name, value in (headers or {}).items():
            connection.putheader(name, value)
        if (body or method in ("POST", "PATCH")) and "Content-Length" not in (headers or {}):
            connection.putheader("Content-Length", str(len(body)))
        connection.endheaders(body or None)
        response = connection.getresponse()
        return Answer(response.status, response.msg, response.read())
    finally:
        connection.close()


def secret_of(link: str) -> str:
    """The session secret a printed link carries in its fragment."""
    fragment = link.partition("#")[2]
    name, _, secret = fragment.partition("=")
    assert name == SESSION_FRAGMENT, link
    return secret


def session_of(proxy: ConsoleProxy) -> dict[str, str]:
    """The header the console's scripts send, with the secret the printed link holds."""
    return {SESSION_HEADER: secret_of(proxy.login_url)}


@pytest.fixture(scope="module")
def session(proxy: ConsoleProxy) -> dict[str, str]:
    return session_of(proxy)


def test_the_printed_link_carries_the_session_in_its_fragment_and_nothing_sets_a_cookie(
    proxy: ConsoleProxy, gateway: SignedGateway
) -> None:
    # The link: the console, and a secret in the fragment, which browsers never send
    assert re.fullmatch(
        rf"http://127\.0\.0\.1:{proxy.server_port}/console/#session=[\w-]{{43}}",
        proxy.login_url,
    )
    secret = secret_of(proxy.login_url)
    # Opening it (the browser sends the path alone) answers the page, and no cookie
    page = send(proxy, "GET", "/console/")
    assert page.status == 200
    assert "Set-Cookie" not in page.headers
    # The page's API calls carry the secret in the header: answered
    assert send(proxy, "GET", "/tasks", {SESSION_HEADER: secret}).status == 200
    # Without it, or with it anywhere but that header once, nothing reaches the API
    before = len(gateway.received)
    for headers, target in (
        ({}, "/tasks"),
        ({SESSION_HEADER: secret[:-1]}, "/tasks"),
        ({SESSION_HEADER: secret + "x"}, "/tasks"),
        ({SESSION_HEADER: ""}, "/tasks"),
        ({"Cookie": f"dynacron_console_{proxy.server_port}={secret}"}, "/tasks"),
        ({"Cookie": f"session={secret}"}, "/tasks"),
        ({}, f"/tasks?session={secret}"),
        ({"x-api-key": secret}, "/tasks"),
    ):
        answer = send(proxy, "GET", target, headers)
        assert answer.status == 401, (headers, target)
        assert answer.headers["WWW-Authenticate"] == "DynacronConsole"
        assert "open the address `dynacron console` printed" in answer.json()["detail"]
    assert len(gateway.received) == before


def test_the_secret_sent_twice_is_refused(proxy: ConsoleProxy, session: dict[str, str]) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", proxy.server_port, timeout=10)
    try:
        connection.putrequest("GET", "/tasks", skip_host=True, skip_accept_encoding=True)
        connection.putheader("Host", proxy.authority)
        connection.putheader(SESSION_HEADER, session[SESSION_HEADER])
        connection.putheader(SESSION_HEADER, session[SESSION_HEADER])
        connection.endheaders()
        assert connection.getresponse().status == 401
    finally:
        connection.close()


def test_each_run_has_a_secret_of_its_own(gateway: SignedGateway, config_dir: Path) -> None:
    other = ConsoleProxy(Upstream.open(gateway.url, auth=signer(config_dir)), port=0)
    try:
        assert secret_of(other.login_url) != ""
        assert other.session.secret != Session().secret
    finally:
        other.server_close()


@pytest.mark.parametrize("path", ["/console", "/console/", "/console/tasks/abc"])
def test_console_pages_are_served_with_their_security_headers(
    proxy: ConsoleProxy, path: str
) -> None:
    page = send(proxy, "GET", path)
    asset = console_response(path)
    assert asset is not None
    assert page.status == 200
    assert page.body == asset.body
    assert page.headers["Content-Type"] == "text/html; charset=utf-8"
    for name, value in SECURITY_HEADERS.items():
        assert page.headers.get_all(name) == [value], name
    head = send(proxy, "HEAD", path)
    assert (head.status, head.body) == (200, b"")


def test_an_api_call_arrives_signed_at_the_stage_and_nothing_of_the_browser_s_with_it(
    proxy: ConsoleProxy, session: dict[str, str], gateway: SignedGateway
) -> None:
    # Given a browser that sends credentials of its own, and headers to be dropped
    hostile = {
        **session,
        "Cookie": "planted=1",
        "Content-Type": "application/json",
        "Authorization": "AWS4-HMAC-SHA256 Credential=AKIDSOMEONEELSE/x",
        "X-Amz-Security-Token": "someone-else",
        "X-Amz-Date": "20200101T000000Z",
        "X-Amz-Target": "DynamoDB_20120810.DeleteTable",
        "Connection": "keep-alive, X-Hop",
        "X-Hop": "1",
        "Proxy-Authorization": "Basic eDp5",
        "Idempotency-Key": "console-create-1",
        "Origin": proxy.origin,
        "Sec-Fetch-Site": "same-origin",
    }
    # When it creates a task and lists tasks through the proxy
    created = send(proxy, "POST", "/tasks", hostile, json.dumps(TASK).encode())
    listed = send(proxy, "GET", "/tasks?limit=5&tag=env:prod", session)
    # Then the real API answered both, through the gateway's signature check
    assert created.status == 201, created.body
    task = created.json()
    assert task["name"] == "nightly"
    assert listed.status == 200, listed.body
    assert listed.json()["items"] == []  # the filter went along, signed: untagged
    everything = send(proxy, "GET", "/tasks", session).json()["items"]
    assert task["task_id"] in [t["task_id"] for t in everything]
    create, listing = gateway.received[-3], gateway.received[-2]
    # at the stage's paths
    assert (create.method, create.target) == ("POST", "/prod/tasks")
    # (the query spelled as SigV4 canonicalises it, which API Gateway checks)
    assert listing.target == "/prod/tasks?limit=5&tag=env%3Aprod"
    # signed with the user's credentials, not the browser's
    assert create.headers["authorization"].startswith(
        f"AWS4-HMAC-SHA256 Credential={CREDENTIALS.access_key}/"
    )
    assert create.headers["x-amz-security-token"] == CREDENTIALS.token
    assert create.headers["x-amz-date"] != "20200101T000000Z"
    assert create.headers["idempotency-key"] == "console-create-1"
    for dropped in ("cookie", "x-amz-target", "x-hop", "proxy-authorization", "origin"):
        assert dropped not in create.headers, dropped
    assert create.headers["host"] == gateway.url.split("/")[2]
    # And the answer carries the console's headers, not the API's cookie
    assert "Set-Cookie" not in created.headers
    assert created.headers["Content-Type"].startswith("application/json")
    for name, value in SECURITY_HEADERS.items():
        assert created.headers.get_all(name) == [value], name


def test_the_api_s_cookies_are_never_sent_back_nor_its_cors_headers_passed_on(
    proxy: ConsoleProxy, session: dict[str, str], gateway: SignedGateway
) -> None:
    # Given an API that sets a cookie and allows any origin on every answer
    first = send(proxy, "GET", "/tasks", session)
    # When the console calls it again
    second = send(proxy, "GET", "/tasks", session)
    # Then the proxy kept no cookie to send back, and passed on neither header
    assert (first.status, second.status) == (200, 200)
    assert "cookie" not in gateway.received[-1].headers
    for answer in (first, second):
        assert "Set-Cookie" not in answer.headers
        assert "Access-Control-Allow-Origin" not in answer.headers


def test_a_preflight_from_another_origin_is_allowed_nothing(
    proxy: ConsoleProxy, gateway: SignedGateway
) -> None:
    """A page of another origin must ask before it adds the session header; the
    answer allows it nothing, so the browser never sends the request."""
    before = len(gateway.received)
    preflight = {
        "Origin": "http://127.0.0.1:1",
        "Access-Control-Request-Method": "GET",
        "Access-Control-Request-Headers": SESSION_HEADER.lower(),
        "Sec-Fetch-Site": "same-site",
    }
    answer = send(proxy, "OPTIONS", "/tasks", preflight)
    assert answer.status >= 400
    assert not [name for name in answer.headers if name.lower().startswith("access-control-")]
    assert len(gateway.received) == before


def test_the_gateway_stand_in_refuses_a_wrong_or_missing_signature(
    gateway: SignedGateway, config_dir: Path
) -> None:
    """The check the test above passes can fail: another secret, or none, is refused."""
    forged = Credentials(CREDENTIALS.access_key, "not-the-secret", CREDENTIALS.token)
    with httpx.Client(auth=signer(config_dir, forged), trust_env=False) as client:
        assert client.get(f"{gateway.url}/tasks").status_code == 403
    assert gateway.refused[-1].startswith("The request signature we calculated does not match")
    with httpx.Client(trust_env=False) as client:
        assert client.get(f"{gateway.url}/tasks").status_code == 403
    assert gateway.refused[-1] == "Missing Authentication Token"
    with httpx.Client(auth=signer(config_dir), trust_env=False) as client:
        assert client.get(f"{gateway.url}/tasks").status_code == 200


def test_the_openapi_document_comes_through_and_the_docs_page_does_not(
    proxy: ConsoleProxy, session: dict[str, str]
) -> None:
    document = send(proxy, "GET", "/openapi.json", session)
    assert document.status == 200
    assert "/tasks" in document.json()["paths"]
    docs = send(proxy, "GET", "/docs", session)
    assert docs.status == 404
    assert "/openapi.json is" in docs.json()["detail"]


def test_an_api_problem_comes_back_as_the_api_said_it(
    proxy: ConsoleProxy, session: dict[str, str]
) -> None:
    missing = send(proxy, "GET", "/tasks/no-such-task", session)
    assert missing.status == 404
    assert missing.headers["Content-Type"] == "application/problem+json"
    assert "no-such-task" in missing.json()["detail"]


@pytest.mark.parametrize(
    ("host", "why"),
    [
        ("attacker.example:{port}", "rebinding: a name the attacker points at 127.0.0.1"),
        ("localhost:{port}", "another name of this host"),
        ("127.0.0.1:1{port}", "another port"),
        ("127.0.0.1", "no port"),
        (None, "no Host at all"),
    ],
)
def test_a_request_for_another_host_is_refused(
    proxy: ConsoleProxy, session: dict[str, str], gateway: SignedGateway, host: str | None, why: str
) -> None:
    before = len(gateway.received)
    answer = send(
        proxy,
        "GET",
        "/tasks",
        session,
        host=None if host is None else host.format(port=proxy.server_port),
    )
    assert answer.status == 403, why
    assert answer.json()["title"] == "Wrong host"
    assert f"answers requests for {proxy.authority} only" in answer.json()["detail"]
    assert len(gateway.received) == before


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "https://attacker.example"},
        {"Origin": "null"},
        {"Origin": "http://127.0.0.1:1"},
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},  # another port of 127.0.0.1 is the same site
        {"Sec-Fetch-Site": "cross-site", "Origin": "{origin}"},
    ],
)
def test_a_request_another_site_makes_is_refused(
    proxy: ConsoleProxy, session: dict[str, str], gateway: SignedGateway, headers: dict[str, str]
) -> None:
    before = len(gateway.received)
    sent = {name: value.format(origin=proxy.origin) for name, value in headers.items()}
    answer = send(proxy, "POST", "/tasks", {**session, **sent}, json.dumps(TASK).encode())
    assert answer.status == 403
    assert answer.json()["title"] == "Cross-site request"
    assert len(gateway.received) == before


def test_the_console_s_own_requests_pass_the_site_checks(
    proxy: ConsoleProxy, session: dict[str, str]
) -> None:
    for headers in (
        {"Origin": proxy.origin, "Sec-Fetch-Site": "same-origin"},
        {"Sec-Fetch-Site": "none"},  # the address typed, or opened from the terminal
        {},  # a browser that sends neither
    ):
        assert send(proxy, "GET", "/tasks", {**session, **headers}).status == 200


def test_the_console_s_pages_need_no_session_and_its_api_calls_do(
    proxy: ConsoleProxy, gateway: SignedGateway
) -> None:
    """The pages are the package's files, for any navigation of this origin; what
    they call needs the secret, in every method."""
    before = len(gateway.received)
    assert send(proxy, "GET", "/console/").status == 200
    for method, path in (("GET", "/tasks"), ("POST", "/tasks"), ("GET", "/openapi.json")):
        answer = send(proxy, method, path, {}, json.dumps(TASK).encode() * (method == "POST"))
        assert answer.status == 401, (method, path)
        for name, value in SECURITY_HEADERS.items():
            assert answer.headers.get_all(name) == [value], name
    assert len(gateway.received) == before


@pytest.mark.parametrize(
    ("method", "target", "status"),
    [
        ("CONNECT", "api.example:443", 405),
        ("PUT", "/tasks", 405),
        ("OPTIONS", "/tasks", 405),
        ("TRACE", "/tasks", 405),
        ("GET", "http://169.254.169.254/latest/meta-data/", 400),
        ("GET", "http://127.0.0.1:{gateway_port}/prod/tasks", 400),
        # (http.server reads a leading // as /: a path, never a host)
        ("GET", "//attacker.example/tasks", 404),
        ("GET", "/tasks/../../dev/tasks", 400),
        ("GET", "/tasks/%2e%2e/%2E%2E/dev/tasks", 400),
        ("GET", "/tasks%2f..%2f..%2fdev", 400),
        ("GET", "/tasks/a\\..\\..", 400),
        ("GET", "/tasks//x", 400),
        ("POST", "/callbacks/x/heartbeat", 404),
        ("GET", "/docs", 404),
        ("GET", "/", 400),
        ("GET", "/prod/tasks", 404),
        ("POST", "/console/", 405),
    ],
)
def test_only_the_api_s_methods_and_paths_are_forwarded(
    proxy: ConsoleProxy,
    session: dict[str, str],
    gateway: SignedGateway,
    method: str,
    target: str,
    status: int,
) -> None:
    before = len(gateway.received)
    gateway_port = gateway.url.split(":")[2].split("/")[0]
    answer = send(proxy, method, target.format(gateway_port=gateway_port), session)
    assert answer.status == status, answer.body
    assert answer.headers["Content-Type"] == "application/problem+json"
    assert answer.json()["detail"]
    if status == 405:
        allowed = "GET, HEAD" if target.startswith("/console") else "GET, HEAD, POST, PATCH, DELETE"
        assert answer.headers["Allow"] == allowed
    assert len(gateway.received) == before


def test_an_unknown_method_gets_the_server_s_answer_with_the_same_headers(
    proxy: ConsoleProxy, session: dict[str, str]
) -> None:
    answer = send(proxy, "BREW", "/tasks", session)
    assert answer.status == 501
    assert answer.headers["Content-Type"] == "application/problem+json"
    assert answer.headers["Content-Security-Policy"] == SECURITY_HEADERS["Content-Security-Policy"]


def test_bodies_are_capped_and_must_say_their_length(
    proxy: ConsoleProxy, session: dict[str, str], gateway: SignedGateway
) -> None:
    before = len(gateway.received)
    too_large = send(
        proxy, "POST", "/tasks", {**session, "Content-Length": str(MAX_BODY_BYTES + 1)}
    )
    assert too_large.status == 413
    assert f"at most {MAX_BODY_BYTES}" in too_large.json()["detail"]
    chunked = send(proxy, "POST", "/tasks", {**session, "Transfer-Encoding": "chunked"})
    assert chunked.status == 411
    # A digit that is not 0-9 ('²'.isdigit() is true) is a 400, not a dropped connection
    superscript = send(proxy, "POST", "/tasks", {**session, "Content-Length": "\u00b2"})
    assert superscript.status == 400
    assert len(gateway.received) == before


def test_a_body_at_the_cap_is_forwarded_and_one_byte_more_is_not(
    gateway: SignedGateway, config_dir: Path
) -> None:
    body = json.dumps(TASK).encode()
    proxy = serve(
        ConsoleProxy(
            Upstream.open(gateway.url, auth=signer(config_dir)), port=0, max_body_bytes=len(body)
        )
    )
    try:
        session = session_of(proxy)
        assert send(proxy, "POST", "/tasks", session, body).status == 201
        assert send(proxy, "POST", "/tasks", session, body + b" ").status == 413
    finally:
        proxy.shutdown()
        proxy.server_close()


def test_it_listens_on_loopback_only(gateway: SignedGateway) -> None:
    upstream = Upstream.open(gateway.url)
    for host in ("0.0.0.0", "192.0.2.1", "::1"):
        with pytest.raises(ValueError, match="loopback"):
            ConsoleProxy(upstream, port=0, host=host)
    proxy = ConsoleProxy(upstream, port=0)
    try:
        assert proxy.server_address[0] == "127.0.0.1"
    finally:
        proxy.server_close()


def test_an_unreachable_api_is_a_502_problem(config_dir: Path) -> None:
    closed = f"http://127.0.0.1:{free_port()}/prod"
    proxy = serve(ConsoleProxy(Upstream.open(closed, auth=signer(config_dir)), port=0))
    try:
        session = session_of(proxy)
        answer = send(proxy, "GET", "/tasks", session)
        assert answer.status == 502
        assert answer.headers["Content-Type"] == "application/problem+json"
        assert answer.json()["title"] == "API unreachable"
        assert f"cannot reach {closed}" in answer.json()["detail"]
    finally:
        proxy.shutdown()
        proxy.server_close()


class EndedSession(httpx.Auth):
    """Credentials that can no longer sign, as an SSO session that ended."""

    def auth_flow(self, request: httpx.Request) -> Iterator[httpx.Request]:
        raise TokenRetrievalError(provider="sso", error_msg="the SSO session has expired")
        yield request


def test_credentials_that_cannot_sign_are_a_502_saying_to_sign_in_again(
    gateway: SignedGateway,
) -> None:
    proxy = serve(ConsoleProxy(Upstream.open(gateway.url, auth=EndedSession()), port=0))
    try:
        session = session_of(proxy)
        before = len(gateway.received)
        answer = send(proxy, "GET", "/tasks", session)
        assert answer.status == 502
        assert answer.json()["title"] == "Could not sign"
        assert "aws sso login" in answer.json()["detail"]
        assert len(gateway.received) == before
    finally:
        proxy.shutdown()
        proxy.server_close()


def test_with_an_api_key_it_sends_its_own_key_and_signs_nothing(
    gateway: SignedGateway,
) -> None:
    keyed = SignedGateway(gateway.api_url, CREDENTIALS, REGION, api_key="k-console").start()
    proxy = serve(ConsoleProxy(Upstream.open(keyed.url, api_key="k-console"), port=0))
    try:
        session = session_of(proxy)
        headers = {**session, "x-api-key": "typed-in-the-console"}
        assert send(proxy, "GET", "/tasks", headers).status == 200
        (received,) = keyed.received
        assert received.headers["x-api-key"] == "k-console"
        assert "authorization" not in received.headers
    finally:
        proxy.shutdown()
        proxy.server_close()
        keyed.stop()


def test_the_command_prints_the_address_and_signs_what_it_forwards(
    gateway: SignedGateway, config_dir: Path
) -> None:
    # Given `dynacron console` started as a user would, with credentials in the environment
    command = ["console", "--url", gateway.url, "--region", REGION, "--port", "0"]
    service = Service(
        ["-m", "dynacron.cli.main", *command],
        ready_marker="/console/#session=",
        env=credential_env(config_dir),
    )
    try:
        link = service.ready_line.split()[-1]
        assert link.startswith("http://127.0.0.1:")
        assert "signed (SigV4, execute-api, eu-west-1)" in "".join(service.output)
        # When the browser opens the printed address and the console calls the API
        with httpx.Client(trust_env=False) as browser:
            page = browser.get(link.partition("#")[0])
            assert page.status_code == 200
            assert page.headers["Content-Security-Policy"]
            tasks = browser.get(
                link.split("/console")[0] + "/tasks", headers={SESSION_HEADER: secret_of(link)}
            )
        # Then the API answered it, signed with those credentials
        assert tasks.status_code == 200, tasks.text
        assert (
            gateway.received[-1]
            .headers["authorization"]
            .startswith(f"AWS4-HMAC-SHA256 Credential={CREDENTIALS.access_key}/")
        )
        # And a refused request is printed, as text (what it carried is no markup)
        refused = httpx.get(
            link.split("/console")[0] + "/[red]x", headers={"Host": "attacker.example"}
        )
        assert refused.status_code == 403
        line = "refused GET '/[red]x': 403 Wrong host"
        assert wait_until(lambda: line in "".join(service.output), timeout=10)
    finally:
        service.stop()


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("ftp://api.example/prod", "is not an http(s) URL"),
        ("http://abc123.execute-api.eu-west-1.amazonaws.com/prod", "over https only"),
        ("https://user:pw@abc123.execute-api.eu-west-1.amazonaws.com/prod", "no user"),
    ],
)
def test_the_command_refuses_a_url_it_would_not_sign_for(url: str, message: str) -> None:
    result = CliRunner().invoke(app, ["console", "--url", url, "--port", "0"])
    assert result.exit_code == 2
    assert message in result.output


def test_the_command_says_when_there_are_no_credentials(
    config_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in AWS_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in credential_env(config_dir).items():
        if not name.startswith(("AWS_ACCESS", "AWS_SECRET", "AWS_SESSION")):
            monkeypatch.setenv(name, value)
    url = "https://abc123.execute-api.eu-west-1.amazonaws.com/prod"
    result = CliRunner().invoke(app, ["console", "--url", url, "--port", "0"])
    assert result.exit_code == 1
    assert "no AWS credentials found" in result.output
