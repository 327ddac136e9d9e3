"""The capacity plan at the seed's peak (issue 22): workers whose calls overlap, the
busiest partition of every table and index, and the AWS quotas a row exceeds.
Figures are worked out by hand here, from the model's stated constants."""

from __future__ import annotations

import json
import math
import random
import statistics
import zlib
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from typer.testing import CliRunner

from dynacron.adapters.delivery.secrets import SECRETS_KEPT
from dynacron.cli.main import app
from dynacron.definitions.resources import TABLES, WORKER_TIMEOUT_SECONDS
from dynacron.domain.tasks.task import Sharding
from dynacron.planning import capacity, capacity_model, quotas
from dynacron.planning.capacity import plan
from dynacron.planning.capacity_model import (
    FIRE_UNITS_BY_TARGET,
    MEASURED,
    UNWINDOWED_BATCH,
    HandlerLatency,
    WorkerModel,
)
from dynacron.planning.partitions import (
    PARTITION_UTILISATION,
    Workload,
    busiest_partitions,
    partition_notes,
)
from dynacron.planning.workers import MAX_WORKER_CONCURRENCY, WorkerSizing
from tests.support import ROOT
from tests.unit.test_plan import result

TARGETS = sum(1 + len(table.indexes) for table in TABLES)


def at(handler_seconds: float, **workload: Any) -> Workload:
    return Workload(handler_seconds=handler_seconds, **workload)


# Workers: many calls in flight an invocation, each invocation as long as its slowest

# What ``make bench BENCH=overlap`` measured of full batches of 32 at 256 MB: the CPU
# of a fire with 10 ms handlers, and how long a batch ran beyond its 2 s handlers.
CPU_A_FIRE = dict(MEASURED.worker_gb_seconds_per_fire)[0.01] / 0.25
PATH_OVERHEAD = 32 * dict(MEASURED.worker_gb_seconds_per_fire)[2.0] / 0.25 - 2.0


def test_the_expected_slowest_answer_of_a_lognormal_batch() -> None:
    # p99 four times the median: sigma = ln 4 / 2.3263
    latency = HandlerLatency.around(0.2)
    assert latency.p99 == 0.8
    assert latency.sigma == pytest.approx(math.log(4) / 2.3263)
    # One call: the mean, median x exp(sigma^2 / 2); two: 2 x mean x Phi(sigma / sqrt 2)
    mean = 0.2 * math.exp(latency.sigma**2 / 2)
    assert latency.expected_slowest(1) == pytest.approx(mean, rel=1e-6)
    two = 2 * mean * 0.5 * (1 + math.erf(latency.sigma / 2))
    assert latency.expected_slowest(2) == pytest.approx(two, rel=1e-6)
    # Ten and 128 at once, against draws of the same distribution
    draws = random.Random(22)
    for calls, samples in ((10, 20_000), (128, 4_000)):
        slowest = [
            max(draws.lognormvariate(math.log(0.2), latency.sigma) for _ in range(calls))
            for _ in range(samples)
        ]
        assert latency.expected_slowest(calls) == pytest.approx(statistics.mean(slowest), rel=0.02)
    # A batch of 10 waits far beyond the median; with no spread, exactly the median
    assert latency.expected_slowest(10) > 2.5 * 0.2
    assert HandlerLatency(0.2, 0.2).expected_slowest(10) == 0.2
    with pytest.raises(ValueError, match="p99"):
        HandlerLatency(0.2, 0.1)


def test_an_invocation_lasts_until_its_slowest_call_or_its_cpu() -> None:
    latency = HandlerLatency.around(0.2)
    batch_of_10 = WorkerModel(32, 10, MEASURED.worker_gb_seconds_per_fire)
    # All ten at once: the slowest of ten answers, plus the measured path beyond it
    assert batch_of_10.invocation_seconds(latency) == pytest.approx(
        latency.expected_slowest(10) + PATH_OVERHEAD
    )
    # ...and not the median's: what sizing by the median (before) said
    assert batch_of_10.invocation_seconds(latency) > 2.5 * (0.2 + PATH_OVERHEAD) / 1.5
    # With every answer at 2 s, a batch of 32 takes what was measured of it
    constant = HandlerLatency(2.0, 2.0)
    full = WorkerModel(32, 32, MEASURED.worker_gb_seconds_per_fire)
    measured = dict(MEASURED.worker_gb_seconds_per_fire)[2.0] / 0.25
    assert full.seconds_per_fire(constant) == pytest.approx(measured)
    # 10 ms handlers: the batch's CPU bounds it, on one core
    quick = HandlerLatency.around(0.01)
    assert full.invocation_seconds(quick) == pytest.approx(32 * CPU_A_FIRE)
    # Without measured figures: the model's own CPU and overhead; one call at a time,
    # each call's own answer (the mean) and its four round trips and CPU, in turn
    assert WorkerModel(32, 32).seconds_per_fire(HandlerLatency(0.01, 0.01)) == pytest.approx(
        capacity_model.WORKER_CPU_SECONDS
    )
    assert WorkerModel(1, 10).seconds_per_fire(HandlerLatency(0.2, 0.2)) == pytest.approx(0.28)
    assert WorkerModel(1, 10).seconds_per_fire(latency) == pytest.approx(latency.mean + 0.08)
    # A batch of 100 with 32 at once runs in 4 rounds of 25
    assert WorkerModel(32, 100).rounds == 4
    assert WorkerModel(32, 100).concurrent_calls == 25
    assert WorkerModel(32, 100).batching_window_seconds == 1


def test_the_10000_row_keeps_up_on_one_mapping_with_handlers_of_02_and_2_s() -> None:
    # 0.2 s median, 0.8 s p99: batches of 10, all ten calls at once, each invocation
    # as long as the slowest of ten answers and the path beyond it; x 1.25 headroom.
    quick = plan(10_000, workload=at(0.2))
    latency = HandlerLatency.around(0.2)
    assert quick.workers.model.batch_size == 10
    assert quick.workers.model.batching_window_seconds == 0
    invocation = latency.expected_slowest(10) + PATH_OVERHEAD
    assert quick.worker_max_concurrency == math.ceil(10_000 * invocation / 10 * 1.25)
    # What the invocations carry at once, by hand, covers the rate with room.
    assert quick.worker_max_concurrency * 10 / invocation >= 10_000 * 1.25 * 0.99
    # 2 s median: a batch of 32 waits some 7 s for its slowest and would need
    # 2,900 invocations; batches of 128, every call at once, spread the tail.
    slow = plan(10_000, workload=at(2.0))
    latency = HandlerLatency.around(2.0)
    model = slow.workers.model
    assert (model.batch_size, model.calls_in_flight, model.batching_window_seconds) == (128, 128, 1)
    invocation = latency.expected_slowest(128) + PATH_OVERHEAD
    assert invocation > 128 * CPU_A_FIRE
    assert slow.worker_max_concurrency == math.ceil(10_000 * invocation / 128 * 1.25)
    thirty_two = WorkerModel(32, 32, MEASURED.worker_gb_seconds_per_fire)
    assert WorkerSizing.of(thirty_two, 10_000, latency).invocations > 2_500
    assert slow.context()["worker_concurrency"] == "128"
    assert "worker_concurrency" not in quick.context()
    for row in (quick, slow):
        assert row.workers_keep_up
        assert row.workers.dispatch_queues == 1
        assert "too few" not in " ".join(capacity.sizing_row(row))
        assert row.context()["worker_batch_size"] == str(row.workers.model.batch_size)


def test_the_plan_sizes_at_least_the_workers_the_scale_simulation_needed() -> None:
    # bench/results/scale.json: 10,000 fires/s of 0.2 s (p99 0.8 s) lognormal handlers,
    # batches of 10 at 256 MB, kept up with this many invocations; 500 (the plan
    # sized by the median) carried about 7,100 fires/s (BENCHMARKS.md, section 9).
    simulated = result("scale")
    deployment = simulated["deployment"]
    scenario = simulated["scenario"]
    assert scenario["handler_latency_seconds"] == {"median": 0.2, "p99": 0.8}
    assert (deployment["worker_batch_size"], deployment["worker_memory_mb"]) == (10, 256)
    assert simulated["lost"] == 0
    assert simulated["steady_rate"]["p99_lateness_seconds"] <= 1.5
    row = plan(scenario["fires_per_second"], workload=at(0.2, handler_p99_seconds=0.8))
    assert row.worker_max_concurrency >= deployment["worker_max_concurrency"]
    # ...and by the model 500 invocations carry fewer than 10,000 fires/s, about what
    # the simulation saw
    carried = 500 * 10 / row.workers.invocation_seconds
    assert 0.85 * 7_100 < carried < 10_000


def test_one_call_at_a_time_could_not_carry_10000_fires_on_one_mapping() -> None:
    # The worker before issue 22: a handler's mean answer and 0.08 s a fire, in turn.
    latency = HandlerLatency.around(0.2)
    sequential = WorkerSizing.of(WorkerModel(1, UNWINDOWED_BATCH), 10_000, latency)
    assert sequential.invocations == math.ceil(10_000 * (latency.mean + 0.08) * 1.25) >= 3900
    assert sequential.dispatch_queues == 4


def test_beyond_one_mapping_the_plan_says_how_many_dispatch_queues() -> None:
    # 10 s handlers: a batch of 32 would run past half the worker's timeout, so
    # batches of 10, each waiting for the slowest of ten.
    row = plan(10_000, workload=at(10.0))
    latency = HandlerLatency.around(10.0)
    assert row.workers.model.batch_size == 10
    invocation = latency.expected_slowest(10) + PATH_OVERHEAD
    assert invocation <= WORKER_TIMEOUT_SECONDS / 2 < latency.expected_slowest(32)
    assert row.workers.invocations == math.ceil(10_000 * invocation / 10 * 1.25)
    queues = math.ceil(row.workers.invocations / 1000)
    assert row.workers.dispatch_queues == queues >= 30
    assert not row.workers_keep_up
    assert f"{queues} dispatch queues" in " ".join(row.notes)
    # 20 s handlers: even ten at once outlast half the timeout, and the plan says so
    slower = plan(10_000, workload=at(20.0))
    assert slower.workers.invocation_seconds > WORKER_TIMEOUT_SECONDS / 2
    assert "answer 202" in " ".join(slower.notes)
    assert "timeout" in " ".join(slower.notes)


def test_the_loaded_cost_per_million_fires_before_and_after() -> None:
    row = plan(10_000, workload=at(0.2), provisioned_targets=TARGETS)
    fires = 10_000 * capacity.MONTH_SECONDS
    latency = HandlerLatency.around(0.2)
    # Only the worker's Lambda differs: each call's answer and 0.08 s in turn before,
    # the batch's slowest answer and its path after, shared by its ten fires.
    gb_second = capacity_model.PRICES.lambda_arm_per_gb_second
    before = row.loaded_sequential_worker
    one_at_a_time = latency.mean + 0.08
    assert before.worker_lambda == pytest.approx(
        fires * (one_at_a_time * 0.25 * gb_second + 0.2 / 1e7)
    )
    overlapping = (latency.expected_slowest(10) + PATH_OVERHEAD) / 10
    assert row.loaded.worker_lambda == pytest.approx(
        fires * (overlapping * 0.25 * gb_second + 0.2 / 1e7)
    )
    assert before.total - row.loaded.total == pytest.approx(
        before.worker_lambda - row.loaded.worker_lambda
    )
    assert row.usd_per_million_fires == pytest.approx(row.loaded.total / fires * 1e6)
    assert row.usd_per_million_fires < capacity.usd_per_million(before, 10_000) - 0.5


def test_plan_takes_the_handlers_p99_and_refuses_one_below_the_median() -> None:
    runner = CliRunner()
    printed = runner.invoke(
        app,
        ["plan", "--fires-per-second", "10000", "--handler-p99", "2", "--json"],
    )
    assert printed.exit_code == 0, printed.output
    wide = plan(10_000, workload=at(0.2, handler_p99_seconds=2.0))
    body = json.loads(printed.output)
    assert body["workers"]["latency"] == {"median": 0.2, "p99": 2.0}
    assert body["worker_max_concurrency"] == wide.worker_max_concurrency
    # A wider tail: batches of 10 would wait longer for their slowest than a mapping carries
    narrow = plan(10_000)
    assert wide.workers.model.batch_size > narrow.workers.model.batch_size
    refused = runner.invoke(app, ["plan", "--fires-per-second", "100", "--handler-p99", "0.1"])
    assert refused.exit_code == 2
    assert "--handler-p99" in refused.output


# Partitions


def test_the_due_index_partition_writes_of_a_known_row() -> None:
    # Each claim deletes its entry and puts the next in the same hour's bucket: two
    # writes to one bucket-and-shard partition. 10,000/s at 500 a partition: 40 shards.
    row = plan(10_000)
    assert row.shards == 40
    assert row.due_index_partition.writes_per_second == 10_000 / 40 * 2 == 500
    assert row.due_index_partition.writes_per_second <= 1000 * PARTITION_UTILISATION
    # 1,000/s took 2 shards before: 1,000 writes a second a partition, all of its limit.
    assert plan(1_000).shards == 4
    assert plan(1_000).due_index_partition.writes_per_second == 500


def test_the_domain_places_a_recurring_claim_s_two_writes_in_one_partition() -> None:
    # Given 4,000 tasks firing every minute, spread over the minute, on 4 shards
    sharding = Sharding(shard_count=4, bucket_seconds=3600)
    start = datetime(2026, 11, 30, 3, 10, tzinfo=UTC)
    writes: Counter[str] = Counter()
    for number in range(4000):
        task_id = f"task-{number}"
        due = start + timedelta(seconds=zlib.crc32(task_id.encode()) % 60)
        # When each is claimed: its entry leaves, the next occurrence's goes in
        for occurrence in (due, due + timedelta(seconds=60)):
            placement = sharding.place(task_id, occurrence, due)
            assert placement is not None
            writes[placement.key] += 1
    # Then each claim wrote twice to one partition, as the plan counts
    busiest = max(writes.values()) / 60
    planned = busiest_partitions(4000 / 60, 4, Workload())[0]
    assert planned.writes_per_second == pytest.approx(4000 / 60 / 4 * 2)
    assert busiest == pytest.approx(planned.writes_per_second, rel=0.1)
    assert len(writes) == 4
    # ...and with buckets of a minute the next occurrence goes to the next bucket
    minute = Sharding(shard_count=4, bucket_seconds=60)
    keys = {minute.place("task-1", start + timedelta(seconds=s), start) for s in (5, 65)}
    assert len(keys) == 2


def test_a_tenant_s_record_is_read_once_per_warm_worker_every_few_seconds() -> None:
    one_tenant = plan(10_000)
    record = next(p for p in one_tenant.partitions if p.target == "coordination")
    # Each warm worker reads it once every SECRETS_KEPT, not once a fire.
    warm = one_tenant.worker_max_concurrency
    assert record.reads_per_second == pytest.approx(warm / SECRETS_KEPT.total_seconds())
    assert record.reads_per_second < 10_000 * MEASURED.tenant_record_reads_per_fire
    assert record.within_headroom
    assert not any("tenant record" in note for note in one_tenant.notes)
    # Read once a fire (no warm workers known), one tenant at 10,000/s is past a
    # partition's 3,000 reads, and the plan says so.
    uncapped = busiest_partitions(10_000, one_tenant.shards, at(0.2))
    read_every_fire = next(p for p in uncapped if p.target == "coordination")
    assert read_every_fire.reads_per_second == 10_000
    assert not read_every_fire.within_headroom
    assert any("tenant record" in note for note in partition_notes(uncapped))


def test_long_jobs_write_the_lease_and_attention_partitions() -> None:
    # Every fire a long job with two heartbeats: the lease index takes its lease, a
    # delete and a put a heartbeat, and its removal, over 4 lease shards; the tenant's
    # listing its entry and its removal, in one partition.
    row = plan(1_000, workload=at(0.05, long_job_share=1.0, heartbeats_per_long_job=2))
    loads = {load.target: load for load in row.partitions}
    assert loads["executions/lease-index"].writes_per_second == 1_000 * (2 + 2 * 2) / 4
    assert loads["executions/attention-index"].writes_per_second == 1_000 * 2
    flagged = " ".join(row.notes)
    assert "lease-index" in flagged
    assert "attention-index" in flagged
    # A hot task catches up at 10 claims a tick: far within its partitions.
    assert loads["tasks"].writes_per_second == 10
    assert loads["executions"].writes_per_second == 20


# Quotas


def test_no_quota_is_listed_below_aws_s_defaults() -> None:
    for rate in (10, 100, 1_000):
        assert plan(rate).quotas == ()
    printed = CliRunner().invoke(app, ["plan", "--fires-per-second", "100"])
    assert "quotas: none above AWS's defaults" in printed.output


def test_the_10000_row_needs_dynamodb_s_table_and_account_quotas_raised() -> None:
    row = plan(10_000, provisioned_targets=TARGETS)
    needs = {need.quota: need for need in row.quotas}
    assert set(needs) == {
        quotas.DYNAMODB_TABLE_THROUGHPUT,
        quotas.DYNAMODB_ACCOUNT_THROUGHPUT,
        quotas.LAMBDA_CONCURRENCY,
    }
    # The account's Lambdas: the workers, the claim invocations, three looping ticks
    # a shard (holder, standby, next arrival) and the reaper's and undelivered's three
    lambdas = row.worker_max_concurrency + row.claim_reserved_concurrency + 3 * row.shards + 3
    assert needs[quotas.LAMBDA_CONCURRENCY].needed == lambdas > 1000
    assert needs[quotas.LAMBDA_CONCURRENCY].request == 2_000
    # The busiest table or index, 2 units a fire, at 70 % and x 1.5 for a burst
    table = math.ceil(10_000 * 2 / 0.7 * 1.5)
    assert needs[quotas.DYNAMODB_TABLE_THROUGHPUT].needed == table == 42_858
    assert needs[quotas.DYNAMODB_TABLE_THROUGHPUT].request == 43_000
    # Every table and index at that room at once: 5.01 write units a fire in all
    assert needs[quotas.DYNAMODB_ACCOUNT_THROUGHPUT].needed == pytest.approx(table * 5.01 / 2)


def test_slow_handlers_one_time_tasks_and_long_waits_exceed_their_quotas() -> None:
    # 10 s handlers: some 34,000 worker invocations at once, beyond a mapping and the
    # account, and their batches of 10 hold their messages until the slowest answers
    slow = plan(10_000, workload=at(10.0))
    named = {need.quota for need in slow.quotas}
    assert {
        quotas.SQS_MAPPING_CONCURRENCY,
        quotas.LAMBDA_CONCURRENCY,
        quotas.LAMBDA_SCALING_RATE,
        quotas.SQS_IN_FLIGHT,
    } <= named
    in_flight = next(n for n in slow.quotas if n.quota is quotas.SQS_IN_FLIGHT)
    waited = HandlerLatency.around(10.0).expected_slowest(10) + PATH_OVERHEAD
    assert in_flight.needed == pytest.approx(10_000 * waited)
    # 2 s: batches of 128 gathered for a second, within the 120,000 a queue allows
    within = plan(10_000, workload=at(2.0))
    assert quotas.SQS_IN_FLIGHT not in {need.quota for need in within.quotas}
    assert within.workers.in_flight_messages(10_000) == pytest.approx(
        10_000 * (1 + within.workers.invocation_seconds)
    )
    # One API call to register each one-time task
    registered = plan(12_000, workload=at(0.2, one_time_share=1.0))
    api = next(n for n in registered.quotas if n.quota is quotas.API_GATEWAY_THROTTLE)
    assert api.needed == 12_000


def test_on_demand_counts_no_account_level_quota() -> None:
    demand = quotas.Demand(
        table_units=50_000,
        account_units=None,
        lambda_concurrency=10,
        worker_invocations=10,
        in_flight_messages=10,
        api_requests_per_second=0,
    )
    assert [need.quota for need in quotas.quota_needs(demand)] == [quotas.DYNAMODB_TABLE_THROUGHPUT]


def test_plan_prints_partitions_quotas_and_the_cost_before_and_after() -> None:
    printed = CliRunner().invoke(app, ["plan", "--fires-per-second", "10000"])
    assert printed.exit_code == 0, printed.output
    row = plan(10_000, provisioned_targets=TARGETS)
    for need in row.quotas:
        assert str(need) in printed.output
    # Every quota's figure, within its default or not: the mapping's, the queue's
    # in-flight messages, API Gateway's...
    named = {figure.quota for figure in row.quota_figures}
    assert named == {
        quotas.DYNAMODB_TABLE_THROUGHPUT,
        quotas.DYNAMODB_ACCOUNT_THROUGHPUT,
        quotas.LAMBDA_CONCURRENCY,
        quotas.LAMBDA_SCALING_RATE,
        quotas.SQS_MAPPING_CONCURRENCY,
        quotas.SQS_IN_FLIGHT,
        quotas.API_GATEWAY_THROTTLE,
    }
    mapping = next(f for f in row.quota_figures if f.quota is quotas.SQS_MAPPING_CONCURRENCY)
    assert mapping.needed == row.workers.invocations
    assert not mapping.exceeded
    in_flight = next(f for f in row.quota_figures if f.quota is quotas.SQS_IN_FLIGHT)
    assert in_flight.needed == pytest.approx(row.workers.in_flight_messages(10_000))
    assert f"{in_flight.needed:,.0f} messages" in printed.output
    assert f"{mapping.needed:,.0f} worker invocations" in " ".join(printed.output.split())
    body = json.loads(
        CliRunner().invoke(app, ["plan", "--fires-per-second", "10000", "--json"]).output
    )
    assert body["quota_figures"][quotas.SQS_IN_FLIGHT.name]["needed"] == in_flight.needed
    assert "tasks/due-index" in printed.output
    assert "busiest partition" in printed.output
    assert f"{row.usd_per_million_fires:.2f}" in printed.output
    before = capacity.usd_per_million(row.loaded_sequential_worker, 10_000)
    assert f"{before:.2f}" in printed.output


def test_the_docs_name_the_quotas_to_request_at_10000_fires_a_second() -> None:
    deploy = " ".join((ROOT / "docs" / "deploy.md").read_text().split())
    for need in plan(10_000, provisioned_targets=TARGETS).quotas:
        assert f"ask for {need.request:,}" in deploy
        assert need.quota.name in deploy


# Where the figures come from


def test_the_units_by_table_and_index_are_the_cost_benchmark_s() -> None:
    recurring = next(
        s for s in result("cost")["scenarios"] if s["kind"] == "recurring" and s["batch"] > 1
    )
    # Who calls what, by the cost benchmark's breakdown.
    reads = {
        "TaskStore.get": "tasks",
        "batch_get": "tasks",
        "TaskStore.due_task_ids": "tasks/due-index",
        "TenantStore.signing_secrets": "coordination",
        "CursorStore.read": "coordination",
        "LimitStore.host": "coordination",
    }
    writes = {
        "TaskStore.claim": "tasks",
        "ExecutionStore.begin": "executions",
        "ExecutionStore.finish": "executions",
        "CursorStore.record_tick": "coordination",
    }
    summed: dict[str, list[float]] = {t.target: [0.0, 0.0] for t in FIRE_UNITS_BY_TARGET}
    for line in recurring["breakdown"]:
        if line["service"] != "dynamodb":
            continue
        caller = line["caller"]
        if line["rcu"]:
            summed[reads[caller]][0] += line["rcu"]
        if line["wcu"]:
            summed[writes[caller]][1] += line["wcu"]
        if line["index_wcu"]:
            assert caller == "TaskStore.claim"
            summed["tasks/due-index"][1] += line["index_wcu"]
    for target in FIRE_UNITS_BY_TARGET:
        assert summed[target.target] == pytest.approx([target.read_units, target.write_units])
    assert sum(t.write_units for t in FIRE_UNITS_BY_TARGET) == pytest.approx(
        MEASURED.write_units_per_fire
    )
    assert sum(t.read_units for t in FIRE_UNITS_BY_TARGET) == pytest.approx(
        MEASURED.read_units_per_fire
    )
    secrets = next(
        line for line in recurring["breakdown"] if line["caller"] == "TenantStore.signing_secrets"
    )
    # The benchmark's one warm worker read its tenant's record once per 5 s (0.0133 a
    # fire); the plan bounds the record's reads by a read a fire, capped by what its
    # warm workers read (``partitions._tenant_record_reads``).
    assert 0 < secrets["rcu"] <= MEASURED.tenant_record_reads_per_fire
    # The cost benchmark's worker took batches of 10, as the plan's unwindowed batch
    assert MEASURED.worker_invocations_per_fire == 1 / UNWINDOWED_BATCH


def test_the_planner_and_the_quotas_agree_on_their_limits() -> None:
    # The busiest table or index: the executions table's begin and finish, or the
    # due index's delete and put.
    assert MEASURED.busiest_target_units_per_fire == 2.0
    assert quotas.SQS_MAPPING_CONCURRENCY.default == MAX_WORKER_CONCURRENCY
