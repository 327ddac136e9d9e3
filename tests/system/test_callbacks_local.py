"""Local mode, end to end: a 202 job calls back on the URL its delivery named, with its
token and no other credential, and its execution ends SUCCEEDED (decision 0023)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from dynacron.domain.instants import format_instant
from dynacron.local.runtime import LocalOptions, LocalRuntime
from tests.support import Delivery, Sink, wait_until

pytestmark = pytest.mark.system

API_KEY = "local-callbacks-key"
TOKEN_HEADER = "Dynacron-Callback-Token"


@pytest.fixture
def runtime() -> Iterator[LocalRuntime]:
    # With an API key configured, a call without one is refused on every other route:
    # the callback must pass on its token alone.
    running = LocalRuntime(
        LocalOptions(port=0, shards=1, workers=1, api_keys=((API_KEY, "alice"),))
    ).start()
    yield running
    running.stop()


def test_a_202_job_completes_through_its_callback_url_with_no_credentials(
    runtime: LocalRuntime, sink: Sink, request: pytest.FixtureRequest
) -> None:
    api = runtime.api_url
    assert api is not None
    assert api.startswith("http://127.0.0.1:")
    keyed = httpx.Client(base_url=api, headers={"x-api-key": API_KEY}, timeout=10, trust_env=False)
    anonymous = httpx.Client(timeout=10, trust_env=False)
    request.addfinalizer(keyed.close)
    request.addfinalizer(anonymous.close)
    answers: list[tuple[str, int]] = []

    # Given a handler that answers 202, then heartbeats and completes on the URLs
    # its delivery named, sending the token and nothing else
    def call_back(delivery: Delivery) -> None:
        headers = {TOKEN_HEADER: delivery.headers[TOKEN_HEADER]}
        callbacks = delivery.body["callbacks"]
        beat = anonymous.post(callbacks["heartbeat"], headers=headers)
        answers.append(("heartbeat", beat.status_code))
        done = anonymous.post(callbacks["complete"], headers=headers, json={"status": "SUCCEEDED"})
        answers.append(("complete", done.status_code))

    def long_job(delivery: Delivery) -> tuple[int, dict[str, str]]:
        threading.Timer(0.05, call_back, [delivery]).start()
        return 202, {}

    sink.answer = long_job
    due = format_instant(datetime.now(UTC) + timedelta(seconds=1))
    created = keyed.post("/tasks", json={"at": due, "handler_url": f"{sink.url}/long"})
    assert created.status_code == 201, created.text
    task_id = created.json()["task_id"]
    # (no key, no identity: the rest of the API is closed)
    assert anonymous.get(f"{api}/tasks/{task_id}").status_code == 401

    # When it runs, Then its own callbacks end it SUCCEEDED
    def executions() -> list[dict[str, Any]]:
        page = keyed.get(f"/tasks/{task_id}/executions").json()
        return list(page["items"])

    assert wait_until(
        lambda: [e["status"] for e in executions()] == ["SUCCEEDED"] and len(answers) == 2,
        timeout=20,
        interval=0.1,
    ), (executions(), answers)
    assert answers == [("heartbeat", 200), ("complete", 200)]
    (delivery,) = sink.snapshot()
    assert delivery.body["callbacks"]["complete"] == (
        f"{api}/callbacks/{delivery.body['execution_id']}/complete"
    )
    # The token went in a header only, never in the body or a URL
    assert delivery.headers[TOKEN_HEADER] not in json.dumps(delivery.body)


def test_a_worker_only_process_names_the_api_it_is_told_of() -> None:
    # `dynacron local --only worker --api-url ...`: the API runs in another process
    options = LocalOptions(port=0, components=("worker",), api_url="http://127.0.0.1:18080")
    running = LocalRuntime(options).start()
    try:
        assert running.api_url == "http://127.0.0.1:18080"
        assert running.settings.api_base_url == "http://127.0.0.1:18080"
    finally:
        running.stop()
    # With the API in this process, its own address, whatever the option says
    both = LocalRuntime(LocalOptions(port=0, components=("api", "worker"))).start()
    try:
        assert both.settings.api_base_url == both.api_url
        assert both.api_url is not None
        assert both.api_url.startswith("http://127.0.0.1:")
    finally:
        both.stop()
