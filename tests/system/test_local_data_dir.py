"""Local mode's data directory is its user's alone, and one it cannot use stops it
with what to do, never a traceback (issue 23); so does a shard count that would
strand tasks.

The database holds every tenant's tasks, payloads and signing secrets: created
0700 and 0600 whatever the umask; found open to others, refused with the
``chmod`` that fixes it. A data directory that is a file, read-only, or holding
a file that is not a dynacron database says so.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import httpx
import pytest

from dynacron.api.requests import TaskCreate
from dynacron.domain.clock import SettableClock
from dynacron.entry.composition import Dynacron
from dynacron.entry.settings import LOOPBACK_NETWORKS
from dynacron.local.runtime import LocalOptions, LocalRuntime
from dynacron.local.stores import DATABASE_FILE, SqliteStore, StoreOptions
from tests.integration.api_client import ALICE
from tests.support import ROOT

pytestmark = pytest.mark.system


@pytest.fixture
def loose_umask() -> Iterator[None]:
    """The common default: what a process creates, everyone may read."""
    before = os.umask(0o022)
    yield
    os.umask(before)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def start_local(data_dir: Path, *options: str) -> tuple[int, str]:
    """`dynacron local` on ``data_dir`` (no API: nothing to bind), as far as it gets:
    its exit status and what it printed. One that starts is stopped at once."""
    command = [sys.executable, "-m", "dynacron.cli.main", "local", "--only", "tick"]
    process = subprocess.Popen(
        [*command, "--data-dir", str(data_dir), *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
    )
    try:
        output, _ = process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate()
    assert "Traceback" not in output, output
    return process.returncode, output


def test_a_new_data_directory_and_its_database_are_the_user_s_alone(
    tmp_path: Path, loose_umask: None
) -> None:
    data_dir = tmp_path / "nested" / "data"
    runtime = LocalRuntime(LocalOptions(port=0, data_dir=data_dir, components=("api",))).start()
    try:
        assert runtime.api_url is not None
        created = httpx.post(
            f"{runtime.api_url}/tasks",
            json={"rate": "1 hour", "handler_url": "http://127.0.0.1:9/hook"},
        )
        assert created.status_code == 201, created.text
        database = data_dir / DATABASE_FILE
        journals = [database.with_name(database.name + s) for s in ("-wal", "-shm")]
        assert all(path.exists() for path in journals)
        assert mode(data_dir) == 0o700
        assert {path.name: mode(path) for path in [database, *journals]} == {
            path.name: 0o600 for path in [database, *journals]
        }
    finally:
        runtime.stop()


def test_a_data_directory_others_may_read_is_refused_with_the_chmod_that_fixes_it(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir(mode=0o755)
    data_dir.chmod(0o755)
    code, output = start_local(data_dir)
    assert code == 2
    assert f"chmod 700 {data_dir}" in output
    assert "mode 0755" in output
    assert not (data_dir / DATABASE_FILE).exists()  # nothing written into it


@pytest.mark.parametrize("suffix", ["", "-wal", "-shm"])
def test_a_database_file_others_may_read_is_refused(tmp_path: Path, suffix: str) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir(mode=0o700)
    (data_dir / DATABASE_FILE).touch(mode=0o600)
    shared = data_dir / (DATABASE_FILE + suffix)
    shared.touch()
    shared.chmod(0o644)
    code, output = start_local(data_dir)
    assert code == 2
    assert f"chmod 600 {shared}" in output


def test_a_data_directory_that_is_a_file_says_so(tmp_path: Path) -> None:
    not_a_directory = tmp_path / "data"
    not_a_directory.write_text("notes\n")
    code, output = start_local(not_a_directory)
    assert code == 2
    assert f"{not_a_directory} is a file, not a directory" in output
    assert "port" not in output


def test_a_read_only_data_directory_says_so(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir(mode=0o700)
    data_dir.chmod(0o500)
    try:
        code, output = start_local(data_dir)
    finally:
        data_dir.chmod(0o700)
    assert code == 2
    assert f"{data_dir} is read-only" in output
    assert f"chmod 700 {data_dir}" in output


def test_a_file_that_is_no_database_is_refused_and_kept(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir(mode=0o700)
    corrupt = data_dir / DATABASE_FILE
    corrupt.write_bytes(b"this is not SQLite\n" * 512)
    corrupt.chmod(0o600)
    code, output = start_local(data_dir)
    assert code == 2
    assert f"{corrupt} is not a database dynacron can read" in output
    assert corrupt.read_bytes() == b"this is not SQLite\n" * 512


def test_another_application_s_database_is_refused_and_kept(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir(mode=0o700)
    foreign = data_dir / DATABASE_FILE
    with sqlite3.connect(foreign) as connection:
        connection.execute("CREATE TABLE photos (path TEXT)")
    connection.close()
    foreign.chmod(0o600)
    code, output = start_local(data_dir)
    assert code == 2
    assert "another application's database (tables photos)" in output
    with sqlite3.connect(foreign) as connection:
        tables = [row[0] for row in connection.execute("SELECT name FROM sqlite_master")]
    connection.close()
    assert tables == ["photos"]


def test_fewer_shards_than_the_tasks_are_filed_in_fire_them_all_the_same(
    tmp_path: Path, clock: SettableClock
) -> None:
    # Given tasks registered and ticked while local mode ran with 8 shards
    data_dir = tmp_path / "data"
    store = SqliteStore(StoreOptions(data_dir=data_dir))
    settings = store.open(clock, shard_count=8, delivery_allow_networks=LOOPBACK_NETWORKS)
    system = Dynacron(settings, adapters=store.adapters(settings, clock), clock=clock)
    ids = [
        system.task_service.register(
            ALICE, TaskCreate(rate="1 minute", handler_url=f"http://127.0.0.1:9/{n}").to_spec()
        ).task_id
        for n in range(20)
    ]
    system.ticker.tick()
    store.close()
    # When it opens the data directory again with 2 (as `dynacron local --shards 2`)
    again = SqliteStore(StoreOptions(data_dir=data_dir))
    settings = again.open(clock, shard_count=2, delivery_allow_networks=LOOPBACK_NETWORKS)
    narrow = Dynacron(settings, adapters=again.adapters(settings, clock), clock=clock)
    # Then once the tasks are due, the 2 shards' ticks fire every one of them
    clock.advance(timedelta(minutes=1, seconds=1))
    assert sum(report.claimed for report in narrow.ticker.tick()) == len(ids)
    again.close()
