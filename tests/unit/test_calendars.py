"""Calendars in the pure domain: what a calendar holds, what a task's claim does
with an excluded day (skip, or the next included day), and the stored copy."""

from __future__ import annotations

import dataclasses
from datetime import UTC, date, datetime, timedelta

import pytest

from dynacron.domain.errors import InvalidRequest
from dynacron.domain.schedules.calendars import (
    MAX_ENTRIES,
    CalendarRule,
    OnExcluded,
    TenantCalendars,
    calendar_from_map,
    calendar_of,
    calendar_to_map,
    copied,
    rule_from_map,
    rule_to_map,
    store_calendars,
)
from dynacron.domain.schedules.expressions import parse_cron
from dynacron.domain.tasks.claiming import advanced, claim_occurrence, passed_over_reason
from dynacron.domain.tasks.record import task_from_record, task_record
from dynacron.domain.tasks.task import execution_id_for
from tests.unit.test_task_rules import make_task

BERLIN = "Europe/Berlin"
# Daily at 09:00 in Berlin: 08:00 UTC in winter.
DAILY = parse_cron("0 9 * * *", BERLIN)
HOLIDAYS = calendar_of(
    "holidays",
    BERLIN,
    ["2026-12-25", {"from": "2026-12-24", "to": "2026-12-26", "note": "Christmas"}, "2027-01-01"],
)


def at(day: int, month: int = 12, year: int = 2026) -> datetime:
    return datetime(year, month, day, 8, 0, tzinfo=UTC)


def test_a_calendar_merges_overlapping_days_and_reads_them_in_its_zone() -> None:
    assert [(s.first, s.last, s.note) for s in HOLIDAYS.spans] == [
        (date(2026, 12, 24), date(2026, 12, 26), "Christmas"),
        (date(2027, 1, 1), date(2027, 1, 1), None),
    ]
    # 23:30 UTC on the 23rd is already the 24th in Berlin
    assert HOLIDAYS.span_of(HOLIDAYS.day_of(datetime(2026, 12, 23, 23, 30, tzinfo=UTC)))
    assert HOLIDAYS.span_of(date(2026, 12, 27)) is None
    assert calendar_from_map(calendar_to_map(HOLIDAYS)) == HOLIDAYS


@pytest.mark.parametrize(
    ("name", "entries", "field"),
    [
        ("bad name!", [], "name"),
        ("ok", ["2026-02-30"], "dates"),
        ("ok", ["26-12-25"], "dates"),
        ("ok", [{"from": "2026-12-31", "to": "2026-12-01"}], "dates"),
        ("ok", [{"from": "2026-01-01", "to": "2027-06-01"}], "dates"),
        ("ok", [{"from": "2026-01-01", "until": "x"}], "dates"),
        ("ok", ["2026-01-01"] * (MAX_ENTRIES + 1), "dates"),
    ],
)
def test_bad_calendars_are_refused_naming_what_to_fix(
    name: str, entries: list[object], field: str
) -> None:
    with pytest.raises(InvalidRequest) as refused:
        calendar_of(name, "UTC", entries)
    assert refused.value.field == field


def test_an_excluded_day_is_skipped_and_recorded_with_its_calendar() -> None:
    rule = CalendarRule(exclude=(HOLIDAYS,))
    task = dataclasses.replace(make_task(DAILY, at(25)), calendars=rule)
    claim = claim_occurrence(task, at(25))
    assert claim is not None
    assert claim.scheduled_at is None
    assert claim.recorded_skip == (at(25), "excluded by calendar holidays (Christmas)")
    assert claim.next_run_at == at(26)
    # The day after the holidays runs
    after = advanced(task, claim, at(25))
    assert after.next_run_at == at(26)
    last = claim_occurrence(dataclasses.replace(after, next_run_at=at(27)), at(27))
    assert last is not None
    assert last.scheduled_at == at(27)


def test_on_excluded_next_moves_a_weekly_run_to_the_next_included_day() -> None:
    # Every Friday at 09:00 Berlin; Friday 2026-12-25 is a holiday, so is Saturday 26th
    fridays = parse_cron("0 9 * * FRI", BERLIN)
    rule = CalendarRule(exclude=(HOLIDAYS,), on_excluded=OnExcluded.NEXT)
    task = dataclasses.replace(make_task(fridays, at(25)), calendars=rule)
    claim = claim_occurrence(task, at(25))
    assert claim is not None
    assert claim.scheduled_at is None
    assert claim.recorded_skip is None
    assert claim.next_run_at == at(27)  # Sunday 09:00: the first included day
    moved = advanced(task, claim, at(25))
    runs = claim_occurrence(moved, at(27))
    assert runs is not None
    assert runs.scheduled_at == at(27)
    assert runs.execution_id == execution_id_for(task.task_id, at(27))
    assert runs.next_run_at == datetime(2027, 1, 1, 8, tzinfo=UTC)  # the grid again


def test_a_daily_task_with_next_skips_as_its_next_occurrence_is_the_next_day() -> None:
    rule = CalendarRule(exclude=(HOLIDAYS,), on_excluded=OnExcluded.NEXT)
    task = dataclasses.replace(make_task(DAILY, at(24)), calendars=rule)
    claim = claim_occurrence(task, at(24))
    assert claim is not None
    assert claim.recorded_skip is not None
    assert claim.next_run_at == at(25)


def test_only_calendars_run_on_their_days_alone() -> None:
    workdays = calendar_of("workdays", BERLIN, [{"from": "2026-12-28", "to": "2026-12-30"}])
    rule = CalendarRule(only=(workdays,))
    assert rule.excluded(at(27)) == "not a day of calendar workdays (only_calendars)"
    assert rule.excluded(at(28)) is None


def test_a_tasks_copy_is_compact_and_read_back() -> None:
    rule = CalendarRule(exclude=(HOLIDAYS,), on_excluded=OnExcluded.NEXT)
    stored = rule_to_map(rule)
    assert stored == {
        "on_excluded": "next",
        "exclude": {
            "holidays": {"timezone": BERLIN, "days": ["2026-12-24/2026-12-26", "2027-01-01"]}
        },
    }
    assert rule_to_map(CalendarRule()) is None
    read = rule_from_map(stored)
    assert read.excluded(at(25)) == "excluded by calendar holidays"  # notes stay home
    task = dataclasses.replace(make_task(DAILY, at(25)), calendars=read)
    assert task_from_record(task_record(task)) == task


def test_a_preview_says_why_and_where_a_moved_occurrence_runs() -> None:
    fridays = parse_cron("0 9 * * FRI", BERLIN)
    moving = dataclasses.replace(
        make_task(fridays, at(25)),
        calendars=CalendarRule(exclude=(HOLIDAYS,), on_excluded=OnExcluded.NEXT),
    )
    assert passed_over_reason(moving, at(25)) == (
        "excluded by calendar holidays (Christmas): runs at 2026-12-27T08:00:00.000Z instead"
    )
    assert passed_over_reason(moving, at(18)) is None
    skipping = dataclasses.replace(moving, calendars=CalendarRule(exclude=(HOLIDAYS,)))
    assert passed_over_reason(skipping, at(25)) == "excluded by calendar holidays (Christmas)"


def test_a_tasks_copy_and_a_tenants_record_are_bounded() -> None:
    # 500 single days (every other one) copy to some 6.5 KB, past the 4 KB a task carries
    every_other = [
        (date(2027, 1, 1) + timedelta(days=2 * n)).isoformat() for n in range(MAX_ENTRIES)
    ]
    many = calendar_of("many", "UTC", every_other)
    with pytest.raises(InvalidRequest, match="at most 4096 bytes"):
        copied(CalendarRule(exclude=(many,)), {"many": many})
    # Twenty calendars of 500 noted entries each pass the tenant's record's bound
    noted = [
        {"from": (date(2027, 1, 1) + timedelta(days=2 * n)).isoformat(), "note": "n" * 200}
        for n in range(MAX_ENTRIES)
    ]
    calendars = {f"c{n}": calendar_of(f"c{n}", "UTC", noted) for n in range(20)}
    with pytest.raises(InvalidRequest, match="at most 300 KB"):
        store_calendars(TenantCalendars({}), calendars)
