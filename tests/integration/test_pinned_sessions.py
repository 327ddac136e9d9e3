"""``PinnedSessions``: the one place a delivery's or a notification's HTTP session is
made, one per URL policy, its connections only to the addresses the policy allows."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import aiohttp
import pytest

from dynacron.adapters.delivery.connections import DeliveryLoop, DestinationRefused
from dynacron.adapters.delivery.http import PinnedSessions
from dynacron.domain.tasks.urls import UrlPolicy
from tests.support import Sink

LOOPBACK = UrlPolicy(("127.0.0.0/8",))
# Names allowed (no allow_networks), and the sink's loopback range granted as if private.
NAMED_LOOPBACK = UrlPolicy(private_networks=("127.0.0.0/8",))
DNS = {"hooks.test": ["127.0.0.1"], "metadata.test": ["169.254.169.254"]}


def resolve(host: str, port: int) -> list[str]:
    if host not in DNS:
        raise OSError(f"no such host {host}")
    return DNS[host]


@pytest.fixture(params=[False, True], ids=["as-sent", "raw-bodies"])
def sessions(request: pytest.FixtureRequest) -> Iterator[PinnedSessions]:
    made = PinnedSessions(resolve, raw_bodies=request.param)
    yield made
    made.close()


def post(sessions: PinnedSessions, policy: UrlPolicy, url: str) -> int:
    async def call() -> int:
        async with asyncio.timeout(5):
            async with sessions.for_policy(policy).post(
                url, data=b"{}", allow_redirects=False
            ) as response:
                return response.status

    return DeliveryLoop.submit(call()).result(10)


def test_one_session_per_policy_made_once() -> None:
    sessions = PinnedSessions(resolve)
    granted = UrlPolicy(private_networks=("10.0.0.0/8",))

    async def made() -> list[aiohttp.ClientSession]:
        return [sessions.for_policy(p) for p in (LOOPBACK, granted, LOOPBACK, granted)]

    first, second, again, second_again = DeliveryLoop.submit(made()).result(10)
    assert first is again
    assert second is second_again
    assert first is not second
    sessions.close()
    assert first.closed
    assert second.closed


def test_a_name_is_connected_at_the_address_checked_with_its_host_name(
    sessions: PinnedSessions, sink: Sink
) -> None:
    port = sink.url.rsplit(":", 1)[1]
    # hooks.test is in no DNS but the injected one: the call found the sink through it
    status = post(sessions, NAMED_LOOPBACK, f"http://hooks.test:{port}/hook")
    assert status == 200
    (received,) = sink.snapshot()
    assert received.headers["Host"] == f"hooks.test:{port}"
    assert received.headers["User-Agent"].startswith("dynacron/")


def test_a_name_that_resolves_to_the_metadata_address_is_refused_before_connecting(
    sessions: PinnedSessions, sink: Sink
) -> None:
    # Given a policy whose private ranges cover the link-local ones
    link_local = UrlPolicy(private_networks=("169.254.0.0/16",))
    # When a name resolves to the instance metadata address, then no connection is made
    with pytest.raises(DestinationRefused, match=r"169\.254\.169\.254.*not allowed"):
        post(sessions, link_local, "http://metadata.test/latest/meta-data/")
    assert sink.snapshot() == []


def test_no_cookie_is_kept_between_calls(sessions: PinnedSessions, sink: Sink) -> None:
    # A host by name: a default cookie jar keeps no cookie for an IP address at all
    url = sink.url.replace("127.0.0.1", "hooks.test")
    sink.answer = lambda _: (200, {"Set-Cookie": "session=alice-s; Path=/"})
    post(sessions, NAMED_LOOPBACK, url)
    post(sessions, NAMED_LOOPBACK, url)
    assert [d.headers.get("Cookie") for d in sink.snapshot()] == [None, None]


def test_no_proxy_is_taken_from_the_environment(
    sessions: PinnedSessions, sink: Sink, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the environment names a proxy (a closed loopback port) for every host
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    for name in ("HTTP_PROXY", "http_proxy"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")
    # When a call is made, then it goes to the address checked, not through the proxy
    assert post(sessions, LOOPBACK, f"{sink.url}/hook") == 200
    assert len(sink.snapshot()) == 1


def test_raw_bodies_ask_for_no_encoding_and_decode_none() -> None:
    raw, as_sent = PinnedSessions(resolve, raw_bodies=True), PinnedSessions(resolve)

    async def made() -> list[tuple[str | None, bool]]:
        return [
            (s.headers.get("Accept-Encoding"), s.auto_decompress)
            for s in (raw.for_policy(LOOPBACK), as_sent.for_policy(LOOPBACK))
        ]

    assert DeliveryLoop.submit(made()).result(10) == [("identity", False), (None, True)]
    raw.close()
    as_sent.close()
