"""A schedule's next occurrences as a person checks them: in words, and with the
daylight-saving changes that fall between them marked, and the occurrences that
will not run (skipped) marked too.

``GET /tasks/{task_id}/next`` and ``POST /schedules/preview`` answer with one; the
console shows it before a task is saved and on a task's page.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from dynacron.domain.schedules.describe import describe
from dynacron.domain.schedules.expressions import Schedule, load_zone, upcoming
from dynacron.domain.schedules.wallclock import offset_at, transition_in


@dataclass(frozen=True)
class OffsetChange:
    """The time zone's UTC offset changed at ``at`` (daylight saving began or ended),
    after the occurrence before ``next_occurrence`` (or the preview's start)."""

    at: datetime
    offset_before: timedelta
    offset_after: timedelta
    next_occurrence: datetime


@dataclass(frozen=True)
class SchedulePreview:
    """A schedule's next occurrences, what it means in words, and the offset changes
    of its time zone between them."""

    timezone: str
    explanation: str
    occurrences: list[datetime]
    offset_changes: list[OffsetChange]
    # Occurrences among ``occurrences`` that will not run: skipped, and why.
    passed_over: list[PassedOver] = field(default_factory=list)


@dataclass(frozen=True)
class PassedOver:
    """An occurrence of the preview that will not run (a skip), and why."""

    occurrence: datetime
    reason: str


def marking_passed_over(
    preview: SchedulePreview, reason_of: Callable[[datetime], str | None]
) -> SchedulePreview:
    """``preview`` with each occurrence ``reason_of`` gives a reason for marked as
    passed over (it stays listed, as the tick still claims it)."""
    marks = []
    for occurrence in preview.occurrences:
        reason = reason_of(occurrence)
        if reason is not None:
            marks.append(PassedOver(occurrence, reason))
    return dataclasses.replace(preview, passed_over=marks)


def preview(schedule: Schedule, timezone: str, after: datetime, count: int) -> SchedulePreview:
    """The next ``count`` occurrences strictly after ``after``, explained and with the
    offset changes of ``timezone`` between them."""
    return _explained(schedule, timezone, after, upcoming(schedule, after, count))


def preview_registration(
    schedule: Schedule, timezone: str, now: datetime, count: int
) -> SchedulePreview:
    """The first ``count`` occurrences of a task registered at ``now`` with ``schedule``:
    from its first run (a one-time task a little late still runs, a fixed delay
    runs at once), as registering computes it."""
    first = schedule.first_run(now)
    occurrences = [first, *upcoming(schedule, first, count - 1)] if first is not None else []
    return _explained(schedule, timezone, now, occurrences)


def _explained(
    schedule: Schedule, timezone: str, start: datetime, occurrences: list[datetime]
) -> SchedulePreview:
    return SchedulePreview(
        timezone=timezone,
        explanation=describe(schedule),
        occurrences=occurrences,
        offset_changes=offset_changes(timezone, start, occurrences),
    )


def offset_changes(
    timezone: str, start: datetime, occurrences: list[datetime]
) -> list[OffsetChange]:
    """Where the UTC offset of ``timezone`` differs from one occurrence to the next
    (the first compared with ``start``), the instant it changed.

    Two changes between the same two occurrences that cancel out (a rate of a
    year) leave the offset as it was and are not listed: the wall clock reads the
    same as before.
    """
    zone = load_zone(timezone)
    changes = []
    previous = start
    for occurrence in occurrences:
        before, after = offset_at(zone, previous), offset_at(zone, occurrence)
        if before != after:
            changes.append(
                OffsetChange(transition_in(zone, previous, occurrence), before, after, occurrence)
            )
        previous = occurrence
    return changes
