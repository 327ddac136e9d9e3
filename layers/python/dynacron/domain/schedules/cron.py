"""Cron expressions: parsing, and the wall-clock times they name.

This module knows nothing of time zones. It turns an expression into a ``CronSpec``
that yields naive wall-clock times in order; mapping a wall-clock time to UTC, and
deciding what happens when it does not exist or happens twice, is ``wallclock``'s job.

Syntax: 5 fields (minute hour day-of-month month day-of-week) or 6 with seconds
first. Each field is a list of items: ``*``, ``N``, ``A-B``, any of those with
``/STEP``, and names (``JAN``, ``MON``). Day-of-month also takes ``L`` (last day),
``L-N`` (N days before the last), ``LW`` (last weekday), ``NW`` (weekday nearest
day N) and ``?``; day-of-week takes ``NL`` (last N-day of the month), ``N#K``
(K-th N-day) and ``?``. Like Vixie and Debian cron, when both day fields are
restricted a day matches either; when one starts with ``*`` or ``?`` it must match
both. ``H`` picks a value by hashing the schedule's seed (the task id): ``H``,
``H/STEP``, ``H(A-B)`` and ``H(A-B)/STEP``.

An expression is ASCII: fields are separated by ASCII whitespace and numbers are
written with the digits 0-9 (``str.isdigit`` would take ``²`` and the Arabic-Indic five too).
"""

from __future__ import annotations

import calendar
import functools
import hashlib
import re
import string
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import MAXYEAR, date, datetime

from dynacron.domain.errors import InvalidSchedule

MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
MONTH_NAMES = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
DAY_NAMES = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
# A schedule with no occurrence in this many years never fires (a 30 February);
# every calendar pattern, leap years included, repeats well within it.
SEARCH_YEARS = 100
# No cron value has more digits than this; a longer number is refused before int().
_MAX_DIGITS = 6
_ASCII_WHITESPACE = re.compile(f"[{re.escape(string.whitespace)}]+")


@dataclass(frozen=True)
class FieldSpec:
    """One field of a cron expression: its range, its names (JAN, MON), and H's range."""

    name: str
    low: int
    high: int
    names: tuple[str, ...] = ()
    name_base: int = 0
    # H is drawn from a narrower range where the full one is not safe every
    # month (day 29-31) or has two spellings of one value (Sunday as 0 and 7).
    hash_high: int | None = None

    @property
    def allowed(self) -> str:
        """The field's values as an error message states them, e.g. ``1-12 or JAN-DEC``."""
        allowed = f"{self.low}-{self.high}"
        if self.names:
            allowed += f" or {self.names[0]}-{self.names[-1]}"
        return allowed


SECOND = FieldSpec("second", 0, 59)
MINUTE = FieldSpec("minute", 0, 59)
HOUR = FieldSpec("hour", 0, 23)
DAY_OF_MONTH = FieldSpec("day-of-month", 1, 31, hash_high=28)
MONTH = FieldSpec("month", 1, 12, MONTH_NAMES, name_base=1)
DAY_OF_WEEK = FieldSpec("day-of-week", 0, 7, DAY_NAMES, hash_high=6)
FIVE_FIELDS = (MINUTE, HOUR, DAY_OF_MONTH, MONTH, DAY_OF_WEEK)
SIX_FIELDS = (SECOND, *FIVE_FIELDS)

_HASH_ITEM = re.compile(r"^H(?:\((\w+)-(\w+)\))?(?:/(\w+))?$")


class FieldError(ValueError):
    """One item of one field is wrong; the parser adds which field."""


@dataclass(frozen=True)
class DayRule:
    """Which days of a month match: the day-of-month and day-of-week fields together."""

    days_of_month: frozenset[int]
    last_day_offsets: frozenset[int]  # L is 0, L-3 is 3
    nearest_weekdays: frozenset[int]  # 15W is 15
    last_weekday_of_month: bool  # LW
    weekdays: frozenset[int]  # 0 is Sunday
    last_weekdays: frozenset[int]  # 5L is 5: the last Friday
    nth_weekdays: frozenset[tuple[int, int]]  # 1#2 is (1, 2): the second Monday
    # Vixie cron: if either day field starts with '*' (or '?'), a day must match
    # both fields; otherwise matching either is enough.
    match_both: bool

    def days(self, year: int, month: int) -> tuple[int, ...]:
        """The matching days of ``month`` of ``year``, in order (cached)."""
        return _matching_days(self, year, month)


@functools.lru_cache(maxsize=4096)
def _matching_days(rule: DayRule, year: int, month: int) -> tuple[int, ...]:
    first_weekday, length = calendar.monthrange(year, month)

    def weekday(day: int) -> int:  # cron numbering: 0 is Sunday
        return (first_weekday + day) % 7

    by_date = {d for d in rule.days_of_month if d <= length}
    by_date |= {length - k for k in rule.last_day_offsets if length - k >= 1}
    by_date |= {
        _nearest_weekday(day, length, weekday(day))
        for day in rule.nearest_weekdays
        if day <= length
    }
    if rule.last_weekday_of_month:
        by_date.add(_nearest_weekday(length, length, weekday(length)))
    by_weekday = {
        d
        for d in range(1, length + 1)
        if weekday(d) in rule.weekdays
        or (weekday(d) in rule.last_weekdays and d + 7 > length)
        or (weekday(d), (d + 6) // 7) in rule.nth_weekdays
    }
    days = by_date & by_weekday if rule.match_both else by_date | by_weekday
    return tuple(sorted(days))


def _nearest_weekday(day: int, length: int, weekday: int) -> int:
    """The Monday-to-Friday day nearest ``day``, never leaving the month (Quartz 'W')."""
    if weekday == 6:  # Saturday: the Friday before, or the Monday after the 1st
        return day - 1 if day > 1 else day + 2
    if weekday == 0:  # Sunday: the Monday after, or the Friday before the last day
        return day + 1 if day < length else day - 2
    return day


@dataclass(frozen=True)
class CronSpec:
    """A parsed cron expression: the wall-clock times it names, in order."""

    seconds: tuple[int, ...]
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    months: frozenset[int]
    day_rule: DayRule
    has_seconds: bool

    def wall_times_from(self, start: datetime) -> Iterator[datetime]:
        """Naive wall-clock times that match, from ``start`` (inclusive) on, in order.

        Ends after ``SEARCH_YEARS`` years without a match.
        """
        first_day = start.date()
        day = first_day
        while day.year <= min(start.year + SEARCH_YEARS, MAXYEAR):
            if day.month in self.months:
                for day_of_month in self.day_rule.days(day.year, day.month):
                    if day_of_month < day.day:
                        continue
                    current = day.replace(day=day_of_month)
                    floor = (start.hour, start.minute, start.second)
                    for hour, minute, second in self._times_of_day(
                        floor if current == first_day else None
                    ):
                        # Naive on purpose: a wall-clock time, in no zone yet.
                        yield datetime(  # noqa: DTZ001
                            current.year, current.month, current.day, hour, minute, second
                        )
            if (day.year, day.month) == (MAXYEAR, 12):
                return  # the end of time: no later month to look in
            day = _first_of_next_month(day)

    def _times_of_day(self, after: tuple[int, int, int] | None) -> Iterator[tuple[int, int, int]]:
        """Matching (hour, minute, second) in order, from ``after`` (inclusive) if given."""
        floor = after or (0, 0, 0)
        for hour in self.hours:
            if hour < floor[0]:
                continue
            for minute in self.minutes:
                if (hour, minute) < floor[:2]:
                    continue
                for second in self.seconds:
                    if (hour, minute, second) >= floor:
                        yield hour, minute, second

    def fires(self) -> bool:
        """Whether it ever matches (``0 0 30 2 *`` never does), within ``SEARCH_YEARS``."""
        start = datetime(2000, 1, 1)  # noqa: DTZ001 -- a wall-clock time
        return next(self.wall_times_from(start), None) is not None


def _first_of_next_month(day: date) -> date:
    return date(day.year + day.month // 12, day.month % 12 + 1, 1)


def normalize(expression: str) -> str:
    """Collapse ASCII whitespace and expand macros (``@daily`` is ``0 0 * * *``).

    Other whitespace (a no-break space, an em space) is left in place, so that
    ``compile_cron`` refuses it rather than reading it as a field separator.
    """
    text = _ASCII_WHITESPACE.sub(" ", expression).strip(" ")
    return MACROS.get(text.lower(), text)


def compile_cron(expression: str, seed: str | None = None) -> CronSpec:
    """Parse a cron expression; InvalidSchedule names the field that is wrong.

    ``seed`` (the task id) resolves ``H``; an expression with ``H`` needs one.
    """
    # Without an H the seed changes nothing, and the same expression compiles to the
    # same (immutable) spec: an import of many tasks compiles each expression once.
    return _compiled(expression, seed if "H" in expression.upper() else None)


@functools.lru_cache(maxsize=4096)
def _compiled(expression: str, seed: str | None) -> CronSpec:
    if not expression.isascii():
        raise InvalidSchedule(
            "cron",
            f"{expression!r} has characters outside ASCII; write numbers with the digits "
            "0-9 and separate fields with plain spaces",
        )
    text = normalize(expression)
    if text.startswith("@"):
        raise InvalidSchedule(
            "cron", f"unknown macro {text!r}; use one of {', '.join(sorted(MACROS))}"
        )
    parts = text.split(" ") if text else []
    if len(parts) not in (5, 6):
        raise InvalidSchedule(
            "cron",
            f"expected 5 fields (minute hour day-of-month month day-of-week), or 6 with "
            f"seconds first, but got {len(parts)} in {expression!r}",
        )
    specs = SIX_FIELDS if len(parts) == 6 else FIVE_FIELDS
    fields: list[_ParsedField] = []
    for position, (value, spec) in enumerate(zip(parts, specs, strict=True)):
        try:
            fields.append(_parse_field(value.upper(), spec, seed))
        except FieldError as error:
            raise InvalidSchedule(
                "cron",
                f"field {position + 1} ({spec.name}) has invalid value {value!r}: {error}; "
                f"allowed: {spec.allowed}, with '*', ',', '-', '/' and 'H'" + _special_hint(spec),
            ) from None
    if len(specs) == 5:
        fields.insert(0, _ParsedField(values=frozenset({0})))
    second, minute, hour, dom, month, dow = fields
    compiled = CronSpec(
        seconds=tuple(sorted(second.values)),
        minutes=tuple(sorted(minute.values)),
        hours=tuple(sorted(hour.values)),
        months=month.values,
        day_rule=DayRule(
            days_of_month=dom.values,
            last_day_offsets=dom.last_day_offsets,
            nearest_weekdays=dom.nearest_weekdays,
            last_weekday_of_month=dom.last_weekday_of_month,
            weekdays=frozenset(d % 7 for d in dow.values),
            last_weekdays=frozenset(d % 7 for d in dow.last_weekdays),
            nth_weekdays=frozenset((d % 7, n) for d, n in dow.nth_weekdays),
            match_both=dom.unrestricted or dow.unrestricted,
        ),
        has_seconds=len(specs) == 6,
    )
    if not compiled.fires():
        raise InvalidSchedule("cron", f"{expression!r} never fires (no such date)")
    return compiled


def _special_hint(spec: FieldSpec) -> str:
    if spec is DAY_OF_MONTH:
        return "; also '?', 'L', 'L-N', 'LW' and 'NW'"
    if spec is DAY_OF_WEEK:
        return "; also '?', 'NL' and 'N#K'"
    return ""


@dataclass(frozen=True)
class _ParsedField:
    values: frozenset[int]
    unrestricted: bool = False
    last_day_offsets: frozenset[int] = frozenset()
    nearest_weekdays: frozenset[int] = frozenset()
    last_weekday_of_month: bool = False
    last_weekdays: frozenset[int] = frozenset()
    nth_weekdays: frozenset[tuple[int, int]] = frozenset()


def _parse_field(text: str, spec: FieldSpec, seed: str | None) -> _ParsedField:
    if not text:
        raise FieldError("it is empty")
    values: set[int] = set()
    last_day_offsets: set[int] = set()
    nearest: set[int] = set()
    last_weekday_of_month = False
    last_weekdays: set[int] = set()
    nth: set[tuple[int, int]] = set()
    for index, item in enumerate(text.split(",")):
        if not item:
            raise FieldError("it has an empty item between commas")
        if spec is DAY_OF_MONTH and item == "LW":
            last_weekday_of_month = True
        elif spec is DAY_OF_MONTH and item.startswith("L"):
            offset = _number(item[2:], "a day count after 'L-'") if item != "L" else 0
            if item != "L" and (not item.startswith("L-") or not 0 <= offset <= 30):
                raise FieldError(f"{item!r} is not 'L' or 'L-N' with N from 0 to 30")
            last_day_offsets.add(offset)
        elif spec is DAY_OF_MONTH and item.endswith("W"):
            nearest.add(_value(item[:-1], spec))
        elif spec is DAY_OF_WEEK and "#" in item:
            weekday, _, occurrence = item.partition("#")
            count = _number(occurrence, "an occurrence after '#'")
            if not 1 <= count <= 5:
                raise FieldError(f"in {item!r} the occurrence after '#' must be 1-5")
            nth.add((_value(weekday, spec), count))
        elif spec is DAY_OF_WEEK and item.endswith("L"):
            if item == "L":
                raise FieldError("'L' follows a weekday here: '5L' is the last Friday")
            last_weekdays.add(_value(item[:-1], spec))
        elif item == "?" and spec in (DAY_OF_MONTH, DAY_OF_WEEK):
            values.update(range(spec.low, spec.high + 1))
        elif item.startswith("H"):
            values.update(_hashed(item, spec, seed, index))
        else:
            values.update(_range_item(item, spec))
    return _ParsedField(
        values=frozenset(values),
        unrestricted=text.startswith(("*", "?")),
        last_day_offsets=frozenset(last_day_offsets),
        nearest_weekdays=frozenset(nearest),
        last_weekday_of_month=last_weekday_of_month,
        last_weekdays=frozenset(last_weekdays),
        nth_weekdays=frozenset(nth),
    )


def _range_item(item: str, spec: FieldSpec) -> range:
    """``*``, ``N``, ``A-B``, each optionally with ``/STEP``; ``N/STEP`` runs to the end."""
    base, slash, step_text = item.partition("/")
    step = _number(step_text, "a step after '/'") if slash else 1
    if step < 1:
        raise FieldError("the step after '/' must be at least 1")
    if base == "*":
        return range(spec.low, spec.high + 1, step)
    first_text, dash, last_text = base.partition("-")
    first = _value(first_text, spec)
    if not dash:
        return range(first, (spec.high if slash else first) + 1, step)
    last = _value(last_text, spec)
    if last < first:
        raise FieldError(f"the range {base!r} runs backwards")
    return range(first, last + 1, step)


def _hashed(item: str, spec: FieldSpec, seed: str | None, index: int) -> range:
    """``H``, ``H/STEP``, ``H(A-B)`` and ``H(A-B)/STEP`` resolved from the seed.

    The offset is drawn from ``[0, min(step, size))`` so that every allowed value
    is equally likely and the result never leaves the range: ``H/60`` in minutes
    is any minute 0-59 and ``H(50-52)/10`` is 50, 51 or 52, once an hour.
    """
    match = _HASH_ITEM.match(item)
    if match is None:
        raise FieldError(f"{item!r} is not 'H', 'H/STEP', 'H(A-B)' or 'H(A-B)/STEP'")
    if seed is None:
        raise FieldError("'H' needs a seed to hash (the task id), and none was given")
    first_text, last_text, step_text = match.groups()
    first = _value(first_text, spec) if first_text else spec.low
    last = _value(last_text, spec) if last_text else (spec.hash_high or spec.high)
    if last < first:
        raise FieldError(f"the range in {item!r} runs backwards")
    step = _number(step_text, "a step after '/'") if step_text else None
    if step is not None and step < 1:
        raise FieldError("the step after '/' must be at least 1")
    size = last - first + 1
    offset = _hash(seed, spec.name, index) % (min(step, size) if step else size)
    return range(first + offset, last + 1 if step else first + offset + 1, step or 1)


def _hash(seed: str, field: str, index: int) -> int:
    # SHA-256, not hash(): the same on every machine and every run. The field
    # name is mixed in so that 'H H * * *' does not tie the hour to the minute.
    digest = hashlib.sha256(f"{seed}\x00{field}\x00{index}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def _value(text: str, spec: FieldSpec) -> int:
    if text in spec.names:
        return spec.names.index(text) + spec.name_base
    if not _is_number(text):
        kind = "name or number" if spec.names else "number"
        raise FieldError(f"{text!r} is not a {kind}")
    value = int(text)
    if not spec.low <= value <= spec.high:
        raise FieldError(f"{value} is out of range {spec.low}-{spec.high}")
    return value


def _number(text: str, what: str) -> int:
    if not _is_number(text):
        raise FieldError(f"expected {what}, found {text!r}")
    return int(text)


def _is_number(text: str) -> bool:
    """ASCII digits only, and not absurdly many of them."""
    if text.isascii() and text.isdigit() and len(text) > _MAX_DIGITS:
        raise FieldError(f"{text!r} has more than {_MAX_DIGITS} digits")
    return text.isascii() and text.isdigit()


def resolve_hashes(expression: str, seed: str | None) -> str | None:
    """``expression`` with each field that uses ``H`` written as the values ``seed``
    gives it (``H 3 * * *`` may become ``17 3 * * *``): the same times, no seed
    needed, so tasks whose ``H`` falls alike share one expression
    (``domain.schedules.signatures``). None when a field mixes ``H`` with ``L`` or
    ``W`` (rare: kept with its seed). An invalid expression raises as
    ``compile_cron`` does."""
    compile_cron(expression, seed)
    parts = normalize(expression).split(" ")
    specs = SIX_FIELDS if len(parts) == 6 else FIVE_FIELDS
    resolved: list[str] = []
    for value, spec in zip(parts, specs, strict=True):
        text = value.upper()
        if not any(item.startswith("H") for item in text.split(",")):
            resolved.append(value)
            continue
        parsed = _parse_field(text, spec, seed)
        if (
            parsed.last_day_offsets
            or parsed.nearest_weekdays
            or parsed.last_weekday_of_month
            or parsed.last_weekdays
            or parsed.nth_weekdays
        ):
            return None
        resolved.append(",".join(str(v) for v in sorted(parsed.values)))
    return " ".join(resolved)
