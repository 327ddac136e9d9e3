"""``GET /forecast``: a tenant's executions per minute over the next hours, from its
schedule census (decision 0046): the work grows with its distinct schedules, not
its tasks."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from dynacron.domain.clock import Clock
from dynacron.domain.schedules.forecast import Forecast, census_forecast
from dynacron.domain.schedules.signatures import Signature
from dynacron.ports import TaskStore

# Census entries read per call of the store.
PAGE = 1_000


@dataclass(frozen=True, kw_only=True)
class HerdForecast:
    """Bounded: reads at most ``max_tasks`` census entries (distinct schedules, per
    store shard) and counts at most ``max_occurrences`` distinct occurrences."""

    tasks: TaskStore
    clock: Clock
    max_tasks: int
    max_occurrences: int

    def next_hours(self, tenant_id: str, hours: int) -> Forecast:
        """The tenant's executions per minute from now over ``hours``; not ``complete``
        (a lower bound) when a budget ran out."""
        census, read_all = self.census(tenant_id)
        result = census_forecast(
            sorted(census.items(), key=lambda entry: entry[0].text),
            self.clock.now(),
            hours * 60,
            self.max_occurrences,
        )
        if not read_all:
            return Forecast(result.start, result.minutes, result.per_minute, result.tasks, False)
        return result

    def census(self, tenant_id: str) -> tuple[Counter[Signature], bool]:
        """The tenant's tasks per signature (a store's shards summed), and whether
        every entry was read within ``max_tasks``."""
        totals: Counter[Signature] = Counter()
        token, read = None, 0
        while read < self.max_tasks:
            page = self.tasks.census_page(tenant_id, min(PAGE, self.max_tasks - read), token)
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
