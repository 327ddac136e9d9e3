"""Cron syntax: every feature, H spreading, and errors that point at the field."""

from __future__ import annotations

import itertools
import uuid
from collections import Counter
from datetime import UTC, datetime

import pytest

from dynacron.domain.errors import InvalidSchedule
from dynacron.domain.schedules.cron import compile_cron
from dynacron.domain.schedules.expressions import parse_cron, upcoming


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def next_n(expression: str, after: datetime, count: int, seed: str | None = None) -> list[str]:
    schedule = parse_cron(expression, seed=seed)
    return [f"{o:%Y-%m-%d %H:%M:%S %a}" for o in upcoming(schedule, after, count)]


# Expected values read off a calendar: January 2026 starts on a Thursday.
FEATURES = [
    ("*/20 * * * * *", ["2026-01-01 00:00:20 Thu", "2026-01-01 00:00:40 Thu"]),
    ("30 0 9 * * *", ["2026-01-01 09:00:30 Thu", "2026-01-02 09:00:30 Fri"]),
    ("0 9 * * MON-FRI", ["2026-01-01 09:00:00 Thu", "2026-01-02 09:00:00 Fri"]),
    ("0 0 1 JAN,jul *", ["2026-07-01 00:00:00 Wed", "2027-01-01 00:00:00 Fri"]),
    ("0 0 L * *", ["2026-01-31 00:00:00 Sat", "2026-02-28 00:00:00 Sat"]),
    ("0 0 L-2 * *", ["2026-01-29 00:00:00 Thu", "2026-02-26 00:00:00 Thu"]),
    # Last weekday: 31 Jan is a Saturday, so Friday 30; 28 Feb a Saturday, so 27.
    ("0 0 LW * *", ["2026-01-30 00:00:00 Fri", "2026-02-27 00:00:00 Fri"]),
    # Nearest weekday to the 3rd: Sat 3 Jan -> Fri 2 Jan; Tue 3 Feb as is.
    ("0 0 3W * ?", ["2026-01-02 00:00:00 Fri", "2026-02-03 00:00:00 Tue"]),
    # 1W never leaves the month: Sun 1 Feb -> Mon 2 Feb; Sat 1 Aug -> Mon 3 Aug.
    ("0 0 1W 2,8 *", ["2026-02-02 00:00:00 Mon", "2026-08-03 00:00:00 Mon"]),
    # 31W: Sat 31 Jan -> Fri 30; months without a 31st do not fire.
    ("0 0 31W * *", ["2026-01-30 00:00:00 Fri", "2026-03-31 00:00:00 Tue"]),
    ("0 0 ? * 5L", ["2026-01-30 00:00:00 Fri", "2026-02-27 00:00:00 Fri"]),
    ("0 0 ? * MON#2", ["2026-01-12 00:00:00 Mon", "2026-02-09 00:00:00 Mon"]),
    # A fifth Friday exists only in some months.
    ("0 0 * * 5#5", ["2026-01-30 00:00:00 Fri", "2026-05-29 00:00:00 Fri"]),
    ("0 0 * * 7", ["2026-01-04 00:00:00 Sun", "2026-01-11 00:00:00 Sun"]),
    # Both day fields restricted: either matches (the 13th, or any Friday).
    (
        "0 0 13 * FRI",
        ["2026-01-02 00:00:00 Fri", "2026-01-09 00:00:00 Fri", "2026-01-13 00:00:00 Tue"],
    ),
    # One starts with '*': both must match (a Friday that is also an odd day).
    ("0 0 */2 * FRI", ["2026-01-09 00:00:00 Fri", "2026-01-23 00:00:00 Fri"]),
    ("0 0 29 2 *", ["2028-02-29 00:00:00 Tue", "2032-02-29 00:00:00 Sun"]),
    ("5/20 8-10/2 * * *", ["2026-01-01 08:05:00 Thu", "2026-01-01 08:25:00 Thu"]),
    ("@monthly", ["2026-02-01 00:00:00 Sun", "2026-03-01 00:00:00 Sun"]),
    ("@weekly", ["2026-01-04 00:00:00 Sun", "2026-01-11 00:00:00 Sun"]),
    ("@yearly", ["2027-01-01 00:00:00 Fri", "2028-01-01 00:00:00 Sat"]),
]


@pytest.mark.parametrize(("expression", "expected"), FEATURES)
def test_features(expression: str, expected: list[str]) -> None:
    assert next_n(expression, utc(2026, 1, 1, 0, 0, 1), len(expected)) == expected


class TestH:
    def test_the_same_seed_gives_the_same_times_everywhere(self) -> None:
        first = next_n("H H * * *", utc(2026, 1, 1), 3, seed="task-1")
        assert first == next_n("H H * * *", utc(2026, 1, 1), 3, seed="task-1")
        # SHA-256 of the seed, not Python's per-process salted hash(): the value
        # is pinned, because changing the hash would move every H task there is.
        assert first[0] == "2026-01-01 02:49:00 Thu"

    def test_ten_thousand_hourly_tasks_spread_over_the_hour(self) -> None:
        minutes = Counter(
            compile_cron("H * * * *", uuid.uuid5(uuid.NAMESPACE_URL, str(i)).hex).minutes[0]
            for i in range(10_000)
        )
        # 60 minutes, about 167 each; a uniform draw stays well inside 100..240.
        assert set(minutes) == set(range(60))
        assert 100 < min(minutes.values()) <= max(minutes.values()) < 240

    def test_h_slash_60_is_uniform_not_skewed(self) -> None:
        # H/60 means once an hour at a hashed minute: any of 0-59, equally likely.
        minutes = Counter(compile_cron("H/60 * * * *", f"t{i}").minutes for i in range(6000))
        assert all(len(m) == 1 for m in minutes)
        assert len(minutes) == 60
        assert max(minutes.values()) < 2 * min(minutes.values())

    @pytest.mark.parametrize("seed", [f"seed-{i}" for i in range(200)])
    def test_a_hashed_range_with_a_step_never_leaves_its_range(self, seed: str) -> None:
        assert set(compile_cron("H(50-52)/10 * * * *", seed).minutes) <= {50, 51, 52}

    def test_a_hashed_step_covers_the_field_from_its_offset(self) -> None:
        minutes = compile_cron("H/15 * * * *", "some-task").minutes
        assert len(minutes) == 4
        assert {b - a for a, b in itertools.pairwise(minutes)} == {15}
        assert minutes[0] < 15

    def test_hashed_day_of_month_fires_every_month(self) -> None:
        days = {compile_cron("0 0 H * *", f"t{i}").day_rule.days_of_month for i in range(500)}
        assert set().union(*days) == set(range(1, 29))

    def test_fields_hash_independently(self) -> None:
        pairs = {
            (spec.minutes[0], spec.hours[0])
            for spec in (compile_cron("H H * * *", f"t{i}") for i in range(2000))
        }
        assert len(pairs) > 1000  # not tied to each other

    def test_h_without_a_seed_is_refused(self) -> None:
        with pytest.raises(InvalidSchedule, match="needs a seed"):
            parse_cron("H * * * *")


@pytest.mark.parametrize(
    ("expression", "needle"),
    [
        ("* 25 * * *", "field 2 (hour) has invalid value '25': 25 is out of range 0-23"),
        ("0 61 * * * *", "field 2 (minute) has invalid value '61'"),
        ("60 * * * * *", "field 1 (second) has invalid value '60'"),
        ("* * 0 * *", "field 3 (day-of-month) has invalid value '0'"),
        ("* * * 13 *", "field 4 (month)"),
        ("* * * FOO *", "'FOO' is not a name or number"),
        ("* * * * 8", "field 5 (day-of-week) has invalid value '8'"),
        ("*/0 * * * *", "the step after '/' must be at least 1"),
        ("10-5 * * * *", "the range '10-5' runs backwards"),
        ("* * * * MON#6", "the occurrence after '#' must be 1-5"),
        ("* * * * L", "'5L' is the last Friday"),
        ("* * L-31 * *", "'L-N' with N from 0 to 30"),
        ("* ? * * *", "field 2 (hour) has invalid value '?'"),
        ("L * * * *", "field 1 (minute) has invalid value 'L'"),
        ("H(5-60) * * * *", "60 is out of range 0-59"),
        ("H(9-5) * * * *", "runs backwards"),
        ("* * * * * * *", "or 6 with seconds first, but got 7"),
        ("@reboot", "unknown macro '@reboot'"),
        ("0 0 31 2,4 *", "never fires"),
        ("* * */16 * 0L", "never fires"),
        ("1,,2 * * * *", "an empty item between commas"),
    ],
)
def test_bad_expressions_point_at_the_field(expression: str, needle: str) -> None:
    with pytest.raises(InvalidSchedule) as raised:
        parse_cron(expression, seed="t")
    assert raised.value.field == "cron"
    assert needle in raised.value.message


@pytest.mark.parametrize(
    "expression",
    ["* * * * *", "*/7 * * * * *", "17 3 * * *", "0 0 29 2 *", "0 12 L * *", "59 23 31 12 *"],
)
def test_utc_occurrences_are_those_of_a_zone_that_never_changes_its_offset(
    expression: str,
) -> None:
    # UTC takes a short path (no transition to look around); Etc/UTC, the same
    # clock under another name, the general one: both name the same instants.
    instants = [
        datetime(2026, 11, 30, 12, 0, 0, 500_000, tzinfo=UTC),
        utc(2028, 2, 28, 23, 59, 59),
        utc(2026, 12, 31, 23, 59),
        utc(1999, 12, 31, 23, 59, 59),
    ]
    for after in instants:
        fast = upcoming(parse_cron(expression, "UTC"), after, 3)
        general = upcoming(parse_cron(expression, "Etc/UTC"), after, 3)
        assert fast == general
        assert len(fast) == 3
        assert all(occurrence.tzinfo is UTC for occurrence in fast)
