"""The CalendarStore contract: one record per tenant, written whole on the version read."""

from __future__ import annotations

from dynacron.domain.schedules.calendars import (
    TenantCalendars,
    calendar_of,
    calendars_from_record,
    store_calendars,
)
from dynacron.ports import AdapterSet


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
