"""`dynacron calendars import`: an iCalendar file's all-day events as calendar dates."""

from __future__ import annotations

import pytest

from dynacron.cli.calendars import dates_from_ics
from dynacron.domain.schedules.calendars import calendar_of

HOLIDAYS_ICS = b"""BEGIN:VCALENDAR
VERSION:2.0
PRODID:-//test//holidays//EN
BEGIN:VEVENT
UID:1
DTSTART;VALUE=DATE:20261225
DTEND;VALUE=DATE:20261227
SUMMARY:Christmas
END:VEVENT
BEGIN:VEVENT
UID:2
DTSTART;VALUE=DATE:20270101
SUMMARY:New Year
RRULE:FREQ=YEARLY
END:VEVENT
BEGIN:VEVENT
UID:3
DTSTART:20261201T100000Z
DTEND:20261201T110000Z
SUMMARY:Team meeting
END:VEVENT
END:VCALENDAR
"""


def test_all_day_events_become_dates_with_their_summary_and_the_rest_is_said() -> None:
    entries, left_out = dates_from_ics(HOLIDAYS_ICS)
    # DTEND is exclusive: a two-day event ends the day before it
    assert entries == [
        {"from": "2026-12-25", "to": "2026-12-26", "note": "Christmas"},
        {"from": "2027-01-01", "to": "2027-01-01", "note": "New Year"},
    ]
    assert left_out == [
        "New Year: repeats; only its first date is imported",
        "Team meeting: a timed event, not a whole day",
    ]
    # What it gives is a calendar the API takes
    assert len(calendar_of("holidays", "Europe/Berlin", entries).spans) == 2


def test_a_file_that_is_not_icalendar_is_refused() -> None:
    with pytest.raises(ValueError, match="not an iCalendar file"):
        dates_from_ics(b"hello")
