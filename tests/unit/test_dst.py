"""DST rules: the hand-worked table, plus the properties behind it."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from dynacron.domain.instants import format_instant, parse_instant
from dynacron.domain.schedules.expressions import parse_at, parse_cron, upcoming
from dynacron.domain.schedules.wallclock import Ambiguous, DstPolicy, Nonexistent
from tests.dst_cases import BERLIN, CASES, LORD_HOWE, NY, DstCase


def policy_of(case: DstCase) -> DstPolicy:
    return DstPolicy(Nonexistent(case.nonexistent), Ambiguous(case.ambiguous))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_the_dst_table(case: DstCase) -> None:
    schedule = parse_cron(case.cron, case.zone, dst=policy_of(case))
    got = upcoming(schedule, parse_instant(case.after), len(case.expected))
    assert tuple(format_instant(i) for i in got) == case.expected


TRANSITIONS_2026 = {
    NY: ("2026-03-08T07:00:00Z", "2026-11-01T06:00:00Z"),
    BERLIN: ("2026-03-29T01:00:00Z", "2026-10-25T01:00:00Z"),
    LORD_HOWE: ("2026-10-03T15:30:00Z", "2026-04-04T15:00:00Z"),
}


@pytest.mark.parametrize("zone", list(TRANSITIONS_2026))
@pytest.mark.parametrize("ambiguous", list(Ambiguous))
@pytest.mark.parametrize("nonexistent", list(Nonexistent))
def test_quarter_hours_around_both_transitions_are_ordered_and_policy_shaped(
    zone: str, ambiguous: Ambiguous, nonexistent: Nonexistent
) -> None:
    # Given every 15 minutes of wall-clock time for a day either side of each transition
    schedule = parse_cron("*/15 * * * *", zone, dst=DstPolicy(nonexistent, ambiguous))
    quarter = timedelta(minutes=15)
    irregular: list[timedelta] = []
    for transition in TRANSITIONS_2026[zone]:
        start = parse_instant(transition) - timedelta(days=1)
        occurrences = upcoming(schedule, start, 2 * 96)
        # Then occurrences never repeat or go backwards
        assert all(a < b for a, b in itertools.pairwise(occurrences))
        irregular += [b - a for a, b in itertools.pairwise(occurrences) if b - a != quarter]
    # And the only irregular spacing is at the fall-back, and only when one pass
    # of the repeated wall times is left out ('both' keeps every gap at 15
    # minutes). A spring-forward never stretches a gap: the runs shifted out of
    # it and the first valid quarter land on one instant, or are skipped.
    if ambiguous is Ambiguous.BOTH:
        assert irregular == []
    else:
        dst_length = timedelta(minutes=30) if zone == LORD_HOWE else timedelta(hours=1)
        assert irregular == [quarter + dst_length]


def test_a_whole_fold_runs_both_passes_in_time_order() -> None:
    # 01:00-01:59 in New York on 1 Nov 2026, every 5 minutes, with 'both':
    # the EDT pass (05:xxZ) entirely before the EST pass (06:xxZ).
    schedule = parse_cron("*/5 1 * * *", NY, dst=DstPolicy(ambiguous=Ambiguous.BOTH))
    got = upcoming(schedule, datetime(2026, 11, 1, 4, 0, tzinfo=UTC), 24)
    expected = [datetime(2026, 11, 1, 5, tzinfo=UTC) + timedelta(minutes=5 * i) for i in range(24)]
    assert got == expected


def test_next_after_any_instant_inside_a_fold_is_consistent() -> None:
    # Asking from every minute through the fall-back gives the answer that the
    # full list of occurrences says comes next.
    schedule = parse_cron("*/10 * * * *", BERLIN, dst=DstPolicy(ambiguous=Ambiguous.BOTH))
    start = datetime(2026, 10, 24, 23, 0, tzinfo=UTC)
    occurrences = upcoming(schedule, start, 30)
    for minute in range(0, 4 * 60):
        instant = start + timedelta(minutes=minute, seconds=30)
        expected = next(o for o in occurrences if o > instant)
        assert schedule.next_after(instant) == expected


class TestOneTimeInLocalTime:
    def test_nonexistent_local_time_shifts_past_the_gap(self) -> None:
        # 02:30 on 8 Mar 2026 does not exist in New York: 03:00 EDT = 07:00Z
        assert parse_at("2026-03-08T02:30:00", NY).at == datetime(2026, 3, 8, 7, tzinfo=UTC)

    def test_nonexistent_local_time_with_skip_is_refused(self) -> None:
        from dynacron.domain.errors import InvalidSchedule

        with pytest.raises(InvalidSchedule, match="does not exist in America/New_York"):
            parse_at("2026-03-08T02:30:00", NY, DstPolicy(nonexistent=Nonexistent.SKIP))

    def test_ambiguous_local_time_first_or_last(self) -> None:
        first = parse_at("2026-11-01T01:30:00", NY).at
        last = parse_at("2026-11-01T01:30:00", NY, DstPolicy(ambiguous=Ambiguous.LAST)).at
        assert (first, last) == (
            datetime(2026, 11, 1, 5, 30, tzinfo=UTC),
            datetime(2026, 11, 1, 6, 30, tzinfo=UTC),
        )

    def test_both_makes_no_sense_for_one_run(self) -> None:
        from dynacron.domain.errors import InvalidSchedule

        with pytest.raises(InvalidSchedule) as raised:
            parse_at("2026-11-01T01:30:00", NY, DstPolicy(ambiguous=Ambiguous.BOTH))
        assert raised.value.field == "dst.ambiguous"


def elapsed_time_oracle(
    zone: str, minutes: set[int], start: datetime, count: int
) -> list[datetime]:
    """Every real minute after ``start`` whose local reading is on one of ``minutes``.

    Walking real time minute by minute and reading the wall clock is what a
    schedule with nonexistent=skip and ambiguous=both means, by definition.
    """
    tz = ZoneInfo(zone)
    found = []
    instant = start.replace(second=0, microsecond=0)
    while len(found) < count:
        instant += timedelta(minutes=1)
        if instant.astimezone(tz).minute in minutes:
            found.append(instant)
    return found


@pytest.mark.parametrize(
    ("zone", "transition"),
    [
        (NY, "2026-03-08T07:00:00Z"),
        (NY, "2026-11-01T06:00:00Z"),
        (LORD_HOWE, "2026-04-04T15:00:00Z"),
        (LORD_HOWE, "2026-10-03T15:30:00Z"),
        ("Asia/Kathmandu", "1985-12-31T18:30:00Z"),
        # The longest fall-back in tzdata since 1970: 7 hours repeated.
        ("Antarctica/Vostok", "1994-01-31T17:00:00Z"),
        ("Antarctica/Casey", "2023-03-08T16:00:00Z"),
        # Samoa skipped 30 December 2011 entirely: a 24-hour gap.
        ("Pacific/Apia", "2011-12-30T10:00:00Z"),
    ],
)
def test_skip_and_both_is_elapsed_time_by_definition(zone: str, transition: str) -> None:
    start = parse_instant(transition) - timedelta(hours=9)
    schedule = parse_cron("*/15 * * * *", zone, dst=DstPolicy(Nonexistent.SKIP, Ambiguous.BOTH))
    assert upcoming(schedule, start, 80) == elapsed_time_oracle(zone, {0, 15, 30, 45}, start, 80)
