"""Capacity planning: how large a deployment must be for a rate of fires, and what it
costs; and the sizing table of docs/deploy.md.

Every figure comes from one place, so that the sizing table, ``dynacron plan``
and the tests cannot disagree: what was measured, the prices, and the tick and
elastic models are ``capacity_model``'s; this module sizes with them.

``plan`` also sizes the workers (``workers``: their calls overlap, issue 22),
keeps every table's and index's busiest partition within its headroom
(``partitions``: the shard count grows with the due index's writes) and names
the AWS quotas the row exceeds (``quotas``).

The elastic design (decision 0025), which ``plan`` sizes: each shard's looping
tick has 128 MB and hands every page of due tasks to a claim invocation of one
vCPU (1,769 MB), so the shards' memory, billed all month, no longer grows with
the rate. The looping-only design (``size_tick``) is kept to show what elastic
capacity saves.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field

from dynacron.definitions.environment import (
    DEFAULT_EXECUTION_RETENTION_DAYS,
    MAX_QUEUED_DISPATCHES_VAR,
)
from dynacron.definitions.resources import WORKER_TIMEOUT_SECONDS
from dynacron.definitions.tick_timing import LoopTiming
from dynacron.entry.settings import Settings
from dynacron.planning.capacity_model import (
    CLAIM_MEMORY_MB,
    FULL_VCPU_MEMORY_MB,
    MEASURED,
    PRICES,
    UNWINDOWED_BATCH,
    WORKER_CALLS_IN_FLIGHT,
    WORKER_MEMORY_MB,
    ElasticModel,
    Measured,
    Prices,
    TickModel,
    WorkerModel,
)
from dynacron.planning.partitions import (
    DUE_INDEX,
    PartitionLoad,
    Workload,
    busiest_partitions,
    partition_notes,
    shards_for_due_index,
)
from dynacron.planning.quotas import Demand, QuotaNeed, quota_figures
from dynacron.planning.workers import (
    LONGEST_PLANNED_INVOCATION_SECONDS,
    MAX_WORKER_CONCURRENCY,
    WORKER_HEADROOM,
    WorkerSizing,
    size_workers,
)

MIN_MEMORY_MB = 128
# Lambda takes memory in 1 MB steps; the plan rounds up to these to stay readable.
MEMORY_STEP_MB = 64
MAX_SHARDS = 100
# The tick is sized for this share of what it can claim: Lambda runs on arm64
# (Graviton) while the CPU was measured on x86, real HTTPS adds TLS, and a shard
# must catch up after a burst.
TICK_UTILISATION = 0.75
# The looping tick's clockwork (decision 0036). Each period's invocation of a shard
# stands by, then holds the shard until its deadline: every period is billed for
# one whole invocation, ``loop_seconds`` (135 s a minute). Its holder renews the
# lease every ``renew_every_seconds``; its standbys' reads (one, and two during the
# overlap, each a read a second) are among the idle shard's measured read units.
_TIMING = LoopTiming()
TICK_BILLED_SECONDS_PER_PERIOD = _TIMING.loop_seconds
TICK_PERIOD_SECONDS = _TIMING.schedule_period_seconds
LEASE_RENEWALS_PER_SECOND = 1 / _TIMING.renew_every_seconds
# Invocations of one shard alive at once: holder, standby, and the next arrival.
TICK_INVOCATIONS_PER_SHARD = math.ceil(_TIMING.loop_seconds / TICK_PERIOD_SECONDS)
MONTH_SECONDS = 730 * 3600
# Room above the sustained load for a burst: auto scaling's maximum, and what an
# on-demand table takes at its peak.
BURST_HEADROOM = 1.5
# The reaper and the undelivered function's two, at once.
OTHER_FUNCTIONS_CONCURRENCY = 3
# How long the API function takes a request (a registration, a callback); assumed.
API_REQUEST_SECONDS = 0.1
DEFAULT_MAX_QUEUED_DISPATCHES = Settings.max_queued_dispatches
DEFAULT_WORKLOAD = Workload()
# Provisioned capacity pays from this much sustained load on: below it the
# saving is small and on-demand absorbs bursts without throttling.
PROVISIONED_FROM_SAVING_USD = 100.0
# Claim invocations reserved: at least this many (a burst's pages, at once), and
# twice the sustained rate's need.
MIN_CLAIM_CONCURRENCY = 20
CLAIM_CONCURRENCY_HEADROOM = 2.0
# Lambda's reserved concurrency must leave an account's unreserved 100.
MAX_CLAIM_CONCURRENCY = 900


@dataclass(frozen=True)
class MonthlyCost:
    tick_lambda: float
    tick_requests: float
    dynamodb: float
    sqs: float
    worker_lambda: float
    # The looping ticks' log lines and heartbeat metrics.
    cloudwatch: float = 0.0
    # Claim invocations (decision 0025): only under load.
    claim_lambda: float = 0.0
    # Tables and indexes at rest, with their backups: the registered tasks, and
    # under load the executions' history, kept its retention.
    storage: float = 0.0

    @property
    def total(self) -> float:
        return (
            self.claim_lambda
            + self.tick_lambda
            + self.tick_requests
            + self.dynamodb
            + self.sqs
            + self.worker_lambda
            + self.cloudwatch
            + self.storage
        )


@dataclass(frozen=True)
class Plan:
    """One deployment's size for a rate of fires, and its monthly cost."""

    fires_per_second: float
    shards: int
    tick_memory_mb: int
    tick_concurrency: int
    # Fires/s one shard hands out to claim invocations at full speed.
    claims_per_second_per_shard: float
    claim_memory_mb: int
    claim_reserved_concurrency: int
    # Fires/s the claim invocations claim at full speed, all of them at once.
    claim_capacity: float
    worker_max_concurrency: int
    # False when even MAX_WORKER_CONCURRENCY workers cannot keep up with the handler.
    workers_keep_up: bool
    billing: str
    provisioned_max_capacity: int | None
    idle: MonthlyCost
    loaded: MonthlyCost
    workers: WorkerSizing
    # The loaded month with one handler call at a time a worker (before issue 22).
    loaded_sequential_worker: MonthlyCost
    # The idle cost of looping ticks sized for the rate instead (``size_tick``).
    looping_only_idle: float = 0.0
    notes: tuple[str, ...] = field(default=())
    partitions: tuple[PartitionLoad, ...] = ()
    # What the row takes of each AWS quota, within its default or not.
    quota_figures: tuple[QuotaNeed, ...] = ()
    # Days each execution's record is kept after it ends (the history at rest).
    execution_retention_days: int = DEFAULT_EXECUTION_RETENTION_DAYS

    @property
    def tick_capacity(self) -> float:
        """Fires/s the deployment can claim in all, at full speed: what its shards
        hand out or what its claim invocations claim, whichever is less."""
        return min(self.shards * self.claims_per_second_per_shard, self.claim_capacity)

    @property
    def quotas(self) -> tuple[QuotaNeed, ...]:
        """The AWS quotas this row exceeds, with what to ask for."""
        return tuple(need for need in self.quota_figures if need.exceeded)

    @property
    def due_index_partition(self) -> PartitionLoad:
        """The busiest due-index partition: the one the shard count is sized for."""
        return next(load for load in self.partitions if load.target == DUE_INDEX)

    @property
    def usd_per_million_fires(self) -> float:
        """The loaded month's cost of a million fires."""
        return usd_per_million(self.loaded, self.fires_per_second)

    def context(self) -> dict[str, str]:
        """The CDK context keys (``infra/config.py``) that deploy this plan."""
        values = {
            "shard_count": str(self.shards),
            "tick_memory_mb": str(self.tick_memory_mb),
            "claim_reserved_concurrency": str(self.claim_reserved_concurrency),
            "worker_max_concurrency": str(self.worker_max_concurrency),
            "billing": self.billing,
        }
        model = self.workers.model
        values["worker_batch_size"] = str(model.batch_size)
        values["worker_batch_window_seconds"] = str(model.batching_window_seconds)
        if model.calls_in_flight != WORKER_CALLS_IN_FLIGHT:
            values["worker_concurrency"] = str(model.calls_in_flight)
        # The memory the plan prices the worker at (the template's default is larger).
        values["worker_memory_mb"] = str(WORKER_MEMORY_MB)
        if self.provisioned_max_capacity is not None:
            values["provisioned_max_capacity"] = str(self.provisioned_max_capacity)
        if self.execution_retention_days != DEFAULT_EXECUTION_RETENTION_DAYS:
            values["execution_retention_days"] = str(self.execution_retention_days)
        return values

    def context_flags(self) -> str:
        return " ".join(f"-c {key}={value}" for key, value in self.context().items())


def usd_per_million(month: MonthlyCost, fires_per_second: float) -> float:
    return month.total / (fires_per_second * MONTH_SECONDS) * 1e6


class PlanRefused(ValueError):
    """A rate no deployment of this design can serve (more than 100 shards of one vCPU)."""


def round_memory(memory_mb: float) -> int:
    stepped = MEMORY_STEP_MB * math.ceil(memory_mb / MEMORY_STEP_MB)
    return max(MIN_MEMORY_MB, min(FULL_VCPU_MEMORY_MB, stepped))


def idle_usd_per_shard_month(
    memory_mb: int, measured: Measured | None = None, prices: Prices | None = None
) -> float:
    """What one looping shard costs a month with nothing due: its Lambda, all month,
    its requests (the due-index query, the queue depth, the lease renewals), its
    log lines and its heartbeat metric."""
    m, p = measured or MEASURED, prices or PRICES
    month = MONTH_SECONDS
    billed_seconds = month * TICK_BILLED_SECONDS_PER_PERIOD / TICK_PERIOD_SECONDS
    return (
        memory_mb / 1024 * billed_seconds * p.lambda_arm_per_gb_second
        + month / TICK_PERIOD_SECONDS * p.lambda_per_million_requests / 1e6
        + month
        * m.idle_read_units_per_shard_second
        * p.dynamodb_on_demand_per_million_read_units
        / 1e6
        + month * LEASE_RENEWALS_PER_SECOND * p.dynamodb_on_demand_per_million_write_units / 1e6
        + month * m.idle_sqs_requests_per_shard_second * p.sqs_standard_per_million_requests / 1e6
        + cloudwatch_usd_per_shard_month(m, p)
    )


def cloudwatch_usd_per_shard_month(measured: Measured, prices: Prices) -> float:
    """A looping shard's log lines (ingested and stored) and its own custom metrics."""
    log_gb = MONTH_SECONDS * measured.idle_log_bytes_per_shard_second / 1e9
    return (
        log_gb
        * (prices.cloudwatch_logs_per_gb_ingested + prices.cloudwatch_logs_per_gb_month_stored)
        + measured.custom_metrics_per_shard * prices.cloudwatch_per_custom_metric_month
    )


def size_elastic(
    fires_per_second: float, model: ElasticModel | None = None, *, min_shards: int = 1
) -> tuple[int, int]:
    """(shards, claim invocations reserved) that claim ``fires_per_second`` at
    ``TICK_UTILISATION``, every looping tick at 128 MB.

    A shard's idle cost is the same whatever the rate, so the fewest shards that
    hand the rate out win; the claim invocations are reserved for twice the
    sustained need, and at least ``MIN_CLAIM_CONCURRENCY`` for a burst.
    """
    model = model or ElasticModel()
    need = fires_per_second / TICK_UTILISATION
    per_shard = model.pages_per_second(MIN_MEMORY_MB) * model.tick.page_size
    shards = max(min_shards, math.ceil(need / per_shard))
    concurrency = max(
        MIN_CLAIM_CONCURRENCY,
        math.ceil(CLAIM_CONCURRENCY_HEADROOM * need / model.claims_per_invocation_second()),
    )
    if shards > MAX_SHARDS or concurrency > MAX_CLAIM_CONCURRENCY:
        raise PlanRefused(
            f"{fires_per_second:g} fires/s needs more than {MAX_SHARDS} shards or "
            f"{MAX_CLAIM_CONCURRENCY} claim invocations at once, the most a deployment has"
        )
    return shards, concurrency


def size_tick(
    fires_per_second: float,
    concurrency: int,
    model: TickModel | None = None,
    *,
    min_shards: int = 1,
    measured: Measured | None = None,
    prices: Prices | None = None,
) -> tuple[int, int]:
    """(shards, tick memory) that claim ``fires_per_second`` at ``TICK_UTILISATION``
    for the least idle cost.

    A shard's claims/s grow with its memory (its CPU share), so the memory of all
    shards together is about the same however it is split; each shard also costs
    its idle queries and lease writes. Every shard count from ``min_shards`` is
    tried with the least memory that carries the rate, and the cheapest wins.
    ``min_shards``: a deployment must never lower its shard count (tasks filed
    under the shards it drops would never be ticked again).
    """
    model = model or TickModel()
    need = fires_per_second / TICK_UTILISATION
    best: tuple[float, int, int] | None = None
    for shards in range(max(1, min_shards), MAX_SHARDS + 1):
        if shards * model.claims_per_second(FULL_VCPU_MEMORY_MB, concurrency) < need:
            continue
        memory = MIN_MEMORY_MB
        while shards * model.claims_per_second(memory, concurrency) < need:
            memory = round_memory(memory + MEMORY_STEP_MB)
        cost = shards * idle_usd_per_shard_month(memory, measured, prices)
        if best is None or cost < best[0] - 0.005:
            best = (cost, shards, memory)
    if best is None:
        raise PlanRefused(
            f"{fires_per_second:g} fires/s needs more than {MAX_SHARDS} shards of one vCPU, "
            "the most a deployment has"
        )
    return best[1], best[2]


def plan(
    fires_per_second: float,
    *,
    workload: Workload = DEFAULT_WORKLOAD,
    tick_concurrency: int = 16,
    provisioned_targets: int = 8,
    min_shards: int = 1,
    execution_retention_days: int = DEFAULT_EXECUTION_RETENTION_DAYS,
    measured: Measured = MEASURED,
    prices: Prices = PRICES,
) -> Plan:
    """The cheapest deployment that fires ``fires_per_second``, sustained.

    ``workload`` says what the fires are like (how long a handler takes to answer,
    the busiest tenant's share, ...); ``provisioned_targets`` how many tables and
    indexes auto scaling provisions (each with a minimum of one read and one write
    unit); ``min_shards`` the deployment's present shard count, which it must not lower.
    """
    if fires_per_second <= 0:
        raise PlanRefused("fires per second must be more than 0")
    model = TickModel(tick_cpu_ms_per_claim=measured.tick_cpu_ms_per_claim)
    elastic = ElasticModel(tick=model, hand_out_cpu_ms_per_page=measured.hand_out_cpu_ms_per_page)
    # Enough shards to claim the rate, and to keep each due-index partition within its headroom.
    floor = max(min_shards, shards_for_due_index(fires_per_second))
    shards, claim_concurrency = size_elastic(fires_per_second, elastic, min_shards=floor)
    workers = size_workers(fires_per_second, workload.handler_latency, measured)
    dynamodb = _DynamoDbBilling(prices, provisioned_targets)
    usage = _Usage.of(fires_per_second, shards, measured)
    billing = dynamodb.billing_for(usage.loaded_reads, usage.loaded_writes)
    max_capacity = dynamodb.max_capacity(billing, fires_per_second, measured)
    idle, loaded = _monthly_costs(
        usage, workers, elastic, tick_concurrency, dynamodb.cost_of(billing), measured, prices
    )
    tasks_stored, history_stored = at_rest(
        fires_per_second, workload, execution_retention_days, measured, prices
    )
    idle = dataclasses.replace(idle, storage=tasks_stored)
    loaded = dataclasses.replace(loaded, storage=tasks_stored + history_stored)
    partitions = busiest_partitions(
        fires_per_second, shards, workload, measured, warm_workers=workers.max_concurrency
    )
    demand = _demand(
        fires_per_second, (shards, claim_concurrency, max_capacity), workers, workload, measured
    )
    looping_only_idle = _looping_only_idle(
        idle.total - shards * idle_usd_per_shard_month(MIN_MEMORY_MB, measured, prices),
        fires_per_second,
        tick_concurrency,
        model,
        min_shards=floor,
        measured=measured,
        prices=prices,
    )
    return Plan(
        fires_per_second=fires_per_second,
        shards=shards,
        tick_memory_mb=MIN_MEMORY_MB,
        tick_concurrency=tick_concurrency,
        claims_per_second_per_shard=elastic.pages_per_second(MIN_MEMORY_MB)
        * elastic.tick.page_size,
        claim_memory_mb=CLAIM_MEMORY_MB,
        claim_reserved_concurrency=claim_concurrency,
        claim_capacity=claim_concurrency * elastic.claims_per_invocation_second(tick_concurrency),
        worker_max_concurrency=workers.max_concurrency,
        workers_keep_up=workers.invocations <= MAX_WORKER_CONCURRENCY,
        billing=billing,
        provisioned_max_capacity=max_capacity,
        idle=idle,
        loaded=loaded,
        looping_only_idle=looping_only_idle,
        notes=tuple(_notes(workers, partitions, demand)),
        workers=workers,
        loaded_sequential_worker=_with_one_call_at_a_time(loaded, usage, workers, prices),
        partitions=partitions,
        quota_figures=quota_figures(demand),
        execution_retention_days=execution_retention_days,
    )


def at_rest(
    fires_per_second: float,
    workload: Workload,
    retention_days: int,
    measured: Measured,
    prices: Prices,
) -> tuple[float, float]:
    """(tasks, history): a month of storing the registered tasks, and the executions
    the rate leaves, each kept ``retention_days`` after it ends (a TTL delete is
    free), with their point-in-time backups, in USD."""
    per_byte = (prices.dynamodb_storage_per_gb_month + prices.dynamodb_pitr_per_gb_month) / 1e9
    tasks = workload.registered_tasks * measured.task_bytes_at_rest * per_byte
    kept = fires_per_second * retention_days * 86_400
    return tasks, kept * measured.execution_bytes_at_rest * per_byte


def _with_one_call_at_a_time(
    loaded: MonthlyCost, usage: _Usage, workers: WorkerSizing, prices: Prices
) -> MonthlyCost:
    """``loaded`` with the worker before issue 22: one handler call at a time, batches of 10."""
    one_at_a_time = WorkerModel(1, UNWINDOWED_BATCH)
    rate = usage.fires / MONTH_SECONDS
    sequential = WorkerSizing.of(one_at_a_time, rate, workers.latency)
    return dataclasses.replace(
        loaded, worker_lambda=_worker_lambda(usage.fires, sequential, prices)
    )


@dataclass(frozen=True)
class _Usage:
    """A month of requests at the rate: the fires, and the read and write units."""

    fires: float
    shards: int
    idle_reads: float
    idle_writes: float
    loaded_reads: float
    loaded_writes: float
    idle_sqs_requests: float
    loaded_sqs_requests: float

    @classmethod
    def of(cls, fires_per_second: float, shards: int, measured: Measured) -> _Usage:
        month = MONTH_SECONDS
        fires = fires_per_second * month
        idle_reads = shards * month * measured.idle_read_units_per_shard_second
        idle_writes = shards * month * LEASE_RENEWALS_PER_SECOND
        idle_sqs = shards * month * measured.idle_sqs_requests_per_shard_second
        return cls(
            fires=fires,
            shards=shards,
            idle_reads=idle_reads,
            idle_writes=idle_writes,
            loaded_reads=idle_reads + fires * measured.read_units_per_fire,
            loaded_writes=idle_writes + fires * measured.write_units_per_fire,
            idle_sqs_requests=idle_sqs,
            loaded_sqs_requests=idle_sqs + fires * measured.sqs_requests_per_fire,
        )


def _monthly_costs(
    usage: _Usage,
    workers: WorkerSizing,
    elastic: ElasticModel,
    tick_concurrency: int,
    dynamodb_cost: Callable[[float, float], float],
    measured: Measured,
    prices: Prices,
) -> tuple[MonthlyCost, MonthlyCost]:
    """(idle, loaded): a month with nothing due, and a month at the rate."""
    p = prices
    shards = usage.shards
    # The looping tick: billed all month whatever the load.
    billed_seconds = MONTH_SECONDS * TICK_BILLED_SECONDS_PER_PERIOD / TICK_PERIOD_SECONDS
    tick_lambda = shards * MIN_MEMORY_MB / 1024 * billed_seconds * p.lambda_arm_per_gb_second
    tick_requests = (
        shards * MONTH_SECONDS / TICK_PERIOD_SECONDS * p.lambda_per_million_requests / 1e6
    )
    cloudwatch = shards * cloudwatch_usd_per_shard_month(measured, prices)
    sqs_price = p.sqs_standard_per_million_requests / 1e6
    # Claim invocations: every fire counted in a full page, claimed at one vCPU. An
    # upper bound: a page under FANOUT_MIN_TASKS is claimed by the looping tick.
    pages = usage.fires / elastic.tick.page_size
    claim_lambda = pages * (
        elastic.page_seconds(tick_concurrency) * CLAIM_MEMORY_MB / 1024 * p.lambda_arm_per_gb_second
        + p.lambda_per_million_requests / 1e6
    )
    idle = MonthlyCost(
        tick_lambda=tick_lambda,
        tick_requests=tick_requests,
        dynamodb=dynamodb_cost(usage.idle_reads, usage.idle_writes),
        sqs=usage.idle_sqs_requests * sqs_price,
        worker_lambda=0.0,
        cloudwatch=cloudwatch,
    )
    loaded = MonthlyCost(
        tick_lambda=tick_lambda,
        tick_requests=tick_requests,
        dynamodb=dynamodb_cost(usage.loaded_reads, usage.loaded_writes),
        sqs=usage.loaded_sqs_requests * sqs_price,
        worker_lambda=_worker_lambda(usage.fires, workers, prices),
        cloudwatch=cloudwatch,
        claim_lambda=claim_lambda,
    )
    return idle, loaded


def _worker_lambda(fires: float, workers: WorkerSizing, prices: Prices) -> float:
    """A month of fires' worker duration at WORKER_MEMORY_MB and invocations, a batch each."""
    gb_seconds = workers.seconds_per_fire * WORKER_MEMORY_MB / 1024
    return fires * (
        gb_seconds * prices.lambda_arm_per_gb_second
        + prices.lambda_per_million_requests / 1e6 / workers.model.batch_size
    )


def _demand(
    fires_per_second: float,
    stack: tuple[int, int, int | None],
    workers: WorkerSizing,
    workload: Workload,
    measured: Measured,
) -> Demand:
    """The row's peak in the terms AWS's quotas count; ``stack``: its shards, claim
    invocations reserved and provisioned maximum (None on demand)."""
    shards, claim_concurrency, max_capacity = stack
    targets = measured.units_by_target
    api = fires_per_second * workload.api_requests_per_fire
    account = None
    if max_capacity is not None:
        # Every table and index at its burst maximum at once: their sustained units
        # with the room ``max_capacity`` gives the busiest.
        most = max(sum(t.read_units for t in targets), sum(t.write_units for t in targets))
        account = max_capacity * most / measured.busiest_target_units_per_fire
    lambdas = (
        workers.invocations
        + claim_concurrency
        # A shard's holder, its standby and, for the overlap, the next arrival.
        + TICK_INVOCATIONS_PER_SHARD * shards
        + OTHER_FUNCTIONS_CONCURRENCY
        + api * API_REQUEST_SECONDS
    )
    busiest = fires_per_second * measured.busiest_target_units_per_fire * BURST_HEADROOM
    return Demand(
        table_units=max_capacity or busiest,
        account_units=account,
        lambda_concurrency=lambdas,
        worker_invocations=workers.invocations,
        in_flight_messages=workers.in_flight_messages(fires_per_second),
        api_requests_per_second=api,
    )


def _notes(
    workers: WorkerSizing, partitions: tuple[PartitionLoad, ...], demand: Demand
) -> list[str]:
    """What the deployment needs besides its CDK context, said as a person would."""
    notes = partition_notes(partitions)
    if workers.invocation_seconds > LONGEST_PLANNED_INVOCATION_SECONDS:
        notes.append(
            f"workers: an invocation would wait {workers.invocation_seconds:,.0f} s for the "
            f"slowest of its calls, beyond half the worker's {WORKER_TIMEOUT_SECONDS} s "
            "timeout (its time budget would stop the slowest): handlers this slow should "
            "answer 202 and complete by callback"
        )
    if workers.dispatch_queues > 1:
        notes.append(
            f"workers: {workers.invocations:,} invocations at once, beyond one event source "
            f"mapping's {MAX_WORKER_CONCURRENCY:,}: {workers.dispatch_queues} dispatch queues "
            "with a mapping each (not built); a faster handler, or answering 202 and "
            "completing by callback, frees the worker sooner"
        )
    wanted = math.ceil(demand.in_flight_messages * WORKER_HEADROOM)
    if wanted > DEFAULT_MAX_QUEUED_DISPATCHES:
        notes.append(
            f"tick: about {demand.in_flight_messages:,.0f} messages are in flight at once; set "
            f"{MAX_QUEUED_DISPATCHES_VAR} to at least {wanted:,} on the tick (default "
            f"{DEFAULT_MAX_QUEUED_DISPATCHES:,}: the tick would hold due fires back)"
        )
    return notes


@dataclass(frozen=True)
class _DynamoDbBilling:
    """What a month of read and write units costs, on demand or provisioned."""

    prices: Prices
    provisioned_targets: int

    def on_demand(self, reads: float, writes: float) -> float:
        p = self.prices
        return (
            reads * p.dynamodb_on_demand_per_million_read_units
            + writes * p.dynamodb_on_demand_per_million_write_units
        ) / 1e6

    def provisioned(self, reads: float, writes: float) -> float:
        # Units used over the month, paid as unit-hours at the utilisation auto scaling keeps;
        # never less than every target's minimum of one unit each.
        p = self.prices
        hours = MONTH_SECONDS / 3600
        floor = (
            self.provisioned_targets
            * hours
            * (p.dynamodb_provisioned_per_rcu_hour + p.dynamodb_provisioned_per_wcu_hour)
        )
        used = (
            reads / 3600 * p.dynamodb_provisioned_per_rcu_hour
            + writes / 3600 * p.dynamodb_provisioned_per_wcu_hour
        ) / p.provisioned_utilisation
        return max(floor, used)

    def max_capacity(self, billing: str, fires_per_second: float, measured: Measured) -> int | None:
        """Provisioned: the most auto scaling may give a table or index, room above the
        busiest one's sustained load to grow into during a burst; None on demand."""
        if billing != "provisioned":
            return None
        busiest = fires_per_second * measured.busiest_target_units_per_fire
        return math.ceil(busiest / self.prices.provisioned_utilisation * BURST_HEADROOM)

    def billing_for(self, reads: float, writes: float) -> str:
        """Provisioned once it saves enough over on demand at this load."""
        saving = self.on_demand(reads, writes) - self.provisioned(reads, writes)
        return "provisioned" if saving >= PROVISIONED_FROM_SAVING_USD else "on-demand"

    def cost_of(self, billing: str) -> Callable[[float, float], float]:
        return self.provisioned if billing == "provisioned" else self.on_demand


def _looping_only_idle(
    idle_without_ticks: float,
    fires_per_second: float,
    tick_concurrency: int,
    model: TickModel,
    *,
    min_shards: int,
    measured: Measured,
    prices: Prices,
) -> float:
    """The idle month of the same stack with looping ticks large enough alone (inf if none
    is): each shard's idle cost at its memory in place of the elastic shards' at 128 MB."""
    try:
        looping_shards, looping_memory = size_tick(
            fires_per_second,
            tick_concurrency,
            model,
            min_shards=min_shards,
            measured=measured,
            prices=prices,
        )
    except PlanRefused:
        return math.inf
    return idle_without_ticks + looping_shards * idle_usd_per_shard_month(
        looping_memory, measured, prices
    )


SIZING_RATES = (10, 100, 1_000, 10_000)
SIZING_HEADERS = (
    "fires/s",
    "shards",
    "tick memory",
    "claim invocations",
    "claims/s (all shards)",
    "worker invocations",
    "DynamoDB",
    "due-index writes/s a partition",
    "idle $/month",
    "idle $/month, looping only",
    "loaded $/month",
    "of it stored $/month",
    "loaded $ a million fires",
    "CDK context",
)


def sizing_row(row: Plan) -> tuple[str, ...]:
    return (
        f"{row.fires_per_second:,.0f}",
        str(row.shards),
        f"{row.tick_memory_mb:,} MB",
        f"up to {row.claim_reserved_concurrency:,} of {row.claim_memory_mb:,} MB",
        f"{row.tick_capacity:,.0f}",
        f"{row.worker_max_concurrency:,}, {row.workers.model.concurrent_calls:g} calls each"
        + ("" if row.workers_keep_up else " (too few)"),
        row.billing
        + (f", max {row.provisioned_max_capacity:,}" if row.provisioned_max_capacity else ""),
        f"{row.due_index_partition.writes_per_second:,.0f}",
        f"{row.idle.total:,.0f}",
        f"{row.looping_only_idle:,.0f}",
        f"{row.loaded.total:,.0f}",
        f"{row.loaded.storage:,.0f}",
        f"{row.usd_per_million_fires:.2f}",
        f"`{row.context_flags()}`",
    )


def sizing_table(rows: list[Plan]) -> str:
    """The Markdown table of docs/deploy.md's "Sizing" section."""
    lines = [
        "| " + " | ".join(SIZING_HEADERS) + " |",
        "|" + "---|" * len(SIZING_HEADERS),
    ]
    lines += ["| " + " | ".join(sizing_row(row)) + " |" for row in rows]
    return "\n".join(lines)
