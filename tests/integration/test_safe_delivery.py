"""SSRF: refused at registration and at delivery, after resolution, pinned to what was checked.

Names resolve through an injected resolver: no DNS query leaves the machine.
"""

from __future__ import annotations

import dataclasses
import gzip
import time
import tracemalloc
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from threading import Thread
from typing import Any

import pytest

from dynacron.adapters.delivery.http import HttpDelivery
from dynacron.api.requests import TaskCreate
from dynacron.definitions.callbacks import CALLBACK_TOKEN_HEADER
from dynacron.domain.clock import SettableClock
from dynacron.domain.executions.execution import DeliveryResult, Dispatch
from dynacron.domain.executions.signing import SIGNATURE_HEADER, verify
from dynacron.domain.tasks.task import execution_id_for
from dynacron.domain.tasks.urls import UrlPolicy
from dynacron.entry.composition import Dynacron
from dynacron.entry.settings import Settings
from tests.integration.api_client import ALICE, call
from tests.support import Sink


class FakeDns:
    """A resolver from a table; records every lookup."""

    def __init__(self, records: dict[str, list[str]]) -> None:
        self.records = records
        self.lookups: list[str] = []

    def __call__(self, host: str, port: int) -> list[str]:
        self.lookups.append(host)
        if host not in self.records:
            raise OSError(f"no such host {host}")
        return self.records[host]


@pytest.fixture
def dns() -> FakeDns:
    return FakeDns({"hooks.test": ["127.0.0.1"], "sneaky.test": ["93.184.0.10", "10.1.2.3"]})


def deployed(system: Dynacron, aws: tuple[Any, Any], dns: FakeDns) -> Dynacron:
    """Dynacron as deployed: public addresses only."""
    dynamodb, sqs = aws
    settings = dataclasses.replace(system.settings, delivery_allow_networks=())
    return Dynacron(settings, dynamodb=dynamodb, sqs=sqs, clock=system.clock, resolver=dns)


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/",
        "http://10.0.0.1/hook",
        "http://[::1]:8080/hook",
        "http://127.0.0.1/hook",
        "http://100.64.0.1/hook",  # carrier-grade NAT
        "http://224.0.0.1/hook",  # multicast
        "http://240.0.0.1/hook",  # reserved
        "http://hooks.test/hook",  # a name that resolves to loopback
        "http://sneaky.test/hook",  # one public and one private address
        "http://nowhere.test/hook",  # does not resolve
    ],
)
def test_internal_destinations_are_refused_at_registration(
    system: Dynacron, aws: tuple[Any, Any], dns: FakeDns, url: str
) -> None:
    status, problem = call(
        deployed(system, aws, dns), "POST", "/tasks", {"rate": "1 hour", "handler_url": url}
    )
    assert status == 422, problem
    assert problem["errors"][0]["field"] == "handler_url"
    assert set(dns.lookups) <= {"hooks.test", "sneaky.test", "nowhere.test"}


def task_for(settings: Settings, url: str) -> Any:
    from dynacron.domain.schedules.expressions import parse_rate
    from dynacron.domain.tasks.task import Task, TaskStatus

    now = datetime(2026, 11, 30, 12, tzinfo=UTC)
    return Task(
        task_id="t1",
        name="t1",
        schedule=parse_rate("1 hour", anchor=now),
        handler_url=url,
        payload={"n": 1},
        status=TaskStatus.ACTIVE,
        next_run_at=now,
        created_at=now,
        updated_at=now,
        tenant_id=ALICE,
    )


TOKEN = "callback-token"
CLOCK = SettableClock(datetime(2026, 11, 30, 12, tzinfo=UTC))


def error_of(result: DeliveryResult) -> str:
    assert result.failure is not None
    return result.failure.error


DISPATCH = Dispatch("t1_20261130T120000Z", "t1", datetime(2026, 11, 30, 12, tzinfo=UTC))


def test_a_name_that_turns_private_after_registration_is_refused_at_delivery(
    system: Dynacron, dns: FakeDns, sink: Sink
) -> None:
    # Given a task whose host resolved to a public address when registered
    # When it now resolves to the metadata service, then to loopback
    delivery = HttpDelivery(UrlPolicy(), 2.0, CLOCK, secrets_of=lambda _: ["s"], resolver=dns)
    for address in ("169.254.169.254", "127.0.0.1"):
        dns.records["rebind.test"] = [address]
        result = delivery.deliver(
            task_for(system.settings, "http://rebind.test/hook"), DISPATCH, TOKEN
        )
        assert not result.ok
        assert f"resolves to {address}, which is not allowed" in error_of(result)
    # Then nothing was sent, by any route
    for url in ("http://10.0.0.1/hook", f"http://[::1]:{sink.url.rsplit(':', 1)[1]}/hook"):
        result = delivery.deliver(task_for(system.settings, url), DISPATCH, TOKEN)
        assert not result.ok
        assert "not allowed" in error_of(result)
    assert sink.snapshot() == []


def test_the_connection_goes_to_the_checked_address_with_the_original_host_and_a_signature(
    system: Dynacron, sink: Sink
) -> None:
    # Given a name that resolves to loopback, in a deployment that allows loopback
    port = int(sink.url.rsplit(":", 1)[1])
    dns = FakeDns({"localhost": ["127.0.0.1"]})
    delivery = HttpDelivery(
        UrlPolicy(("127.0.0.0/8",)),
        2.0,
        CLOCK,
        secrets_of=lambda _: ["new", "old"],
        resolver=dns,
        unix_time=lambda: 1_000,
    )
    # (localhost is the one name a loopback-only policy accepts)
    result = delivery.deliver(
        task_for(system.settings, f"http://localhost:{port}/h"), DISPATCH, TOKEN
    )
    assert result.ok, result.failure
    (received,) = sink.snapshot()
    # Then the Host header names what the user wrote, and the name was looked up
    # once, by the check that chose the address connected to
    assert received.headers["Host"] == f"localhost:{port}"
    assert dns.lookups == ["localhost"]
    # And the body is signed under both secrets of a rotation
    header = received.headers[SIGNATURE_HEADER]
    import json

    body = json.dumps(received.body, separators=(",", ":")).encode()
    assert verify(header, "new", body, now=1_000)
    assert verify(header, "old", body, now=1_000)


class Redirector:
    """A loopback server that answers every POST with a redirect to ``location``."""

    def __init__(self, status: int, location: str) -> None:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(outer.status)
                self.send_header("Location", outer.location)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.status, self.location = status, location
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}"


@pytest.fixture
def redirector() -> Iterator[Redirector]:
    server = Redirector(307, "/")
    yield server
    server.server.shutdown()


def test_redirects_are_checked_and_not_followed_across_hosts(
    system: Dynacron, sink: Sink, redirector: Redirector
) -> None:
    loopback = UrlPolicy(("127.0.0.0/8",))
    delivery = HttpDelivery(loopback, 2.0, CLOCK, secrets_of=lambda _: ["s"], resolver=FakeDns({}))
    # A redirect to another host (here: another port) is not followed
    redirector.location = f"{sink.url}/elsewhere"
    result = delivery.deliver(task_for(system.settings, redirector.url + "/h"), DISPATCH, TOKEN)
    assert not result.ok
    assert "another host" in error_of(result)
    assert sink.snapshot() == []
    # Allowed across hosts, each hop is still checked: the metadata address is refused
    follow = HttpDelivery(
        loopback,
        2.0,
        CLOCK,
        secrets_of=lambda _: ["s"],
        resolver=FakeDns({}),
        follow_cross_host=True,
    )
    redirector.location = "http://169.254.169.254/latest/meta-data/"
    result = follow.deliver(task_for(system.settings, redirector.url + "/h"), DISPATCH, TOKEN)
    assert not result.ok
    assert "not allowed" in error_of(result)
    # And a loop ends after a few hops
    redirector.location = "/again"
    result = follow.deliver(task_for(system.settings, redirector.url + "/h"), DISPATCH, TOKEN)
    assert error_of(result) == "more than 3 redirects"
    redirector.location = f"{sink.url}/elsewhere"
    assert follow.deliver(task_for(system.settings, redirector.url + "/h"), DISPATCH, TOKEN).ok
    assert [d.path for d in sink.snapshot()] == ["/elsewhere"]


def test_the_worker_signs_with_the_tenants_secret(
    system: Dynacron, aws: tuple[Any, Any], sink: Sink
) -> None:
    task = system.task_service.register(
        ALICE, TaskCreate(rate="1 hour", handler_url=f"{sink.url}/hook").to_spec()
    )
    secret = system.task_service.signing_secrets(ALICE)[0]
    assert task.next_run_at is not None
    execution_id = execution_id_for(task.task_id, task.next_run_at)
    assert system.runner.run(Dispatch(execution_id, task.task_id, task.next_run_at))
    (received,) = sink.snapshot()
    import json

    body = json.dumps(received.body, separators=(",", ":")).encode()
    assert verify(received.headers[SIGNATURE_HEADER], secret, body, now=int(time.time()))


def test_a_redirect_to_another_host_carries_neither_the_callback_token_nor_the_signature(
    system: Dynacron, sink: Sink, redirector: Redirector
) -> None:
    """Finding 8: with cross-host redirects allowed, the callback token (which lets its
    holder complete the execution) and the tenant's signature went to the new host."""
    follow = HttpDelivery(
        UrlPolicy(("127.0.0.0/8",)),
        2.0,
        CLOCK,
        secrets_of=lambda _: ["s"],
        resolver=FakeDns({}),
        follow_cross_host=True,
    )
    redirector.location = f"{sink.url}/elsewhere"
    # When the task's host sends the call on to another host
    result = follow.deliver(task_for(system.settings, redirector.url + "/h"), DISPATCH, TOKEN)
    # Then the other host got the call, without the tenant's secrets
    assert result.ok
    (received,) = sink.snapshot()
    assert CALLBACK_TOKEN_HEADER not in received.headers
    assert SIGNATURE_HEADER not in received.headers
    assert received.headers["Idempotency-Key"] == DISPATCH.execution_id
    # And a 202 from there fails: it has no token to call back with
    sink.status = 202
    accepted = follow.deliver(task_for(system.settings, redirector.url + "/h"), DISPATCH, TOKEN)
    assert not accepted.ok
    assert "was not given the callback token" in error_of(accepted)
    assert accepted.failure is not None
    assert not accepted.failure.retryable


def test_a_cookie_one_tenant_s_handler_sets_never_rides_on_another_s_delivery(
    system: Dynacron, sink: Sink
) -> None:
    """One HTTP client delivers for every tenant: a cookie jar in it would send a
    session cookie a host gave for one tenant's task along with any other
    tenant's delivery to that host, payload and all, as that session."""
    delivery = HttpDelivery(
        UrlPolicy(("127.0.0.0/8",)), 2.0, CLOCK, secrets_of=lambda _: ["s"], resolver=FakeDns({})
    )
    sink.answer = lambda _: (200, {"Set-Cookie": "session=alice-s; Path=/"})
    alice_s = task_for(system.settings, f"{sink.url}/hook")
    bob_s = dataclasses.replace(alice_s, task_id="t2", tenant_id="bob")
    # Given the host answered Alice's delivery with a session cookie
    assert delivery.deliver(alice_s, DISPATCH, TOKEN).ok
    # When Bob's task, and Alice's again, are delivered to the same host
    assert delivery.deliver(bob_s, dataclasses.replace(DISPATCH, task_id="t2"), TOKEN).ok
    assert delivery.deliver(alice_s, DISPATCH, TOKEN).ok
    # Then no delivery carried a cookie: every one stands on its signature alone
    assert [d.headers.get("Cookie") for d in sink.snapshot()] == [None, None, None]


def test_the_response_cap_counts_the_bytes_received_not_what_they_inflate_to(
    system: Dynacron, sink: Sink
) -> None:
    """Issue 23: a 1 MB gzip answer inflated to over 100 MiB inside a 256 MB worker
    before the 64 KiB cap applied. Nothing is decoded now, and nothing asked for."""
    bomb = gzip.compress(b"\0" * (64 * 1024 * 1024), compresslevel=9)  # 64 KiB of gzip
    sink.body = bomb
    sink.answer = lambda _: (200, {"Content-Encoding": "gzip"})
    delivery = HttpDelivery(
        UrlPolicy(("127.0.0.0/8",)), 2.0, CLOCK, secrets_of=lambda _: ["s"], resolver=FakeDns({})
    )
    tracemalloc.start()
    try:
        result = delivery.deliver(task_for(system.settings, f"{sink.url}/hook"), DISPATCH, TOKEN)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.ok
    assert peak < 8 * 1024 * 1024, f"{peak / 2**20:.0f} MiB allocated"
    (sent,) = sink.snapshot()
    assert sent.headers.get("Accept-Encoding") == "identity"
    assert result.excerpt is not None
    assert "gzip-encoded body, not decoded" in result.excerpt
    assert "\0" not in result.excerpt


def test_a_long_content_encoding_is_quoted_cut_short(system: Dynacron, sink: Sink) -> None:
    # Given a handler that names a 4 KB Content-Encoding (the tenant's own, but every
    # byte quoted would be stored on the execution and shown in the console)
    sink.body = b"abc"
    sink.answer = lambda _: (200, {"Content-Encoding": "x" * 4096})
    delivery = HttpDelivery(
        UrlPolicy(("127.0.0.0/8",)), 2.0, CLOCK, secrets_of=lambda _: ["s"], resolver=FakeDns({})
    )
    # When it is delivered, then the excerpt names the encoding cut to 32 characters
    result = delivery.deliver(task_for(system.settings, f"{sink.url}/hook"), DISPATCH, TOKEN)
    assert result.excerpt == f"(3 bytes of a {'x' * 32}...-encoded body, not decoded)"
