"""`dynacron tasks import` and `dynacron tasks export` as processes of their own,
against `dynacron local` on a data directory: refused lines by number, an
interrupted import run again, a round trip into a fresh data directory.

One `dynacron local` serves the module, each test as a tenant of its own (its own
API key), so that no test sees another's tasks; it runs only the API (`--only
api`): importing and exporting need nothing else, and a tick and workers firing
the imported tasks at a dead hook would only compete with the import for the
machine."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dynacron.client.api_client import Client
from tests.support import wait_until
from tests.system.local_process import LocalMode

pytestmark = pytest.mark.system
ROOT = Path(__file__).resolve().parents[2]
HOOK = "http://127.0.0.1:9/hook"
# More tenants than the module has tests: each takes one.
TENANTS = 8


@dataclass(frozen=True)
class Tenant:
    """Where a test's tenant calls the API, and with which key (None: the one
    default tenant of a local mode started without keys)."""

    api: str
    key: str | None = None

    def client(self) -> Client:
        return Client(self.api, api_key=self.key)

    def cli(self) -> list[str]:
        return ["--url", self.api, *(["--api-key", self.key] if self.key else [])]


@pytest.fixture(scope="module")
def shared_local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Iterator[Tenant]]:
    """The module's local mode (API only), and the tenants its tests take in turn."""
    keys = [f"key-{n}" for n in range(TENANTS)]
    options = [arg for key in keys for arg in ("--api-key", f"{key}=files-{key}")]
    mode = LocalMode(tmp_path_factory.mktemp("task-files") / "data", "--only", "api", *options)
    mode.start()
    yield (Tenant(mode.api, key) for key in keys)
    mode.stop()


@pytest.fixture
def tenant(shared_local: Iterator[Tenant]) -> Tenant:
    return next(shared_local)


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
    tenant: Tenant, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dynacron.cli.main", "tasks", *tenant.cli(), *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        check=False,
    )


def tasks_of(tenant: Tenant) -> list[dict[str, Any]]:
    with tenant.client() as client:
        return [task.model_dump() for task in client.iter_tasks()]


def names_of(tenant: Tenant) -> list[str]:
    return sorted(task["name"] for task in tasks_of(tenant))


def test_import_creates_every_good_line_and_reports_the_refused_ones_by_number(
    tenant: Tenant, tmp_path: Path
) -> None:
    # Given 1,000 lines, of which line 10 is not JSON, line 500 not an object,
    # line 999 a task the API refuses, and line 300 blank
    lines = good_lines(1000)
    lines[9] = '{"name": "broken", '
    lines[499] = '["a", "list"]'
    lines[998] = json.dumps({**body(999), "cron": "61 * * * *"})
    lines[299] = ""
    # When they are imported
    run = dynacron_tasks(tenant, "import", str(write_lines(tmp_path / "tasks.jsonl", lines)))
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
    assert names_of(tenant) == expected


def test_a_truncated_file_completed_and_imported_again_creates_nothing_twice(
    tenant: Tenant, tmp_path: Path
) -> None:
    lines = good_lines(600)
    path = tmp_path / "tasks.jsonl"
    # Given a file cut in the middle of line 251 (still being written), imported
    path.write_text("".join(line + "\n" for line in lines[:250]) + lines[250][:20])
    first = dynacron_tasks(tenant, "import", str(path))
    assert first.returncode == 1
    assert "line 251: not JSON" in first.stdout
    # When the file is complete and imported again
    write_lines(path, lines)
    second = dynacron_tasks(tenant, "import", str(path))
    # Then every line is one task: the first 250 replayed, the others created
    assert second.returncode == 0, second.stdout + second.stderr
    assert "created 350, replayed 250" in second.stdout
    assert names_of(tenant) == sorted(body(n)["name"] for n in range(1, 601))


def test_an_import_killed_midway_and_run_again_creates_each_task_once(
    tenant: Tenant, tmp_path: Path
) -> None:
    count = 3000
    path = write_lines(tmp_path / "tasks.jsonl", good_lines(count))
    state = tmp_path / "import.state"
    args = ["import", str(path), "--state", str(state), "--concurrency", "2"]
    # Given an import killed (SIGKILL: nothing flushed) after some of its batches
    process = subprocess.Popen(
        [sys.executable, "-m", "dynacron.cli.main", "tasks", *tenant.cli(), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
    )
    with tenant.client() as client:
        assert wait_until(lambda: client.tenant().task_count >= 600, timeout=120, interval=0.01)
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=10)
    with tenant.client() as client:
        made_before = client.tenant().task_count
    assert made_before < count, "the import ended before it was killed: nothing tested"
    # When it runs again with the same state file
    again = dynacron_tasks(tenant, "--json", *args)
    # Then each line is one task; the lines the state file holds were not even sent
    assert again.returncode == 0, again.stdout + again.stderr
    report = json.loads(again.stdout)
    assert report["skipped"] > 0
    assert report["skipped"] + report["replayed"] + report["created"] == count
    assert report["created"] == count - made_before
    assert names_of(tenant) == sorted(body(n)["name"] for n in range(1, count + 1))


def test_an_exported_tenant_imported_into_a_fresh_data_dir_has_equal_tasks(
    tenant: Tenant, tmp_path: Path
) -> None:
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
    with tenant.client() as client:
        for one in bodies:
            client.create_task(**one)
    # When the tenant is exported, and imported into local mode on a fresh data dir
    exported = dynacron_tasks(tenant, "export", "--output", str(tmp_path / "export.jsonl"))
    assert exported.returncode == 0, exported.stderr
    assert len((tmp_path / "export.jsonl").read_text().splitlines()) == len(bodies)
    fresh_mode = LocalMode(tmp_path / "fresh", "--only", "api")
    fresh_mode.start()
    fresh = Tenant(fresh_mode.api)
    try:
        imported = dynacron_tasks(fresh, "import", str(tmp_path / "export.jsonl"))
        assert imported.returncode == 0, imported.stdout + imported.stderr
        # Then every task has the same settings (not its id, times, version or runs),
        # and the same next run but for the fixed delay's (it counts from registration)
        state = {"task_id", "created_at", "updated_at", "version", "next_run_at"}
        state |= {"running_execution", "buffered_at", "last_scheduled_at"}

        def settings(of: Tenant) -> list[dict[str, Any]]:
            return sorted(
                ({k: v for k, v in task.items() if k not in state} for task in tasks_of(of)),
                key=lambda task: task["name"],
            )

        def next_runs(of: Tenant) -> dict[str, str | None]:
            return {t["name"]: t["next_run_at"] for t in tasks_of(of) if t["name"] != "delayed"}

        assert settings(fresh) == settings(tenant)
        assert next_runs(fresh) == next_runs(tenant)
    finally:
        fresh_mode.stop()


def test_a_dry_run_creates_nothing_and_names_what_would_be_refused(
    tenant: Tenant, tmp_path: Path
) -> None:
    lines = good_lines(150)
    lines[119] = json.dumps({**body(120), "timezone": "Mars/Olympus"})
    path = write_lines(tmp_path / "tasks.jsonl", lines)
    run = dynacron_tasks(tenant, "import", str(path), "--dry-run")
    assert run.returncode == 1
    assert "line 120: timezone" in run.stdout
    assert tasks_of(tenant) == []
    # And a file the API would take whole passes
    lines[119] = json.dumps(body(120))
    assert (
        dynacron_tasks(tenant, "import", str(write_lines(path, lines)), "--dry-run").returncode == 0
    )
    assert tasks_of(tenant) == []


def test_import_reads_standard_input_and_its_lines_are_keyed_by_content_and_number(
    tenant: Tenant,
) -> None:
    lines = "".join(line + "\n" for line in good_lines(120))
    first = dynacron_tasks(tenant, "import", "-", stdin=lines)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "created 120" in first.stdout
    # The same lines piped again are the same tasks; with another --key-prefix, new ones
    again = dynacron_tasks(tenant, "import", "-", stdin=lines)
    assert "created 0, replayed 120" in again.stdout
    other = dynacron_tasks(tenant, "import", "-", "--key-prefix", "second", stdin=lines)
    assert "created 120" in other.stdout
    assert len(tasks_of(tenant)) == 240
