"""Deleting execution history past its retention, a small batch per transaction.

Deployed, DynamoDB's TTL deletes an execution's item once its ``expires_at`` (epoch
seconds, written by every transition: the retention after the record's last
moment that matters) has passed. SQLite has no TTL, so without this a file keeps
every execution (some 1.4 KB each) until the disk fills. The rule here is the
same, and narrower still: a row goes only if it has ended (SUCCEEDED, FAILED or
SKIPPED), no lease the reaper watches is on it (a dead letter's copy not yet
sent keeps one), and its ``expires_at`` has passed. A dead letter is an execution
like the others: listed until it expires, as deployed.

Each batch is one write transaction of at most ``batch_size`` deletes, so the
writers of the scheduler (which queue behind it) wait milliseconds, not the
whole sweep.
"""

from __future__ import annotations

import sqlite3
from datetime import datetime

from dynacron.adapters.sqlite.database import Database
from dynacron.adapters.sqlite.schema import EXECUTION_EXPIRY
from dynacron.domain.executions.execution import ExecutionStatus

BATCH_SIZE = 500
# A sweep stops after this many batches (the next one goes on): one run of the
# local reaper loop is never held for long. A batch of 500 took some 22 ms here
# (100,000 rows of 1.4 KB): 20,000 rows a sweep in under a second, where a
# per-second task adds 60 a minute.
MAX_BATCHES = 40
ENDED = tuple(status.value for status in ExecutionStatus if status.is_final)

_EXPIRED = f"""SELECT execution_id FROM executions
    WHERE lease_shard IS NULL AND {EXECUTION_EXPIRY} <= ?
      AND json_extract(record, '$.status') IN ({", ".join("?" * len(ENDED))})
    LIMIT ?"""


def _delete_batch(connection: sqlite3.Connection, now_epoch: int, batch_size: int) -> int:
    ids = [
        (row["execution_id"],)
        for row in connection.execute(_EXPIRED, (now_epoch, *ENDED, batch_size))
    ]
    connection.executemany("DELETE FROM executions WHERE execution_id = ?", ids)
    return len(ids)


def delete_expired_executions(
    database: Database,
    now: datetime,
    *,
    batch_size: int = BATCH_SIZE,
    max_batches: int = MAX_BATCHES,
) -> int:
    """Delete the ended executions whose ``expires_at`` is at or before ``now``, at
    most ``batch_size`` a transaction; returns how many went."""
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    now_epoch = int(now.timestamp())
    deleted = 0
    for _ in range(max_batches):
        count = database.run(lambda c: _delete_batch(c, now_epoch, batch_size))
        deleted += count
        if count < batch_size:
            break
    return deleted


def delete_expired_changes(
    database: Database, now: datetime, *, batch_size: int = BATCH_SIZE
) -> int:
    """Delete up to ``batch_size`` task change records whose ``expires_at`` (the
    history retention, decision 0054) is at or before ``now``; how many went."""
    return database.run(
        lambda c: (
            c.execute(
                """DELETE FROM task_changes WHERE rowid IN (SELECT rowid FROM task_changes
               WHERE expires_at <= ? LIMIT ?)""",
                (int(now.timestamp()), batch_size),
            ).rowcount
        )
    )
