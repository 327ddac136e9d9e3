"""An execution's row: its record (the domain's transitions' map shape, as JSON text)
with the index columns taken from it, and a transition carried out on it. The domain
reads a record back (``record.execution_from_record``, ``record.call_from_record``)."""

from __future__ import annotations

import sqlite3
from typing import Any

from dynacron.adapters.sqlite.records import dump, load
from dynacron.domain.conditions import Transition
from dynacron.domain.executions.record import (
    ATTENTION_AT,
    ATTENTION_TENANT,
    DEAD_LETTER,
    DEAD_LETTERED_AT,
    LEASE_SHARD,
    LEASE_UNTIL,
)
from dynacron.domain.tasks.task import task_id_of

Record = dict[str, Any]


def read_record(connection: sqlite3.Connection, execution_id: str) -> Record | None:
    row = connection.execute(
        "SELECT record FROM executions WHERE execution_id = ?", (execution_id,)
    ).fetchone()
    return load(row["record"]) if row is not None else None


def carry_out(
    connection: sqlite3.Connection, execution_id: str, transition: Transition
) -> tuple[bool, Record | None]:
    """Within a write transaction: whether ``transition`` held, and the record (the new
    one if it held, else the one that made it fail, None if there is none)."""
    before = read_record(connection, execution_id)
    if not transition.holds(before):
        return False, before
    after = transition.applied_to(before)
    after.setdefault("execution_id", execution_id)
    after.setdefault("task_id", task_id_of(execution_id))

    def text(name: str) -> str | None:
        value = after.get(name)
        return value if isinstance(value, str) else None

    # An upsert, not INSERT OR REPLACE: the row keeps its place (rowid), and only the
    # indexes whose columns changed are written (a replace deletes the row from every
    # index and inserts it again: two writes per fire, six indexes each).
    connection.execute(
        """INSERT INTO executions (execution_id, task_id, lease_shard, lease_until,
           dead_letter, dead_lettered_at, record, attention_tenant, attention_at)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
           ON CONFLICT (execution_id) DO UPDATE SET task_id = excluded.task_id,
           lease_shard = excluded.lease_shard, lease_until = excluded.lease_until,
           dead_letter = excluded.dead_letter, dead_lettered_at = excluded.dead_lettered_at,
           record = excluded.record, attention_tenant = excluded.attention_tenant,
           attention_at = excluded.attention_at""",
        (
            execution_id,
            after["task_id"],
            text(LEASE_SHARD),
            text(LEASE_UNTIL),
            text(DEAD_LETTER),
            text(DEAD_LETTERED_AT),
            dump(after),
            text(ATTENTION_TENANT),
            text(ATTENTION_AT),
        ),
    )
    return True, after
