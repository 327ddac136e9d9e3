"""Idempotency keys of task creations on SQLite (the ``CreateKeys`` port)."""

from __future__ import annotations

from datetime import datetime

from dynacron.adapters.sqlite.database import Database
from dynacron.adapters.sqlite.schema import COORDINATION
from dynacron.domain.coordination.create_keys import KEY_LIFETIME, CreateKey, KeyReservation


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
            held = connection.execute(
                "SELECT task_id, fingerprint, created FROM create_keys "
                "WHERE tenant_id = ? AND key = ?",
                (tenant_id, key.key),
            ).fetchone()
            if held is not None:
                return KeyReservation(held["task_id"], held["fingerprint"], bool(held["created"]))
            connection.execute(
                "INSERT INTO create_keys (tenant_id, key, task_id, fingerprint, created, "
                "expires_at) VALUES (?, ?, ?, ?, 0, ?)",
                (
                    tenant_id,
                    key.key,
                    task_id,
                    key.fingerprint,
                    int((now + KEY_LIFETIME).timestamp()),
                ),
            )
        return KeyReservation(task_id, key.fingerprint, created=False)

    def mark_created(self, tenant_id: str, key: str, task_id: str) -> None:
        with self._database.write() as connection:
            connection.execute(
                "UPDATE create_keys SET created = 1 WHERE tenant_id = ? AND key = ? "
                "AND task_id = ?",
                (tenant_id, key, task_id),
            )
