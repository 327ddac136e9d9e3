"""Deployment settings from CDK context: typed from cdk.json, text from ``-c``; no synthesis."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dynacron.config import Settings
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
        ("log_retention_days", "10", "log_retention_days"),
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
