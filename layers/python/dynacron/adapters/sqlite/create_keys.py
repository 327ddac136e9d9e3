"""Idempotency keys of task creations on SQLite (the ``CreateKeys`` port)."""

from __future__ import annotations

from dynacron.adapters.sqlite.database import Database
from dynacron.adapters.sqlite.rows import RowTable, carry_out
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
        with self._database.write() as connection:
            return carry_out(connection, _CREATE_KEYS, _key_of(tenant_id, key), transition)

    def apply_returning(
        self, tenant_id: str, key: str, transition: Transition
    ) -> KeyReservation | None:
        """``apply``; refused, the reservation that holds the key (read in the same
        transaction). A reservation first removes the keys expired when it is made."""
        key_of = _key_of(tenant_id, key)
        with self._database.write() as connection:
            expires_at = transition.sets.get(transitions.EXPIRES_AT)
            if expires_at is not None:
                # A reservation runs KEY_LIFETIME from when it is made: that instant.
                made_at = expires_at - int(KEY_LIFETIME.total_seconds())
                connection.execute("DELETE FROM create_keys WHERE expires_at <= ?", (made_at,))
            if carry_out(connection, _CREATE_KEYS, key_of, transition):
                return None
            held = _CREATE_KEYS.read(connection, key_of) or {}
        return KeyReservation(held["task_id"], held["fingerprint"], bool(held["created"]))


def _key_of(tenant_id: str, key: str) -> dict[str, str]:
    return {"tenant_id": tenant_id, "key": key}
