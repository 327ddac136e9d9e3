"""How many executions fall into each minute ahead: a herd, seen before it happens.

Pure: tasks in, counts out. Each occurrence is counted at the minute it starts,
jitter included (the same fixed offset the tick gives it), so a user can see what
spreading with ``H`` or ``jitter_seconds`` does to a midnight peak.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta

from dynacron.domain.schedules import upcoming
from dynacron.domain.tasks import Task, TaskStatus, execution_id_for, jitter_offset

MINUTE = timedelta(minutes=1)
# Occurrences asked of a schedule at a time while walking the horizon.
STEP = 64


@dataclass(frozen=True)
class Forecast:
    start: datetime
    minutes: int
    per_minute: Counter[datetime]
    tasks: int
    # False when the occurrence budget ran out: the counts are a lower bound.
    complete: bool

    @property
    def peak(self) -> tuple[datetime, int] | None:
        return self.per_minute.most_common(1)[0] if self.per_minute else None


def forecast(
    tasks: Iterable[Task], start: datetime, minutes: int, max_occurrences: int
) -> Forecast:
    """Count active tasks' executions per minute in ``[start, start + minutes)``;
    stop counting after ``max_occurrences`` to bound the work. An overdue
    occurrence counts in the first minute: it starts now."""
    first = start.replace(second=0, microsecond=0)
    end = first + minutes * MINUTE
    per_minute: Counter[datetime] = Counter()
    counted = seen = 0
    for task in tasks:
        seen += 1
        for occurrence in _occurrences_before(task, end):
            jitter = jitter_offset(execution_id_for(task.task_id, occurrence), task.jitter_seconds)
            starts = max(first, occurrence + timedelta(seconds=jitter))
            if starts >= end:
                continue
            per_minute[starts.replace(second=0, microsecond=0)] += 1
            counted += 1
            if counted >= max_occurrences:
                return Forecast(first, minutes, per_minute, seen, complete=False)
    return Forecast(first, minutes, per_minute, seen, complete=True)


def _occurrences_before(task: Task, end: datetime) -> Iterator[datetime]:
    if task.status is not TaskStatus.ACTIVE or task.next_run_at is None:
        return
    pending = [task.next_run_at]
    while pending:
        for occurrence in pending:
            if occurrence >= end:
                return
            yield occurrence
        pending = upcoming(task.schedule, pending[-1], STEP)
