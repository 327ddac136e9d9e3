"""The capacity plan at the seed's peak (issue 22): workers whose calls overlap, the
busiest partition of every table and index, and the AWS quotas a row exceeds.
Figures are worked out by hand here, from the model's stated constants."""

from __future__ import annotations

import math
import zlib
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from typer.testing import CliRunner

from dynacron.adapters.delivery.secrets import SECRETS_KEPT
from dynacron.cli.main import app
from dynacron.definitions.resources import TABLES
from dynacron.domain.tasks.task import Sharding
from dynacron.planning import capacity, capacity_model, quotas
from dynacron.planning.capacity import plan
from dynacron.planning.capacity_model import (
    FIRE_UNITS_BY_TARGET,
    MEASURED,
    UNWINDOWED_BATCH,
    WORKER_OVERHEAD_SECONDS,
    Measured,
    WorkerModel,
)
from dynacron.planning.partitions import (
    PARTITION_UTILISATION,
    Workload,
    busiest_partitions,
    partition_notes,
)
from dynacron.planning.workers import MAX_WORKER_CONCURRENCY, WorkerSizing, size_workers
from tests.support import ROOT
from tests.unit.test_plan import result

TARGETS = sum(1 + len(table.indexes) for table in TABLES)


def at(handler_seconds: float, **workload: Any) -> Workload:
    return Workload(handler_seconds=handler_seconds, **workload)


# Workers: many calls in flight an invocation


def test_the_10000_row_keeps_up_on_one_mapping_with_handlers_of_02_and_2_s() -> None:
    # 0.2 s: batches of 10, all ten calls at once: 0.28 s / 10 a fire of waiting, but
    # 0.04 s of CPU a fire at 256 MB (measured), x 1.25 headroom.
    quick = plan(10_000, workload=at(0.2))
    assert quick.workers.model.batch_size == 10
    assert quick.workers.model.batching_window_seconds == 0
    assert quick.worker_max_concurrency == math.ceil(10_000 * 0.04 * 1.25) == 500
    # What the invocations carry at once, by hand, covers the rate with room.
    busy = quick.workers.handler_seconds + WORKER_OVERHEAD_SECONDS
    assert quick.worker_max_concurrency * 10 / busy >= 10_000 * 1.25 * 0.99
    # 2 s: batches of 10 would need 2,563 invocations; full batches of 32 calls,
    # gathered for a second, take what `make bench` measured of an invocation a
    # fire (GB-seconds at 256 MB, bench/results/overlap.json's planned runs).
    slow = plan(10_000, workload=at(2.0))
    assert slow.workers.model.batch_size == 32
    assert slow.workers.model.batching_window_seconds == 1
    measured = dict(MEASURED.worker_gb_seconds_per_fire)[2.0] / (256 / 1024)
    assert slow.workers.seconds_per_fire == pytest.approx(measured)
    assert slow.worker_max_concurrency == math.ceil(10_000 * measured * 1.25)
    for row in (quick, slow):
        assert row.workers_keep_up
        assert row.workers.dispatch_queues == 1
        assert "too few" not in " ".join(capacity.sizing_row(row))
        assert row.context()["worker_batch_size"] == str(row.workers.model.batch_size)


def test_one_call_at_a_time_could_not_carry_10000_fires_on_one_mapping() -> None:
    # The worker before issue 22: 0.28 s of an invocation per fire.
    sequential = WorkerSizing.of(WorkerModel(1, UNWINDOWED_BATCH), 10_000, 0.2)
    assert sequential.invocations == math.ceil(10_000 * 0.28 * 1.25) >= 3500
    assert sequential.dispatch_queues == 4


def test_beyond_one_mapping_the_plan_says_how_many_dispatch_queues() -> None:
    # 20 s handlers: the figure measured at 2 s and 18 s more of one call's place.
    row = plan(10_000, workload=at(20.0))
    at_2_s = dict(MEASURED.worker_gb_seconds_per_fire)[2.0] / (256 / 1024)
    assert row.workers.seconds_per_fire == pytest.approx(at_2_s + 18 / 32)
    assert row.workers.invocations == math.ceil(10_000 * row.workers.seconds_per_fire * 1.25)
    queues = math.ceil(row.workers.invocations / 1000)
    assert row.workers.dispatch_queues == queues >= 7
    assert not row.workers_keep_up
    assert f"{queues} dispatch queues" in " ".join(row.notes)


def test_an_invocation_s_calls_overlap_but_its_cpu_does_not() -> None:
    # 10 ms handlers, 32 at once: 90 ms / 32 of waiting, but 40 ms of CPU a fire.
    assert WorkerModel(32, 32).seconds_per_fire(0.01) == capacity_model.WORKER_CPU_SECONDS
    # One at a time: the handler and all of the overhead, as before issue 22.
    assert WorkerModel(1, 10).seconds_per_fire(0.2) == pytest.approx(0.28)
    # A batch of 100 with 32 at once runs in 4 rounds: 25 calls at once on average.
    assert WorkerModel(32, 100).concurrent_calls == 25
    assert WorkerModel(32, 100).batching_window_seconds == 1


def test_a_measured_figure_replaces_the_model_for_full_batches() -> None:
    measured = Measured(worker_gb_seconds_per_fire=((0.01, 0.003), (0.2, 0.004), (2.0, 0.02)))
    full = size_workers(10_000, 2.0, measured)
    # 0.02 GB-seconds at 256 MB is 0.08 s of an invocation a fire.
    assert full.seconds_per_fire == pytest.approx(0.08)
    assert full.invocations == 1000
    # Between two measured latencies the figure runs straight; beyond the slowest,
    # each further handler second holds one of the 32 calls' places.
    model = full.model
    assert model.seconds_per_fire(1.1) * 0.25 == pytest.approx(0.012)
    assert model.seconds_per_fire(3.8) == pytest.approx(0.08 + 1.8 / 32)
    assert model.seconds_per_fire(0.0) * 0.25 == pytest.approx(0.003)


def test_the_loaded_cost_per_million_fires_before_and_after() -> None:
    row = plan(10_000, workload=at(0.2), provisioned_targets=TARGETS)
    fires = 10_000 * capacity.MONTH_SECONDS
    # Only the worker's Lambda differs: 0.28 s at 256 MB a fire before, 0.04 s after.
    gb_second = capacity_model.PRICES.lambda_arm_per_gb_second
    before = row.loaded_sequential_worker
    assert before.worker_lambda == pytest.approx(fires * (0.28 * 0.25 * gb_second + 0.2 / 1e7))
    assert row.loaded.worker_lambda == pytest.approx(fires * (0.04 * 0.25 * gb_second + 0.2 / 1e7))
    assert before.total - row.loaded.total == pytest.approx(
        before.worker_lambda - row.loaded.worker_lambda
    )
    assert row.usd_per_million_fires == pytest.approx(row.loaded.total / fires * 1e6)
    assert row.usd_per_million_fires < capacity.usd_per_million(before, 10_000) - 0.5


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
    assert set(needs) == {quotas.DYNAMODB_TABLE_THROUGHPUT, quotas.DYNAMODB_ACCOUNT_THROUGHPUT}
    # The busiest table or index, 2 units a fire, at 70 % and x 1.5 for a burst
    table = math.ceil(10_000 * 2 / 0.7 * 1.5)
    assert needs[quotas.DYNAMODB_TABLE_THROUGHPUT].needed == table == 42_858
    assert needs[quotas.DYNAMODB_TABLE_THROUGHPUT].request == 43_000
    # Every table and index at that room at once: 5.01 write units a fire in all
    assert needs[quotas.DYNAMODB_ACCOUNT_THROUGHPUT].needed == pytest.approx(table * 5.01 / 2)


def test_slow_handlers_one_time_tasks_and_long_waits_exceed_their_quotas() -> None:
    # 10 s handlers: some 3,900 worker invocations at once, beyond a mapping and the account
    slow = plan(10_000, workload=at(10.0))
    named = {need.quota for need in slow.quotas}
    assert {
        quotas.SQS_MAPPING_CONCURRENCY,
        quotas.LAMBDA_CONCURRENCY,
        quotas.LAMBDA_SCALING_RATE,
    } <= named
    assert quotas.SQS_IN_FLIGHT not in named
    # 15 s: a batch of 32 holds its messages for the window and its invocation: 32
    # fires at what was measured at 2 s, and 13 s more of the calls
    longer = plan(10_000, workload=at(15.0))
    in_flight = next(n for n in longer.quotas if n.quota is quotas.SQS_IN_FLIGHT)
    at_2_s = dict(MEASURED.worker_gb_seconds_per_fire)[2.0] / (256 / 1024)
    assert in_flight.needed == pytest.approx(10_000 * (1 + 32 * at_2_s + 13))
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
