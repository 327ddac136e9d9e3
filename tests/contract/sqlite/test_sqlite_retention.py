"""SQLite history kept for the retention, as DynamoDB's TTL keeps it deployed
(issue 23): ended executions past their ``expires_at`` deleted in small
batches, never one still active. Time is injected: the transitions' ``now``, the
sweep's ``now``, and the local runtime's clock."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dynacron.adapters.sqlite.database import Database
from dynacron.adapters.sqlite.executions import SqliteExecutionStore
from dynacron.adapters.sqlite.retention import delete_expired_executions
from dynacron.cli.main import app
from dynacron.domain.clock import SettableClock
from dynacron.domain.executions import dead_letters, transitions
from dynacron.domain.executions.execution import Dispatch, ExecutionStatus
from dynacron.domain.executions.retry import RetryPolicy
from dynacron.domain.schedules.expressions import OneTimeSchedule
from dynacron.domain.tasks.task import Task, TaskStatus, execution_id_for
from dynacron.local.runtime import LocalOptions, LocalRuntime

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
RETENTION = timedelta(days=90)
LEASE = timedelta(minutes=5)


@pytest.fixture
def database(tmp_path: Path) -> Iterator[Database]:
    database = Database(tmp_path / "dynacron.sqlite3")
    yield database
    database.close()


@pytest.fixture
def store(database: Database) -> SqliteExecutionStore:
    return SqliteExecutionStore(database, RETENTION)


def dispatch(task_id: str, at: datetime = T0) -> Dispatch:
    return Dispatch(
        execution_id=execution_id_for(task_id, at),
        task_id=task_id,
        scheduled_at=at,
        attempt=1,
        tenant_id="tenant-a",
    )


def running(store: SqliteExecutionStore, task_id: str, now: datetime) -> str:
    """A new execution RUNNING since ``now`` under lease token ``tok``."""
    d = dispatch(task_id, now)
    assert store.apply(
        d.execution_id,
        transitions.begin_new(
            d,
            now=now,
            lease_until=now + LEASE,
            lease_token="tok",
            callback_digest="digest",
            retry=RetryPolicy(),
            tenant_id="tenant-a",
            keeping=store.keeping(d.execution_id),
        ),
    )
    return d.execution_id


def succeeded(store: SqliteExecutionStore, task_id: str, now: datetime) -> str:
    execution_id = running(store, task_id, now)
    assert store.apply(
        execution_id,
        transitions.finish(
            "tok", ExecutionStatus.SUCCEEDED, now, keeping=store.keeping(execution_id)
        ),
    )
    return execution_id


def dead_lettered(
    store: SqliteExecutionStore, task_id: str, now: datetime, *, released: bool
) -> str:
    execution_id = running(store, task_id, now)
    assert store.apply(
        execution_id,
        dead_letters.dead_letter(
            "tok",
            now=now,
            error="boom",
            lease_until=now + LEASE,
            new_token="copy",
            tenant_id="tenant-a",
            keeping=store.keeping(execution_id),
        ),
    )
    if released:  # its copy for the dead-letter queue was sent
        assert store.apply(execution_id, transitions.release("copy"))
    return execution_id


def queued(store: SqliteExecutionStore, task_id: str, now: datetime) -> str:
    d = dispatch(task_id, now)
    assert store.apply(
        d.execution_id,
        transitions.enqueue(
            d,
            retry=RetryPolicy(),
            lease_until=now + LEASE,
            lease_token="tok",
            tenant_id="tenant-a",
            keeping=store.keeping(d.execution_id),
        ),
    )
    return d.execution_id


def awaiting_callback(store: SqliteExecutionStore, task_id: str, now: datetime) -> str:
    """RUNNING after a 202: its callback lease watched by the reaper."""
    execution_id = running(store, task_id, now)
    assert store.apply(
        execution_id,
        transitions.renew(
            "tok", now + timedelta(minutes=10), now, keeping=store.keeping(execution_id)
        ),
    )
    return execution_id


def skipped(store: SqliteExecutionStore, task_id: str, now: datetime) -> str:
    """A new execution SKIPPED from the start (its task paused)."""
    task = Task(
        task_id=task_id,
        name=f"task {task_id}",
        schedule=OneTimeSchedule(at=now),
        handler_url="http://127.0.0.1:9/",
        payload={},
        status=TaskStatus.PAUSED,
        next_run_at=None,
        created_at=now,
        updated_at=now,
        tenant_id="tenant-a",
    )
    execution_id = execution_id_for(task_id, now)
    assert store.apply(
        execution_id,
        transitions.record_skipped(
            task, execution_id, now, "paused", now, keeping=store.keeping(execution_id)
        ),
    )
    return execution_id


def ids(database: Database) -> set[str]:
    rows = database.connection().execute("SELECT execution_id FROM executions")
    return {row["execution_id"] for row in rows}


def test_old_ended_executions_go_and_recent_or_active_ones_stay(
    database: Database, store: SqliteExecutionStore
) -> None:
    old = T0
    recent = T0 + RETENTION - timedelta(days=1)
    gone = {
        succeeded(store, "old-ok", old),
        skipped(store, "old-skip", old),
        dead_lettered(store, "old-dead", old, released=True),
    }
    kept = {
        succeeded(store, "recent-ok", recent),
        # Active, however old: a run, a queued attempt, a long job awaiting its callback.
        running(store, "old-running", old),
        queued(store, "old-queued", old),
        awaiting_callback(store, "old-waiting", old),
        # A dead letter whose copy was never sent still holds a watched lease.
        dead_lettered(store, "old-dead-unsent", old, released=False),
    }
    assert ids(database) == gone | kept

    # The day before the old ones expire, nothing goes.
    assert delete_expired_executions(database, old + RETENTION - timedelta(days=1)) == 0
    assert ids(database) == gone | kept
    # Past their expiry (and past every lease's), exactly the ended, unleased old ones go.
    deleted = delete_expired_executions(database, old + RETENTION + timedelta(hours=1))
    assert deleted == len(gone)
    assert ids(database) == kept
    assert store.dead_letters("tenant-a", 10, None).items == [
        store.get(execution_id_for("old-dead-unsent", old))
    ]
    # The recent one goes once its own retention has passed.
    delete_expired_executions(database, recent + RETENTION + timedelta(seconds=1))
    assert execution_id_for("recent-ok", recent) not in ids(database)


def test_deletion_takes_a_small_transaction_per_batch(
    database: Database, store: SqliteExecutionStore
) -> None:
    for number in range(5):
        skipped(store, f"t{number}", T0 + timedelta(seconds=number))
    statements: list[str] = []
    # The sweep's transactions are led on this thread's connection (no other writer).
    database.connection().set_trace_callback(statements.append)
    try:
        deleted = delete_expired_executions(
            database, T0 + RETENTION + timedelta(days=1), batch_size=2
        )
    finally:
        database.connection().set_trace_callback(None)
    assert deleted == 5
    assert ids(database) == set()
    begins = [s for s in statements if s.startswith("BEGIN")]
    commits = [s for s in statements if s == "COMMIT"]
    deletes = [s for s in statements if s.startswith("DELETE FROM executions")]
    # 2 + 2 + 1: three transactions, the last one short, and no empty fourth.
    assert len(begins) == len(commits) == 3
    assert len(deletes) == 5


def test_a_sweep_stops_after_its_batches_and_the_next_goes_on(
    database: Database, store: SqliteExecutionStore
) -> None:
    for number in range(5):
        skipped(store, f"t{number}", T0)
    later = T0 + RETENTION + timedelta(days=1)
    assert delete_expired_executions(database, later, batch_size=2, max_batches=1) == 2
    assert len(ids(database)) == 3
    assert delete_expired_executions(database, later, batch_size=2) == 3
    assert ids(database) == set()


def test_the_sweep_uses_its_index(database: Database, store: SqliteExecutionStore) -> None:
    """A file of months of history is not scanned whole every minute."""
    from dynacron.adapters.sqlite import retention

    plan = (
        database.connection()
        .execute(
            "EXPLAIN QUERY PLAN " + retention._EXPIRED,
            (0, *retention.ENDED, 1),
        )
        .fetchall()
    )
    assert any("executions_expiry" in row["detail"] for row in plan), [
        row["detail"] for row in plan
    ]


def test_local_mode_sweeps_on_its_clock_with_its_retention(tmp_path: Path) -> None:
    """``dynacron local``'s reaper loop deletes what its retention let expire: time is
    the runtime's clock, moved by the test, not waited for."""
    clock = SettableClock(T0)
    runtime = LocalRuntime(
        LocalOptions(
            port=0,
            components=("reaper",),
            data_dir=tmp_path,
            reaper_interval=0.02,
            retention_days=7,
            history_sweep_seconds=60,
        ),
        clock=clock,
    ).start()
    try:
        assert runtime.store is not None
        database = runtime.store.database  # type: ignore[attr-defined]
        assert runtime.app is not None
        store = runtime.app.adapters.executions
        assert isinstance(store, SqliteExecutionStore)
        old = skipped(store, "old", T0)
        clock.advance(timedelta(days=6))
        fresh = skipped(store, "fresh", clock.now())
        time.sleep(0.2)
        assert ids(database) == {old, fresh}  # 6 days: within 7
        clock.advance(timedelta(days=1, minutes=2))  # the old one is 7 days and 2 minutes old
        deadline = time.monotonic() + 10
        while old in ids(database) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert ids(database) == {fresh}
    finally:
        runtime.stop()


def test_local_takes_retention_days_and_refuses_a_bad_value() -> None:
    runner = CliRunner()
    for bad in ("0", "-3", "soon"):
        result = runner.invoke(app, ["local", "--retention", bad])
        assert result.exit_code == 2, result.output
        assert "--retention" in result.output
    shown = runner.invoke(app, ["local", "--help"], terminal_width=200)
    assert "--retention" in shown.output
    assert "90" in shown.output  # the deployed default


def test_the_default_retention_is_the_deployed_one() -> None:
    from dynacron.entry.composition import EXECUTION_RETENTION

    assert LocalOptions().retention_days == EXECUTION_RETENTION.days == 90
