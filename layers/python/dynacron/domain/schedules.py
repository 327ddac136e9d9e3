"""Schedules: when a task's occurrences fall.

A schedule answers one question, ``next_after(instant)``: the first occurrence
strictly after an instant, in UTC. The tick always asks it from the *scheduled*
time it just claimed, never from the time it ran, so a late tick never makes a
recurring task drift off its grid.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, CroniterError, croniter

from dynacron.domain.errors import InvalidSchedule
from dynacron.domain.instants import to_utc_ms

CRON_FIELDS = (
    ("minute", "0-59"),
    ("hour", "0-23"),
    ("day-of-month", "1-31"),
    ("month", "1-12 or JAN-DEC"),
    ("day-of-week", "0-7 or SUN-SAT"),
)
CRON_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
RATE_UNITS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400}
_RATE_PATTERN = re.compile(r"^\s*(\d+)\s+(second|minute|hour|day)s?\s*$", re.IGNORECASE)


def load_zone(name: str) -> ZoneInfo:
    """An IANA time zone, or InvalidSchedule naming the field."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, TypeError):
        raise InvalidSchedule(
            "timezone",
            f"unknown time zone {name!r}; use an IANA name such as 'UTC' or 'Europe/Berlin'",
        ) from None


@dataclass(frozen=True)
class CronSchedule:
    """A 5-field cron expression evaluated in an IANA time zone."""

    expression: str
    timezone: str = "UTC"
    kind: Literal["cron"] = "cron"

    def first_run(self, now: datetime) -> datetime | None:
        return self.next_after(now)

    def next_after(self, instant: datetime) -> datetime | None:
        zone = load_zone(self.timezone)
        # croniter works to the second; start from the whole second so that an
        # instant with milliseconds never yields an occurrence inside that second.
        start = instant.astimezone(zone).replace(microsecond=0)
        try:
            occurrence = croniter(self.expression, start).get_next(datetime)
        except CroniterBadDateError:
            return None
        return to_utc_ms(occurrence)


@dataclass(frozen=True)
class RateSchedule:
    """Every ``every_seconds`` on a fixed grid that starts at ``anchor``."""

    every_seconds: int
    anchor: datetime
    kind: Literal["rate"] = "rate"

    def first_run(self, now: datetime) -> datetime | None:
        return self.next_after(now)

    def next_after(self, instant: datetime) -> datetime | None:
        step = timedelta(seconds=self.every_seconds)
        if instant < self.anchor:
            return self.anchor
        periods = (instant - self.anchor) // step + 1
        return to_utc_ms(self.anchor + periods * step)

    @property
    def expression(self) -> str:
        for unit, seconds in reversed(RATE_UNITS.items()):
            if self.every_seconds % seconds == 0:
                count = self.every_seconds // seconds
                return f"{count} {unit}{'' if count == 1 else 's'}"
        raise AssertionError("unreachable: every rate is a whole number of seconds")


@dataclass(frozen=True)
class OneTimeSchedule:
    """A single occurrence at ``at``; the task completes after it."""

    at: datetime
    kind: Literal["at"] = "at"

    def first_run(self, now: datetime) -> datetime | None:
        # A one-time task registered slightly late still fires, at once.
        return self.at

    def next_after(self, instant: datetime) -> datetime | None:
        return self.at if self.at > instant else None


Schedule = CronSchedule | RateSchedule | OneTimeSchedule


def parse_cron(expression: str, timezone: str = "UTC") -> CronSchedule:
    """Validate a 5-field cron expression (or a macro), pointing at the bad field."""
    load_zone(timezone)
    text = " ".join(expression.split())
    text = CRON_MACROS.get(text.lower(), text)
    fields = text.split(" ") if text else []
    if len(fields) != len(CRON_FIELDS):
        names = " ".join(name for name, _ in CRON_FIELDS)
        raise InvalidSchedule(
            "cron",
            f"expected 5 fields ({names}) but got {len(fields)} in {expression!r}",
        )
    for position, (value, (name, allowed)) in enumerate(zip(fields, CRON_FIELDS, strict=True)):
        # Check each field alone so that the message can point at it.
        probe = ["*"] * len(CRON_FIELDS)
        probe[position] = value
        if not _cron_accepts(" ".join(probe)):
            raise InvalidSchedule(
                "cron",
                f"field {position + 1} ({name}) has invalid value {value!r}; "
                f"allowed: {allowed}, with '*', ',', '-' and '/'",
            )
    if not _cron_accepts(text):
        raise InvalidSchedule("cron", f"{expression!r} is not a valid cron expression")
    schedule = CronSchedule(expression=text, timezone=timezone)
    if schedule.next_after(datetime.now(UTC)) is None:
        raise InvalidSchedule("cron", f"{expression!r} never fires (no such date)")
    return schedule


def _cron_accepts(expression: str) -> bool:
    try:
        croniter(expression)
    except (CroniterError, ValueError, KeyError):
        return False
    return True


def parse_rate(expression: str, anchor: datetime) -> RateSchedule:
    """``"30 seconds"``, ``"5 minutes"``, ``"1 hour"``, ``"2 days"``."""
    match = _RATE_PATTERN.match(expression)
    if match is None:
        raise InvalidSchedule(
            "rate",
            f"{expression!r} is not a rate; write a whole number and a unit, "
            "such as '30 seconds', '5 minutes', '1 hour' or '2 days'",
        )
    count, unit = int(match.group(1)), match.group(2).lower()
    if count < 1:
        raise InvalidSchedule("rate", "a rate must be at least 1 second")
    return RateSchedule(every_seconds=count * RATE_UNITS[unit], anchor=to_utc_ms(anchor))


def parse_at(text: str, timezone: str = "UTC") -> OneTimeSchedule:
    """An ISO 8601 instant; one without an offset is read in ``timezone``."""
    zone = load_zone(timezone)
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidSchedule(
            "at", f"{text!r} is not an ISO 8601 instant such as '2026-12-01T09:00:00Z'"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=zone)
    return OneTimeSchedule(at=to_utc_ms(parsed.astimezone(UTC)))
