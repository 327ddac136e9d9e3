"""A tenant's calendars: stored whole per tenant, copied onto each task that names
one, and copied again when the calendar changes (decision 0056)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from dynacron.domain.clock import Clock
from dynacron.domain.errors import CalendarNotFound, Conflict, InvalidRequest
from dynacron.domain.instants import to_utc_ms
from dynacron.domain.schedules.calendars import (
    Calendar,
    CalendarRule,
    TenantCalendars,
    calendar_of,
    calendars_from_record,
    check_name,
    copied,
    store_calendars,
)
from dynacron.domain.tasks import transitions
from dynacron.domain.tasks.task import Sharding, Task
from dynacron.ports import CalendarStore, TaskStore

# Tasks read a page at a time when a calendar changes or is deleted.
_PAGE = 100


@dataclasses.dataclass(frozen=True)
class CalendarService:
    """Puts, reads, lists and deletes one tenant's calendars at a time."""

    calendars: CalendarStore
    tasks: TaskStore
    clock: Clock
    sharding: Sharding

    def stored(self, tenant_id: str) -> TenantCalendars:
        """The tenant's calendars as stored, with their version."""
        return calendars_from_record(self.calendars.read(tenant_id))

    def put(self, tenant_id: str, name: str, timezone: str, dates: list[Any]) -> Calendar:
        """Create or replace the calendar ``name``; the tasks that name it are held to
        the new days from their next claim on. Returns the calendar stored."""
        seen = self.stored(tenant_id)
        # Its days carry the version they are stored at: each task's copy keeps it.
        calendar = dataclasses.replace(calendar_of(name, timezone, dates), version=seen.version + 1)
        users = list(self._users(tenant_id, name)) if name in seen.calendars else []
        for task in users:
            copied(task.calendars, {name: calendar})  # refused before anything is written
        changed = {**seen.calendars, name: calendar}
        if not self.calendars.apply(tenant_id, store_calendars(seen, changed)):
            raise Conflict("the tenant's calendars changed meanwhile; try again")
        for task in users:
            self._recopy(task, {name: calendar})
        return calendar

    def get(self, tenant_id: str, name: str) -> Calendar:
        """The tenant's calendar ``name``; ``CalendarNotFound`` if it has none of that name."""
        found = self.stored(tenant_id).calendars.get(check_name(name))
        if found is None:
            raise CalendarNotFound(name)
        return found

    def list(self, tenant_id: str) -> list[Calendar]:
        """The tenant's calendars, by name."""
        calendars = self.stored(tenant_id).calendars
        return [calendars[name] for name in sorted(calendars)]

    def delete(self, tenant_id: str, name: str) -> None:
        """Delete the calendar ``name``; ``Conflict`` (409) while a task names it."""
        seen = self.stored(tenant_id)
        if check_name(name) not in seen.calendars:
            raise CalendarNotFound(name)
        users = [task.task_id for task in self._users(tenant_id, name)]
        if users:
            shown = ", ".join(users[:5]) + (f" and {len(users) - 5} more" if len(users) > 5 else "")
            raise Conflict(f"calendar {name!r} is used by task {shown}: change them first")
        rest = {n: c for n, c in seen.calendars.items() if n != name}
        if not self.calendars.apply(tenant_id, store_calendars(seen, rest)):
            raise Conflict("the tenant's calendars changed meanwhile; try again")

    def resolved(
        self, tenant_id: str, rule: CalendarRule, stored: TenantCalendars | None = None
    ) -> CalendarRule:
        """``rule`` with the days of each calendar it names copied in; ``InvalidRequest``
        (422) naming a calendar the tenant does not have. ``stored``: the tenant's
        calendars read already (a batch reads them once), else read now."""
        if not rule:
            return rule
        calendars = (stored or self.stored(tenant_id)).calendars
        for field, named in (("exclude_calendars", rule.exclude), ("only_calendars", rule.only)):
            for calendar in named:
                if calendar.name not in calendars:
                    raise InvalidRequest(field, f"no calendar {calendar.name!r} exists")
        return copied(rule, calendars)

    def _users(self, tenant_id: str, name: str) -> Iterator[Task]:
        """The tenant's tasks that name the calendar ``name``, one page read at a time."""
        token: str | None = None
        while True:
            page = self.tasks.page_owned(tenant_id, _PAGE, token)
            yield from (task for task in page.items if name in task.calendars.names)
            token = page.next_token
            if token is None:
                return

    def _recopy(self, task: Task, calendars: dict[str, Calendar]) -> None:
        """Copy the calendars' new days onto ``task``; a task changed meanwhile (a
        claim) is read again, a few times."""
        for _ in range(5):
            now = to_utc_ms(self.clock.now())
            changed = _with_rule(task, copied(task.calendars, calendars), now)
            placement = self.sharding.place_task(changed, now)
            if self.tasks.replace(changed, placement, transitions.replace(task.version)):
                return
            fresh = self.tasks.get_owned(task.tenant_id, task.task_id)
            if fresh is None:
                return
            task = fresh
        raise Conflict(f"task {task.task_id!r} kept changing; put the calendar again")


def _with_rule(task: Task, rule: CalendarRule, now: datetime) -> Task:
    return dataclasses.replace(task, calendars=rule, version=task.version + 1, updated_at=now)
