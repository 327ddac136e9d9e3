"""Occurrences of a task its owner asked not to run: the skips stored on the task,
which occurrence one covers, and how a request for one becomes one (decision 0055).

A skip names occurrences (``at``, exact instants of the schedule) or every one
before an instant (``until``). The tick claims a skipped occurrence like any other,
runs nothing, and records it SKIPPED with who asked and why; the task moves on.
A skip wholly passed is dropped by that same claim, so what a task stores is only
what is still ahead. Pure: the clock and the caller's identity are passed in.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from dynacron.domain.choices import exactly_one_of
from dynacron.domain.errors import InvalidRequest
from dynacron.domain.instants import format_instant, parse_instant
from dynacron.domain.schedules.expressions import (
    GRID_KINDS,
    Schedule,
    parse_local_instant,
    upcoming,
)

# Bounds of what one task stores: each skip is rewritten by every claim of the
# task while it is ahead, so the item (and the claim's write units) stays small.
MAX_SKIPS = 10
MAX_SKIPPED_OCCURRENCES = 100
MAX_NOTE_LENGTH = 200
_JUST_BEFORE = timedelta(milliseconds=1)

# Why an occurrence did not run; stored as the SKIPPED execution's error.
SKIPPED_ON_REQUEST = "skipped at the request of {by}{note}"


@dataclass(frozen=True)
class Skip:
    """Occurrences not to run: the instants ``at``, or every one before ``until``."""

    by: str
    asked_at: datetime
    at: tuple[datetime, ...] = ()
    until: datetime | None = None
    note: str | None = None

    def covers(self, occurrence: datetime) -> bool:
        """Whether ``occurrence`` is one of the occurrences this skip names."""
        if self.until is not None:
            return occurrence < self.until
        return occurrence in self.at

    def ahead_of(self, instant: datetime) -> Skip | None:
        """What of this skip still names occurrences at or after ``instant``; None if nothing."""
        if self.until is not None:
            return self if self.until > instant else None
        left = tuple(a for a in self.at if a >= instant)
        if not left:
            return None
        return self if len(left) == len(self.at) else _replaced(self, at=left)

    @property
    def reason(self) -> str:
        """Why the occurrences it covers did not run, as their SKIPPED record says."""
        return SKIPPED_ON_REQUEST.format(by=self.by, note=f": {self.note}" if self.note else "")


def _replaced(skip: Skip, **changes: Any) -> Skip:
    return dataclasses.replace(skip, **changes)


@dataclass(frozen=True)
class SkipRequest:
    """What ``POST /tasks/{task_id}/skip`` asks for: exactly one of ``occurrences``
    (the next N), ``until`` (every occurrence before it) or ``at`` (these instants)."""

    occurrences: int | None = None
    until: str | None = None
    at: tuple[str, ...] | None = None
    note: str | None = None


def skip_covering(skips: tuple[Skip, ...], occurrence: datetime) -> Skip | None:
    """The first skip that covers ``occurrence``; None if it runs."""
    for skip in skips:
        if skip.covers(occurrence):
            return skip
    return None


def skips_ahead(skips: tuple[Skip, ...], next_run_at: datetime | None) -> tuple[Skip, ...]:
    """The skips that still name an occurrence at or after ``next_run_at`` (none when
    the task has nothing ahead)."""
    if next_run_at is None:
        return ()
    kept = (skip.ahead_of(next_run_at) for skip in skips)
    return tuple(skip for skip in kept if skip is not None)


def requested_skip(
    request: SkipRequest,
    schedule: Schedule,
    timezone: str,
    next_run_at: datetime | None,
    *,
    by: str,
    now: datetime,
) -> Skip:
    """The skip ``request`` asks of a task whose schedule is ``schedule`` and whose next
    occurrence is ``next_run_at``; ``InvalidRequest`` (422) for one it cannot be.

    An instant without an offset is read in ``timezone``. ``occurrences`` names the next N
    occurrences as they are now; ``at`` must name occurrences of the schedule still
    ahead.
    """
    exactly_one_of(
        "skip",
        [("occurrences", request.occurrences), ("until", request.until), ("at", request.at)],
    )
    if schedule.kind not in GRID_KINDS:
        raise InvalidRequest(
            "task_id", f"a {schedule.kind} task has no grid of occurrences to skip"
        )
    note = request.note
    if note is not None and len(note) > MAX_NOTE_LENGTH:
        raise InvalidRequest("note", f"is longer than {MAX_NOTE_LENGTH} characters")
    if next_run_at is None:
        raise InvalidRequest("task_id", "the task has no occurrence ahead to skip")
    if request.until is not None:
        until = parse_local_instant("until", request.until, timezone)
        if until <= next_run_at:
            raise InvalidRequest(
                "until",
                f"is not after the next occurrence ({format_instant(next_run_at)}): "
                "it would skip nothing",
            )
        return Skip(by=by, asked_at=now, until=until, note=note)
    if request.occurrences is not None:
        count = request.occurrences
        if not 1 <= count <= MAX_SKIPPED_OCCURRENCES:
            raise InvalidRequest("occurrences", f"is not between 1 and {MAX_SKIPPED_OCCURRENCES}")
        ahead = [next_run_at, *upcoming(schedule, next_run_at, count - 1)][:count]
        return Skip(by=by, asked_at=now, at=tuple(ahead), note=note)
    assert request.at is not None
    if not 1 <= len(request.at) <= MAX_SKIPPED_OCCURRENCES:
        raise InvalidRequest("at", f"give 1 to {MAX_SKIPPED_OCCURRENCES} instants")
    instants = []
    for text in request.at:
        instant = parse_local_instant("at", text, timezone)
        if instant < next_run_at:
            raise InvalidRequest("at", f"{text!r} is before the next occurrence; it has passed")
        if schedule.next_after(instant - _JUST_BEFORE) != instant:
            raise InvalidRequest("at", f"{text!r} is not an occurrence of the task's schedule")
        instants.append(instant)
    return Skip(by=by, asked_at=now, at=tuple(sorted(set(instants))), note=note)


def added(skips: tuple[Skip, ...], skip: Skip) -> tuple[Skip, ...]:
    """``skips`` with ``skip`` added; ``InvalidRequest`` past the bounds a task keeps."""
    together = (*skips, skip)
    if len(together) > MAX_SKIPS:
        raise InvalidRequest(
            "skip", f"the task has {len(skips)} skips; at most {MAX_SKIPS} are kept: remove some"
        )
    named = sum(len(s.at) for s in together)
    if named > MAX_SKIPPED_OCCURRENCES:
        raise InvalidRequest(
            "skip",
            f"the task's skips would name {named} occurrences; at most "
            f"{MAX_SKIPPED_OCCURRENCES} are kept (use 'until' for a long stretch)",
        )
    return together


def removed(skips: tuple[Skip, ...], occurrence: datetime | None) -> tuple[Skip, ...]:
    """``skips`` without any (``occurrence`` None), or without ``occurrence`` in them:
    an ``until`` that covers it is cut to end there."""
    if occurrence is None:
        return ()
    left = []
    for skip in skips:
        if skip.until is not None and occurrence < skip.until:
            left.append(_replaced(skip, until=occurrence))
        elif skip.at:
            at = tuple(a for a in skip.at if a != occurrence)
            if at:
                left.append(_replaced(skip, at=at))
        else:
            left.append(skip)
    return tuple(left)


def skips_to_list(skips: tuple[Skip, ...]) -> list[dict[str, Any]] | None:
    """Skips as the task record keeps them; None (left out) when there are none."""
    if not skips:
        return None
    return [
        {
            k: v
            for k, v in {
                "by": skip.by,
                "asked_at": format_instant(skip.asked_at),
                "at": [format_instant(a) for a in skip.at] or None,
                "until": format_instant(skip.until) if skip.until is not None else None,
                "note": skip.note,
            }.items()
            if v is not None
        }
        for skip in skips
    ]


def skips_from_list(values: Any) -> tuple[Skip, ...]:
    """Skips as ``skips_to_list`` stored them (none if absent)."""
    if not values:
        return ()
    return tuple(
        Skip(
            by=str(value["by"]),
            asked_at=parse_instant(value["asked_at"]),
            at=tuple(parse_instant(a) for a in value.get("at") or ()),
            until=parse_instant(value["until"]) if value.get("until") else None,
            note=value.get("note"),
        )
        for value in values
    )
