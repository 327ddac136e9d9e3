"""The SQLite stores on a real file: every change states what it expects, as the
DynamoDB adapters' conditions do, across threads and across ``Database`` objects
(two processes' worth of connections) on one file."""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import random
import signal
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from dynacron.adapters.sqlite import sqlite_stores
from dynacron.adapters.sqlite.coordination import (
    SqliteShardLeases,
)
from dynacron.adapters.sqlite.database import Database
from dynacron.adapters.sqlite.executions import SqliteExecutionStore
from dynacron.adapters.sqlite.tasks import SqliteTaskStore
from dynacron.domain.executions import dead_letters, transitions
from dynacron.domain.executions.attention import AttentionQuery
from dynacron.domain.executions.execution import (
    Dispatch,
    ExecutionStatus,
)
from dynacron.domain.executions.retry import RetryPolicy
from dynacron.domain.schedules.expressions import AfterSchedule, OneTimeSchedule, RateSchedule
from dynacron.domain.tasks.claiming import claim_occurrence
from dynacron.domain.tasks.tags import parse_tag_filter
from dynacron.domain.tasks.task import (
    DuePlacement,
    Sharding,
    Task,
    TaskStatus,
    execution_id_for,
)
from dynacron.ports import UnreadableTask, UnreadableTaskError
from dynacron.services import attempts
from tests.contract import coordination_changes as changes
from tests.contract import task_changes

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
SHARDING = Sharding(shard_count=4, bucket_seconds=60)


@pytest.fixture
def database(tmp_path: Path) -> Iterator[Database]:
    database = Database(tmp_path / "dynacron.sqlite3")
    yield database
    database.close()


@pytest.fixture
def tasks(database: Database) -> SqliteTaskStore:
    return SqliteTaskStore(database)


def a_task(
    task_id: str,
    *,
    tenant: str = "tenant-a",
    next_run_at: datetime | None = NOW,
    created_at: datetime = NOW,
    every_seconds: int | None = None,
    after: str | None = None,
) -> Task:
    if after is not None:
        schedule: OneTimeSchedule | RateSchedule | AfterSchedule = AfterSchedule(after)
    elif every_seconds is not None:
        schedule = RateSchedule(every_seconds=every_seconds, anchor=NOW)
    else:
        schedule = OneTimeSchedule(at=NOW)
    return Task(
        task_id=task_id,
        name=f"task {task_id}",
        schedule=schedule,
        handler_url="http://127.0.0.1:9/",
        payload={"n": 1.5, "text": "é"},
        status=TaskStatus.ACTIVE,
        next_run_at=next_run_at,
        created_at=created_at,
        updated_at=created_at,
        tenant_id=tenant,
    )


def place(task: Task) -> DuePlacement | None:
    return SHARDING.place_task(task, NOW)


def create(store: SqliteTaskStore, task: Task, max_tasks: int = 100) -> Task:
    store.create_within_quota(task, place(task), max_tasks, f"secret-{task.task_id}")
    return task


# Tasks ---------------------------------------------------------------------------


def test_claim_race_eight_threads_claim_each_due_task_exactly_once(tmp_path: Path) -> None:
    # Given 1,000 recurring tasks due now in one bucket (NORMAL sync: a quicker test);
    # recurring, so only the version (not the status) tells a stale claim apart
    database = Database(tmp_path / "race.sqlite3", durability="normal")
    store = SqliteTaskStore(database)
    sharding = Sharding(shard_count=1, bucket_seconds=60)
    for i in range(1000):
        task = a_task(f"race{i:04d}", every_seconds=60)
        store.create_within_quota(task, sharding.place_task(task, NOW), 1000, "secret")
    bucket = DuePlacement(sharding.bucket(NOW), 0).key
    claimed = [0] * 8
    barrier = threading.Barrier(8)

    # When eight claimers walk the bucket as the tick does, each in its own order
    def claimer(index: int) -> None:
        rng = random.Random(index)
        barrier.wait()
        start_key = None
        while True:
            ids, start_key = store.due_task_ids(bucket, NOW, 100, start_key)
            candidates = store.get_many(ids)
            rng.shuffle(candidates)
            for task in candidates:
                claim = claim_occurrence(task, NOW)
                if claim is None:
                    continue
                placement = sharding.place(task.task_id, claim.next_run_at, NOW)
                if task_changes.claim(store, claim, placement, NOW):
                    claimed[index] += 1
            if start_key is None:
                return

    threads = [threading.Thread(target=claimer, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)

    # Then exactly 1,000 claims won, and nothing is due any more
    assert sum(claimed) == 1000
    assert store.due_task_ids(bucket, NOW, 10, None) == ([], None)
    done = store.get("race0999")
    assert done is not None
    assert done.version == 2
    assert done.next_run_at == NOW + timedelta(seconds=60)
    database.close()


def test_an_unreadable_task_is_told_apart_shown_and_set_aside(
    tasks: SqliteTaskStore, database: Database
) -> None:
    create(tasks, a_task("good"))
    placement = place(a_task("bad"))
    assert placement is not None
    # Given a row written around the API: a schedule of no known kind
    broken = {"task_id": "bad", "name": "broken", "schedule": {"kind": "lunar"}, "version": 3}
    with database.write() as connection:
        connection.execute(
            "INSERT INTO tasks (task_id, tenant_id, created_at, version, due_bucket, next_run_at,"
            " record) VALUES ('bad', 'tenant-a', ?, 3, ?, ?, ?)",
            (
                "2026-11-30T12:00:00.000Z",
                placement.key,
                "2026-11-30T12:00:00.000Z",
                json.dumps(broken),
            ),
        )

    good, unreadable = tasks.read_many(["good", "bad", "missing"])
    assert [t.task_id for t in good] == ["good"]
    assert len(unreadable) == 1
    assert unreadable[0].task_id == "bad"
    assert unreadable[0].seen_version == 3
    with pytest.raises(UnreadableTaskError):
        tasks.get_many(["good", "bad"])
    shown = tasks.get_owned("tenant-a", "bad")
    assert shown is not None
    assert shown.status is TaskStatus.ERROR
    assert shown.name == "broken"

    # A stale version read sets nothing aside; the one read does
    stale = UnreadableTask("bad", "x", seen_version=2)
    assert task_changes.set_aside(tasks, stale, "nope", NOW) is False
    assert task_changes.set_aside(tasks, unreadable[0], "cannot read it", NOW) is True
    assert tasks.due_task_ids(placement.key, NOW, 10, None)[0] == []
    shown = tasks.get_owned("tenant-a", "bad")
    assert shown is not None
    assert shown.status_reason == "cannot read it"
    assert shown.version == 4


def test_a_row_that_is_not_even_json_is_set_aside_by_id(
    tasks: SqliteTaskStore, database: Database
) -> None:
    with database.write() as connection:
        connection.execute(
            "INSERT INTO tasks (task_id, tenant_id, created_at, due_bucket, next_run_at, record)"
            " VALUES ('junk', 'tenant-a', '2026-11-30T12:00:00.000Z', 'b#0', ?, 'not json')",
            ("2026-11-30T12:00:00.000Z",),
        )

    _, unreadable = tasks.read_many(["junk"])
    assert [u.seen_version for u in unreadable] == [None]
    assert tasks.due_task_ids("b#0", NOW, 10, None)[0] == ["junk"]
    assert task_changes.set_aside_by_id(tasks, "junk", "not a task", NOW) is True

    assert tasks.due_task_ids("b#0", NOW, 10, None)[0] == []
    shown = tasks.get_owned("tenant-a", "junk")
    assert shown is not None
    assert (shown.status, shown.status_reason, shown.version) == (
        TaskStatus.ERROR,
        "not a task",
        1,
    )
    # Set aside at version 1 now: a second try from the old reading is refused
    assert task_changes.set_aside(tasks, unreadable[0], "again", NOW) is False


def test_a_tag_filter_passes_over_rows_that_are_not_json_or_hold_odd_tags(
    tasks: SqliteTaskStore, database: Database
) -> None:
    # Given a tagged task, and rows written around the API: one not JSON at all, one
    # whose tags are not a map of strings (a number where the text should be)
    tagged = dataclasses.replace(a_task("tagged"), tags={"env": "1"})
    create(tasks, tagged)
    with database.write() as connection:
        for task_id, record in (
            ("junk", "not json"),
            ("odd", json.dumps({"tags": {"env": 1}})),
            ("listy", json.dumps({"tags": ["env", "1"]})),
        ):
            connection.execute(
                "INSERT INTO tasks (task_id, tenant_id, created_at, record)"
                " VALUES (?, 'tenant-a', '2026-11-30T12:00:00.000Z', ?)",
                (task_id, record),
            )

    # When the tenant lists by tag, Then the listing answers with the tagged task only
    for text in ("env:1", "env"):
        page = tasks.page_owned("tenant-a", 10, None, (parse_tag_filter(text),))
        assert [t.task_id for t in page.items] == ["tagged"]
    # and the unfiltered listing still shows every row (the unreadable as ERROR)
    assert len(tasks.page_owned("tenant-a", 10, None).items) == 4


# Several Database objects on one file ---------------------------------------


def test_two_databases_on_one_file_act_as_two_processes(tmp_path: Path) -> None:
    # Given two Database objects on one file (as two processes would hold)
    path = tmp_path / "shared.sqlite3"
    first, second = Database(path), Database(path)
    try:
        tasks_one, tasks_two = SqliteTaskStore(first), SqliteTaskStore(second)
        task = create(tasks_one, a_task("t1", every_seconds=60))
        claim = claim_occurrence(task, NOW)
        assert claim is not None
        placement = SHARDING.place("t1", claim.next_run_at, NOW)

        # When both claim the same occurrence, one wins
        assert task_changes.claim(tasks_two, claim, placement, NOW) is True
        assert task_changes.claim(tasks_one, claim, placement, NOW) is False
        # And each sees the other's writes
        stored = tasks_one.get("t1")
        assert stored is not None
        assert stored.version == 2
        leases_one, leases_two = SqliteShardLeases(first), SqliteShardLeases(second)
        assert changes.acquire(leases_one, 0, "a", NOW, NOW + timedelta(seconds=30))
        assert not changes.acquire(leases_two, 0, "b", NOW, NOW + timedelta(seconds=30))
    finally:
        first.close()
        second.close()


# Executions ----------------------------------------------------------------------

RETENTION = timedelta(days=7)
LEASE = NOW + timedelta(minutes=5)
# The execution cases every store shares are in the contract suite
# (tests/contract/test_executions.py); here, only what is SQLite's own.


def a_dispatch(task_id: str = "t1", at: datetime = NOW, attempt: int = 1) -> Dispatch:
    return Dispatch(
        execution_id=execution_id_for(task_id, at),
        task_id=task_id,
        scheduled_at=at,
        attempt=attempt,
        tenant_id="tenant-a",
    )


def begin(
    store: SqliteExecutionStore, dispatch: Dispatch, token: str = "tok1"
) -> tuple[bool, ExecutionStatus | None]:
    result = attempts.begin(
        store,
        dispatch,
        now=NOW,
        lease_until=LEASE,
        lease_token=token,
        callback_digest="digest",
        retry=RetryPolicy(),
        tenant_id="tenant-a",
    )
    return result.began, result.current.status if result.current else None


def test_the_factory_gives_every_store_on_one_file(database: Database) -> None:
    stores = sqlite_stores(database, execution_retention=RETENTION, lease_shards=2)
    assert stores.executions.lease_shards == 2
    create(stores.tasks, a_task("t1"))
    assert stores.tenants.task_count("tenant-a") == 1
    assert begin(stores.executions, a_dispatch()) == (True, ExecutionStatus.RUNNING)


def test_two_databases_race_to_begin_and_take_over(tmp_path: Path) -> None:
    # Given two Database objects on one file (two processes), eight threads each
    path = tmp_path / "shared.sqlite3"
    databases = [Database(path, durability="normal"), Database(path, durability="normal")]
    stores = [SqliteExecutionStore(d, RETENTION) for d in databases]
    dispatches = [a_dispatch(f"t{i}") for i in range(50)]
    began: list[str] = []
    taken: list[str] = []
    lock = threading.Lock()
    barrier = threading.Barrier(16)
    after = LEASE + timedelta(seconds=1)

    def racer(index: int) -> None:
        store = stores[index % 2]
        barrier.wait()
        for dispatch in dispatches:
            if attempts.begin(
                store,
                dispatch,
                now=NOW,
                lease_until=LEASE,
                lease_token=f"w{index}",
                callback_digest="d",
                retry=RetryPolicy(),
            ).began:
                with lock:
                    began.append(dispatch.execution_id)
        barrier.wait()
        for dispatch in dispatches:
            current = store.get(dispatch.execution_id)
            assert current is not None
            assert current.lease_token is not None
            take_over = transitions.take_over(
                current.lease_token,
                cutoff=after,
                new_token=f"r{index}",
                lease_until=after,
                keeping=store.keeping(dispatch.execution_id),
            )
            if store.apply(dispatch.execution_id, take_over):
                with lock:
                    taken.append(dispatch.execution_id)

    threads = [threading.Thread(target=racer, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)

    # Then each execution began once and was taken over once
    assert sorted(began) == sorted(d.execution_id for d in dispatches)
    assert sorted(taken) == sorted(d.execution_id for d in dispatches)
    for database in databases:
        database.close()


def _killed_mid_write(path: str, ready: Any) -> None:
    """A process that dies (SIGKILL) inside a write transaction, its lock held."""
    with Database(path).write() as connection:
        connection.execute("UPDATE tasks SET record = 'half-written' WHERE task_id = 't1'")
        ready.set()
        os.kill(os.getpid(), signal.SIGKILL)


def test_a_process_killed_mid_write_leaves_nothing_half_done(tmp_path: Path) -> None:
    # Given a task, and another process killed while its change to it was uncommitted
    path = tmp_path / "killed.sqlite3"
    database = Database(path)
    tasks = SqliteTaskStore(database)
    task = create(tasks, a_task("t1", every_seconds=60))
    context = multiprocessing.get_context("spawn")
    ready = context.Event()
    process = context.Process(target=_killed_mid_write, args=(str(path), ready))
    process.start()
    process.join(timeout=60)
    assert ready.is_set()
    assert process.exitcode == -signal.SIGKILL

    # Then the task is as it was, and the next change goes through (the lock died with it)
    assert tasks.get("t1") == task
    claim = claim_occurrence(task, NOW)
    assert claim is not None
    assert (
        task_changes.claim(tasks, claim, SHARDING.place("t1", claim.next_run_at, NOW), NOW) is True
    )
    database.close()


def test_a_file_made_before_the_attention_index_gets_it_and_lists_new_failures(
    tmp_path: Path,
) -> None:
    # Given a data file whose executions table predates GET /executions, with a row
    path = tmp_path / "old.sqlite3"
    old = Database(path)
    with old.write() as connection:
        connection.execute(
            """CREATE TABLE executions (execution_id TEXT PRIMARY KEY, task_id TEXT NOT NULL,
               lease_shard TEXT, lease_until TEXT, dead_letter TEXT, dead_lettered_at TEXT,
               record TEXT NOT NULL)"""
        )
        record = {"execution_id": "old_1", "task_id": "old", "status": "FAILED"}
        connection.execute(
            "INSERT INTO executions (execution_id, task_id, record) VALUES (?, ?, ?)",
            ("old_1", "old", json.dumps(record | {"scheduled_at": "2026-11-30T12:00:00.000Z"})),
        )
    old.close()

    # When the store opens it, and an execution then fails for good
    database = Database(path)
    store = SqliteExecutionStore(database, timedelta(days=7))
    dispatch = Dispatch(execution_id="new_20261130T120000.000Z", task_id="new", scheduled_at=NOW)
    assert attempts.begin(
        store,
        dispatch,
        now=NOW,
        lease_until=NOW + timedelta(seconds=30),
        lease_token="t",
        callback_digest="d",
        retry=RetryPolicy(),
        tenant_id="tenant-a",
    ).began
    dead_letter = dead_letters.dead_letter(
        "t",
        now=NOW,
        error="refused",
        lease_until=NOW + timedelta(seconds=30),
        new_token="c",
        tenant_id="tenant-a",
        keeping=store.keeping(dispatch.execution_id),
    )
    assert store.apply(dispatch.execution_id, dead_letter)

    # Then the new failure is listed, the old row is kept as it was, unlisted
    page = store.needing_attention("tenant-a", AttentionQuery(), 10, None)
    assert [e.execution_id for e in page.items] == [dispatch.execution_id]
    assert store.get("old_1") is not None
    # And opening it again changes nothing
    assert (
        SqliteExecutionStore(database, timedelta(days=7))
        .needing_attention("tenant-a", AttentionQuery(), 10, None)
        .items
        == page.items
    )
    database.close()
