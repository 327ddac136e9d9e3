"""The capacity plan (``dynacron.planning.capacity``, ``dynacron plan``): its model, its
figures' sources, and the sizing table in docs/deploy.md made from it."""

from __future__ import annotations

import json
import math
import re
from typing import Any

import pytest
from typer.testing import CliRunner

from dynacron.cli.main import app
from dynacron.definitions.resources import TABLES
from dynacron.definitions.tick_timing import LoopTiming
from dynacron.entry.settings import Settings
from dynacron.planning import capacity, capacity_model
from dynacron.planning.capacity import PlanRefused, plan, size_elastic, size_tick
from dynacron.planning.capacity_model import (
    MEASURED,
    WORKER_CALLS_IN_FLIGHT,
    ElasticModel,
    HandlerLatency,
    TickModel,
)
from dynacron.planning.partitions import Workload
from dynacron.planning.workers import MAX_WORKER_CONCURRENCY, WORKER_HEADROOM
from tests.support import ROOT

RESULTS = ROOT / "bench" / "results"


def result(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((RESULTS / f"{name}.json").read_text())
    return loaded


# The model


def test_a_shards_claims_grow_with_its_cpu_share_up_to_one_vcpu() -> None:
    model = TickModel(tick_cpu_ms_per_claim=2.0)
    rates = [model.claims_per_second(m, 16) for m in (128, 512, 1024, 1769)]
    assert rates == sorted(rates)
    # 128 MB is 7 % of a vCPU: 36 claims/s of CPU, less the round trips nothing overlaps.
    assert 30 < rates[0] < model.cpu_bound(128) == pytest.approx(1000 * 128 / 1769 / 2.0)
    # Python's GIL: memory beyond one vCPU buys the tick nothing.
    assert model.claims_per_second(3538, 16) == model.claims_per_second(1769, 16)


def test_with_the_cpu_free_a_shard_is_bound_by_its_round_trips() -> None:
    model = TickModel(tick_cpu_ms_per_claim=0.0001)
    # A page of 100 at 16 threads: Query, BatchGetItem, one round of sends, 7 of claims.
    assert model.io_bound(16) == pytest.approx(100 / 0.1)
    assert model.claims_per_second(1769, 16) == pytest.approx(model.io_bound(16), rel=0.01)
    # One thread: 10 rounds of sends and 100 of claims.
    assert model.io_bound(1) == pytest.approx(100 / 1.12)


def test_the_tick_is_sized_for_the_least_idle_cost_with_headroom() -> None:
    shards, memory = size_tick(500, 16)
    model = TickModel()
    need = 500 / capacity.TICK_UTILISATION
    assert shards * model.claims_per_second(memory, 16) >= need
    cost = shards * capacity.idle_usd_per_shard_month(memory)
    # No other shard count carries the rate for less.
    for other in range(1, 20):
        if other * model.claims_per_second(capacity_model.FULL_VCPU_MEMORY_MB, 16) < need:
            continue
        least = next(
            m
            for m in range(capacity.MIN_MEMORY_MB, capacity_model.FULL_VCPU_MEMORY_MB + 64, 64)
            if other * model.claims_per_second(min(m, 1769), 16) >= need
        )
        assert other * capacity.idle_usd_per_shard_month(min(least, 1769)) >= cost - 0.01


def test_a_plan_never_lowers_the_shard_count() -> None:
    # Tasks filed under a shard the deployment drops would never be ticked again.
    assert plan(10).shards == 1
    assert plan(10, min_shards=6).shards == 6
    assert plan(10, min_shards=6).tick_memory_mb == capacity.MIN_MEMORY_MB


def test_a_rate_beyond_a_hundred_shards_is_refused() -> None:
    with pytest.raises(PlanRefused, match="100 shards"):
        plan(1_000_000)
    with pytest.raises(PlanRefused):
        plan(0)


def test_workers_are_sized_by_the_handler_and_capped_by_the_event_source() -> None:
    quick = plan(100, workload=Workload(handler_seconds=0.05))
    slow = plan(100, workload=Workload(handler_seconds=1.0))
    assert quick.worker_max_concurrency < slow.worker_max_concurrency
    # Batches of 10, their calls at once: an invocation waits for the slowest of ten
    # answers (lognormal, p99 4 s) and the path measured beyond it.
    assert slow.workers.model.batch_size == 10
    invocation = slow.workers.invocation_seconds
    assert invocation == pytest.approx(
        HandlerLatency.around(1.0).expected_slowest(10) + slow.workers.model.path_overhead_seconds
    )
    assert slow.worker_max_concurrency == math.ceil(100 * invocation / 10 * WORKER_HEADROOM)
    too_many = plan(10_000, workload=Workload(handler_seconds=20.0))
    assert too_many.worker_max_concurrency == MAX_WORKER_CONCURRENCY
    assert not too_many.workers_keep_up
    assert any("event source mapping" in note for note in too_many.notes)


def test_provisioned_capacity_is_chosen_where_it_saves_and_bounded_for_bursts() -> None:
    small, large = plan(10), plan(1000)
    assert small.billing == "on-demand"
    assert small.provisioned_max_capacity is None
    assert large.billing == "provisioned"
    # The busiest table or index takes 2 units a fire; auto scaling targets 70 %.
    assert large.provisioned_max_capacity is not None
    assert large.provisioned_max_capacity >= 1000 * 2 / 0.7
    assert "provisioned_max_capacity" in large.context()


def test_the_looping_tick_is_billed_all_month_loaded_or_idle() -> None:
    row = plan(100)
    assert row.loaded.tick_lambda == row.idle.tick_lambda > 0
    assert row.idle.worker_lambda == 0 < row.loaded.worker_lambda
    assert row.idle.claim_lambda == 0 < row.loaded.claim_lambda
    assert row.loaded.total > row.idle.total
    # arm64 at $0.0000133334 per GB-second, 730 hours; each minute's invocation lives
    # 135 s (a minute as standby, a minute as holder, 15 s of overlap: decision 0036).
    expected = row.shards * row.tick_memory_mb / 1024 * 730 * 3600 * 135 / 60 * 0.0000133334
    assert row.idle.tick_lambda == pytest.approx(expected)
    # Each looping shard prints an EMF line a tick, two a second (686 bytes idle:
    # decision 0042), and has its own heartbeat metric.
    log_gb = 686.2 * 730 * 3600 / 1e9
    assert row.idle.cloudwatch == pytest.approx(row.shards * (log_gb * 0.53 + 0.30))


def test_the_default_lease_fits_the_longest_tick_of_a_planned_shard() -> None:
    # A tick starts no page after lease - margin from its last renewal: one page
    # must fit in the margin at every memory a plan can choose.
    timing = LoopTiming()
    slowest = TickModel().claims_per_second(capacity.MIN_MEMORY_MB, 16)
    assert capacity_model.PAGE_SIZE / slowest < timing.tick_margin_seconds
    assert timing.renew_every_seconds == 1 / capacity.LEASE_RENEWALS_PER_SECOND


def test_the_plan_bills_the_standby_and_its_reads() -> None:
    # A shard's idle month: 135 s of 128 MB a minute (a minute as standby, a minute as
    # holder, 15 s of overlap), a renewal a second (one write unit), and the read
    # units the cost benchmark measured, the standbys' reads of the lease among them.
    assert capacity.LEASE_RENEWALS_PER_SECOND == 1.0
    assert capacity.TICK_BILLED_SECONDS_PER_PERIOD == 135
    assert capacity.TICK_INVOCATIONS_PER_SHARD == 3
    month = 730 * 3600
    expected = (
        128 / 1024 * month * 135 / 60 * 0.0000133334
        + month / 60 * 0.20 / 1e6
        + month * MEASURED.idle_read_units_per_shard_second * 0.125 / 1e6
        + month * 1.0 * 0.625 / 1e6
        + month * MEASURED.idle_sqs_requests_per_shard_second * 0.40 / 1e6
        + capacity.cloudwatch_usd_per_shard_month(MEASURED, capacity_model.PRICES)
    )
    assert capacity.idle_usd_per_shard_month(128) == pytest.approx(expected)
    # The standbys read the lease about once a second and a quarter (cost.json).
    cost = json.loads((ROOT / "bench" / "results" / "cost.json").read_text())
    reads = {
        row["caller"]: row["rcu"]
        for row in cost["idle_shard"]["breakdown"]
        if row["operation"] == "GetItem"
    }
    assert reads["ShardLeases.get"] == pytest.approx(1.25, abs=0.05)
    assert cost["idle_shard"]["billed_seconds_per_invocation"] == [135.0] * 3


# Where the figures come from


def test_the_tick_cpu_per_claim_is_the_one_make_bench_measured() -> None:
    measured = result("capacity")
    row = next(
        r
        for r in measured["cpu_per_claim"]
        if r["tick_concurrency"] == measured["default_tick_concurrency"]
    )
    # Within the noise of a shared machine; a rerun that moves it moves the constant.
    assert MEASURED.tick_cpu_ms_per_claim == pytest.approx(row["tick_cpu_ms_per_claim"], rel=0.15)


def test_the_worker_s_gb_seconds_per_fire_are_the_overlap_benchmark_s_planned_shape() -> None:
    overlap = result("overlap")
    planned = overlap["planned"]
    # The shape the plan sizes at a high rate: full batches of the calls at once, as
    # many as the deployed worker runs by default (decision 0034).
    assert Settings.worker_concurrency == WORKER_CALLS_IN_FLIGHT
    assert planned["concurrency"] == planned["batch"] == WORKER_CALLS_IN_FLIGHT
    assert planned["memory_mb"] == capacity_model.WORKER_MEMORY_MB
    figures = tuple(
        (run["handler_seconds"], run["gb_seconds_per_fire"])
        for run in overlap["lambda"]
        if run["shape"] == "planned"
    )
    assert MEASURED.worker_gb_seconds_per_fire == figures
    assert [latency for latency, _ in figures] == [0.01, 0.2, 2.0]


def test_the_units_per_fire_are_the_ones_the_cost_benchmark_reports() -> None:
    cost = result("cost")
    recurring = next(s for s in cost["scenarios"] if s["kind"] == "recurring" and s["batch"] > 1)
    per_fire = recurring["per_fire"]
    assert MEASURED.write_units_per_fire == per_fire["write_units"]
    assert MEASURED.read_units_per_fire == per_fire["rcu"]
    assert MEASURED.sqs_requests_per_fire == per_fire["sqs_requests"]
    assert MEASURED.worker_invocations_per_fire == per_fire["lambda_invocations"]
    idle = cost["idle_shard"]["per_shard_second"]
    assert MEASURED.idle_read_units_per_shard_second == idle["rcu"]
    assert MEASURED.idle_sqs_requests_per_shard_second == idle["sqs_requests"]


def test_the_prices_are_the_cost_benchmarks() -> None:
    prices = result("cost")["prices_usd"]
    for name in (
        "dynamodb_on_demand_per_million_write_units",
        "dynamodb_on_demand_per_million_read_units",
        "dynamodb_provisioned_per_wcu_hour",
        "dynamodb_provisioned_per_rcu_hour",
        "provisioned_utilisation",
        "sqs_standard_per_million_requests",
    ):
        assert getattr(capacity_model.PRICES, name) == prices[name], name


# The sizing table and the command


def test_the_sizing_table_in_the_docs_is_the_plans() -> None:
    deploy = (ROOT / "docs" / "deploy.md").read_text()
    targets = sum(1 + len(table.indexes) for table in TABLES)
    rows = [plan(rate, provisioned_targets=targets) for rate in capacity.SIZING_RATES]
    assert capacity.sizing_table(rows) in deploy


def test_plan_prints_the_row_and_the_context_that_deploys_it() -> None:
    printed = CliRunner().invoke(app, ["plan", "--fires-per-second", "1000"])
    assert printed.exit_code == 0, printed.output
    row = plan(1000, provisioned_targets=sum(1 + len(t.indexes) for t in TABLES))
    assert f'make synth CONTEXT="{row.context_flags()}"' in printed.output
    assert f"cdk deploy {row.context_flags()}" in printed.output
    assert re.search(rf"shards\s*│\s*{row.shards}\b", printed.output)


def test_plan_as_json_and_plan_refused() -> None:
    runner = CliRunner()
    printed = runner.invoke(
        app, ["plan", "--fires-per-second", "100", "--current-shards", "4", "--json"]
    )
    assert printed.exit_code == 0, printed.output
    body = json.loads(printed.output)
    assert body["shards"] == 4
    assert body["context"]["shard_count"] == "4"
    assert body["idle_usd_per_month"] < body["loaded_usd_per_month"]
    refused = runner.invoke(app, ["plan", "--fires-per-second", "1000000"])
    assert refused.exit_code == 2


# Elastic capacity (decision 0025)


def test_the_models_fan_out_constants_are_the_runtimes_defaults() -> None:
    assert Settings.tick_fanout_max_pages == capacity_model.FANOUT_MAX_PAGES_PER_TICK
    assert Settings.tick_fanout_min_tasks == capacity_model.FANOUT_MIN_TASKS
    assert Settings.tick_page_size == capacity_model.PAGE_SIZE
    assert LoopTiming().tick_interval_seconds == capacity_model.TICK_INTERVAL_SECONDS


def test_the_hand_out_cpu_is_the_one_make_bench_measured() -> None:
    measured = result("fanout")
    assert MEASURED.hand_out_cpu_ms_per_page == pytest.approx(
        measured["hand_out_cpu_ms_per_page"], rel=0.15
    )
    # Under the CPU quota of 128 MB the tick handed pages out at least as fast as the
    # model says (the model is the plan's, so it must not promise more)
    limited = measured["limited"]
    assert limited["memory_mb"] == capacity.MIN_MEMORY_MB
    assert limited["pages_per_second"] >= ElasticModel().pages_per_second(capacity.MIN_MEMORY_MB)


def test_every_planned_looping_tick_idles_at_128_mb_and_claims_are_paid_per_page() -> None:
    for rate in capacity.SIZING_RATES:
        row = plan(rate)
        assert row.tick_memory_mb == capacity.MIN_MEMORY_MB
        assert row.claim_memory_mb == capacity_model.FULL_VCPU_MEMORY_MB
        assert row.tick_capacity * capacity.TICK_UTILISATION >= rate
    # A page of 100 at one vCPU: 100 / 425 claims/s, 1,769 MB, plus the request
    model = ElasticModel()
    per_million = 1e4 * (model.page_seconds() * 1769 / 1024 * 0.0000133334 + 0.2 / 1e6)
    assert per_million == pytest.approx(0.056, abs=0.002)
    row = plan(100)
    fires = 100 * 730 * 3600
    assert row.loaded.claim_lambda == pytest.approx(fires / 1e6 * per_million)


def test_a_shard_hands_out_at_its_pace_up_to_the_cap_and_claims_are_capped_too() -> None:
    slow = ElasticModel(hand_out_cpu_ms_per_page=20.0)
    # 10 ms Query + 20 ms Invoke + 20 ms of CPU at 7 % of a vCPU: 0.31 s a page
    assert slow.hand_out_seconds(128) == pytest.approx(0.03 + 0.020 / (128 / 1769))
    assert slow.pages_per_second(128) < capacity_model.FANOUT_MAX_PAGES_PER_TICK
    # The cap: 10 pages a tick, two ticks a second (decision 0042)
    capped = capacity_model.FANOUT_MAX_PAGES_PER_TICK / capacity_model.TICK_INTERVAL_SECONDS
    assert capped == 20
    assert ElasticModel(hand_out_cpu_ms_per_page=0.1).pages_per_second(128) == capped
    # Four shards handing out 1,000 claims/s each, against 2 invocations' claims
    assert ElasticModel().capacity(4, 128, 2) == pytest.approx(
        2 * ElasticModel().claims_per_invocation_second()
    )
    shards, reserved = size_elastic(5_000)
    # At 128 MB a shard's pace (about 13 pages a second) binds before the cap of 20
    per_shard = ElasticModel().pages_per_second(128) * capacity_model.PAGE_SIZE
    assert 1_000 < per_shard < capped * capacity_model.PAGE_SIZE
    assert shards == math.ceil(5_000 / 0.75 / per_shard)
    assert reserved == math.ceil(2 * 5_000 / 0.75 / ElasticModel().claims_per_invocation_second())
    assert size_elastic(10, min_shards=4) == (4, capacity.MIN_CLAIM_CONCURRENCY)


def test_elastic_capacity_saves_the_idle_cost_of_a_large_looping_tick() -> None:
    # The default stack: 4 shards for 500 fires/s
    targets = sum(1 + len(t.indexes) for t in TABLES)
    row = plan(500, min_shards=4, provisioned_targets=targets)
    looping = size_tick(500, 16, min_shards=4)
    assert looping == (4, 640)
    idle_at = capacity.idle_usd_per_shard_month
    per_shard_saving = idle_at(640) - idle_at(128)
    assert row.looping_only_idle - row.idle.total == pytest.approx(4 * per_shard_saving)
    assert per_shard_saving > 18
    # ...and the figures docs/deploy.md gives for it ("Elastic capacity") are these
    deploy = (ROOT / "docs" / "deploy.md").read_text()
    section = deploy[deploy.index("### Elastic capacity") : deploy.index("## Idle cost")]
    before = re.search(r"idled at about\s+\*\*\$(\d+) a month\*\*", section)
    after = re.search(r"idles at 4 . 128 MB, about \*\*\$(\d+) a month\*\*", section)
    saved = re.search(r"\*\*\$(\d+) a month saved\*\*", section)
    assert before is not None
    assert after is not None
    assert saved is not None
    assert int(before[1]) == pytest.approx(row.looping_only_idle, abs=1)
    assert int(after[1]) == pytest.approx(row.idle.total, abs=1)
    assert int(saved[1]) == pytest.approx(row.looping_only_idle - row.idle.total, abs=1)


# Storage at rest (issue 24)


def test_the_bytes_at_rest_are_the_ones_the_cost_benchmark_measured() -> None:
    stored = result("cost")["at_rest"]
    assert MEASURED.task_bytes_at_rest == stored["task_bytes_at_rest"]
    assert MEASURED.execution_bytes_at_rest == stored["execution_bytes_at_rest"]
    # A task keeps index entries (the due index, the tenant's, the name index); a
    # finished execution none. Each entry is billed 100 bytes and at least the task id
    # (a key of its table: "task_id" and 32 characters)
    indexes_of_a_recurring_task = 3
    assert stored["task_index_bytes"] >= indexes_of_a_recurring_task * (100 + 7 + 32)
    assert stored["execution_index_bytes"] == 0


def test_the_history_kept_and_the_registered_tasks_are_paid_for_at_rest() -> None:
    # Given 10 fires a second, and 10 million tasks registered
    busy = plan(10, workload=Workload(registered_tasks=10_000_000))
    quiet = plan(10)
    per_gb = (
        capacity_model.PRICES.dynamodb_storage_per_gb_month
        + capacity_model.PRICES.dynamodb_pitr_per_gb_month
    )
    # Then the tasks are stored whether they fire or not, idle or loaded...
    tasks = 10_000_000 * MEASURED.task_bytes_at_rest / 1e9 * per_gb
    assert busy.idle.storage == pytest.approx(tasks)
    assert quiet.idle.storage == 0
    # ...and the loaded month adds the executions kept 90 days after they end
    history = 10 * 90 * 86_400 * MEASURED.execution_bytes_at_rest / 1e9 * per_gb
    assert quiet.loaded.storage == pytest.approx(history)
    assert busy.loaded.storage == pytest.approx(tasks + history)
    assert busy.loaded.total - quiet.loaded.total == pytest.approx(tasks)


def test_plan_takes_the_registered_tasks() -> None:
    printed = CliRunner().invoke(
        app, ["plan", "--fires-per-second", "10", "--tasks", "10000000", "--json"]
    )
    assert printed.exit_code == 0, printed.output
    data = json.loads(printed.output)
    assert data["idle"]["storage"] == pytest.approx(
        plan(10, workload=Workload(registered_tasks=10_000_000)).idle.storage
    )
    assert data["idle"]["storage"] > 4


def test_a_shorter_history_retention_is_priced_and_deployed_by_the_plan() -> None:
    kept_90, kept_7 = plan(10_000), plan(10_000, execution_retention_days=7)
    assert kept_7.loaded.storage == pytest.approx(kept_90.loaded.storage * 7 / 90)
    assert kept_7.loaded.total < kept_90.loaded.total
    assert "execution_retention_days" not in kept_90.context()
    assert kept_7.context()["execution_retention_days"] == "7"
    printed = CliRunner().invoke(app, ["plan", "--fires-per-second", "10", "--retention-days", "0"])
    assert printed.exit_code == 2
