"""Scan-free scaling: what one tick reads with 1k, 10k, 100k (1M on request) tasks, 100 due.

Registered tasks are written straight into moto's in-process table (no HTTP,
no request parsing: the only way to reach 1M items in minutes); the tick then
runs through the real, metered client. Tasks not due sit in the same shards and
the same current bucket as the due ones, later in the sort key, and in buckets
up to a week ahead: a tick that read them would show it.

Run: .venv/bin/python -m bench.scaling [--sizes 1000,10000,100000,1000000]
"""

from __future__ import annotations

import argparse
import copy
import random
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
from moto.core import DEFAULT_ACCOUNT_ID
from moto.dynamodb.models import dynamodb_backends

from bench.common import QUICK, in_process_aws, write_result
from bench.meter import Meter
from dynacron.adapters.aws.task_items import task_to_item
from dynacron.definitions.resources import COORDINATION, DUE_INDEX, TASKS
from dynacron.domain.clock import SettableClock
from dynacron.domain.instants import format_instant
from dynacron.domain.schedules.expressions import RateSchedule
from dynacron.domain.tasks.task import Task, TaskStatus
from dynacron.entry.composition import Dynacron
from dynacron.local.aws import REGION

NOW = datetime(2026, 11, 30, 12, 30, tzinfo=UTC)
DUE = 100
SHARDS = 4
WEEK_SECONDS = 7 * 24 * 3600


def task_item(task_id: str, next_run_at: datetime, settings: Any) -> dict[str, Any]:
    task = Task(
        task_id=task_id,
        name="scaling",
        schedule=RateSchedule(every_seconds=WEEK_SECONDS, anchor=next_run_at),
        handler_url="http://127.0.0.1:9/hook",
        payload={"customer": 1},
        status=TaskStatus.ACTIVE,
        next_run_at=next_run_at,
        created_at=NOW - timedelta(days=1),
        updated_at=NOW - timedelta(days=1),
    )
    return task_to_item(task, settings.sharding.place(task_id, next_run_at, NOW))


def fill(settings: Any, registered: int, rng: random.Random) -> None:
    """``registered`` tasks, of which DUE are due now, written straight into moto's table."""
    table = dynamodb_backends[DEFAULT_ACCOUNT_ID][REGION].get_table(settings.tasks_table)
    template = task_item("template", NOW + timedelta(hours=1), settings)
    for number in range(registered):
        due = number < DUE
        # Not due: from a second from now to a week ahead, many in the current bucket.
        offset = -rng.uniform(0, 30) if due else rng.uniform(1, WEEK_SECONDS)
        at = NOW + timedelta(seconds=offset)
        task_id = uuid.UUID(int=rng.getrandbits(128)).hex
        if due:
            item = task_item(task_id, at, settings)
        else:
            # Same shape as a real task, built faster than through the domain.
            item = copy.deepcopy(template)
            placement = settings.sharding.place(task_id, at, NOW)
            item["task_id"] = {"S": task_id}
            item["next_run_at"] = {"S": format_instant(at)}
            item[DUE_INDEX.partition_key.name] = {"S": placement.key}
        table.put_item(item, overwrite=True)


def measure(registered: int) -> dict[str, Any]:
    rng = random.Random(registered)
    clock = SettableClock(NOW)
    with in_process_aws(clock, shard_count=SHARDS) as (raw_dynamodb, raw_sqs, settings):
        began = time.perf_counter()
        fill(settings, registered, rng)
        fill_seconds = time.perf_counter() - began
        meter = Meter(
            tables={settings.tasks_table: TASKS, settings.coordination_table: COORDINATION},
            raw_dynamodb=raw_dynamodb,
        )
        dynamodb = meter.attach(boto3.client("dynamodb", region_name=REGION))
        app = Dynacron(settings, dynamodb=dynamodb, sqs=raw_sqs, clock=clock)
        began = time.perf_counter()
        reports = app.ticker.tick()
        tick_seconds = time.perf_counter() - began
        calls = meter.reset()
    claimed = sum(r.claimed for r in reports)
    assert claimed == DUE, f"{claimed} claimed of {DUE} due"
    # Every read of the tick: due-index pages, consistent re-reads, cursors.
    task_calls = [c for c in calls if c.service == "dynamodb"]
    return {
        "registered": registered,
        "due": DUE,
        "claimed": claimed,
        "items_read": sum(c.items_read for c in task_calls),
        "read_units": sum(c.rcu for c in task_calls),
        "requests": len(task_calls),
        "requests_by_operation": {
            op: sum(1 for c in task_calls if c.operation == op)
            for op in sorted({c.operation for c in task_calls})
        },
        # moto filters the index in Python over every item; DynamoDB does not.
        "emulator_tick_seconds": round(tick_seconds, 3),
        "fill_seconds": round(fill_seconds, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    # 1M fits in memory (about 4 GB) but takes some 10 minutes to fill: on request.
    default = "1000,10000" if QUICK else "1000,10000,100000"
    parser.add_argument("--sizes", default=default)
    sizes = [int(s) for s in parser.parse_args().sizes.split(",")]
    runs = []
    for size in sizes:
        runs.append(measure(size))
        print(runs[-1], flush=True)
    reads = [r["items_read"] for r in runs]
    result = {
        "shards": SHARDS,
        "runs": runs,
        "items_read_ratio_largest_to_smallest": round(reads[-1] / reads[0], 4),
        "goal_ratio": 1.05,
    }
    write_result("scaling", result)


if __name__ == "__main__":
    main()
