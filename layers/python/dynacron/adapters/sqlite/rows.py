"""A domain transition carried out on one row of a coordination table.

Within a write transaction (the write lock held from the read to the commit), the
row is read as a record (its non-NULL columns, JSON ones decoded, and a ``record``
column's fields), the transition's condition checked on it, and the record it
makes written back whole, or the row deleted. What a DynamoDB adapter compiles
into one conditional write, this does in one transaction: the same rules.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dynacron.adapters.sqlite.records import dump, load
from dynacron.domain.conditions import Transition


@dataclass(frozen=True)
class RowTable:
    """A table whose rows are records: ``keys`` identify a row, ``columns`` hold one
    attribute each (``json_columns`` as JSON text), and any other attribute goes into
    the ``record`` column's JSON object, if the table has one."""

    name: str
    keys: tuple[str, ...]
    columns: tuple[str, ...]
    json_columns: frozenset[str] = frozenset()
    has_record: bool = False

    def read(self, connection: sqlite3.Connection, key: Mapping[str, Any]) -> dict[str, Any] | None:
        """The row at ``key`` as a record (None if there is none)."""
        where = " AND ".join(f"{name} = ?" for name in self.keys)
        row = connection.execute(
            f"SELECT * FROM {self.name} WHERE {where}", tuple(key[k] for k in self.keys)
        ).fetchone()
        if row is None:
            return None
        record: dict[str, Any] = load(row["record"]) if self.has_record else {}
        for name in self.columns:
            value = row[name]
            if value is not None:
                record[name] = json.loads(value) if name in self.json_columns else value
        return record

    def write(
        self, connection: sqlite3.Connection, key: Mapping[str, Any], record: Mapping[str, Any]
    ) -> None:
        """Store ``record`` whole at ``key`` (an attribute it lacks is NULL)."""
        names = [*self.keys, *self.columns]
        values = [key[k] for k in self.keys]
        for name in self.columns:
            value = record.get(name)
            values.append(
                json.dumps(value) if name in self.json_columns and value is not None else value
            )
        if self.has_record:
            names.append("record")
            values.append(dump({k: v for k, v in record.items() if k not in names}))
        marks = ", ".join("?" * len(names))
        connection.execute(
            f"INSERT OR REPLACE INTO {self.name} ({', '.join(names)}) VALUES ({marks})", values
        )

    def delete(self, connection: sqlite3.Connection, key: Mapping[str, Any]) -> None:
        where = " AND ".join(f"{name} = ?" for name in self.keys)
        connection.execute(
            f"DELETE FROM {self.name} WHERE {where}", tuple(key[k] for k in self.keys)
        )


def carry_out(
    connection: sqlite3.Connection,
    table: RowTable,
    key: Mapping[str, Any],
    transition: Transition,
) -> bool:
    """Within a write transaction: carry out ``transition`` on the row at ``key``;
    False (nothing written) if its condition does not hold."""
    before = table.read(connection, key)
    if not transition.holds(before):
        return False
    if transition.deletes:
        table.delete(connection, key)
    else:
        table.write(connection, key, transition.applied_to(before))
    return True
