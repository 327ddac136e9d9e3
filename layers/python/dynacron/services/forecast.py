"""``GET /forecast``: a tenant's executions per minute over the next hours, from its
schedule census (decision 0046): the work grows with its distinct schedules, not
its tasks."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

from dynacron.domain.clock import Clock
from dynacron.domain.schedules.forecast import Forecast, census_forecast, forecast
from dynacron.domain.schedules.signatures import Signature
from dynacron.domain.tasks.task import Task
from dynacron.ports import TaskStore

# Census entries read per call of the store.
PAGE = 1_000
# Census entries read at most (a signature is up to ``CENSUS_SHARDS`` entries on
# DynamoDB, about 250 bytes each: 25 MB, some 25 Query pages). The occurrences
# computed from them are ``max_occurrences``, the budget the API's time was
# measured for (docs/limits.md), spent on the largest herds first.
CENSUS_ENTRIES = 100_000
# Tasks read per page for the exact forecast of a small tenant.
TASK_PAGE = 100


@dataclass(frozen=True, kw_only=True)
class HerdForecast:
    """Exact for a tenant of at most ``max_tasks`` counted tasks (each task's own
    occurrences and jitter, as the tick will see them); from the census beyond,
    where reading every task would not fit the API's time (decision 0046).

    Bounded: reads at most ``max_tasks`` tasks, or ``max_census_entries`` census
    entries, and computes at most ``max_occurrences`` occurrences."""

    tasks: TaskStore
    clock: Clock
    max_tasks: int
    max_occurrences: int
    max_census_entries: int = CENSUS_ENTRIES

    def next_hours(self, tenant_id: str, hours: int) -> Forecast:
        """The tenant's executions per minute from now over ``hours``; not ``complete``
        (a lower bound) when a budget ran out."""
        census, read_all = self.census(tenant_id, ending_after=self.clock.now())
        if read_all and sum(census.values()) <= self.max_tasks:
            exact = self._task_by_task(tenant_id, hours)
            if exact.complete:
                return exact
        result = census_forecast(census.items(), self.clock.now(), hours * 60, self.max_occurrences)
        if not read_all:
            # Entries past the bound: how many tasks they count is not known.
            return dataclasses.replace(result, complete=False)
        return result

    def _task_by_task(self, tenant_id: str, hours: int) -> Forecast:
        result = forecast(
            self._tasks_of(tenant_id), self.clock.now(), hours * 60, self.max_occurrences
        )
        if result.tasks >= self.max_tasks:
            return Forecast(result.start, result.minutes, result.per_minute, result.tasks, False)
        return result

    def _tasks_of(self, tenant_id: str) -> Iterator[Task]:
        token, read = None, 0
        while read < self.max_tasks:
            page = self.tasks.page_owned(tenant_id, min(TASK_PAGE, self.max_tasks - read), token)
            yield from page.items
            read += len(page.items)
            token = page.next_token
            if token is None:
                return

    def census(
        self, tenant_id: str, ending_after: datetime | None = None
    ) -> tuple[Counter[Signature], bool]:
        """The tenant's tasks per signature (a store's shards summed), and whether
        every entry was read within ``max_census_entries``."""
        totals: Counter[Signature] = Counter()
        token, read = None, 0
        while read < self.max_census_entries:
            limit = min(PAGE, self.max_census_entries - read)
            page = self.tasks.census_page(tenant_id, limit, token, ending_after)
            for entry in page.items:
                totals[entry.signature] += entry.tasks
            read += len(page.items)
            token = page.next_token
            if token is None:
                return totals, True
        return totals, False

    def count_uncounted(self, tenant_id: str) -> int:
        """Count in the census every task of the tenant stored before it existed (the
        one-off backfill); how many it counted.
        Safe to run again, or beside live writes: a counted task is never counted twice."""
        token, counted = None, 0
        while True:
            page = self.tasks.count_uncounted(tenant_id, PAGE, token)
            counted += len(page.items)
            token = page.next_token
            if token is None:
                return counted
