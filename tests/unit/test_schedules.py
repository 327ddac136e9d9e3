from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from dynacron.domain.errors import InvalidSchedule
from dynacron.domain.schedules.expressions import (
    Window,
    check_computable_from,
    parse_at,
    parse_cron,
    parse_rate,
)


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


class TestCron:
    def test_next_occurrence_in_utc(self) -> None:
        schedule = parse_cron("*/15 * * * *")
        assert schedule.next_after(utc(2026, 1, 1, 10, 7, 30)) == utc(2026, 1, 1, 10, 15)

    def test_next_is_strictly_after_the_given_instant(self) -> None:
        schedule = parse_cron("0 * * * *")
        assert schedule.next_after(utc(2026, 1, 1, 10, 0)) == utc(2026, 1, 1, 11, 0)

    def test_evaluated_in_the_task_time_zone(self) -> None:
        # 09:00 in Berlin is 08:00 UTC in winter and 07:00 UTC in summer.
        schedule = parse_cron("0 9 * * *", "Europe/Berlin")
        assert schedule.next_after(utc(2026, 1, 15, 0, 0)) == utc(2026, 1, 15, 8, 0)
        assert schedule.next_after(utc(2026, 7, 15, 0, 0)) == utc(2026, 7, 15, 7, 0)

    def test_macros_expand(self) -> None:
        assert parse_cron("@hourly").expression == "0 * * * *"

    def test_names_are_accepted(self) -> None:
        schedule = parse_cron("30 8 * JAN MON-FRI")
        assert schedule.next_after(utc(2026, 1, 3, 0, 0)) == utc(2026, 1, 5, 8, 30)

    @pytest.mark.parametrize(
        ("expression", "needle"),
        [
            ("* 25 * * *", "field 2 (hour) has invalid value '25'"),
            ("61 * * * *", "field 1 (minute) has invalid value '61'"),
            ("* * 32 * *", "field 3 (day-of-month)"),
            ("* * * 13 *", "field 4 (month)"),
            ("* * * * FUNDAY", "field 5 (day-of-week)"),
            ("* * *", "expected 5 fields"),
            ("* * * * * * *", "or 6 with seconds first, but got 7"),
            ("", "expected 5 fields"),
        ],
    )
    def test_bad_expressions_point_at_the_field(self, expression: str, needle: str) -> None:
        with pytest.raises(InvalidSchedule) as raised:
            parse_cron(expression)
        assert raised.value.field == "cron"
        assert needle in raised.value.message

    def test_an_impossible_date_is_refused(self) -> None:
        with pytest.raises(InvalidSchedule, match="never fires"):
            parse_cron("0 0 30 2 *")

    @pytest.mark.parametrize(
        "zone",
        [
            "Mars/Olympus_Mons",
            # files of the zone database that are no IANA zone: the host's own
            # zone, the POSIX rules, copies under other rules (browsers refuse them)
            "localtime",
            "posixrules",
            "Factory",
            "posix/Europe/Berlin",
            "right/Europe/Berlin",
        ],
    )
    def test_unknown_time_zone_names_the_field(self, zone: str) -> None:
        with pytest.raises(InvalidSchedule) as raised:
            parse_cron("* * * * *", zone)
        assert raised.value.field == "timezone"
        assert zone in raised.value.message


class TestRate:
    def test_grid_is_anchored_and_never_drifts(self) -> None:
        anchor = utc(2026, 1, 1, 0, 0, 0)
        schedule = parse_rate("2 seconds", anchor)
        # Asked from a late instant, the answer is still on the grid.
        assert schedule.next_after(anchor + timedelta(seconds=5, milliseconds=731)) == (
            anchor + timedelta(seconds=6)
        )
        assert schedule.next_after(anchor + timedelta(seconds=6)) == anchor + timedelta(seconds=8)

    @pytest.mark.parametrize(
        ("text", "seconds", "canonical"),
        [
            ("30 seconds", 30, "30 seconds"),
            ("1 second", 1, "1 second"),
            ("5 minutes", 300, "5 minutes"),
            ("1 hour", 3600, "1 hour"),
            ("2 Days", 172800, "2 days"),
            ("120 seconds", 120, "2 minutes"),
        ],
    )
    def test_units(self, text: str, seconds: int, canonical: str) -> None:
        schedule = parse_rate(text, utc(2026, 1, 1))
        assert schedule.every_seconds == seconds
        assert schedule.expression == canonical

    @pytest.mark.parametrize("text", ["0 seconds", "fast", "5", "1.5 hours", "-1 minutes", ""])
    def test_bad_rates_are_refused(self, text: str) -> None:
        with pytest.raises(InvalidSchedule) as raised:
            parse_rate(text, utc(2026, 1, 1))
        assert raised.value.field == "rate"


class TestAt:
    def test_offset_is_honoured(self) -> None:
        assert parse_at("2026-12-01T09:00:00+02:00").at == utc(2026, 12, 1, 7, 0)

    def test_naive_instant_is_read_in_the_task_zone(self) -> None:
        assert parse_at("2026-12-01T09:00:00", "Europe/Berlin").at == utc(2026, 12, 1, 8, 0)

    def test_fires_once(self) -> None:
        schedule = parse_at("2026-12-01T09:00:00Z")
        assert schedule.next_after(utc(2026, 12, 1, 8)) == utc(2026, 12, 1, 9)
        assert schedule.next_after(utc(2026, 12, 1, 9)) is None

    def test_garbage_is_refused(self) -> None:
        with pytest.raises(InvalidSchedule, match="ISO 8601"):
            parse_at("tomorrow at nine")


def test_a_cron_check_is_told_apart_by_every_field_that_decides_its_occurrences() -> None:
    # Given the last new year the calendar has: a cron schedule with no occurrence after
    last = datetime(9999, 1, 1, tzinfo=UTC)
    bounded = parse_cron("0 0 1 1 *", window=Window(end_at=last))
    # When the same expression with an end is checked first (it may end)
    check_computable_from(bounded, last)
    # Then the one without an end, from the same first occurrence, is still refused
    with pytest.raises(InvalidSchedule, match="no further occurrence after 9999-01-01"):
        check_computable_from(parse_cron("0 0 1 1 *"), last)
