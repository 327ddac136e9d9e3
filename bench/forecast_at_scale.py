"""``GET /forecast`` at 100 k and 1 M tasks on SQLite (issue 24, decision 0046).

Each size gets a fresh database file seeded directly (rows written as the store
writes them, the census beside them: filling a million through the API would take
minutes and measure the import, not the forecast); the first thousand tasks go
through the store's own batch create, and the seeded census must agree with what
it counted for them. Then the forecast service (``HerdForecast``, the API's
settings: 20,000 tasks or census entries read, 30,000 occurrences) forecasts the
tenant's next 24 hours, timed; beside it, the task-by-task forecast of the
tenant's first 20,000 tasks, what ``GET /forecast`` answered before the census.

The tasks: a herd-prone mix, the shape an estate moved over has: 50% crons out of
a few hundred written ones (midnight, on the hour, every 15 minutes, business
hours) in six zones, 20% ``H`` crons, 20% fixed rates anchored at their creation,
5% one-time tasks over the next two days, 5% paused.

Run: .venv/bin/python -m bench.forecast_at_scale [--sizes 100000,1000000]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from dynacron.adapters.sqlite.database import Database
from dynacron.adapters.sqlite.records import dump
from dynacron.adapters.sqlite.tasks import SqliteTaskStore
from dynacron.domain.clock import SettableClock
from dynacron.domain.instants import format_instant
from dynacron.domain.schedules.expressions import (
    CronSchedule,
    OneTimeSchedule,
    RateSchedule,
    Schedule,
)
from dynacron.domain.schedules.forecast import census_forecast
from dynacron.domain.schedules.signatures import CENSUS_KEY, Signature, counted_signature
from dynacron.domain.tasks.record import task_record
from dynacron.domain.tasks.task import Sharding, Task, TaskStatus
from dynacron.entry.settings import Settings
from dynacron.services.forecast import HerdForecast

SIZES = (100_000, 1_000_000)
TENANT = "estate"
NOW = datetime(2026, 12, 5, 21, 0, 0, 250_000, tzinfo=UTC)
SHARDING = Sharding(shard_count=4, bucket_seconds=3600)
ZONES = ("UTC", "Europe/Berlin", "America/New_York", "Asia/Tokyo", "Europe/London", "Asia/Kolkata")
# Tasks seeded per executemany.
ROWS = 20_000
# Tasks created through the store itself, to check the seeding against.
THROUGH_THE_STORE = 1_000


def written_crons() -> list[str]:
    """A few hundred crons as people write them."""
    crons = ["0 0 * * *", "0 * * * *", "*/15 * * * *", "*/5 * * * *", "0 9 * * 1-5"]
    crons += [f"{minute} {hour} * * *" for hour in range(24) for minute in (0, 30)]
    crons += [f"0 {hour} * * 1-5" for hour in range(6, 20)]
    crons += [f"0 {hour} 1 * *" for hour in range(24)]
    crons += [f"{minute} * * * *" for minute in range(0, 60, 5)]
    return crons


def a_task(n: int, pick: random.Random, crons: list[str]) -> Task:
    task_id = f"t{n:08d}"
    roll = pick.random()
    schedule: Schedule
    if roll < 0.5:
        schedule = CronSchedule(expression=pick.choice(crons), timezone=pick.choice(ZONES))
    elif roll < 0.7:
        expression = pick.choice(["H H * * *", "H * * * *", "H/15 * * * *", "H 9 * * 1-5"])
        schedule = CronSchedule(expression=expression, timezone=pick.choice(ZONES), seed=task_id)
    elif roll < 0.9:
        created = NOW - timedelta(seconds=pick.randint(0, 30 * 86_400))
        schedule = RateSchedule(every_seconds=pick.choice([60, 300, 600, 3600]), anchor=created)
    else:
        at = NOW + timedelta(seconds=pick.randint(60, 2 * 86_400))
        schedule = OneTimeSchedule(at=at.replace(microsecond=0))
    status = TaskStatus.PAUSED if pick.random() < 0.05 else TaskStatus.ACTIVE
    return Task(
        task_id=task_id,
        name=f"job {n}",
        schedule=schedule,
        handler_url="http://127.0.0.1:9/",
        payload={},
        status=status,
        next_run_at=schedule.first_run(NOW),
        created_at=NOW - timedelta(microseconds=n),
        updated_at=NOW,
        tenant_id=TENANT,
    )


def seed(database: Database, store: SqliteTaskStore, size: int) -> Counter[Signature]:
    """``size`` tasks of the mix in the database, counted in its census; the census."""
    pick = random.Random(size)
    crons = written_crons()
    first = [a_task(n, pick, crons) for n in range(min(THROUGH_THE_STORE, size))]
    store.create_many_within_quota(
        [(task, SHARDING.place_task(task, NOW)) for task in first], size + 1, "secret"
    )
    census: Counter[Signature] = Counter()
    for task in first:
        signature = counted_signature(task)
        if signature is not None:
            census[signature] += 1
    stored = {
        entry.signature: entry.tasks for entry in _all_entries(store) if entry.signature in census
    }
    if stored != dict(census):
        raise AssertionError("the seeded census would differ from the store's own")
    for start in range(len(first), size, ROWS):
        rows = []
        for n in range(start, min(start + ROWS, size)):
            task = a_task(n, pick, crons)
            record = task_record(task)
            signature = counted_signature(task)
            if signature is not None:
                census[signature] += 1
                record[CENSUS_KEY] = signature.key
            placement = SHARDING.place_task(task, NOW)
            record["due_bucket"] = placement.key if placement else None
            rows.append(
                (
                    task.task_id,
                    TENANT,
                    record["created_at"],
                    task.version,
                    record["due_bucket"],
                    record.get("next_run_at"),
                    dump(record),
                )
            )
        with database.write() as connection:
            connection.executemany(
                """INSERT INTO tasks (task_id, tenant_id, created_at, version, due_bucket,
                   next_run_at, record) VALUES (?, ?, ?, ?, ?, ?, ?)""",
                rows,
            )
    with database.write() as connection:
        connection.executemany(
            """INSERT INTO census (tenant_id, signature_key, signature, tasks, ends_at)
               VALUES (?, ?, ?, ?, ?) ON CONFLICT (tenant_id, signature_key)
               DO UPDATE SET tasks = excluded.tasks""",
            [
                (
                    TENANT,
                    signature.key,
                    signature.text,
                    count,
                    format_instant(signature.ends_at) if signature.ends_at else None,
                )
                for signature, count in census.items()
            ],
        )
        connection.execute("UPDATE tenants SET task_count = ? WHERE tenant_id = ?", (size, TENANT))
    return census


def _all_entries(store: SqliteTaskStore) -> list[Any]:
    entries, token = [], None
    while True:
        page = store.census_page(TENANT, 1_000, token)
        entries += page.items
        token = page.next_token
        if token is None:
            return entries


def measure(size: int, directory: Path) -> dict[str, Any]:
    """Seed ``size`` tasks, then time the forecast as ``GET /forecast`` computes it."""
    database = Database(directory / f"forecast-{size}.db")
    try:
        store = SqliteTaskStore(database)
        started = time.perf_counter()
        census = seed(database, store, size)
        seeded = time.perf_counter() - started
        service = HerdForecast(
            tasks=store,
            clock=SettableClock(NOW),
            max_tasks=Settings.forecast_max_tasks,
            max_occurrences=Settings.forecast_max_occurrences,
        )
        started, cpu = time.perf_counter(), time.process_time()
        result = service.next_hours(TENANT, 24)
        seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu
        # The same census with no occurrence budget: what a complete answer takes.
        started, cpu = time.perf_counter(), time.process_time()
        entries, _ = service.census(TENANT, ending_after=NOW)
        unbounded = census_forecast(entries.items(), NOW, 24 * 60, 10**9, 10**9)
        unbounded_cpu = time.process_time() - cpu
        # What GET /forecast answered before the census: the first 20,000 tasks, one by one.
        started = time.perf_counter()
        before = service._task_by_task(TENANT, 24)
        before_seconds = time.perf_counter() - started
        peak = result.peak
        return {
            "tasks": size,
            "counted": sum(census.values()),
            "signatures": len(census),
            "seed_seconds": round(seeded, 1),
            "forecast_seconds": round(seconds, 3),
            "forecast_cpu_seconds": round(cpu_seconds, 3),
            "complete": result.complete,
            "not_counted": result.not_counted,
            "executions": sum(result.per_minute.values()),
            "peak": {"minute": format_instant(peak[0]), "executions": peak[1]} if peak else None,
            "unbounded_cpu_seconds": round(unbounded_cpu, 3),
            "unbounded_complete": unbounded.complete,
            "unbounded_executions": sum(unbounded.per_minute.values()),
            "before_seconds": round(before_seconds, 3),
            "before_complete": before.complete,
            "before_executions": sum(before.per_minute.values()),
            "before_tasks": before.tasks,
        }
    finally:
        database.close()


def forecast_figures(sizes: tuple[int, ...] = SIZES) -> list[dict[str, Any]]:
    """One row per size: the forecast's time from the census and whether it is
    complete, beside the task-by-task forecast of the first 20,000 tasks."""
    with tempfile.TemporaryDirectory() as directory:
        return [measure(size, Path(directory)) for size in sizes]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(str(s) for s in SIZES))
    arguments = parser.parse_args(argv)
    sizes = tuple(int(s) for s in arguments.sizes.split(","))
    json.dump(forecast_figures(sizes), sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
