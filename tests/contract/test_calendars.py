"""The CalendarStore contract: one record per tenant, written whole on the version read."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dynacron.domain.clock import SettableClock
from dynacron.domain.schedules.calendars import (
    Calendar,
    CalendarRule,
    TenantCalendars,
    calendar_of,
    calendars_from_record,
    store_calendars,
)
from dynacron.ports import AdapterSet, TaskStore
from dynacron.services.calendars import CalendarService
from tests.contract.builders import DEFAULT_TENANT, ROOMY, SHARDING, a_task


def test_calendars_are_written_on_the_version_read_and_kept_per_tenant(
    adapters: AdapterSet,
) -> None:
    store = adapters.calendars
    assert store.read("acme") is None
    holidays = calendar_of("holidays", "Europe/Berlin", ["2026-12-25"])

    # The first write expects no record; a second from the same read is refused
    first = store_calendars(TenantCalendars({}), {"holidays": holidays})
    assert store.apply("acme", first)
    assert not store.apply("acme", first)
    stored = calendars_from_record(store.read("acme"))
    assert stored == TenantCalendars({"holidays": holidays}, version=1)

    # A write from the version read replaces the whole set; another tenant has none
    assert store.apply("acme", store_calendars(stored, {}))
    assert calendars_from_record(store.read("acme")) == TenantCalendars({}, version=2)
    assert not store.apply("acme", store_calendars(stored, {"holidays": holidays}))
    assert store.read("other") is None


class CopyRacedBy:
    """The task store, but the first whole-task write lets ``competitor`` run just
    before it: another change of the calendar copying its days first."""

    def __init__(self, store: TaskStore) -> None:
        self._store = store
        self.competitor: Callable[[], object] | None = None

    def replace(self, *args: Any, **kwargs: Any) -> bool:
        if self.competitor is not None:
            competitor, self.competitor = self.competitor, None
            competitor()
        return bool(self._store.replace(*args, **kwargs))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def test_of_two_changes_of_a_calendar_racing_to_copy_it_the_newer_days_stay(
    adapters: AdapterSet, clock: SettableClock
) -> None:
    # Given a calendar, and a task of the tenant that names it
    plain = CalendarService(adapters.calendars, adapters.tasks, clock, SHARDING)
    plain.put(DEFAULT_TENANT, "holidays", "UTC", ["2026-12-25"])
    rule = plain.resolved(DEFAULT_TENANT, CalendarRule(exclude=(Calendar("holidays", "UTC", ()),)))
    adapters.tasks.create_within_quota(a_task("job", calendars=rule), None, ROOMY, "secret-job")
    racing = CopyRacedBy(adapters.tasks)
    older = CalendarService(adapters.calendars, racing, clock, SHARDING)  # type: ignore[arg-type]

    # When a newer change stores and copies its days between the older one's store and copy
    racing.competitor = lambda: plain.put(DEFAULT_TENANT, "holidays", "UTC", ["2027-01-01"])
    older.put(DEFAULT_TENANT, "holidays", "UTC", ["2026-12-26"])

    # Then the task keeps the newer days, as the tenant's calendar is the newer one
    stored = plain.get(DEFAULT_TENANT, "holidays")
    assert [s.first.isoformat() for s in stored.spans] == ["2027-01-01"]
    job = adapters.tasks.get("job")
    assert job is not None
    assert [s.first.isoformat() for s in job.calendars.exclude[0].spans] == ["2027-01-01"]
    assert job.calendars.exclude[0].version == stored.version
