"""Issue 23: a write that waits out the store's busy timeout answers 503 with
Retry-After (it used to be a 500 after 30 s), and changes nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from dynacron.adapters.sqlite.database import Database
from dynacron.domain.clock import SettableClock
from dynacron.entry.composition import Dynacron
from dynacron.entry.settings import LOOPBACK_NETWORKS
from dynacron.local.gateway import LocalContext, proxy_event
from dynacron.local.stores import SqliteStore, StoreOptions
from tests.integration.api_client import ALICE, call

TASK = {"rate": "1 minute", "handler_url": "http://127.0.0.1:9/hook"}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteStore]:
    opened = SqliteStore(StoreOptions(data_dir=tmp_path, busy_timeout_ms=100))
    yield opened
    opened.close()


def post_task(system: Dynacron) -> tuple[int, dict[str, str], dict[str, object]]:
    event = proxy_event(
        "POST", "/tasks", {"content-type": "application/json"}, json.dumps(TASK).encode(), "::1"
    )
    event["requestContext"]["identity"]["userArn"] = ALICE
    response = system.api(event, LocalContext("test-api"))
    headers = {k.lower(): v[-1] for k, v in (response.get("multiValueHeaders") or {}).items()}
    headers |= {k.lower(): v for k, v in (response.get("headers") or {}).items()}
    return response["statusCode"], headers, json.loads(response["body"])


def test_a_write_that_waits_out_the_busy_timeout_is_a_503_with_retry_after(
    store: SqliteStore, clock: SettableClock
) -> None:
    settings = store.open(clock, delivery_allow_networks=LOOPBACK_NETWORKS)
    system = Dynacron(settings, adapters=store.adapters(settings, clock), clock=clock)
    # Given another process holding the database's write lock
    holder = Database(store.path)
    with holder.write():
        # When a task is created meanwhile
        status, headers, problem = post_task(system)
    # Then the caller is told to come back, in words that name no file
    assert status == 503, problem
    assert headers["content-type"] == "application/problem+json"
    assert int(headers["retry-after"]) >= 1
    assert problem["title"] == "Service unavailable"
    assert "try again" in str(problem["detail"])
    assert str(store.path) not in json.dumps(problem)
    # And nothing was stored; the same request succeeds once the lock is free
    assert call(system, "GET", "/tasks")[1]["items"] == []
    status, _, created = post_task(system)
    assert status == 201, created
    holder.close()
