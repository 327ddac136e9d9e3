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

from dynacron.domain.tasks.claiming import jitter_offset
from dynacron.domain.tasks.task import Task, TaskStatus, execution_id_for

MINUTE = timedelta(minutes=1)
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
