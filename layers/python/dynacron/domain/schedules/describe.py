"""Plain-English descriptions of schedules, for ``dynacron next --explain``, the
API's previews and the console.

Written against our own parsed ``CronSpec`` rather than with a describer
library: it then says exactly what our evaluator does, including the values
``H`` resolved to, and the time zone and DST policy that no cron text carries.
"""

from __future__ import annotations

import itertools

from dynacron.domain.instants import format_instant
from dynacron.domain.schedules.cron import DAY_NAMES, MONTH_NAMES, CronSpec, DayRule
from dynacron.domain.schedules.expressions import (
    AfterSchedule,
    CronSchedule,
    FixedDelaySchedule,
    OneTimeSchedule,
    RateSchedule,
    Schedule,
)
from dynacron.domain.schedules.wallclock import Ambiguous, Nonexistent

_WEEKDAYS = ("Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")
_MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
_ORDINALS = ("first", "second", "third", "fourth", "fifth")
_NONEXISTENT = {
    Nonexistent.SHIFT: "runs at the first instant after the gap",
    Nonexistent.SKIP: "is skipped",
}
_AMBIGUOUS = {
    Ambiguous.FIRST: "runs the first time only",
    Ambiguous.LAST: "runs the second time only",
    Ambiguous.BOTH: "runs both times",
}
assert len(DAY_NAMES) == len(_WEEKDAYS)
assert len(MONTH_NAMES) == len(_MONTHS)


def describe(schedule: Schedule) -> str:
    """One or a few sentences saying when ``schedule`` fires."""
    match schedule:
        case CronSchedule():
            text = _describe_cron(schedule)
        case RateSchedule():
            text = (
                f"Every {schedule.expression} of elapsed time, on a grid through "
                f"{format_instant(schedule.anchor)}; daylight saving does not move it."
            )
        case OneTimeSchedule():
            text = f"Once, at {format_instant(schedule.at)}."
        case FixedDelaySchedule():
            text = (
                f"{schedule.expression[0].upper()}{schedule.expression[1:]} after the previous "
                "execution ended, so runs never overlap; the first at registration or start_at."
            )
        case AfterSchedule(upstream_task_id=""):
            return "The stored schedule cannot be read; PATCH a new one."
        case AfterSchedule():
            ends = {
                "success": "successful execution",
                "failure": "failed execution",
                "always": "finished execution",
            }[schedule.when]
            if schedule.fans_in:
                tasks = ", ".join(schedule.upstream_task_ids)
                text = (
                    f"Once each time every one of tasks {tasks} has had a {ends} "
                    "since its last run."
                )
            else:
                text = f"Once after each {ends} of task {schedule.upstream_task_id}."
    window = schedule.window
    if window.start_at is not None:
        text += f" Not before {format_instant(window.start_at)}."
    if window.end_at is not None:
        text += f" Not after {format_instant(window.end_at)}."
    return text


def _describe_cron(schedule: CronSchedule) -> str:
    spec = schedule.spec
    text = f"{_time_of_day(spec)}, {_days(spec)}"
    if schedule.timezone == "UTC":
        return text + ", UTC."
    return (
        f"{text}, on the wall clock of {schedule.timezone}. A time that daylight saving "
        f"skips {_NONEXISTENT[schedule.dst.nonexistent]}; a time it repeats "
        f"{_AMBIGUOUS[schedule.dst.ambiguous]}."
    )


def _time_of_day(spec: CronSpec) -> str:
    times = len(spec.hours) * len(spec.minutes) * len(spec.seconds)
    if times <= 4:
        with_seconds = any(spec.seconds)
        clock = [
            f"{h:02d}:{m:02d}" + (f":{s:02d}" if with_seconds else "")
            for h in spec.hours
            for m in spec.minutes
            for s in spec.seconds
        ]
        return f"At {_join(clock)}"
    parts = []
    if spec.has_seconds:
        parts.append(_values("second", spec.seconds, 60))
    parts.append(_values("minute", spec.minutes, 60))
    parts.append(_values("hour", spec.hours, 24))
    text = " of ".join(parts)
    return text[0].upper() + text[1:] if text.startswith("every") else f"At {text}"


def _days(spec: CronSpec) -> str:
    rule = spec.day_rule
    by_date = _dates(rule)
    by_weekday = _weekdays(rule)
    if rule.match_both:
        phrases = [p for p in (by_date, by_weekday) if p]
        days = " that is also ".join(phrases) if phrases else "every day"
    else:
        days = f"{by_date} or {by_weekday}"
    if len(spec.months) < 12:
        days += " in " + _join([_MONTHS[m - 1] for m in sorted(spec.months)])
    return days


def _dates(rule: DayRule) -> str:
    phrases = []
    days = sorted(rule.days_of_month)
    if days and len(days) < 31:
        phrases.append("day " + _join(_runs(days)) + " of the month")
    for offset in sorted(rule.last_day_offsets):
        before = f"{offset} day{'s' if offset > 1 else ''} before " if offset else ""
        phrases.append(f"{before}the last day of the month")
    for day in sorted(rule.nearest_weekdays):
        phrases.append(f"the weekday nearest day {day}")
    if rule.last_weekday_of_month:
        phrases.append("the last weekday of the month")
    return "on " + _join(phrases, "or") if phrases else ""


def _weekdays(rule: DayRule) -> str:
    phrases = []
    if rule.weekdays and len(rule.weekdays) < 7:
        phrases.append(_join([_WEEKDAYS[d] for d in _week_order(rule.weekdays)]))
    for day in _week_order(rule.last_weekdays):
        phrases.append(f"the last {_WEEKDAYS[day]} of the month")
    for day, nth in sorted(rule.nth_weekdays, key=lambda pair: (pair[1], (pair[0] + 6) % 7)):
        phrases.append(f"the {_ORDINALS[nth - 1]} {_WEEKDAYS[day]} of the month")
    return "on " + _join(phrases, "or") if phrases else ""


def _week_order(days: frozenset[int]) -> list[int]:
    return sorted(days, key=lambda d: (d + 6) % 7)  # Monday first


def _values(unit: str, values: tuple[int, ...], size: int) -> str:
    if len(values) == size:
        return f"every {unit}"
    steps = {b - a for a, b in itertools.pairwise(values)}
    if len(values) > 2 and len(steps) == 1 and values[0] < next(iter(steps)):
        step = next(iter(steps))
        start = f" from {unit} {values[0]}" if values[0] else ""
        return f"every {step} {unit}s{start} ({_join([str(v) for v in values])})"
    return f"{unit}{'s' if len(values) > 1 else ''} {_join(_runs(list(values)))}"


def _runs(values: list[int]) -> list[str]:
    """``[1, 2, 3, 7]`` -> ``["1-3", "7"]``."""
    runs: list[list[int]] = []
    for value in values:
        if runs and value == runs[-1][-1] + 1:
            runs[-1].append(value)
        else:
            runs.append([value])
    return [f"{r[0]}-{r[-1]}" if len(r) > 2 else ", ".join(map(str, r)) for r in runs]


def _join(items: list[str], word: str = "and") -> str:
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + f" {word} " + items[-1]
