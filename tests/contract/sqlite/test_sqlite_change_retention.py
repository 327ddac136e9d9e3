"""Change records past the history retention are deleted locally, as DynamoDB's TTL
deletes them deployed (decision 0054); the others stay."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from dynacron.adapters.sqlite.database import Database
from dynacron.adapters.sqlite.retention import delete_expired_changes
from dynacron.adapters.sqlite.tasks import SqliteTaskStore
from dynacron.domain.tasks.history import HISTORY_RETENTION, ChangeKind, ChangeStamp
from tests.contract.builders import START


def test_only_records_past_their_retention_are_deleted(tmp_path: Path) -> None:
    database = Database(tmp_path / "dynacron.db")
    try:
        tasks = SqliteTaskStore(database)
        old = ChangeStamp("alice", START).recorded(ChangeKind.TRIGGER, "t1", "acme", {}, {})
        new = ChangeStamp("alice", START + timedelta(days=1)).recorded(
            ChangeKind.TRIGGER, "t1", "acme", {}, {}
        )
        tasks.record_change(old)
        tasks.record_change(new)

        assert delete_expired_changes(database, START + HISTORY_RETENTION - timedelta(1)) == 0
        assert delete_expired_changes(database, START + HISTORY_RETENTION) == 1
        assert tasks.changes_page("acme", "t1", 10, None).items == [new]
    finally:
        database.close()
