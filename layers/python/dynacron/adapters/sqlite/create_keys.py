"""Idempotency keys of task creations on SQLite (the ``CreateKeys`` port)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from dynacron.adapters.sqlite.database import Database
from dynacron.adapters.sqlite.rows import RowTable
from dynacron.adapters.sqlite.schema import COORDINATION
from dynacron.domain.conditions import Transition
from dynacron.domain.coordination import transitions
from dynacron.domain.coordination.create_keys import KEY_LIFETIME, KeyReservation

_CREATE_KEYS = RowTable(
    "create_keys",
    ("tenant_id", "key"),
    (transitions.TASK_ID, transitions.FINGERPRINT, transitions.CREATED, transitions.EXPIRES_AT),
)


class SqliteCreateKeys:
    """One row per tenant and key; each reservation removes the expired ones, as
    DynamoDB's TTL does there."""

    def __init__(self, database: Database) -> None:
        self._database = database
        database.ensure_schema(COORDINATION)

    def apply(self, tenant_id: str, key: str, transition: Transition) -> bool:
        """``transition`` on the key's row, in one write transaction."""
        return self.apply_each(tenant_id, [(key, transition)])[0]

    def apply_returning(
        self, tenant_id: str, key: str, transition: Transition
    ) -> KeyReservation | None:
        """``apply``; refused, the reservation that holds the key (read in the same
        transaction). A reservation first removes the keys expired when it is made."""
        return self.apply_returning_each(tenant_id, [(key, transition)])[0]

    def apply_each(self, tenant_id: str, changes: Sequence[tuple[str, Transition]]) -> list[bool]:
        """``apply`` of each, all in one write transaction."""
        with self._database.write() as connection:
            return [held for held, _ in _carry_out_each(connection, tenant_id, changes)]

    def apply_returning_each(
        self, tenant_id: str, changes: Sequence[tuple[str, Transition]]
    ) -> list[KeyReservation | None]:
        """``apply_returning`` of each, all in one write transaction."""
        expiries = [
            expires_at
            for _, transition in changes
            if (expires_at := transition.sets.get(transitions.EXPIRES_AT)) is not None
        ]
        with self._database.write() as connection:
            if expiries:
                # A reservation runs KEY_LIFETIME from when it is made: the keys expired
                # by the first one's making go first (an expired key counts as absent
                # to a reservation anyway: this only keeps the table small).
                made_at = min(expiries) - int(KEY_LIFETIME.total_seconds())
                connection.execute("DELETE FROM create_keys WHERE expires_at <= ?", (made_at,))
            answered = _carry_out_each(connection, tenant_id, changes)
        return [
            None
            if held
            else KeyReservation(record["task_id"], record["fingerprint"], bool(record["created"]))
            for held, record in answered
        ]


def mark_keys_created(
    connection: sqlite3.Connection, tenant_id: str, created: Sequence[tuple[str, str]]
) -> None:
    """Within the caller's write transaction (a batch create's): each ``(key, task_id)``
    of the tenant's marked created, if the key still holds that task's id; one
    expired and taken since is left as it is. ``mark_key_created`` as one
    ``UPDATE ... WHERE`` for them all: its condition (the key names the task) in
    the WHERE, its change in the SET (a transition carried out row by row took a
    read, a check and a write per key: 7 % of a batch create's time)."""
    connection.executemany(
        "UPDATE create_keys SET created = 1 WHERE tenant_id = ? AND key = ? AND task_id = ?",
        [(tenant_id, key, task_id) for key, task_id in created],
    )


# Keys per ``IN (...)`` read: well under SQLite's limit of bound parameters.
_READ_CHUNK = 500
_PUT_KEY = """INSERT OR REPLACE INTO create_keys
    (tenant_id, key, task_id, fingerprint, created, expires_at) VALUES (?, ?, ?, ?, ?, ?)"""


def _carry_out_each(
    connection: sqlite3.Connection, tenant_id: str, changes: Sequence[tuple[str, Transition]]
) -> list[tuple[bool, dict[str, Any]]]:
    """Within a write transaction: each ``(key, transition)`` carried out in order as
    ``carry_out`` carries out one, each seeing what those before it made, with the
    rows read in one query and written in one statement (a batch's hundred keys
    took two hundred statements, each built anew). For each, whether it held and the
    record as it was then (the one that holds the key, when refused)."""
    records = _read_keys(connection, tenant_id, [key for key, _ in changes])
    changed: dict[str, dict[str, Any] | None] = {}
    answers: list[tuple[bool, dict[str, Any]]] = []
    for key, transition in changes:
        before = records.get(key)
        held = transition.holds(before)
        answers.append((held, before or {}))
        if held:
            after = None if transition.deletes else transition.applied_to(before)
            records[key] = changed[key] = after
    gone = [(tenant_id, key) for key, after in changed.items() if after is None]
    if gone:
        connection.executemany("DELETE FROM create_keys WHERE tenant_id = ? AND key = ?", gone)
    connection.executemany(
        _PUT_KEY,
        [
            (tenant_id, key, *(after.get(name) for name in _CREATE_KEYS.columns))
            for key, after in changed.items()
            if after is not None
        ],
    )
    return answers


def _read_keys(
    connection: sqlite3.Connection, tenant_id: str, keys: Sequence[str]
) -> dict[str, dict[str, Any] | None]:
    """The tenant's rows of ``keys`` as records (as ``RowTable.read`` makes them), by key."""
    unique = list(dict.fromkeys(keys))
    found: dict[str, dict[str, Any] | None] = {}
    for start in range(0, len(unique), _READ_CHUNK):
        chunk = unique[start : start + _READ_CHUNK]
        marks = ",".join("?" * len(chunk))
        for row in connection.execute(
            f"SELECT * FROM create_keys WHERE tenant_id = ? AND key IN ({marks})",
            (tenant_id, *chunk),
        ):
            found[row["key"]] = {
                name: row[name] for name in _CREATE_KEYS.columns if row[name] is not None
            }
    return found


def _key_of(tenant_id: str, key: str) -> dict[str, str]:
    return {"tenant_id": tenant_id, "key": key}
