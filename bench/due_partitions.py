"""Where a recurring claim's due-index writes land: the busiest partition's writes
a second over its shard's fires a second, by schedule period and bucket width.

A claim deletes the task's entry (filed under the bucket of the occurrence being
claimed) and puts the next occurrence's, under ``Sharding.place``, the domain's
own placement, the same keys the store writes (the cost section measured the two
index writes a claim, BENCHMARKS.md section 1). For every (period, width) pair
one shard's tasks fire for 20 periods (at least 3 minutes, at most two hours),
their phases spread evenly; each minute the
writes each partition key takes are counted, and the busiest minute of the
busiest key is reported per fire of the shard. Then what narrower buckets cost
an idle shard: its looping tick as deployed, on moto, metered as the cost
section's idle shard is (``bench.cost.idle_shard``). Decision 0035 cites both.

Run: .venv/bin/python -m bench.due_partitions
"""

from __future__ import annotations

import math
from collections import Counter
from datetime import UTC, datetime, timedelta

from bench.cost import fresh_bench, idle_shard
from bench.loopback import Sink
from dynacron.domain.tasks.task import Sharding

START = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)
HOURS = 2
TASKS = 600
PERIODS = (1, 10, 60, 300, 3600, 86_400)
WIDTHS = (3600, 300, 60)


def busiest_writes_per_fire(period_seconds: int, bucket_seconds: int) -> float:
    """The busiest partition's writes in a minute over the shard's fires in it."""
    sharding = Sharding(shard_count=1, bucket_seconds=bucket_seconds)
    writes: Counter[tuple[str, int]] = Counter()
    fires: Counter[int] = Counter()
    # Whole minutes: a minute cut short would count only its first fires.
    minutes = math.ceil(min(HOURS * 3600, max(180, 20 * period_seconds)) / 60)
    end = START + timedelta(minutes=minutes)
    for number in range(TASKS):
        task_id = f"task-{number}"
        phase = timedelta(seconds=number * period_seconds / TASKS)
        occurrence = START + phase
        while occurrence < end:
            minute = int((occurrence - START).total_seconds()) // 60
            following = occurrence + timedelta(seconds=period_seconds)
            for due in (occurrence, following):
                placement = sharding.place(task_id, due, occurrence)
                assert placement is not None
                writes[placement.key, minute] += 1
            fires[minute] += 1
            occurrence = following
    return max(count / fires[minute] for (_, minute), count in writes.items())


def idle_queries(bucket_seconds: int, sink: Sink) -> tuple[float, float, float]:
    """An idle shard's due-index queries and read units a second, and its requests'
    dollars a month."""
    with fresh_bench(sink, bucket_seconds=bucket_seconds) as bench:
        idle = idle_shard(bench)
    query = next(line for line in idle["breakdown"] if line["caller"] == "TaskStore.due_task_ids")
    per_second = idle["per_shard_second"]
    return query["requests"], per_second["rcu"], idle["usd_per_shard_month_requests"]


def main() -> None:
    header = "| period | " + " | ".join(f"{width:,} s buckets" for width in WIDTHS) + " |"
    print(header)
    print("|---|" + "---|" * len(WIDTHS))
    for period in PERIODS:
        cells = [f"{busiest_writes_per_fire(period, width):.2f}" for width in WIDTHS]
        print(f"| {period:,} s | " + " | ".join(cells) + " |")
    print()
    print("| buckets | due-index queries/s | read units/s | requests $/shard-month |")
    print("|---|---|---|---|")
    sink = Sink().start()
    try:
        for width in WIDTHS:
            queries, reads, dollars = idle_queries(width, sink)
            print(f"| {width:,} s | {queries:.2f} | {reads:.2f} | {dollars:.2f} |")
    finally:
        sink.stop()


if __name__ == "__main__":
    main()
