"""Cost per fire: every AWS request and capacity unit a fire uses, in US dollars per million.

Runs the real tick and worker against in-process moto with a metered client
(see ``bench.meter``), a settable clock and a loopback sink as the handler.
The worker is driven as Lambda's SQS event source mapping drives it: receive
up to 10, invoke, delete the records not reported failed (those requests are
billed to the account, so they are counted).

Run: .venv/bin/python -m bench.cost
"""

from __future__ import annotations

import dataclasses
import heapq
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3

from bench.common import in_process_aws, write_result
from bench.loopback import Delivery, Sink
from bench.meter import Meter, item_size, read_units, summarise
from dynacron.adapters.powertools.metrics import EmfDocument
from dynacron.api.requests import TaskCreate
from dynacron.definitions.resources import (
    CENSUS_KEY_PREFIX,
    CHANGES_KEY_PREFIX,
    COORDINATION,
    EXECUTIONS,
    TASKS,
)
from dynacron.definitions.tick_timing import LoopTiming
from dynacron.domain.clock import SettableClock
from dynacron.domain.coordination.tenants import DEFAULT_TENANT
from dynacron.domain.instants import format_instant
from dynacron.entry.composition import Dynacron
from dynacron.entry.events import TICK_LOOP_MARGIN
from dynacron.local.aws import REGION
from dynacron.local.gateway import LocalContext
from dynacron.local.runtime import sqs_event
from dynacron.services.tick_loop import ShardTickLoop

START = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)

# us-east-1 list prices (USD), read from the public pricing pages, November 2026.
PRICES = {
    "dynamodb_on_demand_per_million_write_units": 0.625,
    "dynamodb_on_demand_per_million_read_units": 0.125,
    "dynamodb_provisioned_per_wcu_hour": 0.00065,
    "dynamodb_provisioned_per_rcu_hour": 0.00013,
    # Provisioned capacity is paid for whether used or not: at the default
    # auto-scaling target of 70 % utilisation a used unit costs 1/0.7 of one.
    "provisioned_utilisation": 0.7,
    "sqs_standard_per_million_requests": 0.40,
    "lambda_per_million_requests": 0.20,
    "eventbridge_scheduler_per_million_invocations": 1.00,
}
WORKER_BATCH = 10
# The looping tick's Lambda timeout (infra/constructs/tick.py, TICK_TIMEOUT, from
# LoopTiming): an invocation's loop ends this long after it started, less its margin.
TICK_TIMEOUT = timedelta(seconds=LoopTiming().invocation_seconds)
# EventBridge starts each minute's invocation some seconds into the minute.
TICK_ARRIVAL_OFFSET = timedelta(seconds=12)


@dataclass
class Bench:
    app: Dynacron
    meter: Meter
    clock: SettableClock
    raw_sqs: Any
    sink: Sink
    # The EMF documents the app's metrics emitted (what CloudWatch Logs ingests).
    metric_documents: list[EmfDocument] = field(default_factory=list)


def dollars_per_million(per_fire: dict[str, float]) -> dict[str, float]:
    """USD per million fires: DynamoDB at on-demand or provisioned, plus SQS and Lambda requests."""
    p = PRICES
    sqs = per_fire["sqs_requests"] * p["sqs_standard_per_million_requests"]
    invocations = per_fire["lambda_invocations"] * p["lambda_per_million_requests"]
    on_demand = (
        per_fire["write_units"] * p["dynamodb_on_demand_per_million_write_units"]
        + per_fire["rcu"] * p["dynamodb_on_demand_per_million_read_units"]
    )
    hours_per_million_units = 1e6 / 3600 / p["provisioned_utilisation"]
    provisioned = hours_per_million_units * (
        per_fire["write_units"] * p["dynamodb_provisioned_per_wcu_hour"]
        + per_fire["rcu"] * p["dynamodb_provisioned_per_rcu_hour"]
    )
    return {
        "dynamodb_on_demand": round(on_demand, 4),
        "dynamodb_provisioned": round(provisioned, 4),
        "sqs": round(sqs, 4),
        "lambda_requests": round(invocations, 4),
        "total_on_demand": round(on_demand + sqs + invocations, 4),
        "total_provisioned": round(provisioned + sqs + invocations, 4),
        "eventbridge_scheduler": p["eventbridge_scheduler_per_million_invocations"],
    }


def drain_worker(bench: Bench, delete: bool = True) -> int:
    """Receive, invoke the worker, delete: as the SQS event source mapping does."""
    app = bench.app
    sqs = app.queue._client  # the metered client: these requests are billed
    url = app.settings.dispatch_queue_url
    invocations = 0
    undeleted: list[dict[str, Any]] = []
    while True:
        messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=WORKER_BATCH).get(
            "Messages", []
        )
        if not messages:
            break
        invocations += 1
        result = app.worker(sqs_event(messages, "arn:aws:sqs:bench"), LocalContext("worker"))
        failed = {f["itemIdentifier"] for f in result.get("batchItemFailures", [])}
        done = [m for m in messages if m["MessageId"] not in failed]
        if delete and done:
            sqs.delete_message_batch(
                QueueUrl=url,
                Entries=[
                    {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(done)
                ],
            )
        else:
            undeleted += messages
    # A worker that died before deleting: its messages come back after their
    # visibility timeout (free); here at once, through the unmetered client.
    for message in undeleted:
        bench.raw_sqs.change_message_visibility(
            QueueUrl=url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0
        )
    return invocations


def fail_first_call() -> Callable[[Delivery], tuple[int, dict[str, str]]]:
    seen: set[str] = set()

    def answer(delivery: Delivery) -> tuple[int, dict[str, str]]:
        key = delivery.headers["Idempotency-Key"]
        first = key not in seen
        seen.add(key)
        return (500 if first else 200), {}

    return answer


def register(bench: Bench, count: int, **fields: Any) -> None:
    for number in range(count):
        bench.app.task_service.register(
            DEFAULT_TENANT,
            TaskCreate(
                name=f"bench-{number}",
                handler_url=f"{bench.sink.url}/hook",
                payload={"report": "daily", "customer": number},
                **fields,
            ).to_spec(),
        )


def scenario(
    bench: Bench,
    kind: str,
    batch: int,
    rounds: int,
    tags: dict[str, str] | None = None,
    notify: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """``batch`` tasks fire together, ``rounds`` times; the meter counts everything in between.
    Recurring tasks may carry ``tags`` (the tenant index projects them) and ``notify``."""
    invocations = 0
    bench.meter.reset()
    retry = {"retry": {"base_delay_seconds": 1, "max_delay_seconds": 1}}
    if kind == "recurring":
        register(bench, batch, rate="1 minute", tags=tags or {}, notify=notify)
    for round_number in range(rounds):
        if kind != "recurring":
            at = bench.clock.now() + timedelta(seconds=30)
            register(bench, batch, at=format_instant(at), **(retry if kind == "retried" else {}))
        bench.meter.reset()
        bench.clock.advance(timedelta(seconds=60 if kind == "recurring" else 30))
        report = bench.app.ticker.tick_shard(0)
        assert report.claimed == batch, (kind, report)
        if kind == "retried":
            # Each execution's first call fails; the worker's retry succeeds.
            bench.sink.answer = fail_first_call()
        if kind == "duplicate":
            invocations += drain_worker(bench, delete=False)
        invocations += drain_worker(bench)
        calls = bench.meter.reset()
        bench.sink.answer = None
        if round_number == 0:
            totals = calls
        else:
            totals += calls
    summary = summarise(totals, fires=batch * rounds)
    summary["per_fire"]["lambda_invocations"] = round(invocations / (batch * rounds), 4)
    summary["usd_per_million_fires"] = dollars_per_million(summary["per_fire"])
    return {"kind": kind, "batch": batch, "rounds": rounds, **summary}


# DynamoDB bills each stored item, and each index entry, 100 bytes of overhead
# beside its attribute names and values (the developer guide's "Item sizes").
ITEM_OVERHEAD_BYTES = 100


def at_rest(bench: Bench) -> dict[str, Any]:
    """The bytes a task and an execution keep stored, as DynamoDB bills storage: each
    item's names and values plus 100 bytes, and the same for each index entry it has
    (its table's keys, the index's keys and what the index projects). Read from the
    items the fires just left (the recurring scenario's tasks and their SUCCEEDED
    executions), averaged."""
    dynamodb = boto3.client("dynamodb", region_name=REGION)
    settings = bench.app.settings
    sizes: dict[str, Any] = {}
    for name, table, definition in (
        ("task", settings.tasks_table, TASKS),
        ("execution", settings.executions_table, EXECUTIONS),
    ):
        items = [
            item
            for item in dynamodb.scan(TableName=table)["Items"]
            # not the tenants' schedule census nor the tasks' change history, which
            # share the executions table (decisions 0046, 0054)
            if not item["task_id"]["S"].startswith((CENSUS_KEY_PREFIX, CHANGES_KEY_PREFIX))
        ]
        stored = [_stored_bytes(item, definition) for item in items]
        sizes[f"{name}_items"] = len(items)
        sizes[f"{name}_item_bytes"] = round(sum(s[0] for s in stored) / len(stored), 1)
        sizes[f"{name}_index_bytes"] = round(sum(s[1] for s in stored) / len(stored), 1)
        sizes[f"{name}_bytes_at_rest"] = round(
            sizes[f"{name}_item_bytes"] + sizes[f"{name}_index_bytes"], 1
        )
    return sizes


def _stored_bytes(item: dict[str, Any], table: Any) -> tuple[int, int]:
    """(the item's billed bytes, its index entries' billed bytes)."""
    table_keys = [table.partition_key.name] + ([table.sort_key.name] if table.sort_key else [])
    entries = 0
    for index in table.indexes:
        index_keys = [index.partition_key.name, index.sort_key.name]
        if not all(key in item for key in index_keys):
            continue  # sparse: no entry
        if index.projection == "ALL":
            projected = dict(item)
        else:
            names = {*table_keys, *index_keys, *index.non_key_attributes}
            projected = {k: v for k, v in item.items() if k in names}
        entries += item_size(projected) + ITEM_OVERHEAD_BYTES
    return item_size(item) + ITEM_OVERHEAD_BYTES, entries


def idle_shard(bench: Bench, minutes: int = 3) -> dict[str, Any]:
    """A shard's looping tick with nothing due, as deployed, for ``minutes`` minutes.

    Each minute a new invocation arrives and stands by, reading the lease each second,
    until the holder hands it the shard at the holder's deadline (``services.tick_loop``,
    decision 0036). The loops are stepped in time order on the settable clock (no
    threads, no sleeping), and every request from the third arrival (the first at
    which a holder has both its standbys, as in every later minute) to the last
    metered one is: ticks (cursor read, due-index query, the dispatch queue's depth),
    heartbeats, lease renewals, handovers and the standbys' reads. Returns the cost
    of one shard-second and each invocation's billed seconds.
    """
    clock = bench.clock
    app = bench.app
    first = clock.now().replace(second=0, microsecond=0) + timedelta(minutes=1)
    arrivals = [first + timedelta(minutes=m) + TICK_ARRIVAL_OFFSET for m in range(minutes + 5)]
    # The first invocation takes a free lease, the second is its only standby for a
    # while; from the third arrival on each minute is like the next.
    window_start, window_end = arrivals[2], arrivals[minutes + 2]
    # (instant, order, invocation number): an arrival or a loop's next step
    steps: list[tuple[datetime, int, int]] = [(at, n, n) for n, at in enumerate(arrivals)]
    heapq.heapify(steps)
    loops: dict[int, ShardTickLoop] = {}
    ended: dict[int, datetime] = {}
    metered: list[Any] | None = None
    documents: list[EmfDocument] = []
    in_window = False
    order = len(arrivals)
    while steps:
        at, _, number = heapq.heappop(steps)
        if at >= arrivals[-1]:
            break
        if at >= window_start and not in_window:
            in_window = True  # what came before (the first acquisition) is not steady
            bench.meter.reset()
            bench.metric_documents.clear()
        if at >= window_end and metered is None:
            metered = bench.meter.reset()
            documents = list(bench.metric_documents)
        clock.set(at)
        loop = loops.get(number)
        if loop is None:
            loop = loops[number] = ShardTickLoop(
                ticker=app.ticker,
                leases=app.leases,
                clock=clock,
                shard=0,
                owner=f"invocation-{number}",
                deadline=at + TICK_TIMEOUT - TICK_LOOP_MARGIN,
                metrics=app.metrics,
            )
        pause = loop.step()
        app.metrics.flush()
        if pause is None:
            ended[number] = clock.now()
            continue
        order += 1
        heapq.heappush(steps, (clock.now() + timedelta(seconds=pause), order, number))
    assert metered is not None, "the simulation ended before its window"
    seconds = (window_end - window_start).total_seconds()
    summary = summarise(metered, fires=int(seconds))
    billed = [(ended[n] - arrivals[n]).total_seconds() for n in range(2, minutes + 2)]
    emf_bytes = sum(len(json.dumps(d, separators=(",", ":"))) + 1 for d in documents)
    # A custom metric is a name with a set of dimensions; one with a shard's among them
    # is published once per shard, so it is billed once per shard.
    metrics = sorted(
        {
            (m["Name"], "shard" in {name for names in c["Dimensions"] for name in names})
            for d in documents
            for c in d["_aws"]["CloudWatchMetrics"]
            for m in c["Metrics"]
        }
    )
    per_second = summary["per_fire"]
    return {
        "simulated_seconds": seconds,
        "tick_arrival_offset_seconds": TICK_ARRIVAL_OFFSET.total_seconds(),
        "per_shard_second": per_second,
        "billed_seconds_per_invocation": billed,
        "emf_bytes_per_shard_second": round(emf_bytes / seconds, 1),
        "metrics": [{"name": name, "per_shard": per_shard} for name, per_shard in metrics],
        "usd_per_shard_month_requests": round(idle_request_dollars(per_second), 4),
        "breakdown": summary["breakdown"],
    }


def listing(bench: Bench, page_size: int = 100) -> dict[str, Any]:
    """One page of ``GET /tasks``: the keys-only tenant index, then the page's items.

    Beside it, what the same page read from an all-attributes index would cost (the
    items as the index would return them), and how many claims' tenant-index
    rewrites, which that projection cost, pay for the difference.
    """
    register(bench, page_size, rate="1 minute")
    bench.meter.reset()
    page = bench.app.task_service.page(DEFAULT_TENANT, page_size, None)
    assert len(page.items) == page_size
    keys_only = summarise(bench.meter.reset(), fires=1)["per_fire"]
    raw = bench.meter.raw_dynamodb
    items = raw.scan(TableName=bench.app.settings.tasks_table)["Items"]
    # Read as the meter reads an index query: each entry plus its 100 bytes.
    all_attributes_rcu = read_units([sum(item_size(i) + 100 for i in items)], consistent=False)
    extra_rcu = keys_only["rcu"] - all_attributes_rcu
    prices = PRICES
    rewrite = prices["dynamodb_on_demand_per_million_write_units"]
    return {
        "page_size": page_size,
        "keys_only": keys_only,
        "all_attributes_rcu": all_attributes_rcu,
        "claims_paying_for_one_page": round(
            extra_rcu * prices["dynamodb_on_demand_per_million_read_units"] / rewrite, 1
        ),
    }


def idle_reaper(bench: Bench) -> dict[str, Any]:
    """One run of the reaper (deployed once a minute) with nothing to reap."""
    bench.clock.advance(timedelta(minutes=1))
    bench.meter.reset()
    bench.app.reaper({}, LocalContext("reaper"))
    summary = summarise(bench.meter.reset(), fires=1)
    return {"per_run": summary["per_fire"], "breakdown": summary["breakdown"]}


SECONDS_PER_MONTH = 30 * 24 * 3600


def idle_request_dollars(per_second: dict[str, float]) -> float:
    """USD a month of one shard's DynamoDB (on demand) and SQS requests at rest."""
    p = PRICES
    per_month = SECONDS_PER_MONTH / 1e6
    return per_month * (
        per_second["write_units"] * p["dynamodb_on_demand_per_million_write_units"]
        + per_second["rcu"] * p["dynamodb_on_demand_per_million_read_units"]
        + per_second["sqs_requests"] * p["sqs_standard_per_million_requests"]
    )


@contextmanager
def fresh_bench(sink: Sink, bucket_seconds: int | None = None) -> Iterator[Bench]:
    """An empty store and queue with one shard, and metered clients; due-index
    buckets of ``bucket_seconds`` if given (bench/due_partitions.py)."""
    clock = SettableClock(START)
    with in_process_aws(clock, shard_count=1) as (raw_dynamodb, raw_sqs, settings):
        if bucket_seconds is not None:
            settings = dataclasses.replace(settings, bucket_seconds=bucket_seconds)
        tables = {
            settings.tasks_table: TASKS,
            settings.executions_table: EXECUTIONS,
            settings.coordination_table: COORDINATION,
        }
        meter = Meter(tables=tables, raw_dynamodb=raw_dynamodb)
        dynamodb = meter.attach(boto3.client("dynamodb", region_name=REGION))
        sqs = meter.attach(boto3.client("sqs", region_name=REGION))
        documents: list[EmfDocument] = []
        app = Dynacron(
            settings, dynamodb=dynamodb, sqs=sqs, clock=clock, emit_metrics=documents.append
        )
        yield Bench(
            app=app,
            meter=meter,
            clock=clock,
            raw_sqs=raw_sqs,
            sink=sink,
            metric_documents=documents,
        )


def main() -> None:
    sink = Sink().start()
    scenarios = []
    try:
        for kind, batch, rounds in (
            ("recurring", 100, 3),
            ("recurring", 1, 3),
            ("one-time", 100, 1),
            ("retried", 100, 1),
            ("duplicate", 100, 1),
        ):
            with fresh_bench(sink) as bench:
                scenarios.append(scenario(bench, kind, batch, rounds))
                if (kind, batch) == ("recurring", 100):
                    stored = at_rest(bench)
        with fresh_bench(sink) as bench:
            idle = idle_shard(bench)
            reaper = idle_reaper(bench)
        with fresh_bench(sink) as bench:
            page = listing(bench)
    finally:
        sink.stop()
    result = {
        "prices_usd": PRICES,
        "write_unit_goal_per_recurring_fire": 5,
        "scenarios": scenarios,
        "idle_shard": idle,
        "idle_reaper": reaper,
        "listing": page,
        "at_rest": stored,
    }
    write_result("cost", result)
    for s in scenarios:
        print(s["kind"], s["batch"], s["per_fire"], s["usd_per_million_fires"])
    print("idle shard-second", idle["per_shard_second"], idle["billed_seconds_per_invocation"])
    print("listing", page)
    print("at rest", stored)


if __name__ == "__main__":
    main()
