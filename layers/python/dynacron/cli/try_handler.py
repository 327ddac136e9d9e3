"""``dynacron try-handler``: a handler to try dynacron with, on the loopback interface.

It answers each delivery (200 by default), prints it readably, and checks its
``Dynacron-Signature`` against the tenant's signing secrets (decision 0019),
given with ``--secret`` or read from the local API's ``GET /tenant``. A bad
signature is printed as such and answered 401. ``--fail-rate``, ``--status`` and
``--delay`` make it fail, answer otherwise, or answer late: to watch retries,
dead letters, callbacks and timeouts. It runs on the bounded server of the local
gateway and the console (``console/bounded_server.py``): an idle connection holds
no thread and is closed after a while, and the connections are capped.
"""

from __future__ import annotations

import ipaddress
import json
import random
import signal
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from types import FrameType
from typing import Annotated, Any

import typer

from dynacron.adapters.delivery.answers import readable
from dynacron.client.api_client import LOCAL_URL, ApiError, ApiUnreachable, Client
from dynacron.console.bounded_server import BodyRefused, BoundedHTTPServer, BoundedRequestHandler
from dynacron.definitions.callbacks import CALLBACK_TOKEN_HEADER
from dynacron.domain.executions.signing import (
    DEFAULT_TOLERANCE_SECONDS,
    SIGNATURE_HEADER,
    parse_timestamp,
    verify,
)

# A delivery's body is at most the tenant's payload limit and a few fields; more is no delivery.
MAX_BODY_BYTES = 1024 * 1024
# The status --fail-rate answers with: a server error, which dynacron retries.
FAIL_STATUS = 500
MAX_DELAY_SECONDS = 30.0
# The server's bounds. Local mode's workers have 64 calls in flight by default
# (2 invocations x 32), each on a connection of its own, and a --delay holds a
# thread per answer: 64 threads at most; idle keep-alive connections hold none.
SERVER_LIMITS: dict[str, Any] = {
    "threads": 64,
    "max_connections": 256,
    "idle_seconds": 30.0,
    # A delivery arrives whole within this; its answer (after --delay) may take longer.
    "request_seconds": 30.0,
    "io_seconds": 10.0,
}


@dataclass(frozen=True)
class SignatureCheck:
    ok: bool
    text: str


class Secrets:
    """The tenant's signing secrets: those given, or those the API's ``GET /tenant``
    shows, fetched again after a signature that none of them verifies (a rotation)."""

    def __init__(
        self,
        given: Sequence[str],
        fetch: Callable[[], list[str]] | None,
    ) -> None:
        self._secrets = list(given)
        self._fetch = None if given else fetch
        self._lock = threading.Lock()
        self.problem: str | None = None

    def current(self) -> list[str]:
        with self._lock:
            if not self._secrets:
                self._refresh()
            return list(self._secrets)

    def refreshed(self) -> list[str]:
        """Fetched again; the same list when they were given or the API is away."""
        with self._lock:
            self._refresh()
            return list(self._secrets)

    def _refresh(self) -> None:
        if self._fetch is None:
            return
        try:
            self._secrets = self._fetch() or self._secrets
            self.problem = None
        except (ApiError, ApiUnreachable) as error:
            self.problem = str(error)


def tenant_secrets(api: str, api_key: str | None) -> Callable[[], list[str]]:
    """Reads the caller's signing secrets from ``GET /tenant`` of the API at ``api``."""

    def fetch() -> list[str]:
        with Client(api, api_key=api_key, timeout=5.0) as client:
            return list(client.tenant().signing_secrets)

    return fetch


def check_signature(header: str | None, body: bytes, secrets: Secrets, now: int) -> SignatureCheck:
    """Whether ``header`` signs ``body`` under one of the tenant's secrets, and if not, why."""
    if header is None:
        return SignatureCheck(False, f"BAD SIGNATURE: no {SIGNATURE_HEADER} header")
    timestamp = parse_timestamp(header)
    if timestamp is None:
        return SignatureCheck(False, f"BAD SIGNATURE: a malformed {SIGNATURE_HEADER} header")
    if abs(now - timestamp) > DEFAULT_TOLERANCE_SECONDS:
        return SignatureCheck(
            False,
            f"BAD SIGNATURE: signed {now - timestamp} s ago "
            f"(more than {DEFAULT_TOLERANCE_SECONDS} s: a replay, or a clock off)",
        )
    known = secrets.current()
    if not known:
        return SignatureCheck(
            True, f"signature NOT CHECKED: no signing secret ({secrets.problem or 'none given'})"
        )
    if any(verify(header, secret, body, now) for secret in known):
        return SignatureCheck(True, "signature ok")
    if any(verify(header, secret, body, now) for secret in secrets.refreshed()):
        return SignatureCheck(True, "signature ok (with a rotated secret)")
    return SignatureCheck(False, "BAD SIGNATURE: no signing secret of the tenant verifies it")


@dataclass
class Answers:
    """How deliveries are answered: ``status``, or ``FAIL_STATUS`` for a ``fail_rate``
    share of them, after ``delay_seconds``."""

    status: int = 200
    fail_rate: float = 0.0
    delay_seconds: float = 0.0
    draw: random.Random = field(default_factory=random.Random)

    def status_for_next(self) -> tuple[int, str]:
        """The status of the next answer, and which option chose it if not the default."""
        if self.fail_rate and self.draw.random() < self.fail_rate:
            return FAIL_STATUS, "--fail-rate"
        return self.status, "--status" if self.status != 200 else ""


def describe_delivery(
    path: str, headers: dict[str, str], body: bytes, check: SignatureCheck, status: int, option: str
) -> list[str]:
    """The lines printed for one delivery: what it carried, and how it was answered."""
    at = datetime.now().astimezone().strftime("%H:%M:%S")  # the reader's own clock
    why = f" ({option})" if option else ""
    lines = [f"{at}  POST {readable(path)}  {check.text}  -> answered {status}{why}"]
    try:
        delivery: Any = json.loads(body)
    except ValueError:
        delivery = None
    if not isinstance(delivery, dict):
        text = body[:200].decode("utf-8", errors="replace")
        lines.append(f"  body        (not a dynacron delivery) {readable(text, 200)}")
        return lines
    for label, key in (
        ("task", "task_id"),
        ("execution", "execution_id"),
        ("scheduled", "scheduled_at"),
        ("attempt", "attempt"),
    ):
        lines.append(f"  {label:<11} {readable(str(delivery.get(key, '?')))}")
    payload = json.dumps(delivery.get("payload"), ensure_ascii=False)
    lines.append(f"  {'payload':<11} {readable(payload, 500)}")
    if "upstream" in delivery:
        upstream = json.dumps(delivery["upstream"], ensure_ascii=False)
        lines.append(f"  {'upstream':<11} {readable(upstream, 500)}")
    callbacks = delivery.get("callbacks")
    if status == 202 and isinstance(callbacks, dict) and "complete" in callbacks:
        token = headers.get(CALLBACK_TOKEN_HEADER.lower(), "")
        lines.append(
            f"  {'complete':<11} curl -X POST {readable(str(callbacks['complete']))} "
            f"-H '{CALLBACK_TOKEN_HEADER}: {readable(token)}' "
            """-H 'content-type: application/json' -d '{"status": "SUCCEEDED"}'"""
        )
    return lines


class _Handler(BoundedRequestHandler):
    """Checks, prints and answers each POST; a GET (a browser) is told what this is."""

    server: TryServer
    server_version = "dynacron-try-handler"

    def do_POST(self) -> None:
        try:
            body = self.read_body(MAX_BODY_BYTES)
        except BodyRefused as refusal:
            # Answered before any of the body is read (a length that is none, over
            # the limit, or chunked), then what is still sent is dropped.
            self.close_connection = True
            self._answer(refusal.status, {"error": f"{refusal.title}: {refusal.detail}"})
            self.discard_body()
            return
        headers = {name.lower(): value for name, value in self.headers.items()}
        check = check_signature(
            headers.get(SIGNATURE_HEADER.lower()), body, self.server.secrets, int(time.time())
        )
        status, option = self.server.answers.status_for_next() if check.ok else (401, "")
        self.server.say(describe_delivery(self.path, headers, body, check, status, option))
        if check.ok and self.server.answers.delay_seconds:
            time.sleep(self.server.answers.delay_seconds)
        if not check.ok:
            self._answer(status, {"error": check.text})
        elif option and not 200 <= status < 300:
            self._answer(status, {"error": f"try-handler answers {status} as asked ({option})"})
        else:
            self._answer(status, {"received": _execution_of(body)})

    def do_GET(self) -> None:
        self._answer(200, {"try_handler": "POST deliveries here; each is printed where it runs"})

    def _answer(self, status: int, document: dict[str, Any]) -> None:
        encoded = json.dumps(document).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(encoded)))
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(encoded)
        except OSError:
            pass  # the caller gave up (a timeout that --delay caused): nothing to answer

    def log_message(self, format: str, *args: Any) -> None:
        return None  # each delivery is printed by do_POST, readably


def _execution_of(body: bytes) -> Any:
    try:
        delivery = json.loads(body)
    except ValueError:
        return None
    return delivery.get("execution_id") if isinstance(delivery, dict) else None


class TryServer(BoundedHTTPServer):
    """The server: a bounded pool of threads answers deliveries (none of them holding
    Ctrl-C up); idle connections wait without one and are closed after a while."""

    def __init__(
        self, address: tuple[str, int], secrets: Secrets, answers: Answers, **limits: Any
    ) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.secrets = secrets
        self.answers = answers
        self._print_lock = threading.Lock()
        super().__init__(address, _Handler, **(SERVER_LIMITS | limits))

    def say(self, lines: Sequence[str]) -> None:
        """Print lines together (deliveries arrive on several threads), at once."""
        with self._print_lock:
            print("\n".join(lines), flush=True)


def loopback_host(host: str) -> str | None:
    """The address to bind for ``host``, or None when it is not a loopback address."""
    if host == "localhost":
        return "127.0.0.1"
    try:
        return host if ipaddress.ip_address(host).is_loopback else None
    except ValueError:
        return None


def try_handler(
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port to listen on")] = 9000,
    host: Annotated[
        str, typer.Option(help="A loopback address to bind (127.0.0.1, ::1): nothing else")
    ] = "127.0.0.1",
    secret: Annotated[
        list[str] | None,
        typer.Option(
            "--secret",
            envvar="DYNACRON_SIGNING_SECRET",
            help="The tenant's signing secret (repeat during a rotation); "
            "without it, read from --api",
            show_default=False,
        ),
    ] = None,
    api: Annotated[
        str, typer.Option(help="The local API whose GET /tenant shows the signing secrets")
    ] = LOCAL_URL,
    api_key: Annotated[
        str | None,
        typer.Option("--api-key", envvar="DYNACRON_API_KEY", help="The key of your tenant"),
    ] = None,
    status: Annotated[
        int, typer.Option(min=200, max=599, help="Answer each delivery with this status")
    ] = 200,
    fail_rate: Annotated[
        float,
        typer.Option(
            min=0.0, max=1.0, help=f"Answer this share of deliveries {FAIL_STATUS}: retries"
        ),
    ] = 0.0,
    delay: Annotated[
        float,
        typer.Option(
            min=0.0,
            max=MAX_DELAY_SECONDS,
            help="Answer this many seconds late; past the worker's HTTP timeout "
            "(10 s, `dynacron local --http-timeout-seconds`) the attempt times out",
        ),
    ] = 0.0,
) -> None:
    """Answer deliveries on the loopback interface and print each, its signature checked.

    Point a task at it: `--handler-url http://127.0.0.1:9000/hook`. Ctrl-C stops it.
    """
    bind = loopback_host(host)
    if bind is None:
        typer.echo(
            f"error: --host {host} is no loopback address: this handler is for trying", err=True
        )
        raise typer.Exit(2)
    secrets = Secrets(secret or [], tenant_secrets(api, api_key))
    try:
        server = TryServer((bind, port), secrets, Answers(status, fail_rate, delay))
    except OSError as error:
        typer.echo(f"error: could not listen on {host} port {port}: {error.strerror}", err=True)
        raise typer.Exit(1) from None
    _print_banner(server, bind, secrets, bool(secret), api)
    _serve_until_stopped(server)


def _print_banner(server: TryServer, bind: str, secrets: Secrets, given: bool, api: str) -> None:
    shown = f"[{bind}]" if ":" in bind else bind
    port = server.server_port
    answers = server.answers
    known = secrets.current()
    if given:
        signing = f"checked with the {len(known)} secret(s) given"
    elif known:
        signing = f"checked with your tenant's secret, read from {api}/tenant"
    else:
        signing = f"not checkable yet: {secrets.problem} (read again at each delivery)"
    lines = [
        f"dynacron try-handler listening on http://{shown}:{port}  (Ctrl-C to stop)",
        f"  signatures  {signing}",
        f"  answers     {answers.status} to each POST"
        + (f", {FAIL_STATUS} to {answers.fail_rate:.0%} of them" if answers.fail_rate else "")
        + (f", after {answers.delay_seconds:g} s" if answers.delay_seconds else ""),
        f"  try         --handler-url http://{shown}:{port}/hook",
    ]
    server.say(lines)


def _serve_until_stopped(server: TryServer) -> None:
    """Serve until Ctrl-C (or SIGTERM): then close the socket and say so."""

    def stop(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        server.server_close()
    server.say(["stopped"])
