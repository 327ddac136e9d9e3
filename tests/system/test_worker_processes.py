"""`dynacron local --worker-processes N`: workers in processes of their own on one
data directory, each execution run once, a killed one replaced, none left behind."""

from __future__ import annotations

import os
import signal
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from dynacron.api.requests import MAX_BATCH
from dynacron.domain.instants import format_instant
from tests.support import Sink, api_call, wait_until
from tests.system.local_process import LocalMode, executions

pytestmark = [pytest.mark.system, pytest.mark.slow]


def children_of(pid: int) -> set[int]:
    """The live processes whose parent is ``pid`` (Linux: read from /proc)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # ended while we looked
        # pid (comm) state ppid ...: comm may hold spaces, so split after its ')'.
        state, ppid = stat.rpartition(")")[2].split()[:2]
        if int(ppid) == pid and state != "Z":
            found.add(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").exists() and " Z " not in Path(f"/proc/{pid}/stat").read_text()


def worker_processes(local: LocalMode) -> set[int]:
    """The worker processes of ``local`` (its children, less multiprocessing's tracker,
    and less any that ended since they were listed)."""
    assert local.service is not None
    workers = set()
    for pid in children_of(local.service.process.pid):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
        except FileNotFoundError:
            continue
        if b"resource_tracker" not in command:
            workers.add(pid)
    return workers


def register_due(local: LocalMode, sink: Sink, count: int, in_seconds: float) -> list[str]:
    """``count`` one-time tasks due at once, in one ``POST /tasks/batch`` (at most 100)
    each: one request per task kept the local mode busy for seconds."""
    due = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=in_seconds)
    body = {"at": format_instant(due), "handler_url": f"{sink.url}/effect"}
    task_ids: list[str] = []
    while len(task_ids) < count:
        batch = {"tasks": [body] * min(MAX_BATCH, count - len(task_ids))}
        response = api_call(local.api, "POST", "/tasks/batch", batch)
        assert response.status_code == 200, response.text
        items = response.json()["items"]
        assert [item["outcome"] for item in items] == ["created"] * len(batch["tasks"]), items
        task_ids += [item["task"]["task_id"] for item in items]
    return task_ids


def succeeded(local: LocalMode, task_ids: list[str]) -> int:
    return sum(
        [e["status"] for e in executions(local.api, task_id)] == ["SUCCEEDED"]
        for task_id in task_ids
    )


def test_two_worker_processes_run_each_execution_once(local: LocalMode, sink: Sink) -> None:
    # Given local mode with its workers in two processes of their own
    local.options = ("--worker-processes", "2", "--workers", "4")
    local.start()
    assert wait_until(lambda: len(worker_processes(local)) == 2, timeout=20)
    # When 150 one-time tasks fall due at once
    task_ids = register_due(local, sink, 150, in_seconds=2)
    # Then each is delivered once, its business effect applied once, and recorded SUCCEEDED
    assert wait_until(lambda: len(sink.effects) == 150, timeout=60), len(sink.effects)
    assert wait_until(lambda: succeeded(local, task_ids) == 150, timeout=30, interval=0.5)
    assert set(sink.calls_by_key().values()) == {1}
    assert sink.applied_twice == 0


def test_a_killed_worker_process_is_replaced_and_what_it_held_runs_again(
    local: LocalMode, sink: Sink
) -> None:
    # Given two worker processes (the queue's visibility timeout, 360 s, left as it
    # is; leases of 5 s, so the reaper's hand-over comes soon) and a handler slow
    # enough that a kill finds calls in flight
    sink.hold = 0.1
    local.options = ("--worker-processes", "2", "--workers", "4", "--lease-seconds", "5")
    local.start()
    assert wait_until(lambda: len(worker_processes(local)) == 2, timeout=20)
    task_ids = register_due(local, sink, 120, in_seconds=2)
    # When one of them is killed with SIGKILL while it works
    assert wait_until(lambda: len(sink.snapshot()) >= 10, timeout=30)
    before = worker_processes(local)
    victim = min(before)
    os.kill(victim, signal.SIGKILL)
    # Then another takes its place
    assert wait_until(lambda: len(worker_processes(local) - before) == 1, timeout=20)
    assert victim not in worker_processes(local)
    # And every execution succeeds long before the visibility timeout, each effect once
    # (the sink counted first: each look at the statuses costs 120 requests)
    assert wait_until(lambda: len(sink.effects) == 120, timeout=90, interval=0.2)
    assert wait_until(lambda: succeeded(local, task_ids) == 120, timeout=30, interval=0.5)
    assert set(sink.effects.values()) == {1}
    assert sink.applied_twice == 0


def test_sigterm_stops_every_worker_process(local: LocalMode) -> None:
    # Given local mode with two worker processes
    local.options = ("--worker-processes", "2")
    service = local.start()
    assert wait_until(lambda: len(worker_processes(local)) == 2, timeout=20)
    children = worker_processes(local)
    # When it is sent SIGTERM
    service.process.send_signal(signal.SIGTERM)
    # Then it ends cleanly, and so does every worker process
    assert service.process.wait(timeout=30) == 0
    assert wait_until(lambda: not any(alive(pid) for pid in children), timeout=10)


def test_a_killed_local_mode_leaves_no_worker_process_behind(local: LocalMode) -> None:
    # Given local mode with two worker processes
    local.options = ("--worker-processes", "2")
    local.start()
    assert wait_until(lambda: len(worker_processes(local)) == 2, timeout=20)
    children = worker_processes(local)
    # When it is killed with SIGKILL (it can stop nothing)
    local.kill()
    # Then its worker processes end too, as if the whole had crashed
    assert wait_until(lambda: not any(alive(pid) for pid in children), timeout=10)
