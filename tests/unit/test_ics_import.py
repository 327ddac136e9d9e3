"""`dynacron calendars import`: an iCalendar file's all-day events as calendar dates."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from dynacron.cli.calendars import dates_from_ics
from dynacron.cli.main import app
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


def test_dynacron_next_marks_the_days_an_ics_file_excludes(tmp_path: Path) -> None:
    holidays = tmp_path / "holidays.ics"
    holidays.write_bytes(HOLIDAYS_ICS)
    result = CliRunner().invoke(
        app,
        [
            "next", "0 9 * * *", "--tz", "Europe/Berlin", "--after", "2026-12-24T12:00:00Z",
            "--count", "3", "--explain", "--exclude", str(holidays),
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[1:] == [
        "Not on the days of holidays (Europe/Berlin).",
        "2026-12-25T08:00:00.000Z  skipped: excluded by calendar holidays (Christmas)",
        "2026-12-26T08:00:00.000Z  skipped: excluded by calendar holidays (Christmas)",
        "2026-12-27T08:00:00.000Z",
    ]
