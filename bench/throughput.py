"""Tick throughput per shard with a simulated 10 ms round trip to AWS on every call.

Both simulations run dynacron's real tick (``Ticker.tick_shard`` with its pool
of ``tick_concurrency`` threads) through real boto3 clients; they differ in
what answers the requests:

- **double** (``bench/aws_double.py``): botocore builds, validates, signs and
  parses every request as usual, but a ``before-send`` handler answers it from
  a small in-memory model of DynamoDB and SQS and returns the answer 10 ms
  after it was sent. A call costs 10 ms of waiting and about 0.2 ms of the
  model's CPU, so what is measured is the tick's own code and botocore. Before
  measuring, the double is checked against moto: the same tick over the same
  tasks claims the same tasks, sends the same messages and leaves the same
  items (``verify_against_moto``).
- **moto**: a botocore ``before-call`` hook sleeps 10 ms, then in-process moto
  answers. moto spends some 20 ms of CPU per call on this machine, all under
  the GIL, so these rows measure the emulator; they are kept for comparison.

One shard holds ``--tasks`` tasks all due; one ``tick_shard`` claims them and
we divide by its wall time. CPU is ``time.process_time`` around the tick; the
tick's own CPU is that less the double's model (its handler's thread CPU).

Run: .venv/bin/python -m bench.throughput
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import random
import statistics
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any
from unittest import mock

import boto3
from boto3.dynamodb.types import TypeDeserializer
from moto.core import DEFAULT_ACCOUNT_ID
from moto.dynamodb.exceptions import DynamodbException
from moto.dynamodb.models import dynamodb_backends
from moto.dynamodb.responses import DynamoHandler

from bench.aws_double import AwsDouble, AwsModel
from bench.common import QUICK, in_process_aws, write_result
from bench.meter import add_latency
from bench.scaling import task_item
from dynacron.adapters.aws.cursors import DynamoCursorStore
from dynacron.adapters.aws.task_items import task_from_item, task_to_item
from dynacron.adapters.messages import SEND_BATCH_LIMIT
from dynacron.domain.clock import SettableClock
from dynacron.domain.coordination import transitions as coordination
from dynacron.domain.schedules.expressions import FixedDelaySchedule, OneTimeSchedule, RateSchedule
from dynacron.domain.tasks import transitions
from dynacron.domain.tasks.claiming import claim_occurrence
from dynacron.domain.tasks.task import (
    CatchUp,
    CatchUpPolicy,
    Overlap,
    Task,
    TaskStatus,
    execution_id_for,
)
from dynacron.entry.composition import Dynacron
from dynacron.entry.settings import Settings
from dynacron.local.aws import REGION
from dynacron.services.page_claimer import TickReport

NOW = datetime(2026, 11, 30, 12, 30, tzinfo=UTC)
TARGET_FIRES_PER_SECOND = 10_000
GOAL_CLAIMS_PER_SECOND_PER_SHARD = 500
LATENCY_MS = 10
DOUBLE_SIMULATION = (
    "double: real boto3 clients; a botocore before-send handler answers each request from an "
    "in-memory model of DynamoDB and SQS, 10 ms after it was sent (no emulator, no network)"
)
MOTO_SIMULATION = "moto: a botocore before-call hook sleeps 10 ms, then in-process moto answers"
_deserializer = TypeDeserializer()


def latency_bound(concurrency: int, page_size: int = 100) -> float:
    """Claims/s if each call cost exactly the latency and the CPU nothing.

    A page is one Query, one BatchGetItem, its SendMessageBatch calls and its
    claims, each group waiting for the one before; within a group, calls go out
    ``concurrency`` at a time.
    """
    sends = math.ceil(page_size / SEND_BATCH_LIMIT)
    rounds = 2 + math.ceil(sends / concurrency) + math.ceil(page_size / concurrency)
    return page_size / (rounds * LATENCY_MS / 1000)


def due_items(tasks: int, settings: Settings, seed: int) -> list[dict[str, Any]]:
    """``tasks`` weekly tasks due within the last second, built by ``task_to_item``."""
    rng = random.Random(seed)
    items = []
    for _ in range(tasks):
        task_id = uuid.UUID(int=rng.getrandbits(128)).hex
        items.append(task_item(task_id, NOW - timedelta(seconds=rng.uniform(0, 1)), settings))
    return items


def warm(app: Dynacron) -> None:
    """A warm Lambda has loaded its clients' models: keep that out of the figure."""
    app.queue.depth()
    app.cursors.get(0)


def timed_tick(
    app: Dynacron, model_cpu: Callable[[], float]
) -> tuple[TickReport, dict[str, float]]:
    began, cpu, model = time.perf_counter(), time.process_time(), model_cpu()
    report = app.ticker.tick_shard(0)
    seconds = time.perf_counter() - began
    return report, {
        "seconds": seconds,
        "cpu": time.process_time() - cpu,
        "model_cpu": model_cpu() - model,
    }


def measure_double(tasks: int, concurrency: int, latency_ms: float, seed: int) -> dict[str, Any]:
    double = AwsDouble(latency_seconds=0.0)
    settings = double.settings(
        shard_count=1, tick_concurrency=concurrency, tick_max_claims=max(tasks, 2000)
    )
    dynamodb, sqs = double.clients()
    DynamoCursorStore(dynamodb, settings.coordination_table).apply(
        0, coordination.advance_cursor(settings.sharding.bucket(NOW))
    )
    for item in due_items(tasks, settings, seed):
        double.put(settings.tasks_table, item)
    app = Dynacron(settings, dynamodb=dynamodb, sqs=sqs, clock=SettableClock(NOW))
    warm(app)
    double.latency_seconds = latency_ms / 1000
    double.calls.clear()
    report, took = timed_tick(app, lambda: double.model_cpu_seconds)
    assert report.claimed == tasks, f"{report.claimed} of {tasks} claimed"
    assert len(double.messages(settings.dispatch_queue_url)) == tasks
    requests = sum(double.calls.values())
    return {
        "claimed": report.claimed,
        "seconds": took["seconds"],
        "claims_per_second": report.claimed / took["seconds"],
        "cpu_ms_per_claim": 1000 * took["cpu"] / report.claimed,
        "tick_cpu_ms_per_claim": 1000 * (took["cpu"] - took["model_cpu"]) / report.claimed,
        "requests_per_claim": requests / report.claimed,
        "requests": dict(double.calls),
    }


def measure_moto(tasks: int, concurrency: int, latency_ms: float, seed: int) -> dict[str, Any]:
    clock = SettableClock(NOW)
    with in_process_aws(clock, shard_count=1) as (_, _, settings):
        settings = dataclasses.replace(
            settings, tick_concurrency=concurrency, tick_max_claims=max(tasks, 2000)
        )
        table = dynamodb_backends[DEFAULT_ACCOUNT_ID][REGION].get_table(settings.tasks_table)
        for item in due_items(tasks, settings, seed):
            table.put_item(item, overwrite=True)
        # No meter here: its before/after snapshots would triple moto's work.
        dynamodb = add_latency(boto3.client("dynamodb", region_name=REGION), latency_ms / 1000)
        sqs = add_latency(boto3.client("sqs", region_name=REGION), latency_ms / 1000)
        app = Dynacron(settings, dynamodb=dynamodb, sqs=sqs, clock=clock)
        warm(app)
        report, took = timed_tick(app, lambda: 0.0)
    assert report.claimed == tasks, f"{report.claimed} of {tasks} claimed"
    return {
        "claimed": report.claimed,
        "seconds": took["seconds"],
        "claims_per_second": report.claimed / took["seconds"],
        "cpu_ms_per_claim": 1000 * took["cpu"] / report.claimed,
        # moto runs in the tick's process: its CPU cannot be told from the tick's.
        "tick_cpu_ms_per_claim": None,
    }


def row(
    simulation: str,
    concurrency: int,
    latency_ms: float,
    tasks: int,
    repeats: int,
    measure: Callable[[int, int, float, int], dict[str, Any]],
) -> dict[str, Any]:
    """``repeats`` measurements (fresh tables each), summarised by their median rate."""
    runs = []
    for repeat in range(repeats):
        runs.append(measure(tasks, concurrency, latency_ms, repeat))
        print(f"  {simulation} x{concurrency} {latency_ms} ms: {runs[-1]}", flush=True)
    rates = [r["claims_per_second"] for r in runs]
    median = statistics.median(rates)

    def middle(name: str) -> float | None:
        values = [r[name] for r in runs if r.get(name) is not None]
        return round(statistics.median(values), 3) if values else None

    result = {
        "simulation": simulation,
        "tick_concurrency": concurrency,
        "latency_ms": latency_ms,
        "claimed": tasks,
        "repeats": repeats,
        "seconds": middle("seconds"),
        "claims_per_second": round(median, 1),
        "claims_per_second_range": [round(min(rates), 1), round(max(rates), 1)],
        "cpu_ms_per_claim": middle("cpu_ms_per_claim"),
        "tick_cpu_ms_per_claim": middle("tick_cpu_ms_per_claim"),
        "requests_per_claim": middle("requests_per_claim"),
        "latency_bound_claims_per_second": (
            round(latency_bound(concurrency), 1) if latency_ms == LATENCY_MS else None
        ),
        "shards_for_10k_fires_per_second": math.ceil(TARGET_FIRES_PER_SECOND / median),
    }
    if "requests" in runs[0]:
        result["requests"] = runs[0]["requests"]
    return result


# Checking the double against moto


def verification_items(settings: Settings) -> list[dict[str, Any]]:
    """50 tasks covering every path a tick takes, placed as the API would have placed them.

    Due on time, due in an older bucket (walked by the cursor), one-time
    (completes), run_all catching up (claimed again and again in one pass),
    overlap skip (a SKIPPED execution), fixed delay (leaves the index),
    catch-up skip, and not yet due (same bucket, later in the sort key).
    """
    rng = random.Random(8)
    items = []
    for number in range(50):
        task_id = uuid.UUID(int=rng.getrandbits(128)).hex
        kind = number % 10
        at = NOW - timedelta(seconds=rng.uniform(0, 30))
        placed_at = NOW
        fields: dict[str, Any] = {"schedule": RateSchedule(every_seconds=60, anchor=at)}
        if kind == 3:
            at = NOW - timedelta(hours=2, seconds=rng.uniform(0, 600))
            placed_at = at
            fields["schedule"] = RateSchedule(every_seconds=60, anchor=at)
        elif kind == 4:
            fields["schedule"] = OneTimeSchedule(at=at)
        elif kind == 5:
            at = NOW - timedelta(seconds=95)
            fields["schedule"] = RateSchedule(every_seconds=10, anchor=at)
            fields["catchup"] = CatchUpPolicy(CatchUp.RUN_ALL, window_seconds=3600)
        elif kind == 6:
            fields["overlap"] = Overlap.SKIP
            fields["running_execution"] = execution_id_for(task_id, at - timedelta(seconds=60))
        elif kind == 7:
            fields["schedule"] = FixedDelaySchedule(delay_seconds=30)
        elif kind == 8:
            at = NOW - timedelta(minutes=10)
            fields["schedule"] = RateSchedule(every_seconds=60, anchor=at)
            fields["catchup"] = CatchUpPolicy(CatchUp.SKIP)
        elif kind == 9:
            at = NOW + timedelta(minutes=10)
            fields["schedule"] = RateSchedule(every_seconds=60, anchor=at)
        task = Task(
            task_id=task_id,
            name=f"verify-{kind}",
            handler_url="http://127.0.0.1:9/hook",
            payload={"number": number},
            status=TaskStatus.ACTIVE,
            next_run_at=at,
            created_at=NOW - timedelta(days=1),
            updated_at=NOW - timedelta(days=1),
            **fields,
        )
        items.append(task_to_item(task, settings.sharding.place(task_id, at, placed_at)))
    return items


def _plain(items: list[dict[str, Any]], *keys: str) -> dict[tuple[Any, ...], dict[str, Any]]:
    values = [{k: _deserializer.deserialize(v) for k, v in item.items()} for item in items]
    return {tuple(v[k] for k in keys): v for v in values}


def _tick_for_verification(
    app: Dynacron, dynamodb: Any, items: list[dict[str, Any]], clock: SettableClock
) -> dict[str, Any]:
    """Store ``items`` with PutItem, tick at NOW, then try one stale claim."""
    settings = app.settings
    for item in items:
        dynamodb.put_item(TableName=settings.tasks_table, Item=item)
    clock.set(NOW)
    report = app.ticker.tick_shard(0)
    # A claim made from the state read before the tick must lose: its version moved on.
    stale = task_from_item(items[0])
    claim = claim_occurrence(stale, NOW)
    assert claim is not None
    placement = settings.sharding.place(stale.task_id, claim.next_run_at, NOW)
    stale_claim = transitions.claim(claim, placement.key if placement else None, NOW)
    return {
        "report": {
            "candidates": report.candidates,
            "sent": report.sent,
            "claimed": report.claimed,
            "rescheduled": report.rescheduled,
            "lost_races": report.lost_races,
            "buckets_queried": report.buckets_queried,
            "cursor": report.cursor.isoformat() if report.cursor else None,
        },
        "stale_claim_won": app.tasks.apply(stale.task_id, stale_claim),
    }


def _verification_settings(settings: Settings) -> Settings:
    # Small pages and a few threads: pagination and the pool are exercised too.
    return dataclasses.replace(settings, tick_concurrency=4, tick_page_size=7)


STARTED = NOW - timedelta(hours=3)  # the cursors start three buckets back


def throttle_first_claims() -> Callable[[str, dict[str, Any]], bool]:
    """A rule both stand-ins follow in the throttled check: the first UpdateItem of
    each task (its claim) is refused as over its partition's throughput."""
    seen: set[str] = set()

    def refuses(operation: str, params: dict[str, Any]) -> bool:
        if operation != "dynamodb.UpdateItem" or "task_id" not in params.get("Key", {}):
            return False
        key = json.dumps(params["Key"], sort_keys=True)
        first = key not in seen
        seen.add(key)
        return first

    return refuses


def moto_tick(refuses: Callable[[str, dict[str, Any]], bool] | None = None) -> tuple[Any, Any]:
    """The verification tick against moto; ``refuses`` answers some requests with
    DynamoDB's throttling error first (botocore retries them). Returns the tick's
    outcome and every item and message it leaves."""
    clock = SettableClock(STARTED)
    with in_process_aws(clock, shard_count=1) as (dynamodb, sqs, provisioned):
        settings = _verification_settings(provisioned)
        app = Dynacron(settings, dynamodb=dynamodb, sqs=sqs, clock=clock)
        with _throttling(refuses):
            outcome = _tick_for_verification(app, dynamodb, verification_items(settings), clock)
        state = {
            "tasks": _plain(_scan(dynamodb, settings.tasks_table), "task_id"),
            "executions": _plain(
                _scan(dynamodb, settings.executions_table), "task_id", "execution_id"
            ),
            "coordination": _plain(_scan(dynamodb, settings.coordination_table), "key"),
            "messages": sorted(_receive_all(sqs, settings.dispatch_queue_url)),
        }
    return outcome, state


@contextmanager
def _throttling(refuses: Callable[[str, dict[str, Any]], bool] | None) -> Iterator[None]:
    """moto's UpdateItem answers DynamoDB's throttling error where ``refuses`` says so
    (before it applies anything); botocore retries it as from AWS."""
    if refuses is None:
        yield
        return
    original = DynamoHandler.update_item

    def update_item(handler: DynamoHandler) -> Any:
        if refuses("dynamodb.UpdateItem", handler.body):
            raise DynamodbException(
                "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException",
                "Throughput exceeds the current capacity for one or more resources.",
            )
        return original(handler)

    with mock.patch.object(DynamoHandler, "update_item", update_item):
        yield


def model_state(model: AwsModel, settings: Settings) -> dict[str, Any]:
    """What ``moto_tick`` reads of moto, read from the double's model."""
    return {
        "tasks": _plain(list(model.tables[settings.tasks_table].items.values()), "task_id"),
        "executions": _plain(
            list(model.tables[settings.executions_table].items.values()),
            "task_id",
            "execution_id",
        ),
        "coordination": _plain(
            list(model.tables[settings.coordination_table].items.values()), "key"
        ),
        "messages": sorted(m["Body"] for m in model.messages(settings.dispatch_queue_url)),
    }


def same_outcome(moto: tuple[Any, Any], double: tuple[Any, Any]) -> dict[str, Any]:
    """Raises AssertionError unless both ticks did and left the same; a summary."""
    (moto_outcome, moto_state), (double_outcome, double_state) = moto, double
    assert moto_outcome == double_outcome, (moto_outcome, double_outcome)
    for name in moto_state:
        if moto_state[name] != double_state[name]:
            raise AssertionError(f"the double and moto disagree on {name}")
    assert not double_outcome["stale_claim_won"]
    return {
        "tasks": len(double_state["tasks"]),
        **double_outcome["report"],
        "skipped_executions": len(double_state["executions"]),
        "messages": len(double_state["messages"]),
        "stale_claim_refused": True,
        "identical": True,
    }


def verify_against_moto() -> dict[str, Any]:
    """The same tick over the same 50 tasks, against moto and against the double.

    Both must claim the same tasks, send the same messages, record the same
    SKIPPED executions, move the cursor alike and refuse a stale claim; every
    item they leave behind must be equal. Raises AssertionError otherwise.
    """
    moto = moto_tick()
    double = AwsDouble(latency_seconds=0.0)
    settings = _verification_settings(double.settings(shard_count=1))
    dynamodb, sqs = double.clients()
    clock = SettableClock(STARTED)
    DynamoCursorStore(dynamodb, settings.coordination_table).apply(
        0, coordination.advance_cursor(settings.sharding.bucket(STARTED))
    )
    app = Dynacron(settings, dynamodb=dynamodb, sqs=sqs, clock=clock)
    outcome = _tick_for_verification(app, dynamodb, verification_items(settings), clock)
    return same_outcome(moto, (outcome, model_state(double, settings)))


def _scan(dynamodb: Any, table: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for page in dynamodb.get_paginator("scan").paginate(TableName=table, ConsistentRead=True):
        items += page["Items"]
    return items


def _receive_all(sqs: Any, queue_url: str) -> list[str]:
    bodies: list[str] = []
    while True:
        messages = sqs.receive_message(
            QueueUrl=queue_url, MaxNumberOfMessages=10, VisibilityTimeout=600
        ).get("Messages", [])
        if not messages:
            return bodies
        bodies += [m["Body"] for m in messages]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=1000 if QUICK else 5000)
    parser.add_argument("--moto-tasks", type=int, default=100 if QUICK else 250)
    parser.add_argument("--repeats", type=int, default=1 if QUICK else 3)
    parser.add_argument("--concurrency", default="1,4,16,32,64")
    parser.add_argument("--moto-concurrency", default="1,4,16,32")
    args = parser.parse_args()
    verification = verify_against_moto()
    print(f"double checked against moto: {verification}", flush=True)
    runs = []
    for concurrency in (int(c) for c in args.concurrency.split(",")):
        # One at a time is slow by design: fewer tasks keep the run short.
        tasks = args.tasks // 5 if concurrency == 1 else args.tasks
        runs.append(row("double", concurrency, LATENCY_MS, tasks, args.repeats, measure_double))
    # No latency at all: what the CPU alone allows.
    runs.append(row("double", 16, 0, args.tasks, args.repeats, measure_double))
    for concurrency in (int(c) for c in args.moto_concurrency.split(",")):
        tasks = args.moto_tasks * 2 // 5 if concurrency == 1 else args.moto_tasks
        runs.append(row("moto", concurrency, LATENCY_MS, tasks, 1, measure_moto))
    runs.append(row("moto", 16, 0, args.moto_tasks, 1, measure_moto))
    write_result(
        "throughput",
        {
            "latency_simulation": {"double": DOUBLE_SIMULATION, "moto": MOTO_SIMULATION},
            "goal_claims_per_second_per_shard": GOAL_CLAIMS_PER_SECOND_PER_SHARD,
            "target_fires_per_second": TARGET_FIRES_PER_SECOND,
            "double_checked_against_moto": verification,
            "runs": runs,
        },
    )


if __name__ == "__main__":
    main()
