"""Schedules: when a task's occurrences fall.

A schedule answers one question, ``next_after(instant)``: the first occurrence
strictly after an instant, in UTC. The tick always asks it from the *scheduled*
time it just claimed, never from the time it ran, so a late tick never makes a
recurring task drift off its grid.

Cron schedules are evaluated on the wall clock of their time zone and mapped to
UTC by an explicit ``DstPolicy`` (see ``wallclock``). Rates count elapsed time on
a fixed grid from their anchor, so daylight saving never touches them. Any
schedule may be bounded by a ``Window``: no occurrence before ``start_at`` or
after ``end_at``.

``next_after`` never raises: past the last instant ``datetime`` can hold it
answers None, as it does for a schedule that has ended. Whatever a caller sends is
bounded first (``MAX_DURATION_SECONDS``, ``instants.EARLIEST``/``LATEST``), and
every parser reads ASCII digits and ASCII whitespace only: a ``²`` or an Arabic-Indic
five is an ``InvalidSchedule``, never a ``ValueError`` and never a silent 5.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import cached_property, lru_cache
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from dynacron.domain.errors import InvalidSchedule
from dynacron.domain.instants import EARLIEST, LATEST, format_instant, to_utc_ms
from dynacron.domain.schedules.cron import CronSpec, compile_cron, normalize
from dynacron.domain.schedules.wallclock import DstPolicy, Nonexistent, instants_of, next_in_zone

RATE_UNITS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400}
# re.ASCII: \d is 0-9 and \s is ASCII whitespace, and IGNORECASE does not let the
# long s or the Kelvin sign stand in for 's' and 'k'.
_RATE_PATTERN = re.compile(r"\s*(\d+)\s+(second|minute|hour|day)s?\s*", re.IGNORECASE | re.ASCII)
# The longest rate or fixed delay: a year, leap day included (EventBridge
# Scheduler's longest rate unit is days; nothing useful waits longer).
MAX_DURATION_SECONDS = 366 * 86400
# Enough digits for any count up to the maximum; more is refused before int().
_MAX_COUNT_DIGITS = 9
# Occurrences are whole milliseconds; this is "just before" one.
_JUST_BEFORE = timedelta(microseconds=1)


# Files of the zone database that are not IANA zones: the host's own zone (which
# differs between a laptop and Lambda), the POSIX default rules, a placeholder,
# and copies of the zones under other rules (right/ counts leap seconds).
_NOT_ZONES = frozenset({"localtime", "posixrules", "Factory"})
_NOT_ZONE_PREFIXES = ("posix/", "right/")


def load_zone(name: str) -> ZoneInfo:
    """An IANA time zone, or InvalidSchedule naming the field."""
    try:
        if not name.isascii() or name in _NOT_ZONES or name.startswith(_NOT_ZONE_PREFIXES):
            raise ValueError(name)
        return ZoneInfo(name)
    # OSError: a directory of the database ('Europe') or a name too long for a path.
    except (ZoneInfoNotFoundError, ValueError, TypeError, OSError):
        raise InvalidSchedule(
            "timezone",
            f"unknown time zone {name!r}; use an IANA name such as 'UTC' or 'Europe/Berlin'",
        ) from None


@dataclass(frozen=True)
class Window:
    """Bounds on a schedule's occurrences, both inclusive; None is unbounded."""

    start_at: datetime | None = None
    end_at: datetime | None = None

    def next_within(
        self, instant: datetime, next_after: Callable[[datetime], datetime | None]
    ) -> datetime | None:
        """``next_after(instant)``, from ``start_at`` on (inclusive) if ``instant`` is
        before it; None past ``end_at``, or past the end of time (year 9999)."""
        try:
            if self.start_at is not None and instant < self.start_at:
                instant = self.start_at - _JUST_BEFORE
            following = next_after(instant)
        except OverflowError:
            # Past the end of time (year 9999): a schedule built around the edge
            # API (a stored item, a migration) has no further occurrence.
            return None
        if following is None or (self.end_at is not None and following > self.end_at):
            return None
        return following


@dataclass(frozen=True)
class CronSchedule:
    """A cron expression on the wall clock of an IANA time zone.

    ``seed`` (the task id) resolves ``H`` fields; ``dst`` says what happens to a
    wall-clock time that a daylight-saving change skips or repeats.
    """

    expression: str
    timezone: str = "UTC"
    dst: DstPolicy = field(default_factory=DstPolicy)
    seed: str | None = None
    window: Window = field(default_factory=Window)
    kind: Literal["cron"] = "cron"

    @cached_property
    def spec(self) -> CronSpec:
        """The expression compiled, ``H`` resolved with ``seed``."""
        return compile_cron(self.expression, self.seed)

    @cached_property
    def zone(self) -> ZoneInfo:
        """The time zone the expression is read in."""
        return load_zone(self.timezone)

    def first_run(self, now: datetime) -> datetime | None:
        """The first wall-clock match after ``now``, within the window."""
        return self.next_after(now)

    def next_after(self, instant: datetime) -> datetime | None:
        """The first match after ``instant`` (strictly), within the window; None if none.
        A time the clocks skip or repeat runs as ``dst`` says."""
        return self.window.next_within(instant, self._next_unbounded)

    def _next_unbounded(self, instant: datetime) -> datetime | None:
        found = next_in_zone(self.spec.wall_times_from, self.zone, self.dst, instant)
        return to_utc_ms(found) if found is not None else None


@dataclass(frozen=True)
class RateSchedule:
    """Every ``every_seconds`` of elapsed time, on a fixed grid through ``anchor``.

    ``anchor`` is the first occurrence; a later occurrence is always a whole
    number of periods after it, however late the previous one ran.
    """

    every_seconds: int
    anchor: datetime
    window: Window = field(default_factory=Window)
    kind: Literal["rate"] = "rate"

    def first_run(self, now: datetime) -> datetime | None:
        """The first point of the grid after ``now``, within the window: ``anchor``
        itself if it is still ahead."""
        return self.next_after(now)

    def next_after(self, instant: datetime) -> datetime | None:
        """The first point of the grid after ``instant`` (strictly), within the window."""
        return self.window.next_within(instant, self._next_unbounded)

    def _next_unbounded(self, instant: datetime) -> datetime | None:
        step = timedelta(seconds=self.every_seconds)
        if instant < self.anchor:
            return self.anchor
        periods = (instant - self.anchor) // step + 1
        return to_utc_ms(self.anchor + periods * step)

    @property
    def expression(self) -> str:
        """The rate as written, e.g. ``"5 minutes"``."""
        return rate_expression(self.every_seconds)


def rate_expression(seconds: int) -> str:
    """``300`` as ``"5 minutes"``: the largest unit that divides it."""
    for unit, unit_seconds in reversed(RATE_UNITS.items()):
        if seconds % unit_seconds == 0:
            count = seconds // unit_seconds
            return f"{count} {unit}{'' if count == 1 else 's'}"
    raise AssertionError("unreachable: every rate is a whole number of seconds")


@dataclass(frozen=True)
class OneTimeSchedule:
    """A single occurrence at ``at``; the task completes after it."""

    at: datetime
    window: Window = field(default_factory=Window)
    kind: Literal["at"] = "at"

    def first_run(self, now: datetime) -> datetime | None:
        """``at``, even if it is already past (within the window); None outside it."""
        # A one-time task registered slightly late still fires, at once.
        try:
            just_before = self.at - _JUST_BEFORE
        except OverflowError:  # at the very start of time: nothing before it
            return None
        return self.window.next_within(just_before, self._next_unbounded)

    def next_after(self, instant: datetime) -> datetime | None:
        """``at`` if it is after ``instant``, within the window; else None: it ran."""
        return self.window.next_within(instant, self._next_unbounded)

    def _next_unbounded(self, instant: datetime) -> datetime | None:
        return self.at if self.at > instant else None


@dataclass(frozen=True)
class FixedDelaySchedule:
    """Due ``delay_seconds`` after the previous execution *finished*, so runs never overlap.

    There is no grid: the next occurrence is only known once an execution ends,
    and the worker that ends it files it (see ``services.follow_ups``). The first
    one is due at registration, or at ``start_at``. ``next_after`` answers the
    preview question "if every run took no time".
    """

    delay_seconds: int
    window: Window = field(default_factory=Window)
    kind: Literal["fixed_delay"] = "fixed_delay"

    def first_run(self, now: datetime) -> datetime | None:
        """Now, or ``start_at`` if later; None if that is past ``end_at``."""
        first = max(now, self.window.start_at or now)
        if self.window.end_at is not None and first > self.window.end_at:
            return None
        try:
            return to_utc_ms(first)
        except OverflowError:
            return None

    def next_after(self, instant: datetime) -> datetime | None:
        """The next occurrence once an execution finished at ``instant``."""
        return self.window.next_within(instant, self._next_unbounded)

    def _next_unbounded(self, instant: datetime) -> datetime | None:
        return to_utc_ms(instant + timedelta(seconds=self.delay_seconds))

    @property
    def expression(self) -> str:
        """The delay as written, e.g. ``"5 minutes"``."""
        return rate_expression(self.delay_seconds)


# Which ends of its upstreams start a dependent (decision 0058): a success, a
# failure (a dead letter), or either. A skipped execution is neither.
AfterWhen = Literal["success", "failure", "always"]
AFTER_WHEN: tuple[AfterWhen, ...] = ("success", "failure", "always")
# The most upstreams one dependent may name.
MAX_UPSTREAMS = 10


@dataclass(frozen=True)
class AfterSchedule:
    """Runs after its upstreams end (``when``); never on its own.

    One upstream (``upstream_task_id``): once per matching end of it. Several (fan-in,
    ``also_after`` the others): once each time every upstream has a matching end newer
    than the dependent's last fan-in (``domain.tasks.fan_in``, decision 0058).
    """

    upstream_task_id: str
    window: Window = field(default_factory=Window)
    kind: Literal["after"] = "after"
    also_after: tuple[str, ...] = ()
    when: AfterWhen = "success"

    @property
    def upstream_task_ids(self) -> tuple[str, ...]:
        """Every upstream, the first (the dependents index's key) first."""
        return (self.upstream_task_id, *self.also_after)

    @property
    def fans_in(self) -> bool:
        """Whether it waits for several upstreams."""
        return bool(self.also_after)

    def first_run(self, now: datetime) -> datetime | None:
        """None: an upstream success starts each run, never the clock."""
        return None

    def next_after(self, instant: datetime) -> datetime | None:
        """None: an upstream success starts each run, never the clock."""
        return None

    @property
    def expression(self) -> str:
        """The upstream tasks' ids, comma-separated."""
        return ",".join(self.upstream_task_ids)


Schedule = CronSchedule | RateSchedule | OneTimeSchedule | FixedDelaySchedule | AfterSchedule
# Kinds whose occurrences the tick finds in the due index on a grid known in advance.
GRID_KINDS = frozenset({"cron", "rate", "at"})


def check_computable(schedule: Schedule, now: datetime, count: int = 3) -> None:
    """Compute the first ``count`` occurrences as the tick will; refuse a schedule
    whose next occurrence cannot be computed, naming its field.

    A grid schedule (cron, rate) without ``end_at`` must keep having occurrences;
    with one, or for ``at`` and ``fixed_delay``, ending early is allowed.
    """
    try:
        first = schedule.first_run(now)
    except (ArithmeticError, ValueError) as error:
        raise _uncomputable(schedule, error) from None
    check_computable_from(schedule, first, count)


def check_computable_from(schedule: Schedule, first: datetime | None, count: int = 3) -> None:
    """``check_computable`` once the first occurrence, ``first``, is known (a create
    has just computed it: not computed twice)."""
    if isinstance(schedule, CronSchedule) and first is not None:
        # By what decides a cron schedule's occurrences (its seed only if it has an
        # H, as ``compile_cron`` reads it) and its first: an import registers each
        # expression many times and computes its next occurrences once.
        seed = schedule.seed if "H" in schedule.expression.upper() else None
        _check_cron_from(
            schedule.expression,
            schedule.timezone,
            schedule.dst,
            seed,
            schedule.window,
            first,
            count,
        )
        return
    _check_from(schedule, first, count)


@lru_cache(maxsize=4096)
def _check_cron_from(
    expression: str,
    timezone: str,
    dst: DstPolicy,
    seed: str | None,
    window: Window,
    first: datetime,
    count: int,
) -> None:
    """``check_computable_from`` of the cron schedule these make (a refusal raises,
    and is not kept)."""
    _check_from(CronSchedule(expression, timezone, dst, seed, window), first, count)


def _check_from(schedule: Schedule, first: datetime | None, count: int) -> None:
    try:
        found = [first] if first is not None else []
        if first is not None:
            found += upcoming(schedule, first, count - 1)
    except (ArithmeticError, ValueError) as error:
        raise _uncomputable(schedule, error) from None
    ends = schedule.window.end_at is not None or schedule.kind not in ("cron", "rate")
    if len(found) < count and not ends:
        since = f" after {format_instant(found[-1])}" if found else ""
        raise InvalidSchedule(
            schedule.kind,
            f"has no further occurrence{since}; a recurring schedule without end_at "
            "must keep having occurrences (none can be computed past the year 9999)",
        )


def _uncomputable(schedule: Schedule, error: Exception) -> InvalidSchedule:
    return InvalidSchedule(schedule.kind, f"its occurrences cannot be computed ({error})")


def upcoming(schedule: Schedule, after: datetime, count: int) -> list[datetime]:
    """The next ``count`` occurrences strictly after ``after`` (fewer if it ends)."""
    occurrences: list[datetime] = []
    instant: datetime | None = after
    while len(occurrences) < count and instant is not None:
        instant = schedule.next_after(instant)
        if instant is not None:
            occurrences.append(instant)
    return occurrences


def parse_cron(
    expression: str,
    timezone: str = "UTC",
    *,
    dst: DstPolicy | None = None,
    seed: str | None = None,
    window: Window | None = None,
) -> CronSchedule:
    """Validate a cron expression (or a macro), pointing at the bad field."""
    load_zone(timezone)
    schedule = CronSchedule(
        expression=normalize(expression),
        timezone=timezone,
        dst=dst or DstPolicy(),
        seed=seed,
        window=window or Window(),
    )
    schedule.spec  # noqa: B018 -- compiling is the validation; it raises InvalidSchedule
    return schedule


def parse_expression(
    expression: str,
    timezone: str = "UTC",
    *,
    anchor: datetime,
    dst: DstPolicy | None = None,
    seed: str | None = None,
) -> CronSchedule | RateSchedule:
    """A rate (``"5 minutes"``) or else a cron expression, as the command line takes them."""
    if _RATE_PATTERN.fullmatch(expression):
        load_zone(timezone)
        return parse_rate(expression, anchor)
    return parse_cron(expression, timezone, dst=dst, seed=seed)


def parse_rate(expression: str, anchor: datetime, window: Window | None = None) -> RateSchedule:
    """``"30 seconds"``, ``"5 minutes"``, ``"1 hour"``, ``"2 days"``."""
    return RateSchedule(
        every_seconds=parse_duration("rate", expression),
        anchor=to_utc_ms(anchor),
        window=window or Window(),
    )


def parse_fixed_delay(expression: str, window: Window | None = None) -> FixedDelaySchedule:
    """A delay written like a rate: ``"30 seconds"``, ``"5 minutes"``."""
    return FixedDelaySchedule(
        delay_seconds=parse_duration("fixed_delay", expression), window=window or Window()
    )


def parse_duration(field_name: str, expression: str) -> int:
    """Whole seconds from ``"N seconds|minutes|hours|days"``, 1 s to ``MAX_DURATION_SECONDS``."""
    if not expression.isascii():
        raise InvalidSchedule(
            field_name,
            f"{expression!r} has characters outside ASCII; "
            "write the number with the digits 0-9, such as '30 seconds'",
        )
    match = _RATE_PATTERN.fullmatch(expression)
    if match is None:
        raise InvalidSchedule(
            field_name,
            f"{expression!r} is not a {'rate' if field_name == 'rate' else 'duration'}; "
            "write a whole number and a unit, "
            "such as '30 seconds', '5 minutes', '1 hour' or '2 days'",
        )
    digits, unit = match.group(1).lstrip("0") or "0", match.group(2).lower()
    seconds = (
        int(digits) * RATE_UNITS[unit]
        if len(digits) <= _MAX_COUNT_DIGITS
        else MAX_DURATION_SECONDS + 1
    )
    if seconds < 1:
        raise InvalidSchedule(field_name, "must be at least 1 second")
    if seconds > MAX_DURATION_SECONDS:
        raise InvalidSchedule(
            field_name, f"{expression.strip()!r} is longer than the maximum, 366 days"
        )
    return seconds


def parse_at(
    text: str, timezone: str = "UTC", dst: DstPolicy | None = None, window: Window | None = None
) -> OneTimeSchedule:
    """An ISO 8601 instant; one without an offset is read in ``timezone`` by ``dst``."""
    instants = parse_local_instants("at", text, timezone, dst)
    if len(instants) > 1:
        raise InvalidSchedule(
            "dst.ambiguous",
            f"{text!r} happens twice in {timezone} and a one-time task runs once: "
            "choose 'first' or 'last', not 'both'",
        )
    return OneTimeSchedule(at=instants[0], window=window or Window())


def parse_local_instant(
    field_name: str, text: str, timezone: str = "UTC", dst: DstPolicy | None = None
) -> datetime:
    """An ISO 8601 instant in UTC; one without an offset is local time in ``timezone``.

    A local time that does not exist or happens twice is resolved by ``dst``
    (by default: shifted past the gap, the first of the two).
    """
    return parse_local_instants(field_name, text, timezone, dst)[0]


def parse_local_instants(
    field_name: str, text: str, timezone: str = "UTC", dst: DstPolicy | None = None
) -> tuple[datetime, ...]:
    """Every instant ``text`` names, in order: one, or two for a local time the clocks
    repeat with ``dst.ambiguous`` BOTH. ``InvalidSchedule`` naming ``field_name`` for
    text that is not an instant, out of range, or skipped with ``dst.nonexistent`` SKIP."""
    zone = load_zone(timezone)
    not_an_instant = InvalidSchedule(
        field_name, f"{text!r} is not an ISO 8601 instant such as '2026-12-01T09:00:00Z'"
    )
    if not text.isascii():
        raise not_an_instant
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise not_an_instant from None
    # The year first: converting an instant near datetime's ends to UTC overflows.
    if not EARLIEST.year - 1 <= parsed.year <= LATEST.year + 1:
        raise _out_of_range(field_name, text)
    if parsed.tzinfo is not None:
        instants: tuple[datetime, ...] = (parsed.astimezone(UTC),)
    else:
        instants = instants_of(parsed, zone, dst or DstPolicy())
    if not instants:
        raise InvalidSchedule(
            field_name,
            f"{text!r} does not exist in {timezone} (the clocks skip it) and "
            f"dst.nonexistent is {Nonexistent.SKIP.value!r}",
        )
    if any(not EARLIEST <= i <= LATEST for i in instants):
        raise _out_of_range(field_name, text)
    return tuple(to_utc_ms(i) for i in instants)


def _out_of_range(field_name: str, text: str) -> InvalidSchedule:
    return InvalidSchedule(
        field_name,
        f"{text!r} is outside the supported range, "
        f"{format_instant(EARLIEST)} to {format_instant(LATEST)}",
    )
