"""The busiest partition of each table and index at a rate of fires, against
DynamoDB's limits per partition.

One partition serves at most 3,000 read units and 1,000 write units a second,
for a table and for each of its global secondary indexes alike, on demand or
provisioned, whatever the table's capacity: all the items of one partition key
value live in one partition. Adaptive capacity can move a frequently used item
into a partition of its own, and split a hot partition by its sort key, but
neither lifts those limits; burst capacity does not lift them either. A write
an index cannot take throttles the table write that made it (back pressure), so
a hot due-index partition slows the claims themselves. Sources, from AWS's
documentation: Amazon DynamoDB Developer Guide, "Burst and adaptive capacity"
and "Understanding global secondary index (GSI) write throttling and back
pressure in DynamoDB"; AWS re:Post knowledge center, "My on-demand Amazon
DynamoDB table has throttling" and "How does DynamoDB handle spiky workloads in
short intervals?"; AWS Database Blog, "Scaling DynamoDB: How partitions, hot
keys, and split for heat impact performance (Part 3)".

The plan keeps the busiest partition of every table and index at half those
limits (``PARTITION_UTILISATION``): schedules written as cron fire together at
the top of a minute, above the sustained rate the plan is given; two hot keys
can share one partition until adaptive capacity separates them, and the due
index's hot keys change every bucket (an hour), so a split made for one hour's
key does nothing for the next.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dynacron.adapters.delivery.secrets import SECRETS_KEPT
from dynacron.definitions.environment import DEFAULT_TICK_MAX_CLAIMS_PER_TASK
from dynacron.definitions.resources import LEASE_SHARDS
from dynacron.planning.capacity_model import MEASURED, HandlerLatency, Measured

PARTITION_READ_UNITS = 3000
PARTITION_WRITE_UNITS = 1000
PARTITION_UTILISATION = 0.5
DUE_INDEX = "tasks/due-index"
# A claim deletes the task's due-index entry (in the bucket being ticked) and puts
# the next occurrence's; a schedule that fires more than once a bucket (an hour by
# default) puts it in the same bucket, so in the same partition: two writes there.
DUE_INDEX_WRITES_PER_CLAIM = 2
# The most claims one task gets a second: one tick a second (LoopTiming), at most
# tick_max_claims_per_task claims in a tick (a task catching up; on time, a
# schedule fires at most once a second).
HOT_TASK_CLAIMS_PER_SECOND = DEFAULT_TICK_MAX_CLAIMS_PER_TASK
# A long job (a 202, completed by callback): its lease is written to the lease
# index when it answers and removed when it completes; each heartbeat moves the
# lease's end, the index's sort key: a delete and a put. Its attention entry (the
# tenant's listing across tasks) is put at the 202 and removed at the end.
LEASE_INDEX_WRITES_PER_LONG_JOB = 2
LEASE_INDEX_WRITES_PER_HEARTBEAT = 2
ATTENTION_INDEX_WRITES_PER_LONG_JOB = 2


@dataclass(frozen=True)
class Workload:
    """What the fires are like, beyond how many there are a second."""

    # How long a handler takes to answer (the worker's call waits for it): the
    # median, and the 99th percentile (None: HANDLER_P99_OVER_MEDIAN times the median).
    handler_seconds: float = 0.2
    handler_p99_seconds: float | None = None
    # The busiest tenant's share of the fires: its record (the signing secrets) is
    # read once a fire, and its listing across tasks is one index partition.
    busiest_tenant_share: float = 1.0
    # The share of fires whose handler answers 202 and completes by callback, and
    # the heartbeats each such long job sends.
    long_job_share: float = 0.0
    heartbeats_per_long_job: float = 0.0
    # The share of fires of one-time tasks, each registered by an API call of its own.
    one_time_share: float = 0.0
    # Tasks registered (stored whether they fire or not).
    registered_tasks: int = 0

    @property
    def handler_latency(self) -> HandlerLatency:
        """The handlers' answer times, lognormal (``capacity_model.HandlerLatency``)."""
        return HandlerLatency.around(self.handler_seconds, self.handler_p99_seconds)

    @property
    def api_requests_per_fire(self) -> float:
        """Registrations and callbacks: what API Gateway takes per fire."""
        callbacks = self.long_job_share * (1 + self.heartbeats_per_long_job)
        return self.one_time_share + callbacks


@dataclass(frozen=True)
class PartitionLoad:
    """The units a second the busiest partition of one table or index takes."""

    target: str
    # What the partition key is, said as a person would.
    key: str
    reads_per_second: float
    writes_per_second: float

    @property
    def share_of_limit(self) -> float:
        """The larger of its reads' and its writes' share of one partition's limit."""
        return max(
            self.reads_per_second / PARTITION_READ_UNITS,
            self.writes_per_second / PARTITION_WRITE_UNITS,
        )

    @property
    def within_headroom(self) -> bool:
        return self.share_of_limit <= PARTITION_UTILISATION


def shards_for_due_index(fires_per_second: float) -> int:
    """The fewest shards that keep a due-index partition within its headroom."""
    per_partition = PARTITION_WRITE_UNITS * PARTITION_UTILISATION
    return math.ceil(fires_per_second * DUE_INDEX_WRITES_PER_CLAIM / per_partition)


def busiest_partitions(
    fires_per_second: float,
    shards: int,
    workload: Workload,
    measured: Measured = MEASURED,
    *,
    warm_workers: int | None = None,
) -> tuple[PartitionLoad, ...]:
    """Each table's and index's busiest partition at ``fires_per_second``: the due
    index's (a time bucket of one shard), a hot task's (which the tasks and the
    executions tables both key by task id), the lease index's (one of LEASE_SHARDS),
    the busiest tenant's listing across tasks and its record in the coordination table.

    A warm worker reads a tenant's record at most once every ``SECRETS_KEPT``
    (``adapters.delivery.secrets``), so ``warm_workers`` bounds its reads.
    """
    per_shard = fires_per_second / shards
    tenant_fires = fires_per_second * workload.busiest_tenant_share
    long_jobs = fires_per_second * workload.long_job_share
    lease_writes = long_jobs * (
        LEASE_INDEX_WRITES_PER_LONG_JOB
        + LEASE_INDEX_WRITES_PER_HEARTBEAT * workload.heartbeats_per_long_job
    )
    units = {target.target: target for target in measured.units_by_target}
    return (
        PartitionLoad(
            DUE_INDEX,
            "a time bucket of a shard",
            reads_per_second=per_shard * units[DUE_INDEX].read_units,
            writes_per_second=per_shard * DUE_INDEX_WRITES_PER_CLAIM,
        ),
        PartitionLoad(
            "tasks",
            "task id (a task catching up)",
            reads_per_second=HOT_TASK_CLAIMS_PER_SECOND * units["tasks"].read_units,
            writes_per_second=HOT_TASK_CLAIMS_PER_SECOND * units["tasks"].write_units,
        ),
        PartitionLoad(
            "executions",
            "task id (a task catching up)",
            reads_per_second=0.0,
            writes_per_second=HOT_TASK_CLAIMS_PER_SECOND * units["executions"].write_units,
        ),
        PartitionLoad(
            "executions/lease-index",
            f"lease shard (one of {LEASE_SHARDS})",
            reads_per_second=0.0,
            writes_per_second=lease_writes / LEASE_SHARDS,
        ),
        PartitionLoad(
            "executions/attention-index",
            "tenant",
            reads_per_second=0.0,
            writes_per_second=tenant_fires
            * workload.long_job_share
            * ATTENTION_INDEX_WRITES_PER_LONG_JOB,
        ),
        PartitionLoad(
            "coordination",
            "tenant record",
            reads_per_second=_tenant_record_reads(
                tenant_fires * measured.tenant_record_reads_per_fire, warm_workers
            ),
            writes_per_second=0.0,
        ),
    )


def _tenant_record_reads(per_fire: float, warm_workers: int | None) -> float:
    if warm_workers is None:
        return per_fire
    return min(per_fire, warm_workers / SECRETS_KEPT.total_seconds())


def partition_notes(partitions: tuple[PartitionLoad, ...]) -> list[str]:
    """What to do about each partition beyond its headroom, said as a person would."""
    remedies = {
        DUE_INDEX: "more shards (the plan adds them up to 100)",
        "executions/lease-index": "more lease shards (LEASE_SHARDS is fixed at 4: a code change)",
        "executions/attention-index": "the long jobs spread over more tenants",
        "coordination": (
            "fires spread over more tenants, or fewer warm workers (each reads a "
            "tenant's signing secrets once every few seconds)"
        ),
    }
    return [
        f"partition: {load.target} ({load.key}) takes {load.reads_per_second:,.0f} reads "
        f"and {load.writes_per_second:,.0f} writes a second, {load.share_of_limit:.0%} of "
        f"what one partition serves ({PARTITION_READ_UNITS:,} reads or "
        f"{PARTITION_WRITE_UNITS:,} writes; the plan keeps {PARTITION_UTILISATION:.0%}); needs "
        + remedies.get(load.target, "a different key")
        for load in partitions
        if not load.within_headroom
    ]
