"""The schedule census (decision 0046) on moto through the real tick and worker: a
fire writes nothing to it, tasks stored before it are counted by the backfill, and
the forecast from it matches the forecast task by task on a thousand mixed tasks."""

from __future__ import annotations

import dataclasses
import json
import math
import random
import tempfile
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from dynacron.adapters.aws.task_items import task_to_item
from dynacron.api.requests import TaskCreate
from dynacron.cli.main import app
from dynacron.domain.clock import SettableClock
from dynacron.domain.schedules.expressions import (
    CronSchedule,
    OneTimeSchedule,
    RateSchedule,
    Schedule,
    Window,
)
from dynacron.domain.schedules.forecast import census_forecast, forecast
from dynacron.domain.schedules.signatures import counted_signature
from dynacron.domain.tasks import transitions
from dynacron.domain.tasks.task import Task, TaskStatus
from dynacron.entry.composition import Dynacron
from dynacron.services.forecast import HerdForecast
from tests.contract import task_changes
from tests.pipeline import Pipeline
from tests.support import Sink


def census_writes(client: Any) -> list[str]:
    """Records every DynamoDB request that names a census entry, as the client sends it."""
    seen: list[str] = []

    def record(params: dict[str, Any], model: Any, **_: Any) -> None:
        text = json.dumps(params, default=str)
        if "census#" in text:
            seen.append(model.name)

    client.meta.events.register("provide-client-params.dynamodb.*", record)
    return seen


def test_a_fire_writes_nothing_to_the_census(
    pipeline: Pipeline, clock: SettableClock, sink: Sink
) -> None:
    writes = census_writes(pipeline.dynamodb._client)
    # Given a recurring task holding its run slot, a fixed delay and a one-time task
    pipeline.register(cron="* * * * *", handler_url=sink.url, overlap="skip")
    pipeline.register(fixed_delay="1 minute", handler_url=sink.url)
    at = (clock.now() + timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    pipeline.register(at=at, handler_url=sink.url)
    # (the creates counted them: the recorder sees census writes)
    assert writes.count("TransactWriteItems") == 3
    writes.clear()
    # When they fire, a few times, each run finishing (releasing slots, replanning)
    fired = 0
    for _ in range(3):
        clock.advance(timedelta(minutes=1, seconds=5))
        fired += pipeline.tick()
        pipeline.work()
    # Then nothing touched the census
    assert fired >= 5
    assert writes == []


def test_the_backfill_counts_tasks_stored_before_the_census(system: Dynacron) -> None:
    client = system.tasks._client  # the store's own client: items written around the API
    # Given tasks written as items without the census's mark (stored before it existed)
    now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    daily = CronSchedule(expression="0 3 * * *")
    old = [_task(f"old-{n}", daily, now, tenant_id="acme") for n in range(5)]
    for task in old:
        client.put_item(TableName=system.settings.tasks_table, Item=task_to_item(task, None))
    assert system.forecast.census("acme")[0] == Counter()
    # When the backfill runs, twice
    assert system.forecast.count_uncounted("acme") == 5
    assert system.forecast.count_uncounted("acme") == 0
    # Then each is counted once, under its signature
    signature = counted_signature(old[0])
    assert signature is not None
    assert system.forecast.census("acme")[0] == Counter({signature: 5})


def test_the_operator_s_census_backfill_counts_every_tenant_once(system: Dynacron) -> None:
    client = system.tasks._client
    # Given two tenants' tasks written as items without the census's mark, each
    # tenant with its record, and the stack's outputs as `cdk deploy` writes them
    now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    daily = CronSchedule(expression="0 3 * * *")
    for tenant_id, count in (("acme", 3), ("beta", 2)):
        for n in range(count):
            task = _task(f"{tenant_id}-{n}", daily, now, tenant_id=tenant_id)
            client.put_item(TableName=system.settings.tasks_table, Item=task_to_item(task, None))
        system.tenants.ensure_secret(tenant_id, "secret")
    settings = system.settings
    outputs = {
        "Dynacron": {
            "TasksTable": settings.tasks_table,
            "ExecutionsTable": settings.executions_table,
            "CoordinationTable": settings.coordination_table,
        }
    }

    def backfill(*options: str) -> Any:
        result = CliRunner().invoke(app, ["admin", "backfill-census", *options])
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    # When the operator runs the backfill, then again from the outputs file
    first = backfill(
        "--tasks-table",
        settings.tasks_table,
        "--executions-table",
        settings.executions_table,
        "--coordination-table",
        settings.coordination_table,
    )
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "outputs.json"
        path.write_text(json.dumps(outputs))
        second = backfill("--outputs-file", str(path))
    # Then every tenant's tasks are counted once, and the second run counts none
    assert first == {"tasks_table": settings.tasks_table, "tenants": 2, "counted": 5}
    assert second == [{"tasks_table": settings.tasks_table, "tenants": 2, "counted": 0}]
    signature = counted_signature(_task("x", daily, now))
    assert system.forecast.census("acme")[0] == Counter({signature: 3})
    assert system.forecast.census("beta")[0] == Counter({signature: 2})


def test_the_census_backfill_needs_its_tables() -> None:
    result = CliRunner().invoke(app, ["admin", "backfill-census", "--tasks-table", "t"])
    assert result.exit_code == 2
    assert "--executions-table" in result.output


def census_items(system: Dynacron) -> list[dict[str, Any]]:
    """Every census item in the executions table, whatever it counts (a Scan)."""
    client = system.tasks._client
    pages = client.get_paginator("scan").paginate(TableName=system.settings.executions_table)
    return [
        item
        for page in pages
        for item in page["Items"]
        if item["task_id"]["S"].startswith("census#")
    ]


def test_an_entry_that_counts_no_task_is_deleted(system: Dynacron) -> None:
    # Given three tasks of one schedule and one of another, created through the API
    now = system.clock.now()
    daily, hourly = CronSchedule(expression="0 3 * * *"), CronSchedule(expression="0 * * * *")
    tasks = [_task(f"t-{n}", daily, now) for n in range(3)] + [_task("h", hourly, now)]
    for task in tasks:
        system.tasks.create_within_quota(task, None, 100, "secret")
    assert len(census_items(system)) >= 2
    # When every one of them leaves the census: deleted, set aside, paused
    assert system.tasks.delete_owned("acme", "t-0")
    assert system.tasks.delete_owned("acme", "h")
    assert system.tasks.apply("t-1", transitions.set_aside(1, "it raised", now))
    paused = dataclasses.replace(tasks[2], status=TaskStatus.PAUSED, version=2)
    assert task_changes.replace(system.tasks, paused, None, expected_version=1)
    # Then no census item is left: a forecast reads nothing (none at 0, none at -1)
    assert census_items(system) == []
    # And a task of that schedule created again is counted again
    system.tasks.create_within_quota(_task("t-3", daily, now), None, 100, "secret")
    signature = counted_signature(tasks[0])
    assert system.forecast.census("acme")[0] == Counter({signature: 1})


def test_a_decrement_of_an_entry_ttl_removed_leaves_nothing(system: Dynacron) -> None:
    # Given a one-time task whose census entry TTL removed (a day after its minute)
    now = system.clock.now()
    once = _task("once", OneTimeSchedule(at=now + timedelta(hours=1)), now)
    system.tasks.create_within_quota(once, None, 100, "secret")
    client = system.tasks._client
    for item in census_items(system):
        key = {"task_id": item["task_id"], "execution_id": item["execution_id"]}
        client.delete_item(TableName=system.settings.executions_table, Key=key)
    # When the task is deleted later
    assert system.tasks.delete_owned("acme", "once")
    # Then no item with tasks -1 (no signature, no TTL) is left behind
    assert census_items(system) == []


def _task(
    task_id: str,
    schedule: Schedule,
    now: datetime,
    *,
    tenant_id: str = "acme",
    status: TaskStatus = TaskStatus.ACTIVE,
    jitter_seconds: int = 0,
) -> Task:
    return Task(
        task_id=task_id,
        name=task_id,
        schedule=schedule,
        handler_url="http://127.0.0.1:9/",
        payload={},
        status=status,
        next_run_at=schedule.first_run(now),
        created_at=now,
        updated_at=now,
        tenant_id=tenant_id,
        jitter_seconds=jitter_seconds,
    )


def mixed_tasks(now: datetime, count: int) -> list[Task]:
    """Crons in zones with daylight saving (a DST night inside the window), with ``H``
    and with bounds; rates of whole and odd periods; one-time tasks; paused and
    ended ones."""
    pick = random.Random(24)
    zones = ["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata"]
    crons = ["0 * * * *", "30 2 * * *", "H H * * *", "*/15 * * * *", "H/10 * * * *", "0 0 * * *"]
    tasks: list[Task] = []
    for n in range(count):
        roll = pick.random()
        schedule: Schedule
        if roll < 0.55:
            window = Window()
            if pick.random() < 0.1:
                window = Window(end_at=now + timedelta(hours=pick.randint(1, 30)))
            schedule = CronSchedule(
                expression=pick.choice(crons),
                timezone=pick.choice(zones),
                seed=f"task-{n}",
                window=window,
            )
        elif roll < 0.8:
            period = pick.choice([60, 300, 3600, 90, 7])
            anchor = now - timedelta(
                seconds=pick.randint(0, 10_000), milliseconds=pick.randint(0, 999)
            )
            schedule = RateSchedule(every_seconds=period, anchor=anchor)
        else:
            at = now + timedelta(seconds=pick.randint(30, 2 * 86_400))
            schedule = OneTimeSchedule(at=at.replace(microsecond=0))
        status = TaskStatus.PAUSED if pick.random() < 0.05 else TaskStatus.ACTIVE
        tasks.append(_task(f"task-{n}", schedule, now, status=status))
    return tasks


def census_of(tasks: list[Task]) -> Counter[Any]:
    counts: Counter[Any] = Counter()
    for task in tasks:
        signature = counted_signature(task)
        if signature is not None:
            counts[signature] += 1
    return counts


def test_the_census_forecast_matches_the_task_by_task_one() -> None:
    # Given a thousand mixed tasks, the window over the night Europe/Berlin springs
    # forward (2027-03-28, 01:00 UTC). A thousand hold every cron in every zone,
    # every rate period, bounded, one-time and paused tasks; their 780,000
    # occurrences cost the task-by-task forecast 7 s of CPU (three thousand: 21 s).
    now = datetime(2027, 3, 27, 20, 0, 0, 500_000, tzinfo=UTC)
    tasks = mixed_tasks(now, 1_000)
    census = census_of(tasks)
    # When both forecast 24 hours
    exact = forecast(tasks, now, 24 * 60, 10_000_000, max_per_task=100_000)
    counted = census_forecast(census.items(), now, 24 * 60, 10_000_000, max_per_signature=100_000)
    # Then every minute after the first holds the same count, and the census read
    # far fewer schedules than there are tasks
    assert exact.complete
    assert counted.complete
    first = exact.start
    later = {m: c for m, c in exact.per_minute.items() if m > first}
    assert {m: c for m, c in counted.per_minute.items() if m > first} == later
    assert sum(later.values()) > 50_000
    assert len(census) < len(tasks) / 2
    assert counted.tasks == sum(1 for t in tasks if t.status is not TaskStatus.PAUSED)


def test_jitter_is_spread_as_the_tasks_spread_it() -> None:
    # Given a thousand tasks on one midnight cron, spread by 15 minutes of jitter
    now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    midnight = CronSchedule(expression="0 0 * * *")
    tasks = [_task(f"j-{n}", midnight, now, jitter_seconds=900) for n in range(1_000)]
    exact = forecast(tasks, now, 24 * 60, 1_000_000)
    counted = census_forecast(census_of(tasks).items(), now, 24 * 60, 1_000_000)
    # Then both count every execution, over the same 16 minutes, each minute alike
    # within what chance gives a thousand draws (the census holds the expectation:
    # five standard deviations of a minute's binomial count)
    assert sum(counted.per_minute.values()) == sum(exact.per_minute.values()) == 1_000
    assert set(counted.per_minute) == set(exact.per_minute)
    share = 60 / 901
    spread = 5 * math.sqrt(1_000 * share * (1 - share))
    for minute, expected in counted.per_minute.items():
        assert abs(exact.per_minute[minute] - expected) <= max(spread, 3), minute


def test_the_api_forecast_of_a_tenant_past_max_tasks_comes_from_the_census(
    system: Dynacron, sink: Sink
) -> None:
    # Given a tenant with more counted tasks than the forecast reads one by one
    for _ in range(30):
        system.task_service.register("acme", _create_body(sink.url).to_spec())
    small = HerdForecast(
        tasks=system.tasks, clock=system.clock, max_tasks=10, max_occurrences=30_000
    )
    # When it forecasts: the census's 30 tasks (in at most 8 entries, one per shard)
    result = small.next_hours("acme", 24)
    # Then the forecast is complete, with every task's midnight run in one minute
    assert result.complete
    assert result.tasks == 30
    assert result.peak is not None
    assert result.peak[1] == 30


def _create_body(url: str) -> TaskCreate:
    return TaskCreate(cron="0 0 * * *", handler_url=url)
