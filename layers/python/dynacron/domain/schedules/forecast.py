"""How many executions fall into each minute ahead: a herd, seen before it happens.

Pure: tasks in, counts out. Each occurrence is counted at the minute it starts,
jitter included (the same fixed offset the tick gives it), so a user can see what
spreading with ``H`` or ``jitter_seconds`` does to a midnight peak.

The work is bounded, because a per-second cron costs 50-100 µs an occurrence
and has 86,400 of them a day: every occurrence computed counts against the budget,
and one task counts at most ``MAX_PER_TASK``, so that a few per-second tasks
neither use up the budget nor hide everyone else's. Either cap makes the
forecast ``complete=False``: its counts are then a lower bound.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta

from dynacron.domain.instants import parse_instant
from dynacron.domain.schedules.signatures import Signature, minutes_of
from dynacron.domain.tasks.claiming import jitter_offset
from dynacron.domain.tasks.task import Task, TaskStatus, execution_id_for

MINUTE = timedelta(minutes=1)
_JUST_BEFORE = timedelta(milliseconds=1)
# Occurrences one task may add to a forecast: one every 18 s over 24 hours fits.
MAX_PER_TASK = 5_000


@dataclass(frozen=True)
class Forecast:
    """Executions per minute over ``minutes`` minutes from ``start``, counted over
    ``tasks`` tasks."""

    start: datetime
    minutes: int
    per_minute: Counter[datetime]
    tasks: int
    # False when a budget ran out (occurrences in all or of one task, tasks read):
    # the counts are a lower bound.
    complete: bool
    # Of ``tasks``, how many were left out, or counted only in part, when a budget
    # ran out (from a census: the tasks of the signatures not computed to the end).
    not_counted: int = 0

    @property
    def peak(self) -> tuple[datetime, int] | None:
        """The busiest minute and its count; None if nothing runs."""
        return self.per_minute.most_common(1)[0] if self.per_minute else None


def forecast(
    tasks: Iterable[Task],
    start: datetime,
    minutes: int,
    max_occurrences: int,
    max_per_task: int = MAX_PER_TASK,
) -> Forecast:
    """Count active tasks' executions per minute in ``[start, start + minutes)``;
    stop after computing ``max_occurrences`` in all, and each task's after
    ``max_per_task``, to bound the work. An overdue occurrence counts in the
    first minute: it starts now."""
    first = start.replace(second=0, microsecond=0)
    end = first + minutes * MINUTE
    per_minute: Counter[datetime] = Counter()
    computed = seen = 0
    complete = True
    for task in tasks:
        seen += 1
        for of_task, occurrence in enumerate(_occurrences_before(task, end)):
            if of_task >= max_per_task:
                complete = False
                break
            if computed >= max_occurrences:
                return Forecast(first, minutes, per_minute, seen, complete=False)
            computed += 1
            jitter = jitter_offset(execution_id_for(task.task_id, occurrence), task.jitter_seconds)
            starts = max(first, occurrence + timedelta(seconds=jitter))
            if starts < end:
                per_minute[starts.replace(second=0, microsecond=0)] += 1
    return Forecast(first, minutes, per_minute, seen, complete=complete)


def _occurrences_before(task: Task, end: datetime) -> Iterator[datetime]:
    """The task's occurrences from ``next_run_at`` up to ``end``, one at a time:
    none is computed that is not counted."""
    if task.status is not TaskStatus.ACTIVE:
        return
    occurrence = task.next_run_at
    while occurrence is not None and occurrence < end:
        yield occurrence
        occurrence = task.schedule.next_after(occurrence)


def census_forecast(
    census: Iterable[tuple[Signature, int]],
    start: datetime,
    minutes: int,
    max_occurrences: int,
    max_per_signature: int = MAX_PER_TASK,
) -> Forecast:
    """``forecast`` from a schedule census (signature and how many tasks share it):
    each signature's occurrences are computed once and count for all its tasks, so
    the work grows with the distinct schedules, not the tasks. The same budgets, per
    signature instead of per task; the largest herds first, so that a budget that
    runs out leaves out the smallest (``not_counted`` says how many tasks).

    Where it differs from ``forecast`` over the same tasks (decision 0046): jitter is
    spread evenly over its seconds (its expected counts, rounded) where each task's
    own offset would fall; a fixed delay is spread evenly over its delay; a rate
    whose period is whole minutes, and a one-time task, may fall in the first minute
    though it already started; a task overdue at ``start`` is not counted, and a rate
    anchored ahead counts from now.
    """
    first = start.replace(second=0, microsecond=0)
    end = first + minutes * MINUTE
    shares: dict[datetime, float] = {}
    computed = tasks = not_counted = 0
    largest_first = sorted(census, key=lambda entry: (-entry[1], entry[0].text))
    for signature, count in largest_first:
        if count <= 0:
            continue
        tasks += count
        if computed >= max_occurrences:
            not_counted += count
            continue
        if signature.kind == "fixed_delay":
            computed += _spread_evenly(signature, count, first, end, shares)
            continue
        schedule = signature.schedule()
        occurrence = schedule.next_after(start - _JUST_BEFORE)
        of_signature = 0
        while occurrence is not None and occurrence < end:
            if of_signature >= max_per_signature or computed >= max_occurrences:
                not_counted += count
                break
            computed += 1
            of_signature += 1
            for minute, share in minutes_of(occurrence, signature.jitter_seconds, first):
                if minute < end:
                    shares[minute] = shares.get(minute, 0.0) + share * count
            occurrence = schedule.next_after(occurrence)
    return Forecast(
        first, minutes, _rounded(shares), tasks, complete=not not_counted, not_counted=not_counted
    )


def _spread_evenly(
    signature: Signature, count: int, first: datetime, end: datetime, shares: dict[datetime, float]
) -> int:
    """A fixed delay's runs, ``count`` tasks' worth, spread evenly over the minutes
    its bounds allow; the minutes it touched."""
    fields = signature.fields
    per_minute = count * 60 / int(fields["delay"])
    touched = 0
    minute = first
    while minute < end:
        if (fields.get("start_at") is None or minute >= _floor(fields["start_at"])) and (
            fields.get("end_at") is None or minute <= _floor(fields["end_at"])
        ):
            shares[minute] = shares.get(minute, 0.0) + per_minute
            touched += 1
        minute += MINUTE
    return touched


def _floor(text: str) -> datetime:
    return parse_instant(text).replace(second=0, microsecond=0)


def _rounded(shares: dict[datetime, float]) -> Counter[datetime]:
    """Whole counts from expected ones, their total kept (largest remainders): a
    jittered task spread thin over fifteen minutes still counts once, somewhere."""
    floors = {minute: int(share) for minute, share in shares.items()}
    left = round(sum(shares.values())) - sum(floors.values())
    by_remainder = sorted(shares, key=lambda minute: (floors[minute] - shares[minute], minute))
    for minute in by_remainder[: max(0, left)]:
        floors[minute] += 1
    return Counter({minute: count for minute, count in floors.items() if count})
