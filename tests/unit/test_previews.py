"""A preview's daylight-saving marks and words: pure, on fixed instants."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from dynacron.domain.schedules.describe import describe
from dynacron.domain.schedules.expressions import (
    AfterSchedule,
    parse_cron,
    parse_fixed_delay,
    parse_rate,
)
from dynacron.domain.schedules.previews import offset_changes, preview, preview_registration
from dynacron.domain.tasks.task import UNREADABLE_SCHEDULE

HOUR = timedelta(hours=1)


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def test_a_daily_cron_over_spring_forward_marks_the_change_before_the_first_summer_run() -> None:
    schedule = parse_cron("0 9 * * *", "Europe/Berlin")
    shown = preview(schedule, "Europe/Berlin", at("2026-03-27T12:00:00"), 3)

    assert shown.occurrences == [
        at("2026-03-28T08:00:00"),
        at("2026-03-29T07:00:00"),
        at("2026-03-30T07:00:00"),
    ]
    (change,) = shown.offset_changes
    assert change.at == at("2026-03-29T01:00:00")
    assert (change.offset_before, change.offset_after) == (HOUR, 2 * HOUR)
    assert change.next_occurrence == at("2026-03-29T07:00:00")


def test_fall_back_is_marked_and_a_zone_without_dst_has_no_marks() -> None:
    occurrences = [at("2026-10-24T23:00:00"), at("2026-10-25T23:00:00")]
    (change,) = offset_changes("Europe/Berlin", at("2026-10-24T00:00:00"), occurrences)
    assert change.at == at("2026-10-25T01:00:00")
    assert (change.offset_before, change.offset_after) == (2 * HOUR, HOUR)
    assert offset_changes("UTC", at("2026-01-01T00:00:00"), occurrences) == []
    assert offset_changes("Asia/Kolkata", at("2026-01-01T00:00:00"), occurrences) == []


def test_a_change_before_the_first_occurrence_counts_from_the_start() -> None:
    # Previewed on the last winter evening: the first run is already on summer time
    (change,) = offset_changes(
        "Europe/Berlin", at("2026-03-28T20:00:00"), [at("2026-03-29T07:00:00")]
    )
    assert change.next_occurrence == at("2026-03-29T07:00:00")


def test_a_registration_preview_starts_at_the_first_run() -> None:
    now = at("2026-11-30T12:00:00")
    delay = parse_fixed_delay("10 minutes")
    shown = preview_registration(delay, "UTC", now, 2)
    assert shown.occurrences == [now, now + timedelta(minutes=10)]
    rate = parse_rate("1 hour", anchor=now)
    assert preview_registration(rate, "UTC", now, 1).occurrences == [now + HOUR]


def test_every_kind_is_described() -> None:
    assert describe(parse_fixed_delay("10 minutes")).startswith(
        "10 minutes after the previous execution ended"
    )
    assert describe(AfterSchedule(upstream_task_id="abc")) == (
        "Once after each successful execution of task abc."
    )
    fan_in = AfterSchedule(upstream_task_id="a", also_after=("b",), when="always")
    assert describe(fan_in) == (
        "Once each time every one of tasks a, b has had a finished execution since its last run."
    )
    assert describe(UNREADABLE_SCHEDULE).startswith("The stored schedule cannot be read")
