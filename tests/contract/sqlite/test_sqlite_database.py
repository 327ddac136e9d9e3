"""The shared SQLite database: what a failing file means to the services."""

from __future__ import annotations

import gc
import os
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from dynacron.adapters.sqlite.database import Database, Durability
from dynacron.ports import StoreUnavailable

SCHEMA = ["CREATE TABLE IF NOT EXISTS notes (id INTEGER PRIMARY KEY, text TEXT NOT NULL)"]


def test_a_file_locked_past_the_busy_timeout_is_unavailable_and_changes_nothing(
    tmp_path: Path,
) -> None:
    # Given another process (here: another Database on the same file) holding the write lock
    holder = Database(tmp_path / "dynacron.db")
    holder.ensure_schema(SCHEMA)
    waiter = Database(tmp_path / "dynacron.db", busy_timeout_ms=50)
    with holder.write() as connection:
        connection.execute("INSERT INTO notes (text) VALUES ('held')")
        # When a writer waits longer than its busy timeout
        with pytest.raises(StoreUnavailable), waiter.write() as blocked:
            blocked.execute("INSERT INTO notes (text) VALUES ('never')")
    # Then it was told the store is unavailable, and only the holder's change is there
    rows = waiter.connection().execute("SELECT text FROM notes").fetchall()
    assert [row["text"] for row in rows] == ["held"]
    # And the waiter's connection is usable again once the lock is free
    with waiter.write() as connection:
        connection.execute("INSERT INTO notes (text) VALUES ('later')")
    assert waiter.connection().execute("SELECT COUNT(*) FROM notes").fetchone()[0] == 2


def test_an_error_inside_a_write_rolls_the_whole_change_back(tmp_path: Path) -> None:
    database = Database(tmp_path / "dynacron.db")
    database.ensure_schema(SCHEMA)

    def half_a_change() -> None:
        with database.write() as connection:
            connection.execute("INSERT INTO notes (text) VALUES ('half')")
            raise RuntimeError("the adapter failed between two statements")

    with pytest.raises(RuntimeError, match="between two statements"):
        half_a_change()
    assert database.connection().execute("SELECT COUNT(*) FROM notes").fetchone()[0] == 0
    assert not database.connection().in_transaction


def open_files() -> int:
    return len(os.listdir("/dev/fd"))


def test_a_thread_s_connection_closes_when_the_thread_ends(tmp_path: Path) -> None:
    # Local mode's API answers each request on a thread of its own, and each thread
    # opens its own connection: kept past the thread, each would hold its file
    # descriptors until the process ran out of them (SQLite keeps a few closed ones
    # for reuse while other connections to the file hold locks: a bounded number).
    database = Database(tmp_path / "dynacron.db")
    database.ensure_schema(SCHEMA)

    def requests(count: int) -> int:
        for _ in range(count):
            thread = threading.Thread(target=one_request)
            thread.start()
            thread.join()
        gc.collect()
        return open_files()

    def one_request() -> None:
        with database.write() as connection:
            connection.execute("INSERT INTO notes (text) VALUES ('request')")

    # Given 100 requests' threads, come and gone
    after_some = requests(100)
    # When 400 more come and go
    after_more = requests(400)
    # Then every change is there, and the files open grew by a few at most (held
    # past their threads, the 400 connections would hold two files each: 800)
    assert database.connection().execute("SELECT COUNT(*) FROM notes").fetchone()[0] == 500
    assert after_more - after_some < 50, (after_some, after_more)


def synchronous_of_a_write(database: Database) -> int:
    """SQLite's ``synchronous`` in force for a write's commit: 1 NORMAL, 2 FULL."""
    with database.write() as connection:
        connection.execute("INSERT INTO notes (text) VALUES ('change')")
        return int(connection.execute("PRAGMA synchronous").fetchone()[0])


@pytest.mark.parametrize(
    ("durability", "acknowledged", "scheduler_s_own", "answer_synced"),
    [("full", 2, 2, False), ("acknowledged", 1, 1, True), ("normal", 1, 1, False)],
)
def test_what_each_durability_syncs(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    durability: Durability,
    acknowledged: int,
    scheduler_s_own: int,
    answer_synced: bool,
) -> None:
    database = Database(tmp_path / "dynacron.db", durability=durability)
    database.ensure_schema(SCHEMA)
    wal = str(tmp_path / "dynacron.db-wal")
    synced: list[str] = []
    fsync = os.fsync

    def recording_fsync(descriptor: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{descriptor}"))
        fsync(descriptor)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    # Two changes the API acknowledges in one answer: with `acknowledged`, the WAL
    # is synced once, when the answer is ready, not at each commit
    with database.acknowledging():
        in_answer = synchronous_of_a_write(database)
        synchronous_of_a_write(database)
        synced_within = synced.count(wal)
    synced_by_the_answer = synced.count(wal)
    # Then the scheduler's own on the same thread, and an answer that wrote nothing
    own = synchronous_of_a_write(database)
    with database.acknowledging():
        pass
    # And one on another thread while this one acknowledges: the flag is per thread
    elsewhere: list[int] = []
    with database.acknowledging():
        thread = threading.Thread(target=lambda: elsewhere.append(synchronous_of_a_write(database)))
        thread.start()
        thread.join()
    assert (in_answer, own, elsewhere) == (acknowledged, scheduler_s_own, [scheduler_s_own])
    assert (synced_within, synced_by_the_answer) == (0, int(answer_synced))
    assert synced.count(wal) == int(answer_synced), "only an answer that wrote is synced"


def test_changes_made_at_once_share_a_transaction_and_one_that_fails_is_undone_alone(
    tmp_path: Path,
) -> None:
    database = Database(tmp_path / "dynacron.db")
    database.ensure_schema(SCHEMA)
    reader = Database(tmp_path / "dynacron.db")
    holding, release = threading.Event(), threading.Event()
    refused: dict[int, str] = {}
    seen_on_return: dict[int, int] = {}

    def first() -> None:
        with database.write() as connection:
            connection.execute("INSERT INTO notes (text) VALUES ('first')")
            holding.set()
            release.wait(10)

    def insert(number: int, connection: sqlite3.Connection) -> None:
        connection.execute("INSERT INTO notes (text) VALUES (?)", (f"change {number}",))
        if number % 3 == 0:
            raise ValueError(f"change {number} refused")

    def change(number: int) -> None:
        # Half as blocks of their own threads, half as functions the leader calls.
        try:
            if number % 2:
                with database.write() as connection:
                    insert(number, connection)
            else:
                database.run(lambda connection: insert(number, connection))
        except ValueError as error:
            refused[number] = str(error)
        # What a change returned from is committed: another connection reads it.
        count = reader.connection().execute("SELECT COUNT(*) FROM notes").fetchone()[0]
        seen_on_return[number] = count

    # Given a change holding its transaction open while twelve more wait to write
    holder = threading.Thread(target=first)
    holder.start()
    assert holding.wait(10)
    others = [threading.Thread(target=change, args=(n,)) for n in range(12)]
    for thread in others:
        thread.start()
    deadline = time.monotonic() + 10
    while len(database._group._waiting) < 12 and time.monotonic() < deadline:
        time.sleep(0.01)
    # When the first one ends and the others run in the transaction it opened
    release.set()
    for thread in [holder, *others]:
        thread.join(10)
    # Then the four that raised were undone alone, each told why, and the rest kept
    texts = {row["text"] for row in reader.connection().execute("SELECT text FROM notes")}
    assert texts == {"first"} | {f"change {n}" for n in range(12) if n % 3}
    assert refused == {n: f"change {n} refused" for n in (0, 3, 6, 9)}
    # And they were committed together: none returned before all nine rows were there
    assert seen_on_return == dict.fromkeys(range(12), 9)
    assert not database.connection().in_transaction


def test_a_write_inside_a_write_is_refused(tmp_path: Path) -> None:
    database = Database(tmp_path / "dynacron.db")
    database.ensure_schema(SCHEMA)
    with database.write() as connection:
        connection.execute("INSERT INTO notes (text) VALUES ('outer')")
        with pytest.raises(StoreUnavailable), database.write():
            pass
    assert database.connection().execute("SELECT COUNT(*) FROM notes").fetchone()[0] == 1


def test_a_change_given_as_a_function_returns_its_result_once_committed(tmp_path: Path) -> None:
    database = Database(tmp_path / "dynacron.db")
    database.ensure_schema(SCHEMA)
    reader = Database(tmp_path / "dynacron.db")

    def add(connection: sqlite3.Connection) -> int:
        return int(connection.execute("INSERT INTO notes (text) VALUES ('x')").lastrowid or 0)

    assert database.run(add) == 1
    assert reader.connection().execute("SELECT COUNT(*) FROM notes").fetchone()[0] == 1


@pytest.mark.parametrize("given_as", ["block", "function"])
def test_a_change_sqlite_refuses_is_unavailable_and_undone_alone(
    tmp_path: Path, given_as: str
) -> None:
    database = Database(tmp_path / "dynacron.db")
    database.ensure_schema(SCHEMA)

    def half_a_change(connection: sqlite3.Connection) -> None:
        connection.execute("INSERT INTO notes (text) VALUES ('half')")
        connection.execute("INSERT INTO no_such_table (text) VALUES ('never')")

    def make() -> None:
        if given_as == "function":
            database.run(half_a_change)
            return
        with database.write() as connection:
            half_a_change(connection)

    # When a change's second statement is one SQLite refuses (an OperationalError)
    with pytest.raises(StoreUnavailable, match="no such table") as refused:
        make()
    # Then the caller is told the store is unavailable, SQLite's error as its cause,
    # and its first statement was undone
    assert isinstance(refused.value.__cause__, sqlite3.OperationalError)
    assert database.connection().execute("SELECT COUNT(*) FROM notes").fetchone()[0] == 0
    assert not database.connection().in_transaction
    # And the next change is written
    with database.write() as connection:
        connection.execute("INSERT INTO notes (text) VALUES ('next')")
    assert database.connection().execute("SELECT COUNT(*) FROM notes").fetchone()[0] == 1
