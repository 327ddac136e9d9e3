"""``GET /forecast``: a tenant's executions per minute over the next hours."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from dynacron.domain.clock import Clock
from dynacron.domain.schedules.forecast import Forecast, forecast
from dynacron.domain.tasks.task import Task
from dynacron.ports import TaskStore

PAGE = 100


@dataclass(frozen=True, kw_only=True)
class HerdForecast:
    """Bounded: reads at most ``max_tasks`` tasks and counts at most ``max_occurrences``."""

    tasks: TaskStore
    clock: Clock
    max_tasks: int
    max_occurrences: int

    def next_hours(self, tenant_id: str, hours: int) -> Forecast:
        """The tenant's executions per minute from now over ``hours``; not ``complete``
        (a lower bound) when a budget ran out."""
        result = forecast(
            self._tasks_of(tenant_id), self.clock.now(), hours * 60, self.max_occurrences
        )
        if result.tasks >= self.max_tasks:
            return Forecast(result.start, result.minutes, result.per_minute, result.tasks, False)
        return result

    def _tasks_of(self, tenant_id: str) -> Iterator[Task]:
        token, read = None, 0
        while read < self.max_tasks:
            page = self.tasks.page_owned(tenant_id, min(PAGE, self.max_tasks - read), token)
            yield from page.items
            read += len(page.items)
            token = page.next_token
            if token is None:
                return
