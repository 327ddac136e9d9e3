"""SQLite's task listings on a real file: a file made before the name key and the tag
table gets both, and each listing reads its own index, never the whole tenant
(decision 0045)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from dynacron.adapters.sqlite.database import Database
from dynacron.adapters.sqlite.tasks import SqliteTaskStore, _page_rows
from dynacron.domain.tasks.listing import TaskListing, TaskOrder
from dynacron.domain.tasks.tags import parse_tag_filter
from dynacron.domain.tasks.task import TaskStatus
from tests.contract.sqlite.test_sqlite_stores import a_task, create

OLD_TASKS = """CREATE TABLE tasks (
    task_id TEXT PRIMARY KEY, tenant_id TEXT NOT NULL, created_at TEXT NOT NULL,
    version INTEGER, due_bucket TEXT, next_run_at TEXT, after_task_id TEXT,
    record TEXT NOT NULL)"""


@pytest.fixture
def database(tmp_path: Path) -> Iterator[Database]:
    database = Database(tmp_path / "dynacron.sqlite3")
    yield database
    database.close()


def test_a_file_made_before_the_name_key_and_tag_table_gets_both(tmp_path: Path) -> None:
    # Given a data file whose tasks table predates name search, with tasks in it (one
    # tagged, one whose record is not even JSON)
    path = tmp_path / "old.sqlite3"
    scratch = Database(tmp_path / "scratch.sqlite3")
    tagged = dataclasses.replace(a_task("t1"), name="Nightly Backup", tags={"env": "prod"})
    create(SqliteTaskStore(scratch), tagged)
    (text,) = scratch.connection().execute("SELECT record FROM tasks").fetchone()
    scratch.close()
    record = json.loads(text)
    del record["name_key"]  # (written since)
    old = Database(path)
    with old.write() as connection:
        connection.execute(OLD_TASKS)
        for task_id, stored in (("t1", json.dumps(record)), ("junk", "not json")):
            connection.execute(
                "INSERT INTO tasks (task_id, tenant_id, created_at, version, record)"
                " VALUES (?, 'tenant-a', '2026-11-30T12:00:00.000Z', 1, ?)",
                (task_id, stored),
            )
    old.close()

    # When the store opens it
    database = Database(path)
    store = SqliteTaskStore(database)

    # Then the old rows are found by name (the unreadable one by its id) and by tag
    def found(prefix: str) -> list[str]:
        page = store.page_owned("tenant-a", 10, None, (), TaskListing(name_prefix=prefix))
        return [t.task_id for t in page.items]

    assert found("nightly") == ["t1"]
    assert found("JUNK") == ["junk"]
    env = (parse_tag_filter("env:prod"),)
    assert [t.task_id for t in store.page_owned("tenant-a", 10, None, env).items] == ["t1"]
    # And opening it again changes nothing
    assert [
        t.task_id for t in SqliteTaskStore(database).page_owned("tenant-a", 10, None, env).items
    ] == ["t1"]
    database.close()


def test_the_name_keys_are_looked_for_once_per_file(database: Database) -> None:
    # Given a store opened once, holding a task
    create(SqliteTaskStore(database), a_task("t1"))
    # When it is opened again, every statement it runs traced
    connection = database.connection()
    statements: list[str] = []
    connection.set_trace_callback(statements.append)
    try:
        store = SqliteTaskStore(database)
    finally:
        connection.set_trace_callback(None)
    # Then no statement looked for rows without a name key (a scan of every task)
    assert not [s for s in statements if "name_key IS NULL" in s], statements
    page = store.page_owned("tenant-a", 10, None, (), TaskListing(name_prefix="t"))
    assert [t.task_id for t in page.items] == ["t1"]


def plan(database: Database, tags: tuple[str, ...], listing: TaskListing) -> str:
    """The query plan of a listing's page, as SQLite would run it."""
    connection = database.connection()
    captured: list[str] = []
    connection.set_trace_callback(captured.append)
    try:
        _page_rows(connection, "tenant-a", 10, None, tuple(map(parse_tag_filter, tags)), listing)
    finally:
        connection.set_trace_callback(None)
    query = next(q for q in captured if q.lstrip().startswith("SELECT tasks.*"))
    rows = connection.execute("EXPLAIN QUERY PLAN " + query).fetchall()
    return "\n".join(str(row[3]) for row in rows)


@pytest.mark.parametrize(
    ("tags", "listing", "index"),
    [
        ((), TaskListing(name_prefix="night"), "tasks_name"),
        ((), TaskListing(order=TaskOrder.NAME, descending=True), "tasks_name"),
        ((), TaskListing(order=TaskOrder.NEXT_RUN), "tasks_next_run"),
        (("env:prod",), TaskListing(), "task_tags_value"),
        (("env",), TaskListing(descending=True), "task_tags_key"),
        (("env", "team:billing"), TaskListing(status=TaskStatus.ACTIVE), "task_tags_value"),
    ],
)
def test_each_listing_reads_its_index_in_order_not_the_whole_tenant(
    database: Database, tags: tuple[str, ...], listing: TaskListing, index: str
) -> None:
    store = SqliteTaskStore(database)
    for n in range(20):
        create(store, dataclasses.replace(a_task(f"t{n}"), tags={"env": "prod"}))
    with database.write() as connection:
        connection.execute("ANALYZE")
    shown = plan(database, tags, listing)
    # The index named is searched, and no sort is needed: a page reads its rows only
    assert f"USING INDEX {index}" in shown or f"USING COVERING INDEX {index}" in shown, shown
    assert "TEMP B-TREE" not in shown, shown
    assert "SCAN tasks" not in shown, shown
