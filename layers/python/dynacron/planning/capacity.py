"""Capacity planning: how large a deployment must be for a rate of fires, and what it
costs; and the sizing table of docs/deploy.md.

Every figure comes from one place, so that the sizing table, ``dynacron plan``
and the tests cannot disagree: what was measured, the prices, and the tick and
elastic models are ``capacity_model``'s; this module sizes with them.

The elastic design (decision 0025), which ``plan`` sizes: each shard's looping
tick has 128 MB and hands every page of due tasks to a claim invocation of one
vCPU (1,769 MB), so the shards' memory, billed all month, no longer grows with
the rate. The looping-only design (``size_tick``) is kept to show what elastic
capacity saves.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from dynacron.planning.capacity_model import (
    CLAIM_MEMORY_MB,
    FULL_VCPU_MEMORY_MB,
    MEASURED,
    PRICES,
    ElasticModel,
    Measured,
    Prices,
    TickModel,
)

MIN_MEMORY_MB = 128
# Lambda takes memory in 1 MB steps; the plan rounds up to these to stay readable.
MEMORY_STEP_MB = 64
MAX_SHARDS = 100
# The tick is sized for this share of what it can claim: Lambda runs on arm64
# (Graviton) while the CPU was measured on x86, real HTTPS adds TLS, and a shard
# must catch up after a burst.
TICK_UTILISATION = 0.75
# A looping tick is relieved by the next minute's invocation at its next lease
# renewal (every 5 s), so each minute is billed for about 2.5 s twice.
HANDOVER_OVERLAP_SECONDS = 2.5
LEASE_RENEWALS_PER_SECOND = 1 / 5
MONTH_SECONDS = 730 * 3600
# The limits of an SQS event source mapping's maximum concurrency.
MAX_WORKER_CONCURRENCY = 1000
MIN_WORKER_CONCURRENCY = 2
# What one fire keeps a worker busy besides the handler: reading the task and
# its tenant's secrets, beginning and ending the execution (four round trips)
# and its CPU at 256 MB. An assumption, not measured.
WORKER_OVERHEAD_SECONDS = 0.05
WORKER_MEMORY_MB = 256
WORKER_HEADROOM = 1.25
# DynamoDB's default quota of provisioned units per table (each of reads and writes).
TABLE_UNIT_QUOTA = 40_000
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
    # The idle cost of looping ticks sized for the rate instead (``size_tick``).
    looping_only_idle: float = 0.0
    notes: tuple[str, ...] = field(default=())

    @property
    def tick_capacity(self) -> float:
        """Fires/s the deployment can claim in all, at full speed: what its shards
        hand out or what its claim invocations claim, whichever is less."""
        return min(self.shards * self.claims_per_second_per_shard, self.claim_capacity)

    def context(self) -> dict[str, str]:
        """The CDK context keys (``infra/config.py``) that deploy this plan."""
        values = {
            "shard_count": str(self.shards),
            "tick_memory_mb": str(self.tick_memory_mb),
            "claim_reserved_concurrency": str(self.claim_reserved_concurrency),
            "worker_max_concurrency": str(self.worker_max_concurrency),
            "billing": self.billing,
        }
        if self.provisioned_max_capacity is not None:
            values["provisioned_max_capacity"] = str(self.provisioned_max_capacity)
        return values

    def context_flags(self) -> str:
        return " ".join(f"-c {key}={value}" for key, value in self.context().items())


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
    billed_seconds = month * (60 + HANDOVER_OVERLAP_SECONDS) / 60
    return (
        memory_mb / 1024 * billed_seconds * p.lambda_arm_per_gb_second
        + month / 60 * p.lambda_per_million_requests / 1e6
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
    handler_seconds: float = 0.2,
    tick_concurrency: int = 16,
    provisioned_targets: int = 8,
    min_shards: int = 1,
    measured: Measured = MEASURED,
    prices: Prices = PRICES,
) -> Plan:
    """The cheapest deployment that fires ``fires_per_second``, sustained.

    ``handler_seconds`` is how long a handler takes to answer (the worker waits
    for it); ``provisioned_targets`` how many tables and indexes auto scaling
    provisions (each with a minimum of one read and one write unit); ``min_shards``
    the deployment's present shard count, which it must not lower.
    """
    if fires_per_second <= 0:
        raise PlanRefused("fires per second must be more than 0")
    model = TickModel(tick_cpu_ms_per_claim=measured.tick_cpu_ms_per_claim)
    elastic = ElasticModel(tick=model, hand_out_cpu_ms_per_page=measured.hand_out_cpu_ms_per_page)
    shards, claim_concurrency = size_elastic(fires_per_second, elastic, min_shards=min_shards)
    memory = MIN_MEMORY_MB
    p = prices
    month = MONTH_SECONDS
    fires = fires_per_second * month

    # The looping tick: billed all month whatever the load.
    billed_seconds = month * (60 + HANDOVER_OVERLAP_SECONDS) / 60
    tick_lambda = shards * memory / 1024 * billed_seconds * p.lambda_arm_per_gb_second
    tick_invocations = shards * month / 60
    tick_requests = tick_invocations * p.lambda_per_million_requests / 1e6
    idle_reads = shards * month * measured.idle_read_units_per_shard_second
    idle_writes = shards * month * LEASE_RENEWALS_PER_SECOND
    idle_sqs = shards * month * measured.idle_sqs_requests_per_shard_second
    sqs_idle = idle_sqs * p.sqs_standard_per_million_requests / 1e6
    sqs_loaded = sqs_idle + fires * measured.sqs_requests_per_fire * (
        p.sqs_standard_per_million_requests / 1e6
    )

    loaded_reads = idle_reads + fires * measured.read_units_per_fire
    loaded_writes = idle_writes + fires * measured.write_units_per_fire
    dynamodb = _DynamoDbBilling(prices, provisioned_targets)
    billing = dynamodb.billing_for(loaded_reads, loaded_writes)
    dynamodb_cost = dynamodb.cost_of(billing)
    max_capacity = None
    if billing == "provisioned":
        busiest = fires_per_second * measured.busiest_target_units_per_fire
        # Room above the sustained load for auto scaling to grow into during a burst.
        max_capacity = math.ceil(busiest / p.provisioned_utilisation * 1.5)

    # Claim invocations: every fire counted in a full page, claimed at one vCPU. An
    # upper bound: a page under FANOUT_MIN_TASKS is claimed by the looping tick.
    pages = fires / elastic.tick.page_size
    claim_lambda = pages * (
        elastic.page_seconds(tick_concurrency) * CLAIM_MEMORY_MB / 1024 * p.lambda_arm_per_gb_second
        + p.lambda_per_million_requests / 1e6
    )

    busy_seconds = handler_seconds + WORKER_OVERHEAD_SECONDS
    wanted_workers = math.ceil(fires_per_second * busy_seconds * WORKER_HEADROOM)
    workers = max(MIN_WORKER_CONCURRENCY, min(MAX_WORKER_CONCURRENCY, wanted_workers))
    worker_lambda = fires * (
        busy_seconds * WORKER_MEMORY_MB / 1024 * p.lambda_arm_per_gb_second
        + measured.worker_invocations_per_fire * p.lambda_per_million_requests / 1e6
    )
    notes = _quota_notes(max_capacity, workers, wanted_workers, claim_concurrency, busy_seconds)
    idle = MonthlyCost(
        tick_lambda=tick_lambda,
        tick_requests=tick_requests,
        dynamodb=dynamodb_cost(idle_reads, idle_writes),
        sqs=sqs_idle,
        worker_lambda=0.0,
        cloudwatch=shards * cloudwatch_usd_per_shard_month(measured, prices),
    )
    loaded = MonthlyCost(
        tick_lambda=tick_lambda,
        tick_requests=tick_requests,
        dynamodb=dynamodb_cost(loaded_reads, loaded_writes),
        sqs=sqs_loaded,
        worker_lambda=worker_lambda,
        cloudwatch=shards * cloudwatch_usd_per_shard_month(measured, prices),
        claim_lambda=claim_lambda,
    )
    looping_only_idle = _looping_only_idle(
        idle.total - shards * idle_usd_per_shard_month(memory, measured, prices),
        fires_per_second,
        tick_concurrency,
        model,
        min_shards=min_shards,
        measured=measured,
        prices=prices,
    )
    return Plan(
        fires_per_second=fires_per_second,
        shards=shards,
        tick_memory_mb=memory,
        tick_concurrency=tick_concurrency,
        claims_per_second_per_shard=elastic.pages_per_second(memory) * elastic.tick.page_size,
        claim_memory_mb=CLAIM_MEMORY_MB,
        claim_reserved_concurrency=claim_concurrency,
        claim_capacity=claim_concurrency * elastic.claims_per_invocation_second(tick_concurrency),
        worker_max_concurrency=workers,
        workers_keep_up=wanted_workers <= MAX_WORKER_CONCURRENCY,
        billing=billing,
        provisioned_max_capacity=max_capacity,
        idle=idle,
        loaded=loaded,
        looping_only_idle=looping_only_idle,
        notes=tuple(notes),
    )


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

    def billing_for(self, reads: float, writes: float) -> str:
        """Provisioned once it saves enough over on demand at this load."""
        saving = self.on_demand(reads, writes) - self.provisioned(reads, writes)
        return "provisioned" if saving >= PROVISIONED_FROM_SAVING_USD else "on-demand"

    def cost_of(self, billing: str) -> Callable[[float, float], float]:
        return self.provisioned if billing == "provisioned" else self.on_demand


def _quota_notes(
    max_capacity: int | None,
    workers: int,
    wanted_workers: int,
    claim_concurrency: int,
    busy_seconds: float,
) -> list[str]:
    """What the plan needs AWS to raise, or cannot do, said as a person would."""
    notes = []
    if max_capacity is not None and max_capacity > TABLE_UNIT_QUOTA:
        notes.append(
            f"DynamoDB: {max_capacity:,} units at the peak is above the default quota of "
            f"{TABLE_UNIT_QUOTA:,} per table; ask AWS to raise it before deploying"
        )
    if workers + claim_concurrency > MAX_WORKER_CONCURRENCY:
        notes.append(
            f"concurrency: {workers} workers and {claim_concurrency} claim invocations "
            f"reserved need more than the {MAX_WORKER_CONCURRENCY} concurrent Lambdas an "
            "account has unless raised; ask AWS to raise it before deploying"
        )
    if wanted_workers > MAX_WORKER_CONCURRENCY:
        notes.append(
            f"workers: {wanted_workers} would be needed for {busy_seconds:g} s per fire; an "
            f"event source mapping allows {MAX_WORKER_CONCURRENCY} (and an account 1,000 "
            "concurrent Lambdas unless raised): a faster handler, or answering 202 and "
            "completing by callback, frees the worker sooner"
        )
    return notes


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
    "worker concurrency",
    "DynamoDB",
    "idle $/month",
    "idle $/month, looping only",
    "loaded $/month",
    "CDK context",
)


def sizing_row(row: Plan) -> tuple[str, ...]:
    return (
        f"{row.fires_per_second:,.0f}",
        str(row.shards),
        f"{row.tick_memory_mb:,} MB",
        f"up to {row.claim_reserved_concurrency:,} of {row.claim_memory_mb:,} MB",
        f"{row.tick_capacity:,.0f}",
        f"{row.worker_max_concurrency:,}" + ("" if row.workers_keep_up else " (too few)"),
        row.billing
        + (f", max {row.provisioned_max_capacity:,}" if row.provisioned_max_capacity else ""),
        f"{row.idle.total:,.0f}",
        f"{row.looping_only_idle:,.0f}",
        f"{row.loaded.total:,.0f}",
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
