"""Idempotency keys of task creations on SQLite (the ``CreateKeys`` port)."""

from __future__ import annotations

from collections.abc import Sequence

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
            return [
                carry_out(connection, _CREATE_KEYS, _key_of(tenant_id, key), transition)
                for key, transition in changes
            ]

    def apply_returning_each(
        self, tenant_id: str, changes: Sequence[tuple[str, Transition]]
    ) -> list[KeyReservation | None]:
        """``apply_returning`` of each, all in one write transaction."""
        answers: list[KeyReservation | None] = []
        with self._database.write() as connection:
            swept: set[int] = set()
            for key, transition in changes:
                key_of = _key_of(tenant_id, key)
                expires_at = transition.sets.get(transitions.EXPIRES_AT)
                if expires_at is not None and expires_at not in swept:
                    # A reservation runs KEY_LIFETIME from when it is made: that instant.
                    made_at = expires_at - int(KEY_LIFETIME.total_seconds())
                    connection.execute("DELETE FROM create_keys WHERE expires_at <= ?", (made_at,))
                    swept.add(expires_at)
                if carry_out(connection, _CREATE_KEYS, key_of, transition):
                    answers.append(None)
                    continue
                held = _CREATE_KEYS.read(connection, key_of) or {}
                answers.append(
                    KeyReservation(held["task_id"], held["fingerprint"], bool(held["created"]))
                )
        return answers


def _key_of(tenant_id: str, key: str) -> dict[str, str]:
    return {"tenant_id": tenant_id, "key": key}
