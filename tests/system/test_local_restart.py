"""Local mode keeps its data: stopped or killed, it finds its tasks and history again."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime

import pytest

from dynacron.domain.instants import format_instant
from tests.support import Sink, api_call, wait_until
from tests.system.local_process import LocalMode, executions, register

pytestmark = pytest.mark.system


def test_tasks_and_history_outlive_ctrl_c_and_fire_again(local: LocalMode, sink: Sink) -> None:
    # Given local mode with a task every 2 seconds that has fired twice
    local.start()
    every = register(local.api, {"name": "every", "rate": "2 seconds", "handler_url": sink.url})
    assert wait_until(lambda: len(sink.snapshot()) >= 2, timeout=15)
    assert wait_until(
        lambda: (
            sum(e["status"] == "SUCCEEDED" for e in executions(local.api, every["task_id"])) >= 2
        ),
        timeout=10,
    )
    before = {e["execution_id"]: e["status"] for e in executions(local.api, every["task_id"])}

    # When it is stopped with Ctrl-C, and a one-time task falls due while it is down
    once_at = datetime.fromtimestamp(time.time() + 3, UTC).replace(microsecond=0)
    once = register(
        local.api, {"name": "once", "at": format_instant(once_at), "handler_url": f"{sink.url}/o"}
    )
    local.interrupt()
    time.sleep(max(0.0, once_at.timestamp() - time.time()) + 1.5)
    assert not any(d.path == "/o" for d in sink.snapshot()), "ran while stopped"

    # And started again on the same directory
    local.start()

    # Then both tasks are listed, the history from before is intact
    listed = api_call(local.api, "GET", "/tasks", limit=100).json()["items"]
    assert {t["task_id"] for t in listed} == {every["task_id"], once["task_id"]}
    after = {e["execution_id"]: e["status"] for e in executions(local.api, every["task_id"])}
    assert {i: after[i] for i in before if before[i] == "SUCCEEDED"} == {
        i: s for i, s in before.items() if s == "SUCCEEDED"
    }

    # And the one missed while down runs once (catch-up), the recurring one fires on
    fires_before = len([d for d in sink.snapshot() if d.path == "/"])
    assert wait_until(lambda: any(d.path == "/o" for d in sink.snapshot()), timeout=15)
    assert wait_until(
        lambda: len([d for d in sink.snapshot() if d.path == "/"]) >= fires_before + 2, timeout=15
    )
    assert wait_until(
        lambda: [e["status"] for e in executions(local.api, once["task_id"])] == ["SUCCEEDED"],
        timeout=10,
    )
    assert set(sink.effects.values()) == {1}
    assert sink.applied_twice == 0


def test_what_was_in_flight_at_a_kill_runs_again_soon_after_restart(
    local: LocalMode, sink: Sink
) -> None:
    # Given a handler that holds each call until the test lets it go, and a task
    # whose execution is in that call
    gate = sink.gate = threading.Event()
    # Short leases and calls, so the take-over needs seconds (the defaults: 30 s).
    local.options = (
        "--lease-seconds", "2",
        "--clock-skew-seconds", "0.5",
        "--http-timeout-seconds", "3",
        "--reaper-interval", "0.5",
    )  # fmt: skip
    local.start()
    task = register(
        local.api,
        {
            "name": "held",
            "retry": {"base_delay_seconds": 1, "max_delay_seconds": 1},
            "at": format_instant(datetime.fromtimestamp(time.time() + 1, UTC)),
            "handler_url": sink.url,
        },
    )
    assert wait_until(lambda: len(sink.snapshot()) >= 1, timeout=15)

    # When local mode is killed mid-call, the call ends, and it starts again
    local.kill()
    gate.set()
    killed_at = time.monotonic()
    local.start()

    # Then the execution runs again well within a minute, not after the 360 s
    # visibility timeout, and ends SUCCEEDED, with both attempts in its history
    assert wait_until(
        lambda: [e["status"] for e in executions(local.api, task["task_id"])] == ["SUCCEEDED"],
        timeout=60,
    )
    assert time.monotonic() - killed_at < 60
    # called again after the restart; its effect applied once
    assert sink.calls_by_key() == {execution_id: 2 for execution_id in sink.calls_by_key()}
    assert list(sink.effects.values()) == [1]
