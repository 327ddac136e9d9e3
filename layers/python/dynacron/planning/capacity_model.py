"""What a deployment's capacity is made of: what ``make bench`` measured, the prices,
and the models of a shard's tick and of elastic claiming built on them.

- ``MEASURED``: the tick's CPU per claim (``bench/results/capacity.json``) and
  what one fire and one idle shard-second use (``bench/results/cost.json``).
  A rerun of ``make bench`` that moves them changes the constants here, and
  ``tests/unit/test_plan.py`` fails until it does.
- ``PRICES``: us-east-1 list prices, arm64 Lambda (the stack's architecture).
- ``WorkerModel``: what a fire costs the worker Lambda, with its handler calls
  overlapping up to ``worker_concurrency`` an invocation (issue 22).

The tick model: Lambda gives a function CPU in proportion to its memory, one
vCPU at 1,769 MB; Python runs the tick on one core at a time (the GIL), so
memory above 1,769 MB buys the tick nothing. A page of ``PAGE_SIZE`` due tasks
costs its CPU at that share, plus the round trips nothing overlaps (the Query,
the consistent BatchGetItem, the sends, issued ``tick_concurrency`` at a time);
the claims' round trips overlap with the CPU of the other threads.

The elastic model (decision 0025): a shard hands out pages as fast as its
Query, its ``Invoke`` and their CPU at 128 MB allow, at most
``FANOUT_MAX_PAGES_PER_TICK`` a tick; each page is claimed at the claims/s of
the tick model at 1,769 MB, by at most ``claim_reserved_concurrency``
invocations at once.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

FULL_VCPU_MEMORY_MB = 1769
PAGE_SIZE = 100
SEND_BATCH = 10
# Round trips within a region: DynamoDB answers single-item requests in single-digit
# milliseconds, a BatchGetItem of 100 and a SendMessageBatch of 10 take longer;
# 10 ms each is what section 4 of BENCHMARKS.md simulated. Slower calls only
# matter when the CPU is plentiful (the I/O bound).
DYNAMODB_LATENCY_MS = 10.0
SQS_LATENCY_MS = 10.0


@dataclass(frozen=True)
class TargetUnits:
    """What one recurring fire uses of one table or index (bench/results/cost.json,
    its per-caller breakdown, added up per target)."""

    target: str
    read_units: float
    write_units: float


# The tasks table: the claim's update (1) and two consistent reads (the tick's
# BatchGetItem, the worker's GetItem); its due index: the claim's delete of the
# entry and put of the next (KEYS_ONLY, under 1 KB: 1 each) and the tick's Query;
# the executions table: begin and finish; coordination: the tenant's record (the
# signing secrets, which a warm worker keeps 5 s), the shard's cursor and the host's limits.
FIRE_UNITS_BY_TARGET = (
    TargetUnits("tasks", read_units=2.0, write_units=1.0),
    TargetUnits("tasks/due-index", read_units=0.03, write_units=2.0),
    TargetUnits("executions", read_units=0.0, write_units=2.0),
    TargetUnits("coordination", read_units=0.0333, write_units=0.01),
)


@dataclass(frozen=True)
class Measured:
    """What ``make bench`` measured; see the module docstring."""

    # bench/results/capacity.json: cpu_per_claim, tick_concurrency 16, moto in another process.
    tick_cpu_ms_per_claim: float = 2.05
    # bench/results/cost.json: the recurring fire, 100 per tick.
    write_units_per_fire: float = 5.01
    read_units_per_fire: float = 2.0633
    sqs_requests_per_fire: float = 0.42
    worker_invocations_per_fire: float = 0.1
    # The same fire's units per table and index (``FIRE_UNITS_BY_TARGET`` says which).
    units_by_target: tuple[TargetUnits, ...] = FIRE_UNITS_BY_TARGET
    # The worker's strongly consistent read of its tenant's record (signing secrets):
    # one item per tenant, so one partition (``planning.partitions``).
    tenant_record_reads_per_fire: float = 1.0
    # bench/results/overlap.json, its planned runs: the overlapping worker's Lambda
    # GB-seconds per fire at WORKER_MEMORY_MB, as (handler seconds, GB-seconds) at
    # 10 ms, 200 ms and 2 s, with full batches of WORKER_CALLS_IN_FLIGHT (decision
    # 0034). Below 2 s the invocation is bound by its CPU (6-8 ms a fire at a whole
    # vCPU), not by its calls.
    worker_gb_seconds_per_fire: tuple[tuple[float, float], ...] = (
        (0.01, 0.0138937),
        (0.2, 0.0108626),
        (2.0, 0.0174619),
    )
    # bench/results/cost.json: at_rest, the bytes DynamoDB bills for storing a task
    # (its item and its index entries, 100 bytes of overhead each) and a finished
    # execution, from the items the recurring fire left.
    task_bytes_at_rest: float = 1377.6
    execution_bytes_at_rest: float = 598.0
    # ...of which the task's item itself, and its index entries (a bulk import's
    # writes: ``planning.imports``).
    task_item_bytes: float = 756.7
    task_index_bytes: float = 620.9
    # bench/results/cost.json: idle_shard, per shard-second (two ticks a second:
    # decision 0042).
    idle_read_units_per_shard_second: float = 5.2499
    idle_sqs_requests_per_shard_second: float = 1.9833
    # bench/tick_log_bytes.py: the looping tick's EMF line each tick of an idle
    # shard, ingested by CloudWatch Logs, and its own TickHeartbeat metric.
    idle_log_bytes_per_shard_second: float = 686.2
    custom_metrics_per_shard: int = 1
    # bench/results/fanout.json: the looping tick's CPU per page it hands out (the
    # due-index Query and the asynchronous Invoke), at a whole vCPU.
    hand_out_cpu_ms_per_page: float = 3.27

    @property
    def busiest_target_units_per_fire(self) -> float:
        """The units of a fire the one table or index taking the most of them takes
        (the executions table's begin and end; the due index's delete and put):
        provisioned capacity's bound."""
        return max(max(t.read_units, t.write_units) for t in self.units_by_target)


@dataclass(frozen=True)
class Prices:
    """us-east-1 list prices in USD, November 2026."""

    lambda_arm_per_gb_second: float = 0.0000133334
    lambda_per_million_requests: float = 0.20
    dynamodb_on_demand_per_million_write_units: float = 0.625
    dynamodb_on_demand_per_million_read_units: float = 0.125
    dynamodb_provisioned_per_wcu_hour: float = 0.00065
    dynamodb_provisioned_per_rcu_hour: float = 0.00013
    # Auto scaling keeps consumed capacity near 70 % of what is provisioned.
    provisioned_utilisation: float = 0.7
    sqs_standard_per_million_requests: float = 0.40
    cloudwatch_logs_per_gb_ingested: float = 0.50
    # Logs kept 30 days (log_retention_days): about one month of them stored.
    cloudwatch_logs_per_gb_month_stored: float = 0.03
    cloudwatch_per_custom_metric_month: float = 0.30
    # DynamoDB Standard table class storage, and continuous backups (point-in-time
    # recovery, on every table by default: infra/config.py), per GB-month; the
    # first 25 GB a month free of storage are left out.
    dynamodb_storage_per_gb_month: float = 0.25
    dynamodb_pitr_per_gb_month: float = 0.20


MEASURED = Measured()
PRICES = Prices()


def cpu_share(memory_mb: int) -> float:
    """The share of one vCPU Lambda gives a function of ``memory_mb``, for one thread."""
    return min(1.0, memory_mb / FULL_VCPU_MEMORY_MB)


@dataclass(frozen=True)
class TickModel:
    tick_cpu_ms_per_claim: float = MEASURED.tick_cpu_ms_per_claim
    dynamodb_latency_ms: float = DYNAMODB_LATENCY_MS
    sqs_latency_ms: float = SQS_LATENCY_MS
    page_size: int = PAGE_SIZE

    def cpu_bound(self, memory_mb: int) -> float:
        """Claims/s if every call answered at once: the CPU share alone."""
        return 1000 * cpu_share(memory_mb) / self.tick_cpu_ms_per_claim

    def _waits(self, concurrency: int) -> tuple[float, float]:
        """(round trips no CPU overlaps, claim round trips) of one page, in seconds."""
        sends = math.ceil(self.page_size / SEND_BATCH)
        serial = 2 * self.dynamodb_latency_ms + math.ceil(sends / concurrency) * self.sqs_latency_ms
        claims = math.ceil(self.page_size / concurrency) * self.dynamodb_latency_ms
        return serial / 1000, claims / 1000

    def io_bound(self, concurrency: int) -> float:
        """Claims/s if the CPU were free: the page's round trips alone."""
        serial, claims = self._waits(concurrency)
        return self.page_size / (serial + claims)

    def claims_per_second(self, memory_mb: int, concurrency: int) -> float:
        """What one shard claims per second at ``memory_mb`` and ``concurrency`` threads."""
        serial, claims = self._waits(concurrency)
        cpu = self.page_size / self.cpu_bound(memory_mb)
        return self.page_size / (max(cpu, claims) + serial)


def claims_per_second_per_shard(memory_mb: int, concurrency: int) -> float:
    return TickModel().claims_per_second(memory_mb, concurrency)


# Elastic capacity (decision 0025). The claim function has one vCPU: the tick model's
# best. The next three are the runtime's defaults (Settings, LoopTiming), which
# tests/unit/test_plan.py holds them to.
CLAIM_MEMORY_MB = FULL_VCPU_MEMORY_MB
FANOUT_MAX_PAGES_PER_TICK = 10
FANOUT_MIN_TASKS = 20
TICK_INTERVAL_SECONDS = 0.5
# An asynchronous Invoke answers once Lambda has queued the event; assumed.
LAMBDA_INVOKE_LATENCY_MS = 20.0


@dataclass(frozen=True)
class ElasticModel:
    tick: TickModel = field(default_factory=TickModel)
    hand_out_cpu_ms_per_page: float = MEASURED.hand_out_cpu_ms_per_page
    invoke_latency_ms: float = LAMBDA_INVOKE_LATENCY_MS
    max_pages_per_tick: int = FANOUT_MAX_PAGES_PER_TICK

    def hand_out_seconds(self, tick_memory_mb: int) -> float:
        """What one page costs the looping tick: its Query and its Invoke, one after
        the other, and their CPU at the tick's share."""
        cpu = self.hand_out_cpu_ms_per_page / cpu_share(tick_memory_mb)
        return (self.tick.dynamodb_latency_ms + self.invoke_latency_ms + cpu) / 1000

    def pages_per_second(self, tick_memory_mb: int) -> float:
        """Pages one shard hands out a second: its pace, at most the cap a tick."""
        cap = self.max_pages_per_tick / TICK_INTERVAL_SECONDS
        return min(cap, 1 / self.hand_out_seconds(tick_memory_mb))

    def claims_per_invocation_second(self, concurrency: int = 16) -> float:
        """What one claim invocation claims a second (the tick model at 1,769 MB)."""
        return self.tick.claims_per_second(CLAIM_MEMORY_MB, concurrency)

    def page_seconds(self, concurrency: int = 16) -> float:
        """How long a claim invocation of a full page runs (billed duration)."""
        return self.tick.page_size / self.claims_per_invocation_second(concurrency)

    def capacity(
        self, shards: int, tick_memory_mb: int, claim_concurrency: int, concurrency: int = 16
    ) -> float:
        """Fires/s a deployment claims at full speed: what its shards hand out, or
        what its claim invocations claim, whichever is less."""
        handed_out = shards * self.pages_per_second(tick_memory_mb) * self.tick.page_size
        claimed = claim_concurrency * self.claims_per_invocation_second(concurrency)
        return min(handed_out, claimed)


# The worker (issue 22). An invocation gets a batch of ``batch_size`` records and
# runs their handler calls up to ``calls_in_flight`` at once (``worker_concurrency``):
# a fire holds its call's place for the handler, its four round trips (the task,
# the tenant's secrets, begin, finish: DYNAMODB_LATENCY_MS each) and its CPU, but
# the invocation's CPU (one core: the GIL) is shared by its calls. One call at a
# time (the worker before issue 22) waits four round trips a fire besides the handler.
WORKER_MEMORY_MB = 256
WORKER_WAIT_SECONDS = 4 * DYNAMODB_LATENCY_MS / 1000
# The CPU of one fire at 256 MB, measured (bench/overlap.py, its planned runs): at
# 200 ms handlers an invocation of 32 calls at once is bound by its CPU, 0.0109
# GB-seconds a fire, so about 0.04 s at 256 MB (6 ms at a whole vCPU). Used when
# no measured figures are given; ``MEASURED.worker_gb_seconds_per_fire`` otherwise.
WORKER_CPU_SECONDS = 0.04
WORKER_OVERHEAD_SECONDS = WORKER_WAIT_SECONDS + WORKER_CPU_SECONDS
# The calls in flight per invocation: the default of the worker's `worker_concurrency`
# setting (decision 0034), at which MEASURED.worker_gb_seconds_per_fire was measured,
# in full batches of as many records.
WORKER_CALLS_IN_FLIGHT = 32
# SQS's most records a batch holds without a batching window (with one, up to 10,000).
UNWINDOWED_BATCH = 10

# How long handlers take to answer: lognormal around the median the plan is given.
# Unless told its 99th percentile, the plan takes it as 4 x the median (sigma 0.596),
# what the scale simulation draws (bench/scale.py: 0.2 s median, 0.8 s p99).
HANDLER_P99_OVER_MEDIAN = 4.0
# The standard normal's 99th percentile.
NORMAL_P99 = 2.3263


@dataclass(frozen=True)
class HandlerLatency:
    """A handler's answer time: lognormal with this median and 99th percentile
    (``p99 == median``: every call takes the median)."""

    median: float
    p99: float

    @classmethod
    def around(cls, median: float, p99: float | None = None) -> HandlerLatency:
        """``median`` with ``p99``, or with HANDLER_P99_OVER_MEDIAN times it."""
        return cls(median, median * HANDLER_P99_OVER_MEDIAN if p99 is None else p99)

    def __post_init__(self) -> None:
        if self.median < 0 or self.p99 < self.median:
            raise ValueError("a handler's p99 must be at least its median, and both at least 0")

    @property
    def sigma(self) -> float:
        if self.median == 0 or self.p99 == self.median:
            return 0.0
        return math.log(self.p99 / self.median) / NORMAL_P99

    @property
    def mean(self) -> float:
        return self.median * math.exp(self.sigma**2 / 2)

    def expected_slowest(self, calls: int) -> float:
        """The expected longest of ``calls`` answers drawn at once: how long a round
        of that many overlapping calls waits for its last."""
        return self.median * _expected_max_of_lognormals(self.sigma, calls)


@functools.lru_cache(maxsize=1024)
def _expected_max_of_lognormals(sigma: float, calls: int) -> float:
    """E[max of ``calls`` draws of exp(sigma Z)], Z standard normal: the integral of
    exp(sigma z) times the density of the largest of ``calls`` normals, by the
    trapezoid rule over z in [-8, 9] (the density is below 1e-14 outside)."""
    if sigma == 0 or calls < 1:
        return 1.0
    step = 0.002
    total = 0.0
    for index in range(int(17 / step) + 1):
        z = -8 + index * step
        below = 0.5 * (1 + math.erf(z / math.sqrt(2)))
        density = calls * math.exp(-z * z / 2) / math.sqrt(2 * math.pi) * below ** (calls - 1)
        weight = 0.5 if index in (0, int(17 / step)) else 1.0
        total += weight * math.exp(sigma * z) * density
    return total * step


@dataclass(frozen=True)
class WorkerModel:
    """What a fire costs the worker: an invocation of ``batch_size`` records, with
    up to ``calls_in_flight`` handler calls at once.

    The invocation lasts until its slowest record is done, not its median one: its
    calls run in rounds of ``calls_in_flight`` (``rounds``), each round waits for
    its slowest answer (``HandlerLatency.expected_slowest``) and the worker's own
    part of that record's path (``path_overhead_seconds``), and the whole batch's
    CPU, on one core, is a floor under it (``cpu_seconds_per_fire`` each)."""

    calls_in_flight: int = WORKER_CALLS_IN_FLIGHT
    batch_size: int = UNWINDOWED_BATCH
    # (handler seconds, GB-seconds per fire) measured in full batches of
    # WORKER_CALLS_IN_FLIGHT calls at once, every call answering in that time.
    measured: tuple[tuple[float, float], ...] = ()

    @property
    def rounds(self) -> int:
        return math.ceil(self.batch_size / self.calls_in_flight)

    @property
    def concurrent_calls(self) -> float:
        """Calls in flight over the invocation on average: its batch in rounds of
        ``calls_in_flight``, the last round perhaps not full."""
        return self.batch_size / self.rounds

    @property
    def batching_window_seconds(self) -> int:
        """SQS gathers a batch above 10 records only with a window (of at least 1 s)."""
        return 0 if self.batch_size <= UNWINDOWED_BATCH else 1

    @property
    def cpu_seconds_per_fire(self) -> float:
        """One fire's CPU at WORKER_MEMORY_MB: measured with the quickest handler
        (what an invocation takes a fire when its calls wait for nothing)."""
        if not self.measured:
            return WORKER_CPU_SECONDS
        return min(self.measured)[1] / (WORKER_MEMORY_MB / 1024)

    @property
    def path_overhead_seconds(self) -> float:
        """What a round takes beyond its slowest answer: one call at a time, its four
        round trips and its CPU; overlapping, also its turns at the shared CPU, as
        measured with the slowest handler (a batch's time less that handler's)."""
        if self.calls_in_flight == 1 or not self.measured:
            return WORKER_OVERHEAD_SECONDS
        handler_seconds, gb_seconds = max(self.measured)
        batch = WORKER_CALLS_IN_FLIGHT * gb_seconds / (WORKER_MEMORY_MB / 1024)
        return max(WORKER_OVERHEAD_SECONDS, batch - handler_seconds)

    def invocation_seconds(self, latency: HandlerLatency) -> float:
        """How long one invocation runs (and its messages stay in flight)."""
        slowest = latency.expected_slowest(math.ceil(self.concurrent_calls))
        waited = self.rounds * (slowest + self.path_overhead_seconds)
        return max(self.batch_size * self.cpu_seconds_per_fire, waited)

    def seconds_per_fire(self, latency: HandlerLatency) -> float:
        """Invocation-seconds one fire costs: its share of its batch's invocation."""
        return self.invocation_seconds(latency) / self.batch_size
