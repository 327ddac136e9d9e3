"""From wall-clock times in a time zone to UTC instants, by explicit DST policy.

A wall-clock time (09:30 on a date, in Europe/Berlin) names zero, one or two
instants. Zero when the clocks spring forward over it, two when they fall back
over it. ``DstPolicy`` says what a schedule wants in each case; see
docs/decisions/0001-dst-rules.md for the rules and why.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from zoneinfo import ZoneInfo

# The longest fall-back (a repeated stretch of wall-clock time) we look around
# an instant for. DST repeats 1 hour (30 minutes in Lord Howe); the longest in
# tzdata since 1970 is 7 hours (Antarctica/Vostok, 1994), then 3 (Antarctica/Casey).
MAX_FOLD = timedelta(hours=8)
_SECOND = timedelta(seconds=1)


class Nonexistent(StrEnum):
    """A wall-clock time skipped by a spring-forward."""

    SHIFT = "shift"  # run at the first valid instant after the gap
    SKIP = "skip"  # do not run


class Ambiguous(StrEnum):
    """A wall-clock time repeated by a fall-back."""

    FIRST = "first"  # run at the first of the two instants
    LAST = "last"  # run at the second
    BOTH = "both"  # run at each


@dataclass(frozen=True)
class DstPolicy:
    """What a wall-clock time does when daylight saving skips or repeats it."""

    nonexistent: Nonexistent = Nonexistent.SHIFT
    ambiguous: Ambiguous = Ambiguous.FIRST


def instants_of(wall: datetime, zone: ZoneInfo, policy: DstPolicy) -> tuple[datetime, ...]:
    """The UTC instants, in order, at which the naive wall-clock time ``wall`` runs."""
    # PEP 495: fold=0 reads a wall time with the offset in force before a
    # transition, fold=1 with the one after. For a time that exists once both
    # agree; in a fall-back fold=0 is the earlier instant; in a spring-forward
    # gap fold=0 is the *later* one, which is how a gap is recognised.
    before = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    after = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    if before == after:
        return (before,)
    if before < after:
        if policy.ambiguous is Ambiguous.FIRST:
            return (before,)
        if policy.ambiguous is Ambiguous.LAST:
            return (after,)
        return (before, after)
    if policy.nonexistent is Nonexistent.SKIP:
        return ()
    return (transition_in(zone, after, before),)


def transition_in(zone: ZoneInfo, low: datetime, high: datetime) -> datetime:
    """The instant in ``(low, high]`` at which ``zone``'s UTC offset changes.

    tzdata transitions fall on whole seconds, so a bisection over seconds is exact.
    """
    target = offset_at(zone, high)
    while high - low > _SECOND:
        middle = low + (high - low) // 2
        middle = middle.replace(microsecond=0)
        if middle <= low:
            middle = low + _SECOND
        if offset_at(zone, middle) == target:
            high = middle
        else:
            low = middle
    return high


def offset_at(zone: ZoneInfo, instant: datetime) -> timedelta:
    """``zone``'s UTC offset at ``instant``."""
    offset = instant.astimezone(zone).utcoffset()
    assert offset is not None
    return offset


def to_wall(instant: datetime, offset: timedelta) -> datetime:
    """The naive wall-clock time of ``instant`` read with ``offset``."""
    return (instant.astimezone(UTC) + offset).replace(tzinfo=None)


def next_in_zone(
    wall_times_from: Callable[[datetime], Iterator[datetime]],
    zone: ZoneInfo,
    policy: DstPolicy,
    instant: datetime,
) -> datetime | None:
    """The first instant strictly after ``instant`` named by a wall-clock sequence.

    ``wall_times_from(start)`` yields matching naive wall-clock times from
    ``start`` on, in order. Wall-clock order is UTC order except inside a
    fall-back, where the second pass of an earlier wall time can come after the
    first pass of a later one; so the search starts early enough to see a fold
    ahead of ``instant``, and once it has an answer it keeps looking only as far
    as a fold could hide an earlier one. Away from a transition that is the very
    next candidate.
    """
    instant = instant.astimezone(UTC)
    if zone.key == "UTC":
        # No transition ever: each wall time is one instant, in the same order (most
        # tasks are in UTC, and a create computes its first occurrences this way).
        for wall in wall_times_from(instant.replace(tzinfo=None, microsecond=0)):
            candidate = wall.replace(tzinfo=UTC)
            if candidate > instant:
                return candidate
        return None
    # A wall time before ``instant``'s own can still name a later instant when
    # the clocks fall back soon after it: start from the smaller offset.
    offset = min(offset_at(zone, instant), offset_at(zone, instant + MAX_FOLD))
    start = to_wall(instant, offset).replace(microsecond=0)
    best: datetime | None = None
    stop_at: datetime | None = None
    for wall in wall_times_from(start):
        if stop_at is not None and wall >= stop_at:
            break
        for candidate in instants_of(wall, zone, policy):
            if candidate > instant and (best is None or candidate < best):
                best = candidate
                # A later wall time names an earlier instant only through a
                # larger offset in force shortly before ``best``.
                largest = max(offset_at(zone, best - MAX_FOLD), offset_at(zone, best - _SECOND))
                stop_at = to_wall(best, largest)
    return best
