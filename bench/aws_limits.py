"""AWS's documented limits and behaviours, as the scale benchmark's double enforces them.

Each figure is AWS's default, from the documentation page named beside it (checked
on the pages as published in 2026):

DynamoDB
- Every partition of a table or of a global secondary index serves at most 1,000
  write units and 3,000 read units a second ("Understanding DynamoDB warm throughput
  in different scenarios"; "Key range throughput exceeded (hot partitions)"). Modelled
  per partition key value, the finest a partition can be split to: a due-index
  partition is one ``due_bucket`` (bucket x shard), a task's is its ``task_id``.
- An on-demand table and each of its indexes serve at most 40,000 read and 40,000
  write request units a second ("Quotas in Amazon DynamoDB", per-table throughput).
  The table is taken as warm: its previous peak at least what the run asks
  ("DynamoDB on-demand capacity mode").
- A write whose index update would exceed the index's throughput is refused on the
  base table: GSI back-pressure ("Understanding global secondary index (GSI) write
  throttling and back pressure in DynamoDB").
- A refused request is answered HTTP 400 with ``ProvisionedThroughputExceededException``
  (partition: ``TableWriteKeyRangeThroughputExceeded``, ``IndexWriteKeyRangeThroughputExceeded``
  and the Read forms) or ``ThrottlingException`` (the table's on-demand quota:
  ``TableWriteAccountLimitExceeded`` and the like), each with its ``ThrottlingReasons``
  ("ThrottlingReason", DynamoDB API Reference; "DynamoDB throttling resolution guide").
  A BatchGetItem answers the keys it could not read as ``UnprocessedKeys`` and raises
  only when it read none.
- A write unit is 1 KB of the larger of the item before and after, a read unit 4 KB
  strongly consistent, half of it eventually consistent (index queries are); a
  failed condition still costs the write.

SQS
- About 120,000 messages in flight (received, not deleted) per standard queue; past
  it a long poll answers nothing ("Amazon SQS standard queue quotas").
- A long poll (ReceiveMessage with WaitTimeSeconds above 0, at most 20) returns as
  soon as a message is available, with what is available up to its maximum, and
  returns empty only when its wait time has passed with nothing to return ("Amazon
  SQS short and long polling"; "Setting-up long polling in Amazon SQS";
  ReceiveMessage, Amazon SQS API Reference). Each ReceiveMessage is one billed
  request, empty or not, and so are the event source mapping's receives and deletes:
  Lambda's pollers call SQS on the account's behalf ("Using Lambda with Amazon SQS";
  "Amazon SQS pricing").
- ReceiveMessage returns at most 10 messages; a received message is invisible for
  the visibility timeout, then received again; after ``maxReceiveCount`` receives it
  moves to the redrive target (the queue definitions in ``dynacron.definitions``).
- ChangeMessageVisibility(Batch) makes a message in flight invisible for the new
  timeout counted from the call, not from its receipt; 0 makes it visible at once.
  The receipt handle must be the one of the message's latest receipt; a message
  whose timeout has run out is no longer in flight, and a timeout may not reach
  beyond 12 hours from the first receipt. The batch form answers each entry's
  failure in ``Failed`` ("Amazon SQS visibility timeout"; ChangeMessageVisibility
  and ChangeMessageVisibilityBatch, Amazon SQS API Reference).

Lambda
- 1,000 concurrent executions per account and Region; a function's reserved
  concurrency is both its bound and taken from the account's ("Lambda quotas";
  "Configuring reserved concurrency for a function").
- Each function scales by at most 1,000 execution environments every 10 seconds,
  refilled continuously ("Lambda scaling behavior").
- An SQS event source mapping starts with 5 concurrent batches and adds up to 300 a
  minute while messages wait, at most 1,000, or its maximum concurrency (2 to 1,000)
  ("Configuring scaling behavior for SQS event source mappings"). Its pollers
  long-poll the queue, each with one ReceiveMessage of up to the batch size at a
  time, 20 seconds of wait (long polling, "Using Lambda with Amazon SQS"; an idle
  mapping's five pollers: ``bench/idle_cost.py``); ``SqsEventSource`` in
  ``bench/lambda_double.py``.
- An asynchronous invocation that finds no concurrency is returned to the function's
  event queue and tried again from 1 second later, the interval doubling to at most
  5 minutes, until the event's maximum age ("How Lambda handles errors and retries
  with asynchronous invocation").

Latency is not a documented figure: each call's is drawn from a lognormal
distribution (``Latency``) with the medians and 99th percentiles the scale
benchmark states (DynamoDB single-digit milliseconds, "DynamoDB on-demand capacity
mode").
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# DynamoDB
PARTITION_WRITE_UNITS = 1000.0
PARTITION_READ_UNITS = 3000.0
ON_DEMAND_TABLE_UNITS = 40_000.0
WRITE_UNIT_BYTES = 1024
READ_UNIT_BYTES = 4096
# SQS
IN_FLIGHT_PER_QUEUE = 120_000
RECEIVE_MAX_MESSAGES = 10
LONG_POLL_SECONDS = 20.0
MAX_VISIBILITY_SECONDS = 12 * 3600
# Lambda
ACCOUNT_CONCURRENCY = 1000
SCALING_ENVIRONMENTS = 1000
SCALING_PERIOD_SECONDS = 10.0
ESM_INITIAL_BATCHES = 5
ESM_BATCHES_ADDED_PER_MINUTE = 300
ESM_MAX_BATCHES = 1000
ASYNC_RETRY_FIRST_SECONDS = 1.0
ASYNC_RETRY_MAX_SECONDS = 300.0


@dataclass(frozen=True)
class Latency:
    """A lognormal round trip: median and 99th percentile in seconds."""

    median: float
    p99: float

    def draw(self, rng: random.Random) -> float:
        sigma = math.log(self.p99 / self.median) / 2.3263
        return rng.lognormvariate(math.log(self.median), sigma)


@dataclass(frozen=True)
class Charge:
    """Capacity one request asks of one partition: of a table (``index`` None) or an index."""

    table: str
    index: str | None
    partition: str
    write: bool
    units: float


@dataclass
class Throttle(Exception):
    """DynamoDB refused a request: its error code and throttling reason."""

    code: str
    reason: str
    resource: str


@dataclass
class Throughput:
    """Token buckets per partition and per table or index, refilled each instant.

    A partition's bucket holds at most one second of its throughput, so that a
    partition over 1,000 write units in any second is refused; a table's or an
    index's on-demand quota likewise. A request is admitted whole or refused whole
    (nothing is consumed when one of its charges is refused). Counts what was
    consumed and what was refused, by table, index and partition.
    """

    now: Callable[[], float]
    partition_write: float = PARTITION_WRITE_UNITS
    partition_read: float = PARTITION_READ_UNITS
    table_units: float = ON_DEMAND_TABLE_UNITS
    buckets: dict[tuple[str, str | None, str | None, bool], list[float]] = field(
        default_factory=dict
    )
    consumed: dict[tuple[str, str | None, bool], float] = field(default_factory=dict)
    throttled: dict[tuple[str, str | None, str, str], int] = field(default_factory=dict)

    def admit(self, charges: list[Charge]) -> None:
        """Consume every charge, or raise ``Throttle`` for the first one that does not fit."""
        now = self.now()
        taken: list[tuple[list[float], float]] = []
        for charge in charges:
            for partition, rate in (
                (charge.partition, self.partition_write if charge.write else self.partition_read),
                (None, self.table_units),
            ):
                key = (charge.table, charge.index, partition, charge.write)
                bucket = self.buckets.get(key)
                if bucket is None:
                    bucket = self.buckets[key] = [rate, now]
                tokens = min(rate, bucket[0] + (now - bucket[1]) * rate)
                bucket[0], bucket[1] = tokens, now
                if tokens < charge.units:
                    for refunded, units in taken:
                        refunded[0] += units
                    raise self._refused(charge, partition)
                bucket[0] -= charge.units
                taken.append((bucket, charge.units))
        for charge in charges:
            key3 = (charge.table, charge.index, charge.write)
            self.consumed[key3] = self.consumed.get(key3, 0.0) + charge.units

    def _refused(self, charge: Charge, partition: str | None) -> Throttle:
        resource = "Index" if charge.index else "Table"
        operation = "Write" if charge.write else "Read"
        if partition is None:
            code, limit, where = "ThrottlingException", "AccountLimitExceeded", "(all)"
        else:
            code, limit, where = (
                "ProvisionedThroughputExceededException",
                "KeyRangeThroughputExceeded",
                partition,
            )
        reason = f"{resource}{operation}{limit}"
        key = (charge.table, charge.index, where, reason)
        self.throttled[key] = self.throttled.get(key, 0) + 1
        arn = f"arn:aws:dynamodb:us-east-1:000000000000:table/{charge.table}"
        if charge.index:
            arn += f"/index/{charge.index}"
        return Throttle(code, reason, arn)

    def forget_full(self) -> None:
        """Drop the buckets that have refilled: a missing bucket is a full one."""
        now = self.now()
        self.buckets = {
            key: bucket
            for key, bucket in self.buckets.items()
            if bucket[0] + (now - bucket[1]) * self._rate(key) < self._rate(key)
        }

    def _rate(self, key: tuple[str, str | None, str | None, bool]) -> float:
        if key[2] is None:
            return self.table_units
        return self.partition_write if key[3] else self.partition_read


def item_size(item: dict[str, Any]) -> int:
    """An item's size as DynamoDB counts it, near enough: names and values in bytes."""
    return sum(len(name) + _value_size(value) for name, value in item.items())


def _value_size(value: dict[str, Any]) -> int:
    ((kind, inner),) = value.items()
    if kind == "S":
        return len(inner) if inner.isascii() else len(inner.encode())
    if kind == "N":
        return len(inner) // 2 + 1
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "L":
        return 3 + sum(1 + _value_size(v) for v in inner)
    if kind == "M":
        return 3 + sum(1 + len(k) + _value_size(v) for k, v in inner.items())
    if kind == "SS":
        return sum(len(s) for s in inner)
    if kind == "NS":
        return sum(len(n) // 2 + 1 for n in inner)
    return len(inner)


def write_units(size: int) -> float:
    return float(max(1, math.ceil(size / WRITE_UNIT_BYTES)))


def read_units(size: int, consistent: bool) -> float:
    units = max(1, math.ceil(size / READ_UNIT_BYTES))
    return float(units) if consistent else units / 2
