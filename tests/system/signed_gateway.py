"""A stand-in for a deployed API on loopback: API Gateway's IAM check, then the real API;
and the AWS SDK environment of the fixed test credentials it checks against.

``SignedGateway`` verifies each request's SigV4 signature as API Gateway does
(botocore computes the signature expected of fixed test credentials), refuses what
does not verify with API Gateway's 403, and hands what does, its stage prefix
removed, to an API behind it (local mode). It records what it received.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from botocore.auth import SigV4Auth as BotocoreSigV4
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from dynacron.client.api_client import SigV4Auth

_AUTHORIZATION = re.compile(
    r"AWS4-HMAC-SHA256 Credential=(?P<key>[^/]+)/(?P<date>\d{8})/(?P<region>[^/]+)/"
    r"(?P<service>[^/]+)/aws4_request, SignedHeaders=(?P<signed>[a-z0-9;-]+), "
    r"Signature=(?P<signature>[0-9a-f]{64})"
)
CREDENTIALS = Credentials("AKIDCONSOLEPROXYTEST", "console-proxy-test-secret", "session-token-1")
REGION = "eu-west-1"


def credential_env(config_dir: Path, credentials: Credentials = CREDENTIALS) -> dict[str, str]:
    """The AWS SDK's environment for ``credentials`` alone: no profile, no config
    file of this machine's, no instance metadata."""
    empty = config_dir / "empty"
    empty.write_text("")
    return {
        "AWS_ACCESS_KEY_ID": credentials.access_key,
        "AWS_SECRET_ACCESS_KEY": credentials.secret_key,
        "AWS_SESSION_TOKEN": credentials.token or "",
        "AWS_CONFIG_FILE": str(empty),
        "AWS_SHARED_CREDENTIALS_FILE": str(empty),
        "AWS_EC2_METADATA_DISABLED": "true",
        "BOTO_CONFIG": str(empty),
    }


AWS_VARIABLES = (
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_ENDPOINT_URL",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_ROLE_ARN",
)


def signer(config_dir: Path, credentials: Credentials = CREDENTIALS) -> SigV4Auth:
    """The client's SigV4 signer, reading ``credentials`` from the environment as
    the command does (the default credential chain)."""
    with pytest.MonkeyPatch.context() as env:
        for name in AWS_VARIABLES:
            env.delenv(name, raising=False)
        for name, value in credential_env(config_dir, credentials).items():
            env.setenv(name, value)
        return SigV4Auth(region=REGION)


# What API Gateway allows between a request's X-Amz-Date and its own clock.
MAX_SKEW = timedelta(minutes=5)
# Headers the API behind is given; API Gateway passes the rest too, the API reads these.
PASSED_ON = ("accept", "content-type", "idempotency-key", "x-api-key")


@dataclass(frozen=True)
class Received:
    method: str
    target: str  # as received: the stage, the path and the query
    headers: dict[str, str]  # names in lower case
    body: bytes


def verify_sigv4(
    received: Received, credentials: Credentials, region: str, now: datetime
) -> str | None:
    """None if ``received`` carries a valid SigV4 signature of ``credentials`` for
    execute-api in ``region``; otherwise why not."""
    headers = received.headers
    match = _AUTHORIZATION.fullmatch(headers.get("authorization", ""))
    if match is None:
        return "Missing Authentication Token"
    if match["key"] != credentials.access_key:
        return "The security token included in the request is invalid."
    if (match["region"], match["service"]) != (region, "execute-api"):
        return f"Credential should be scoped to a valid region ({region}) and service"
    stamp = headers.get("x-amz-date", "")
    try:
        signed_at = datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    except ValueError:
        return "Authorization header requires existence of a valid 'X-Amz-Date' header"
    if abs(now - signed_at) > MAX_SKEW or stamp[:8] != match["date"]:
        return "Signature expired"
    signed = match["signed"].split(";")
    if "host" not in signed or "x-amz-date" not in signed:
        return "the signature must cover the Host and X-Amz-Date headers"
    if credentials.token and (
        "x-amz-security-token" not in signed
        or headers.get("x-amz-security-token") != credentials.token
    ):
        return "The security token included in the request is invalid."
    request = AWSRequest(
        method=received.method,
        url=f"http://{headers['host']}{received.target}",
        data=received.body,
        headers={name: headers[name] for name in signed if name != "host" and name in headers},
    )
    request.context["timestamp"] = stamp
    sigv4 = BotocoreSigV4(credentials, "execute-api", region)
    if sigv4.signed_headers(sigv4.headers_to_sign(request)) != match["signed"]:
        return "a signed header is missing from the request"
    canonical = sigv4.canonical_request(request)
    expected = sigv4.signature(sigv4.string_to_sign(request, canonical), request)
    if expected != match["signature"]:
        return "The request signature we calculated does not match the signature you provided."
    return None


@dataclass
class SignedGateway:
    """``api_url`` behind IAM auth (or behind ``api_key``) at ``url``, stage ``stage``."""

    api_url: str
    credentials: Credentials
    region: str = "eu-west-1"
    stage: str = "prod"
    api_key: str | None = None
    received: list[Received] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_port}/{self.stage}"

    def start(self) -> SignedGateway:
        gateway = self
        api = httpx.Client(base_url=self.api_url, timeout=10, trust_env=False)

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                received = Received(
                    self.command,
                    self.path,
                    {name.lower(): value for name, value in self.headers.items()},
                    self.rfile.read(length) if length else b"",
                )
                status, headers, body = gateway._answer(received, api)
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                # The deployed API never sets a cookie nor allows another origin; a
                # proxy must neither keep the one nor pass either on.
                self.send_header("Set-Cookie", "gateway=1; Path=/")
                self.send_header("Access-Control-Allow-Origin", "*")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            do_GET = do_HEAD = do_POST = do_PATCH = do_DELETE = do_PUT = _handle

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        ).start()
        return self

    def _answer(self, received: Received, api: httpx.Client) -> tuple[int, dict[str, str], bytes]:
        with self._lock:
            self.received.append(received)
        if self.api_key is not None:
            sent = received.headers.get("x-api-key")
            why = None if sent == self.api_key else "Forbidden"
            if "authorization" in received.headers:
                why = "an API key stack takes no Authorization header"
        else:
            why = verify_sigv4(received, self.credentials, self.region, datetime.now(UTC))
        prefix = f"/{self.stage}/"
        if why is None and not received.target.startswith(prefix):
            why = "Missing Authentication Token"  # API Gateway's answer to another stage
        if why is not None:
            with self._lock:
                self.refused.append(why)
            return 403, {"Content-Type": "application/json"}, f'{{"message": "{why}"}}'.encode()
        response = api.request(
            received.method,
            received.target[len(prefix) - 1 :],
            headers={n: v for n, v in received.headers.items() if n in PASSED_ON},
            content=received.body,
        )
        passed = {"content-type", "retry-after", "allow", "location", "idempotent-replayed"}
        headers = {n: v for n, v in response.headers.items() if n in passed}
        return response.status_code, headers, response.content

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
