"""``GET /forecast``: a tenant's executions per minute over the next hours."""

from __future__ import annotations

from collections.abc import Iterator

from dynacron.domain.clock import Clock
from dynacron.domain.schedules.forecast import Forecast, forecast
from dynacron.domain.tasks.task import Task
from dynacron.ports import TaskStore

PAGE = 100


class HerdForecast:
    """Bounded: reads at most ``max_tasks`` tasks and counts at most ``max_occurrences``."""

    def __init__(
        self, tasks: TaskStore, clock: Clock, max_tasks: int, max_occurrences: int
    ) -> None:
        self._tasks = tasks
        self._clock = clock
        self._max_tasks = max_tasks
        self._max_occurrences = max_occurrences

    def next_hours(self, tenant_id: str, hours: int) -> Forecast:
        result = forecast(
            self._tasks_of(tenant_id), self._clock.now(), hours * 60, self._max_occurrences
        )
        if result.tasks >= self._max_tasks:
            return Forecast(result.start, result.minutes, result.per_minute, result.tasks, False)
        return result

    def _tasks_of(self, tenant_id: str) -> Iterator[Task]:
        token, read = None, 0
        while read < self._max_tasks:
            page = self._tasks.page_owned(tenant_id, min(PAGE, self._max_tasks - read), token)
            yield from page.items
            read += len(page.items)
            token = page.next_token
            if token is None:
                return
