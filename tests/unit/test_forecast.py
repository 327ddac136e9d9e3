"""The herd forecast: executions per minute ahead, jitter included, bounded."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

from dynacron.domain.schedules.expressions import parse_cron, parse_rate
from dynacron.domain.schedules.forecast import forecast
from dynacron.domain.tasks.task import Task, TaskStatus

NOW = datetime(2026, 11, 30, 23, 0, 30, tzinfo=UTC)
MIDNIGHT = datetime(2026, 12, 1, tzinfo=UTC)


def task(task_id: str, schedule: object, next_run_at: datetime, **fields: object) -> Task:
    return Task(
        task_id=task_id,
        name=task_id,
        schedule=schedule,  # type: ignore[arg-type]
        handler_url="http://127.0.0.1:9/hook",
        payload={},
        status=TaskStatus.ACTIVE,
        next_run_at=next_run_at,
        created_at=NOW,
        updated_at=NOW,
        **fields,  # type: ignore[arg-type]
    )


def test_a_midnight_herd_shows_as_one_minute_and_jitter_spreads_it() -> None:
    nightly = parse_cron("0 0 * * *")
    herd = [task(f"t{i}", nightly, MIDNIGHT) for i in range(300)]
    result = forecast(herd, NOW, 24 * 60, 10_000)
    assert result.complete
    assert result.peak == (MIDNIGHT, 300)
    assert sum(result.per_minute.values()) == 300

    spread = [dataclasses.replace(t, jitter_seconds=600) for t in herd]
    result = forecast(spread, NOW, 24 * 60, 10_000)
    assert sum(result.per_minute.values()) == 300
    assert result.peak is not None
    assert result.peak[1] < 300 / 5
    assert all(MIDNIGHT <= m < MIDNIGHT + timedelta(minutes=11) for m in result.per_minute)


def test_a_rate_counts_every_occurrence_in_the_horizon_and_stops_at_its_end() -> None:
    every_minute = parse_rate("1 minute", anchor=NOW.replace(second=0) + timedelta(minutes=1))
    first = NOW.replace(second=0) + timedelta(minutes=1)
    result = forecast([task("r", every_minute, first)], NOW, 60, 10_000)
    assert sum(result.per_minute.values()) == 59  # minutes 1..59 of the hour ahead
    assert set(result.per_minute.values()) == {1}


def test_paused_tasks_count_nothing_and_the_budget_bounds_the_work() -> None:
    every_second = parse_rate("1 second", anchor=NOW)
    paused = dataclasses.replace(task("p", every_second, NOW), status=TaskStatus.PAUSED)
    assert sum(forecast([paused], NOW, 60, 10_000).per_minute.values()) == 0
    bounded = forecast([task("s", every_second, NOW)], NOW, 24 * 60, 1000)
    assert not bounded.complete
    assert sum(bounded.per_minute.values()) == 1000
