"""Named calendars of days (holidays, a winter break) and what they do to a
schedule's occurrences: excluded, or moved to the next included day (decision 0056).

A calendar is a set of whole days in its own time zone: single dates and date
ranges, each with an optional note. A task lists calendars to exclude
(``exclude_calendars``: an occurrence on one of their days does not run) or to
keep to (``only_calendars``: an occurrence on none of their days does not run),
and what an excluded occurrence becomes (``on_excluded``): skipped and recorded
SKIPPED, or moved to the same wall-clock time of the next included day. Pure:
instants in, decisions out.
"""

from __future__ import annotations

import bisect
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from enum import StrEnum
from typing import Any

from dynacron.domain.conditions import Equals, Missing, Transition
from dynacron.domain.errors import InvalidRequest
from dynacron.domain.schedules.expressions import load_zone
from dynacron.domain.schedules.wallclock import DstPolicy, instants_of

# A calendar name is a path segment: short, plain.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
# Entries one calendar holds (each a date or a range), and how far a range reaches.
MAX_ENTRIES = 500
MAX_RANGE_DAYS = 366
MAX_NOTE_LENGTH = 200
# Calendars one tenant keeps (all in one record of at most some 300 KB), and one
# task may name.
MAX_CALENDARS_PER_TENANT = 20
MAX_CALENDARS_PER_TASK = 5
# The tenant's record stays well under DynamoDB's 400 KB item limit.
MAX_RECORD_BYTES = 300_000
# A task's copy of its calendars' days is rewritten by every claim of the task:
# at most this much JSON (some 300 dates), at most 4 write units more a claim.
MAX_COPY_BYTES = 4096
# The tenant's calendars record: its calendars as JSON text, and a version.
CALENDARS = "calendars"
VERSION = "version"
# How many days ``on_excluded: next`` looks ahead for an included one.
MAX_DAYS_AHEAD = 2 * MAX_RANGE_DAYS

EXCLUDED_BY = "excluded by calendar {name}{note}"
NOT_IN_ONLY = "not a day of calendar {names} (only_calendars)"


class OnExcluded(StrEnum):
    """What an occurrence on an excluded day becomes."""

    SKIP = "skip"  # it does not run; a SKIPPED execution says which calendar
    NEXT = "next"  # it runs at the same wall-clock time on the next included day


@dataclass(frozen=True)
class DateSpan:
    """The days ``first`` to ``last``, both included (one day when they are equal)."""

    first: date
    last: date
    note: str | None = None


@dataclass(frozen=True)
class Calendar:
    """A tenant's named set of days, read in ``timezone``; spans in order, not overlapping."""

    name: str
    timezone: str
    spans: tuple[DateSpan, ...]
    # The version of the tenant's calendars record that stored these days (0: stored
    # before versions were kept). A task's copy keeps it: a copy is never replaced by
    # an older one (``copied``).
    version: int = 0

    def span_of(self, day: date) -> DateSpan | None:
        """The span holding ``day``; None if the calendar does not hold it."""
        index = bisect.bisect_right([s.first for s in self.spans], day) - 1
        if index >= 0 and self.spans[index].last >= day:
            return self.spans[index]
        return None

    def day_of(self, instant: datetime) -> date:
        """The day ``instant`` falls on in this calendar's time zone."""
        return instant.astimezone(load_zone(self.timezone)).date()


def check_name(name: str) -> str:
    """``name`` if it may name a calendar; ``InvalidRequest`` otherwise."""
    if not re.fullmatch(NAME_PATTERN, name):
        raise InvalidRequest(
            "name", "1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    return name


def calendar_of(name: str, timezone: str, entries: list[Any]) -> Calendar:
    """The calendar ``PUT /calendars/{name}`` describes: ``entries`` are ISO dates
    (``"2026-12-25"``) or ``{"from": ..., "to": ..., "note": ...}`` ranges (``to``
    may be left out: one day). Overlapping or adjacent entries are merged, the
    first note kept. ``InvalidRequest`` (422) naming what to fix."""
    check_name(name)
    load_zone(timezone)
    if len(entries) > MAX_ENTRIES:
        raise InvalidRequest("dates", f"a calendar holds at most {MAX_ENTRIES} dates or ranges")
    spans = [_span_of(index, entry) for index, entry in enumerate(entries)]
    return Calendar(name=name, timezone=timezone, spans=_merged(spans))


def _span_of(index: int, entry: Any) -> DateSpan:
    def refused(message: str) -> InvalidRequest:
        return InvalidRequest("dates", f"entry {index}: {message}")

    if isinstance(entry, str):
        day = _date(entry, refused)
        return DateSpan(day, day)
    if not isinstance(entry, dict) or not isinstance(entry.get("from"), str):
        raise refused('give a date \'YYYY-MM-DD\' or {"from": ..., "to": ...}')
    unknown = set(entry) - {"from", "to", "note"}
    if unknown:
        raise refused(f"unknown field {sorted(unknown)[0]!r}")
    first = _date(entry["from"], refused)
    last = _date(entry["to"], refused) if entry.get("to") is not None else first
    if last < first:
        raise refused("'to' is before 'from'")
    if (last - first).days >= MAX_RANGE_DAYS:
        raise refused(f"a range spans at most {MAX_RANGE_DAYS} days")
    note = entry.get("note")
    if note is not None and (not isinstance(note, str) or len(note) > MAX_NOTE_LENGTH):
        raise refused(f"a note is text of at most {MAX_NOTE_LENGTH} characters")
    return DateSpan(first, last, note)


def _date(text: Any, refused: Callable[[str], InvalidRequest]) -> date:
    if not isinstance(text, str) or not re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
        raise refused(f"{text!r} is not a date such as '2026-12-25'")
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise refused(f"{text!r} is not a day of the calendar") from None


def _merged(spans: list[DateSpan]) -> tuple[DateSpan, ...]:
    merged: list[DateSpan] = []
    for span in sorted(spans, key=lambda s: (s.first, s.last)):
        if merged and span.first <= merged[-1].last + timedelta(days=1):
            last = merged[-1]
            merged[-1] = DateSpan(last.first, max(last.last, span.last), last.note or span.note)
        else:
            merged.append(span)
    return tuple(merged)


@dataclass(frozen=True)
class CalendarRule:
    """The calendars a task's occurrences are held to, as copied onto the task."""

    exclude: tuple[Calendar, ...] = ()
    only: tuple[Calendar, ...] = ()
    on_excluded: OnExcluded = OnExcluded.SKIP

    def __bool__(self) -> bool:
        return bool(self.exclude or self.only)

    @property
    def names(self) -> tuple[str, ...]:
        """Every calendar the rule names."""
        return tuple(c.name for c in (*self.exclude, *self.only))

    def excluded(self, occurrence: datetime) -> str | None:
        """Why ``occurrence`` does not run on its day; None if its day is included."""
        for calendar in self.exclude:
            span = calendar.span_of(calendar.day_of(occurrence))
            if span is not None:
                note = f" ({span.note})" if span.note else ""
                return EXCLUDED_BY.format(name=calendar.name, note=note)
        if self.only and not any(c.span_of(c.day_of(occurrence)) for c in self.only):
            return NOT_IN_ONLY.format(names=" or ".join(c.name for c in self.only))
        return None

    def moved(self, occurrence: datetime, timezone: str) -> datetime | None:
        """The same wall-clock time (in ``timezone``) on the first later day whose
        instant is included; None if none is within ``MAX_DAYS_AHEAD``."""
        zone = load_zone(timezone)
        local = occurrence.astimezone(zone)
        wall = datetime.combine(local.date(), time(local.hour, local.minute, local.second))
        for days in range(1, MAX_DAYS_AHEAD + 1):
            for candidate in instants_of(wall + timedelta(days=days), zone, DstPolicy()):
                if self.excluded(candidate) is None:
                    return candidate
        return None


def rule_to_map(rule: CalendarRule) -> dict[str, Any] | None:
    """A task's copy of its calendars, compact (days as ``2026-12-25`` or
    ``2026-12-24/2026-12-31``, no notes: a claim writes it back each time); None
    (left out) for a task held to none."""
    if not rule:
        return None

    def days(calendar: Calendar) -> dict[str, Any]:
        copy: dict[str, Any] = {
            "timezone": calendar.timezone,
            "days": [
                s.first.isoformat() if s.first == s.last else f"{s.first}/{s.last}"
                for s in calendar.spans
            ],
        }
        if calendar.version:
            copy["version"] = calendar.version
        return copy

    values: dict[str, Any] = {"on_excluded": rule.on_excluded.value}
    if rule.exclude:
        values["exclude"] = {c.name: days(c) for c in rule.exclude}
    if rule.only:
        values["only"] = {c.name: days(c) for c in rule.only}
    return values


def rule_from_map(values: dict[str, Any] | None) -> CalendarRule:
    """A task's copy of its calendars as ``rule_to_map`` stored it (none if absent)."""
    if not values:
        return NO_CALENDARS

    def calendars(named: dict[str, Any] | None) -> tuple[Calendar, ...]:
        return tuple(
            Calendar(
                name=name,
                timezone=copy["timezone"],
                spans=tuple(_stored_span(text) for text in copy.get("days") or ()),
                version=int(copy.get("version", 0)),
            )
            for name, copy in (named or {}).items()
        )

    return CalendarRule(
        exclude=calendars(values.get("exclude")),
        only=calendars(values.get("only")),
        on_excluded=OnExcluded(values.get("on_excluded", OnExcluded.SKIP)),
    )


def _stored_span(text: str) -> DateSpan:
    first, _, last = text.partition("/")
    return DateSpan(date.fromisoformat(first), date.fromisoformat(last or first))


def copied(rule: CalendarRule, calendars: dict[str, Calendar]) -> CalendarRule:
    """``rule`` with each calendar it names replaced by ``calendars``' copy of it
    (its notes left out); a calendar ``calendars`` lacks stays as it was, and so does
    one ``rule`` holds at a newer version (two changes of a calendar racing to copy
    it: the older never overwrites the newer). ``InvalidRequest`` when the copy
    would pass ``MAX_COPY_BYTES``."""

    def fresh(calendar: Calendar) -> Calendar:
        found = calendars.get(calendar.name)
        if found is None or found.version < calendar.version:
            return calendar
        spans = tuple(DateSpan(s.first, s.last) for s in found.spans)
        return Calendar(found.name, found.timezone, spans, found.version)

    copy = CalendarRule(
        exclude=tuple(fresh(c) for c in rule.exclude),
        only=tuple(fresh(c) for c in rule.only),
        on_excluded=rule.on_excluded,
    )
    size = len(json.dumps(rule_to_map(copy), separators=(",", ":")).encode())
    if size > MAX_COPY_BYTES:
        raise InvalidRequest(
            "exclude_calendars" if copy.exclude else "only_calendars",
            f"a task's calendars hold at most {MAX_COPY_BYTES} bytes of days (these: {size}), "
            "as each claim of it writes them: use fewer or shorter calendars, or ranges",
        )
    return copy


def named(exclude: tuple[str, ...], only: tuple[str, ...], on_excluded: OnExcluded) -> CalendarRule:
    """A rule naming calendars not read yet (no days): ``copied`` fills them in."""
    if len(exclude) + len(only) > MAX_CALENDARS_PER_TASK:
        raise InvalidRequest(
            "exclude_calendars", f"a task names at most {MAX_CALENDARS_PER_TASK} calendars"
        )
    for name in (*exclude, *only):
        check_name(name)
    return CalendarRule(
        exclude=tuple(Calendar(n, "UTC", ()) for n in dict.fromkeys(exclude)),
        only=tuple(Calendar(n, "UTC", ()) for n in dict.fromkeys(only)),
        on_excluded=on_excluded,
    )


NO_CALENDARS = CalendarRule()


@dataclass(frozen=True)
class CalendarChanges:
    """What a PATCH says of a task's calendars: each field None when not given."""

    exclude: tuple[str, ...] | None = None
    only: tuple[str, ...] | None = None
    on_excluded: OnExcluded | None = None

    def over(self, stored: CalendarRule) -> CalendarRule:
        """The rule these changes make of ``stored`` (names only: days are copied in
        again by whoever stores it)."""
        return named(
            self.exclude if self.exclude is not None else tuple(c.name for c in stored.exclude),
            self.only if self.only is not None else tuple(c.name for c in stored.only),
            self.on_excluded or stored.on_excluded,
        )


def calendar_to_map(calendar: Calendar) -> dict[str, Any]:
    """A calendar as stored (and as the API shows it, without ``version``): dates as
    ISO text."""
    stored: dict[str, Any] = {"version": calendar.version} if calendar.version else {}
    return stored | {
        "name": calendar.name,
        "timezone": calendar.timezone,
        "dates": [
            {
                k: v
                for k, v in {
                    "from": span.first.isoformat(),
                    "to": span.last.isoformat(),
                    "note": span.note,
                }.items()
                if v is not None
            }
            for span in calendar.spans
        ],
    }


def calendar_from_map(values: dict[str, Any]) -> Calendar:
    """A calendar as ``calendar_to_map`` stored it."""
    return Calendar(
        name=values["name"],
        timezone=values["timezone"],
        spans=tuple(
            DateSpan(
                date.fromisoformat(d["from"]),
                date.fromisoformat(d.get("to", d["from"])),
                d.get("note"),
            )
            for d in values.get("dates") or ()
        ),
        version=int(values.get("version", 0)),
    )


@dataclass(frozen=True)
class TenantCalendars:
    """A tenant's calendars by name, as stored at ``version`` (0: none stored yet)."""

    calendars: dict[str, Calendar]
    version: int = 0


def calendars_to_text(calendars: dict[str, Calendar]) -> str:
    """The stored form of a tenant's calendars: compact JSON, by name."""
    maps = [calendar_to_map(calendars[name]) for name in sorted(calendars)]
    return json.dumps(maps, separators=(",", ":"))


def calendars_from_record(record: dict[str, Any] | None) -> TenantCalendars:
    """A tenant's calendars as ``store_calendars`` wrote them (none if no record)."""
    if not record:
        return TenantCalendars({})
    maps = json.loads(record[CALENDARS])
    return TenantCalendars(
        {m["name"]: calendar_from_map(m) for m in maps}, version=int(record[VERSION])
    )


def store_calendars(seen: TenantCalendars, calendars: dict[str, Calendar]) -> Transition:
    """Write the tenant's calendars whole; expects them still as ``seen`` (its version)."""
    if len(calendars) > MAX_CALENDARS_PER_TENANT:
        raise InvalidRequest(
            "name", f"a tenant keeps at most {MAX_CALENDARS_PER_TENANT} calendars: delete one"
        )
    text = calendars_to_text(calendars)
    if len(text.encode()) > MAX_RECORD_BYTES:
        raise InvalidRequest(
            "dates",
            f"the tenant's calendars would take {len(text.encode()) // 1000} KB; at most "
            f"{MAX_RECORD_BYTES // 1000} KB are kept: shorten notes or delete a calendar",
        )
    return Transition(
        expects=Missing(VERSION) if seen.version == 0 else Equals(VERSION, seen.version),
        sets={CALENDARS: text, VERSION: seen.version + 1},
        move="calendars",
    )
