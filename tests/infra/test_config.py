"""Deployment settings from CDK context: typed from cdk.json, text from ``-c``; no synthesis."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dynacron.entry.settings import Settings
from infra.app import command_line_context
from infra.config import SchedulerConfig


class Context:
    """Just enough of a construct node: what ``try_get_context`` would return."""

    def __init__(self, **values: Any) -> None:
        self._values = values

    def try_get_context(self, key: str) -> Any:
        return self._values.get(key)


def config_from(**values: Any) -> SchedulerConfig:
    return SchedulerConfig.from_context(Context(**values))  # type: ignore[arg-type]


def test_defaults_are_the_runtime_s_own_and_cost_nothing_idle() -> None:
    config = config_from()
    assert config.shard_count == Settings.shard_count
    assert config.bucket_seconds == Settings.bucket_seconds
    assert config.billing == "on-demand"
    assert config.alarm_email is None


def test_text_from_the_command_line_becomes_typed_settings() -> None:
    config = config_from(
        shard_count="8",
        api_rate_limit="12.5",
        point_in_time_recovery="false",
        billing="provisioned",
        alarm_email="ops@dynacron.invalid",
    )
    assert config.shard_count == 8
    assert config.api_rate_limit == 12.5
    assert config.point_in_time_recovery is False
    assert config.billing == "provisioned"
    assert config.alarm_email == "ops@dynacron.invalid"


@pytest.mark.parametrize(
    ("key", "value", "named"),
    [
        ("shard_count", "eight", "shard_count"),
        ("shard_count", "0", "shard_count"),
        ("billing", "reserved", "billing"),
        ("point_in_time_recovery", "maybe", "point_in_time_recovery"),
        ("worker_max_concurrency", "1", "worker_max_concurrency"),
        ("callback_ip_rate_limit", "5", "callback_ip_rate_limit"),
        ("api_ip_rate_limit", "0", "api_ip_rate_limit"),
        ("api_firewall", "perhaps", "api_firewall"),
        ("worker_concurrency", "0", "worker_concurrency"),
        ("worker_memory_mb", "64", "worker_memory_mb"),
        ("worker_batch_window_seconds", "0", "worker_batch_window_seconds >= 1"),
        ("log_retention_days", "10", "log_retention_days"),
        # An alias names no key a grant can name; a key by id alone has no region.
        ("kms_key_arn", "arn:aws:kms:eu-west-1:123456789012:alias/dynacron", "kms_key_arn"),
        ("kms_key_arn", "0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b", "kms_key_arn"),
        ("kms_key_arn", "", "kms_key_arn"),
    ],
)
def test_a_bad_value_is_refused_by_name(key: str, value: str, named: str) -> None:
    with pytest.raises(ValueError, match=named):
        config_from(**{key: value})


@pytest.mark.parametrize(
    ("stage", "explicit", "protected"),
    [("prod", None, True), ("dev", None, False), ("dev", "true", True), ("prod", False, False)],
)
def test_data_is_protected_in_production_unless_told_otherwise(
    stage: str, explicit: Any, protected: bool
) -> None:
    config = config_from(stage=stage, deletion_protection=explicit)
    assert config.protect_data is protected


def test_command_line_flags_override_cdk_json(tmp_path: Path) -> None:
    cdk_json = tmp_path / "cdk.json"
    cdk_json.write_text(json.dumps({"app": "x", "context": {"stage": "dev", "shard_count": 4}}))
    context = command_line_context(["-c", "stage=prod", "--context", "alarm_email=a=b"], cdk_json)
    assert context == {"stage": "prod", "shard_count": 4, "alarm_email": "a=b"}
    with pytest.raises(SystemExit):
        command_line_context(["-c", "stage"], cdk_json)


def test_the_default_stack_fires_at_least_500_a_second_at_the_least_idle_cost() -> None:
    from dynacron.planning import capacity, capacity_model
    from dynacron.planning.capacity_model import UNWINDOWED_BATCH, HandlerLatency, WorkerModel
    from dynacron.planning.workers import WorkerSizing

    config = config_from()
    # Elastic capacity (decision 0025): 128 MB looping ticks hand pages to claim
    # invocations of one vCPU, as many at once as reserved; with the plan's headroom.
    elastic = capacity_model.ElasticModel().capacity(
        config.shard_count,
        config.tick_memory_mb,
        config.claim_reserved_concurrency,
        Settings.tick_concurrency,
    )
    assert elastic * capacity.TICK_UTILISATION >= 500
    # ...and no more than the plan for 500/s (which keeps today's shard count: lowering
    # it would strand the tasks filed under the shards dropped).
    row = capacity.plan(500, min_shards=Settings.shard_count)
    assert (config.shard_count, config.tick_memory_mb) == (row.shards, row.tick_memory_mb)
    assert (config.claim_memory_mb, config.claim_reserved_concurrency) == (
        row.claim_memory_mb,
        row.claim_reserved_concurrency,
    )
    assert config.tick_memory_mb == 128
    # The workers keep up with 500 fires/s of handlers answering in 0.2 s, many calls
    # at once an invocation (decision 0034), as the plan sizes them; one call at a
    # time would have needed four times as many.
    assert config.worker_max_concurrency == row.worker_max_concurrency
    assert config.worker_concurrency >= row.workers.model.calls_in_flight
    latency = HandlerLatency.around(0.2)
    one_at_a_time = WorkerSizing.of(WorkerModel(1, UNWINDOWED_BATCH), 500, latency)
    assert one_at_a_time.max_concurrency > 4 * config.worker_max_concurrency


def test_a_plans_context_is_what_the_app_reads(tmp_path: Path) -> None:
    from dynacron.planning import capacity

    cdk_json = tmp_path / "cdk.json"
    cdk_json.write_text(json.dumps({"app": "x", "context": {"stage": "dev"}}))
    from dynacron.planning.partitions import Workload

    # The sizing table's rows, and 2 s handlers at 10,000/s (full batches of 128, every
    # call at once: the plan sets the worker's concurrency too)
    rows = [capacity.plan(rate) for rate in capacity.SIZING_RATES]
    rows.append(capacity.plan(10_000, workload=Workload(handler_seconds=2.0)))
    for row in rows:
        # The flags `dynacron plan` prints, read as `make synth CONTEXT=...` reads them.
        context = command_line_context(row.context_flags().split(), cdk_json)
        assert context == {"stage": "dev", **row.context()}
        config = config_from(**context)
        assert config.shard_count == row.shards
        assert config.tick_memory_mb == row.tick_memory_mb
        assert config.claim_reserved_concurrency == row.claim_reserved_concurrency
        assert config.worker_max_concurrency == row.worker_max_concurrency
        assert config.worker_memory_mb == 256
        assert config.worker_concurrency == row.workers.model.calls_in_flight
        assert config.worker_batch_size == row.workers.model.batch_size
        assert config.billing == row.billing
        if row.provisioned_max_capacity is not None:
            assert config.provisioned_max_capacity == row.provisioned_max_capacity


def test_the_ticks_fairness_settings_are_context_keys_with_the_runtimes_defaults() -> None:
    config = config_from()
    assert config.tick_max_claims_per_task == Settings.tick_max_claims_per_task
    assert config.tick_backlog_seconds == Settings.tick_backlog_seconds
    assert config.catchup_max_runs == Settings.catchup_max_runs
    assert config.tick_heartbeat_seconds == Settings.tick_heartbeat_seconds
    custom = config_from(
        tick_max_claims_per_task="3",
        tick_backlog_seconds="0.5",
        catchup_max_runs="7",
        tick_heartbeat_seconds="20",
    )
    assert (
        custom.tick_max_claims_per_task,
        custom.tick_backlog_seconds,
        custom.catchup_max_runs,
        custom.tick_heartbeat_seconds,
    ) == (3, 0.5, 7, 20)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("tick_max_claims_per_task", "0"),
        ("tick_backlog_seconds", "-1"),
        ("catchup_max_runs", "0"),
        ("tick_heartbeat_seconds", "60"),
        ("tick_memory_mb", "64"),
    ],
)
def test_a_bad_tick_setting_is_refused_by_name(key: str, value: str) -> None:
    with pytest.raises(ValueError, match=key):
        config_from(**{key: value})


def test_a_whole_tick_of_the_default_stack_fits_inside_its_lease() -> None:
    from dynacron.definitions.tick_timing import LoopTiming
    from dynacron.planning import capacity_model

    # The loop renews the lease between ticks, at most every renew_every_seconds,
    # so a tick of tick_max_claims claims must end before lease_seconds have passed
    # since the renewal before it; at 128 MB it took about a minute (the deadline
    # bound of issue 12 cut it short instead).
    config, timing = config_from(), LoopTiming()
    rate = capacity_model.claims_per_second_per_shard(
        config.tick_memory_mb, Settings.tick_concurrency
    )
    # Elastic (decision 0025): a tick hands out at most tick_fanout_max_pages pages and
    # claims itself only pages under tick_fanout_min_tasks (one per bucket it queries:
    # the two newest, and the backlog's first).
    handing_out = Settings.tick_fanout_max_pages * capacity_model.ElasticModel().hand_out_seconds(
        config.tick_memory_mb
    )
    longest_tick = handing_out + 3 * (Settings.tick_fanout_min_tasks - 1) / rate
    assert timing.renew_every_seconds + longest_tick < timing.lease_seconds
    # And no tick is ever cut short by its deadline: it ends before the last page may start.
    assert timing.renew_every_seconds + longest_tick < (
        timing.lease_seconds - timing.tick_margin_seconds
    )
