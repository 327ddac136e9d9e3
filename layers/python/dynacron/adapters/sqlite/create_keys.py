"""Idempotency keys of task creations on SQLite (the ``CreateKeys`` port)."""

from __future__ import annotations

from datetime import datetime

from dynacron.adapters.sqlite.database import Database
from dynacron.adapters.sqlite.rows import RowTable, carry_out
from dynacron.adapters.sqlite.schema import COORDINATION
from dynacron.domain.coordination import transitions
from dynacron.domain.coordination.create_keys import CreateKey, KeyReservation

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

    def reserve(
        self, tenant_id: str, key: CreateKey, task_id: str, now: datetime
    ) -> KeyReservation:
        with self._database.write() as connection:
            connection.execute(
                "DELETE FROM create_keys WHERE expires_at <= ?", (int(now.timestamp()),)
            )
            key_of = {"tenant_id": tenant_id, "key": key.key}
            reserve = transitions.reserve_create_key(key, task_id, now)
            if not carry_out(connection, _CREATE_KEYS, key_of, reserve):
                held = _CREATE_KEYS.read(connection, key_of) or {}
                return KeyReservation(held["task_id"], held["fingerprint"], bool(held["created"]))
        return KeyReservation(task_id, key.fingerprint, created=False)

    def mark_created(self, tenant_id: str, key: str, task_id: str) -> None:
        with self._database.write() as connection:
            carry_out(
                connection,
                _CREATE_KEYS,
                {"tenant_id": tenant_id, "key": key},
                transitions.mark_key_created(task_id),
            )
