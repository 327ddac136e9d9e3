"""Bytes of EMF the looping tick prints per step on an idle shard, and what
CloudWatch Logs' ingestion of them costs a month.

The looping tick flushes its metrics after every step (one a tick, two a second per
shard: decision 0042) so that they reach CloudWatch while it runs; each line is ingested and
billed. Runs one invocation of the real loop on in-process moto with a settable
clock, and measures the lines exactly as ``print_emf`` would print them.

Run: .venv/bin/python -m bench.tick_log_bytes
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from bench.common import in_process_aws
from dynacron.adapters.powertools.metrics import EmfDocument
from dynacron.definitions.tick_timing import LoopTiming
from dynacron.domain.clock import SettableClock
from dynacron.entry.composition import Dynacron

START = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
# us-east-1 list price (USD) of CloudWatch Logs standard ingestion, November 2026.
INGESTION_PER_GB = 0.50
SECONDS_PER_MONTH = 30 * 86_400


class _Context:
    aws_request_id = "bench-tick"

    def get_remaining_time_in_millis(self) -> int:
        return 75_000  # a 60 s loop: the deployed tick stops 15 s before its timeout


def measure() -> dict[str, Any]:
    clock = SettableClock(START)
    lines: list[str] = []

    def emit(document: EmfDocument) -> None:
        lines.append(json.dumps(document, separators=(",", ":")))

    def sleep(seconds: float) -> None:
        clock.advance(timedelta(seconds=seconds))

    with in_process_aws(clock, shard_count=1) as (dynamodb, sqs, settings):
        app = Dynacron(
            settings,
            dynamodb=dynamodb,
            sqs=sqs,
            clock=clock,
            sleep=sleep,
            emit_metrics=emit,
        )
        report = app.tick({"shard": 0, "loop": True}, _Context())
    bytes_per_step = sum(len(line) + 1 for line in lines) / report["ticks"]
    steps_per_second = 1 / LoopTiming().tick_interval_seconds
    gigabytes = bytes_per_step * steps_per_second * SECONDS_PER_MONTH / 1e9
    return {
        "steps": report["ticks"],
        "lines_per_step": len(lines) / report["ticks"],
        "bytes_per_step": round(bytes_per_step),
        "gb_per_shard_month": round(gigabytes, 3),
        "usd_per_shard_month": round(gigabytes * INGESTION_PER_GB, 2),
    }


if __name__ == "__main__":
    print(json.dumps(measure(), indent=2))
