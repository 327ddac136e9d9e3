"""Each tenant's calendars on SQLite (the ``CalendarStore`` port): one row per tenant."""

from __future__ import annotations

from typing import Any

from dynacron.adapters.sqlite.database import Database
from dynacron.adapters.sqlite.rows import RowTable, carry_out
from dynacron.adapters.sqlite.schema import COORDINATION
from dynacron.domain.conditions import Transition
from dynacron.domain.schedules.calendars import CALENDARS, VERSION

_CALENDARS = RowTable("calendars", ("tenant_id",), (CALENDARS, VERSION))


class SqliteCalendarStore:
    """The row of a tenant: its calendars as JSON text and a version."""

    def __init__(self, database: Database) -> None:
        self._database = database
        database.ensure_schema(COORDINATION)

    def read(self, tenant_id: str) -> dict[str, Any] | None:
        """The tenant's record; None if it has none."""
        return _CALENDARS.read(self._database.connection(), {"tenant_id": tenant_id})

    def apply(self, tenant_id: str, transition: Transition) -> bool:
        """``transition`` on the tenant's row, in one write transaction."""
        with self._database.write() as connection:
            return carry_out(connection, _CALENDARS, {"tenant_id": tenant_id}, transition)
