"""`dynacron tasks import` and `dynacron tasks export` as processes of their own,
against `dynacron local` on a data directory: refused lines by number, an
interrupted import run again, a round trip into a fresh data directory."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dynacron.client.api_client import Client
from tests.support import wait_until
from tests.system.local_process import LocalMode

pytestmark = pytest.mark.system
ROOT = Path(__file__).resolve().parents[2]
HOOK = "http://127.0.0.1:9/hook"


def body(number: int) -> dict[str, Any]:
    return {
        "name": f"task-{number:05d}",
        "cron": f"{number % 60} {number % 24} * * *",
        "handler_url": HOOK,
        "tags": {"line": str(number)},
    }


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines))
    return path


def good_lines(count: int) -> list[str]:
    return [json.dumps(body(n)) for n in range(1, count + 1)]


def dynacron_tasks(
    api: str, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dynacron.cli.main", "tasks", "--url", api, *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        check=False,
    )


def tasks_of(api: str) -> list[dict[str, Any]]:
    with Client(api) as client:
        return [task.model_dump() for task in client.iter_tasks()]


def names_of(api: str) -> list[str]:
    return sorted(task["name"] for task in tasks_of(api))


def test_import_creates_every_good_line_and_reports_the_refused_ones_by_number(
    local: LocalMode, tmp_path: Path
) -> None:
    local.start()
    # Given 1,000 lines, of which line 10 is not JSON, line 500 not an object,
    # line 999 a task the API refuses, and line 300 blank
    lines = good_lines(1000)
    lines[9] = '{"name": "broken", '
    lines[499] = '["a", "list"]'
    lines[998] = json.dumps({**body(999), "cron": "61 * * * *"})
    lines[299] = ""
    # When they are imported
    run = dynacron_tasks(local.api, "import", str(write_lines(tmp_path / "tasks.jsonl", lines)))
    # Then the 996 others are tasks, and the three are named by line, with why
    assert run.returncode == 1, run.stderr
    refused = [line for line in run.stdout.splitlines() if line.startswith("line ")]
    assert [line.split(":")[0] for line in refused] == ["line 10", "line 500", "line 999"]
    assert "not JSON" in refused[0]
    assert "not a JSON object" in refused[1]
    assert "cron" in refused[2]
    assert "61" in refused[2]
    assert "created 996," in run.stdout
    expected = sorted(body(n)["name"] for n in range(1, 1001) if n not in (10, 300, 500, 999))
    assert names_of(local.api) == expected


def test_a_truncated_file_completed_and_imported_again_creates_nothing_twice(
    local: LocalMode, tmp_path: Path
) -> None:
    local.start()
    lines = good_lines(600)
    path = tmp_path / "tasks.jsonl"
    # Given a file cut in the middle of line 251 (still being written), imported
    path.write_text("".join(line + "\n" for line in lines[:250]) + lines[250][:20])
    first = dynacron_tasks(local.api, "import", str(path))
    assert first.returncode == 1
    assert "line 251: not JSON" in first.stdout
    # When the file is complete and imported again
    write_lines(path, lines)
    second = dynacron_tasks(local.api, "import", str(path))
    # Then every line is one task: the first 250 replayed, the others created
    assert second.returncode == 0, second.stdout + second.stderr
    assert "created 350, replayed 250" in second.stdout
    assert names_of(local.api) == sorted(body(n)["name"] for n in range(1, 601))


def test_an_import_killed_midway_and_run_again_creates_each_task_once(
    local: LocalMode, tmp_path: Path
) -> None:
    local.start()
    count = 3000
    path = write_lines(tmp_path / "tasks.jsonl", good_lines(count))
    state = tmp_path / "import.state"
    args = ["import", str(path), "--state", str(state), "--concurrency", "2"]
    # Given an import killed (SIGKILL: nothing flushed) after some of its batches
    process = subprocess.Popen(
        [sys.executable, "-m", "dynacron.cli.main", "tasks", "--url", local.api, *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
    )
    with Client(local.api) as client:
        assert wait_until(lambda: client.tenant().task_count >= 600, timeout=120, interval=0.01)
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=10)
    with Client(local.api) as client:
        made_before = client.tenant().task_count
    assert made_before < count, "the import ended before it was killed: nothing tested"
    # When it runs again with the same state file
    again = dynacron_tasks(local.api, "--json", *args)
    # Then each line is one task; the lines the state file holds were not even sent
    assert again.returncode == 0, again.stdout + again.stderr
    report = json.loads(again.stdout)
    assert report["skipped"] > 0
    assert report["skipped"] + report["replayed"] + report["created"] == count
    assert report["created"] == count - made_before
    assert names_of(local.api) == sorted(body(n)["name"] for n in range(1, count + 1))


def test_an_exported_tenant_imported_into_a_fresh_data_dir_has_equal_tasks(
    local: LocalMode, tmp_path: Path
) -> None:
    local.start()
    bodies: list[dict[str, Any]] = [
        {"name": "plain", "cron": "0 9 * * MON-FRI", "handler_url": HOOK},
        {
            "name": "everything",
            "cron": "30 2 * * *",
            "timezone": "Europe/Paris",
            "dst": {"nonexistent": "skip", "ambiguous": "both"},
            "start_at": "2030-01-01T00:00:00Z",
            "end_at": "2031-01-01T00:00:00Z",
            "jitter_seconds": 30,
            "catchup": "run_all",
            "catchup_window_seconds": 3600,
            "overlap": "buffer_one",
            "handler_url": HOOK,
            "payload": {"report": "daily", "depth": {"n": [1, 2]}},
            "retry": {"max_attempts": 3, "base_delay_seconds": 5, "max_delay_seconds": 60},
            "max_concurrency": 2,
            "rate_limit": {"per_second": 5.0},
            "tags": {"team": "ops", "tier": "gold"},
        },
        {
            "name": "every 5",
            "rate": "5 minutes",
            "anchor": "2030-01-01T00:00:07Z",
            "handler_url": HOOK,
        },
        {"name": "once", "at": "2031-06-01T12:00:00Z", "handler_url": HOOK},
        {"name": "delayed", "fixed_delay": "10 minutes", "handler_url": HOOK},
    ]
    with Client(local.api) as client:
        for one in bodies:
            client.create_task(**one)
    # When the tenant is exported, and imported into local mode on a fresh data dir
    exported = dynacron_tasks(local.api, "export", "--output", str(tmp_path / "export.jsonl"))
    assert exported.returncode == 0, exported.stderr
    assert len((tmp_path / "export.jsonl").read_text().splitlines()) == len(bodies)
    fresh = LocalMode(tmp_path / "fresh")
    fresh.start()
    try:
        imported = dynacron_tasks(fresh.api, "import", str(tmp_path / "export.jsonl"))
        assert imported.returncode == 0, imported.stdout + imported.stderr
        # Then every task has the same settings (not its id, times, version or runs),
        # and the same next run but for the fixed delay's (it counts from registration)
        state = {"task_id", "created_at", "updated_at", "version", "next_run_at"}
        state |= {"running_execution", "buffered_at", "last_scheduled_at"}

        def settings(api: str) -> list[dict[str, Any]]:
            return sorted(
                ({k: v for k, v in task.items() if k not in state} for task in tasks_of(api)),
                key=lambda task: task["name"],
            )

        def next_runs(api: str) -> dict[str, str | None]:
            return {t["name"]: t["next_run_at"] for t in tasks_of(api) if t["name"] != "delayed"}

        assert settings(fresh.api) == settings(local.api)
        assert next_runs(fresh.api) == next_runs(local.api)
    finally:
        fresh.stop()


def test_a_dry_run_creates_nothing_and_names_what_would_be_refused(
    local: LocalMode, tmp_path: Path
) -> None:
    local.start()
    lines = good_lines(150)
    lines[119] = json.dumps({**body(120), "timezone": "Mars/Olympus"})
    path = write_lines(tmp_path / "tasks.jsonl", lines)
    run = dynacron_tasks(local.api, "import", str(path), "--dry-run")
    assert run.returncode == 1
    assert "line 120: timezone" in run.stdout
    assert tasks_of(local.api) == []
    # And a file the API would take whole passes
    lines[119] = json.dumps(body(120))
    assert (
        dynacron_tasks(local.api, "import", str(write_lines(path, lines)), "--dry-run").returncode
        == 0
    )
    assert tasks_of(local.api) == []


def test_import_reads_standard_input_and_its_lines_are_keyed_by_content_and_number(
    local: LocalMode,
) -> None:
    local.start()
    lines = "".join(line + "\n" for line in good_lines(120))
    first = dynacron_tasks(local.api, "import", "-", stdin=lines)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "created 120" in first.stdout
    # The same lines piped again are the same tasks; with another --key-prefix, new ones
    again = dynacron_tasks(local.api, "import", "-", stdin=lines)
    assert "created 0, replayed 120" in again.stdout
    other = dynacron_tasks(local.api, "import", "-", "--key-prefix", "second", stdin=lines)
    assert "created 120" in other.stdout
    assert len(tasks_of(local.api)) == 240
