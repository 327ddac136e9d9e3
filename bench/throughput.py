"""Tick throughput per shard with a simulated 10 ms round trip to AWS on every call.

How the latency is simulated: a botocore ``before-call`` event hook on the
tick's DynamoDB and SQS clients sleeps 10 ms before each request (the typical
in-region round trip for a small DynamoDB or SQS call), then in-process moto
answers. So every call costs 10 ms of waiting plus moto's own CPU time, which
on this machine is not negligible (the 0 ms row shows it alone).

One shard holds ``--tasks`` tasks all due; one ``tick_shard`` claims them
(within ``tick_max_claims``) and we divide. Repeated for several
``tick_concurrency`` values, fresh tables each time.

Run: .venv/bin/python -m bench.throughput
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import random
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
from moto.core import DEFAULT_ACCOUNT_ID
from moto.dynamodb.models import dynamodb_backends

from bench.common import QUICK, in_process_aws, write_result
from bench.meter import add_latency
from bench.scaling import task_item
from dynacron.app import Dynacron
from dynacron.domain.clock import SettableClock
from dynacron.local.aws import REGION

NOW = datetime(2026, 11, 30, 12, 30, tzinfo=UTC)
TARGET_FIRES_PER_SECOND = 10_000
GOAL_CLAIMS_PER_SECOND_PER_SHARD = 500


def measure(tasks: int, concurrency: int, latency_ms: float) -> dict[str, Any]:
    rng = random.Random(tasks)
    clock = SettableClock(NOW)
    with in_process_aws(clock, shard_count=1) as (_, _, settings):
        settings = dataclasses.replace(
            settings, tick_concurrency=concurrency, tick_max_claims=max(tasks, 2000)
        )
        table = dynamodb_backends[DEFAULT_ACCOUNT_ID][REGION].get_table(settings.tasks_table)
        for _ in range(tasks):
            task_id = uuid.UUID(int=rng.getrandbits(128)).hex
            at = NOW - timedelta(seconds=rng.uniform(0, 1))
            table.put_item(task_item(task_id, at, settings), overwrite=True)
        # No meter here: its before/after snapshots would triple moto's work.
        dynamodb = add_latency(boto3.client("dynamodb", region_name=REGION), latency_ms / 1000)
        sqs = add_latency(boto3.client("sqs", region_name=REGION), latency_ms / 1000)
        app = Dynacron(settings, dynamodb=dynamodb, sqs=sqs, clock=clock)
        began = time.perf_counter()
        report = app.ticker.tick_shard(0)
        seconds = time.perf_counter() - began
    assert report.claimed == tasks, f"{report.claimed} of {tasks} claimed"
    rate = report.claimed / seconds
    return {
        "tick_concurrency": concurrency,
        "latency_ms": latency_ms,
        "claimed": report.claimed,
        "seconds": round(seconds, 3),
        "claims_per_second": round(rate, 1),
        "shards_for_10k_fires_per_second": math.ceil(TARGET_FIRES_PER_SECOND / rate),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=300 if QUICK else 1000)
    parser.add_argument("--concurrency", default="1,4,16,32")
    args = parser.parse_args()
    runs = []
    for concurrency in (int(c) for c in args.concurrency.split(",")):
        # One at a time is slow by design: fewer tasks keep the run short.
        tasks = args.tasks // 4 if concurrency == 1 else args.tasks
        runs.append(measure(tasks, concurrency, latency_ms=10))
        print(runs[-1], flush=True)
    runs.append(measure(args.tasks, 16, latency_ms=0))
    print(runs[-1], flush=True)
    write_result(
        "throughput",
        {
            "latency_simulation": "botocore before-call hook sleeping 10 ms per request",
            "goal_claims_per_second_per_shard": GOAL_CLAIMS_PER_SECOND_PER_SHARD,
            "target_fires_per_second": TARGET_FIRES_PER_SECOND,
            "runs": runs,
        },
    )


if __name__ == "__main__":
    main()
