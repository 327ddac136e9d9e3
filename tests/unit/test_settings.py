"""Runtime settings from the environment (``Settings.from_env``), as a Lambda reads them."""

from __future__ import annotations

import os
import re
from datetime import timedelta

import pytest

from dynacron.definitions.resources import QUEUES, TABLES
from dynacron.entry import settings as config
from dynacron.entry.settings import Settings
from tests.support import ROOT

RESOURCES = {
    **{table.env_var: f"table-{table.logical_id}" for table in TABLES},
    **{queue.env_var: f"https://queue.invalid/{queue.logical_id}" for queue in QUEUES},
}


@pytest.fixture
def environment(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in list(os.environ):
        if name.startswith("DYNACRON_"):
            monkeypatch.delenv(name)
    for name, value in RESOURCES.items():
        monkeypatch.setenv(name, value)
    return monkeypatch


def test_limit_and_breaker_settings_are_read_from_the_environment(
    environment: pytest.MonkeyPatch,
) -> None:
    environment.setenv("DYNACRON_BREAKER_FAILURE_THRESHOLD", "3")
    environment.setenv("DYNACRON_BREAKER_COOL_DOWN_SECONDS", "2.5")
    environment.setenv("DYNACRON_MAX_QUEUED_DISPATCHES", "500")
    environment.setenv("DYNACRON_FORECAST_MAX_TASKS", "40")
    environment.setenv("DYNACRON_FORECAST_MAX_OCCURRENCES", "9000")

    settings = Settings.from_env(os.environ)

    assert settings.breaker_failure_threshold == 3
    assert settings.breaker_cool_down_seconds == 2.5
    assert settings.max_queued_dispatches == 500
    assert settings.forecast_max_tasks == 40
    assert settings.forecast_max_occurrences == 9000
    assert settings.breaker_policy.failure_threshold == 3
    assert settings.breaker_policy.cool_down == timedelta(seconds=2.5)


def test_unset_or_empty_means_the_default(environment: pytest.MonkeyPatch) -> None:
    environment.setenv("DYNACRON_MAX_QUEUED_DISPATCHES", "")
    settings = Settings.from_env(os.environ)
    assert settings.max_queued_dispatches == Settings.max_queued_dispatches
    assert settings.breaker_failure_threshold == Settings.breaker_failure_threshold
    assert settings.breaker_cool_down_seconds == Settings.breaker_cool_down_seconds


def test_to_env_gives_back_the_same_settings(environment: pytest.MonkeyPatch) -> None:
    settings = Settings(
        tasks_table="t",
        executions_table="e",
        coordination_table="c",
        dispatch_queue_url="https://queue.invalid/d",
        dead_letter_queue_url="https://queue.invalid/dl",
        breaker_failure_threshold=7,
        breaker_cool_down_seconds=30.0,
        max_queued_dispatches=1234,
        forecast_max_tasks=5,
        forecast_max_occurrences=6,
    )
    assert Settings.from_env(settings.to_env()) == settings


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("DYNACRON_BREAKER_FAILURE_THRESHOLD", "0"),
        ("DYNACRON_BREAKER_FAILURE_THRESHOLD", "five"),
        ("DYNACRON_BREAKER_FAILURE_THRESHOLD", "2.5"),
        ("DYNACRON_BREAKER_COOL_DOWN_SECONDS", "-1"),
        ("DYNACRON_MAX_QUEUED_DISPATCHES", "0"),
        ("DYNACRON_FORECAST_MAX_TASKS", "-3"),
        ("DYNACRON_FORECAST_MAX_OCCURRENCES", "lots"),
        ("DYNACRON_MESSAGE_HOLDS", "maybe"),
        ("DYNACRON_EXECUTION_RETENTION_DAYS", "0"),
        ("DYNACRON_EXECUTION_RETENTION_DAYS", "a week"),
    ],
)
def test_a_bad_value_is_refused_naming_the_variable(
    environment: pytest.MonkeyPatch, name: str, value: str
) -> None:
    environment.setenv(name, value)
    with pytest.raises(ValueError, match=name):
        Settings.from_env(os.environ)


def test_every_variable_the_runtime_reads_is_documented() -> None:
    documented = set(re.findall(r"DYNACRON_[A-Z_]+", (ROOT / "docs/deploy.md").read_text()))
    read = {
        value
        for name, value in vars(config).items()
        if name.endswith("_VAR") and isinstance(value, str)
    } | set(RESOURCES)
    assert read - documented == set()


def test_the_ticks_fairness_settings_are_read_from_the_environment(
    environment: pytest.MonkeyPatch,
) -> None:
    environment.setenv("DYNACRON_TICK_MAX_CLAIMS_PER_TASK", "3")
    environment.setenv("DYNACRON_TICK_BACKLOG_SECONDS", "0.25")
    environment.setenv("DYNACRON_CATCHUP_MAX_RUNS", "7")
    environment.setenv("DYNACRON_TICK_HEARTBEAT_SECONDS", "20")

    settings = Settings.from_env(os.environ)

    assert settings.tick_max_claims_per_task == 3
    assert settings.tick_backlog_seconds == 0.25
    assert settings.catchup_max_runs == 7
    assert settings.tick_heartbeat_seconds == 20


def test_the_ticks_fairness_settings_round_trip_through_to_env() -> None:
    settings = Settings(
        tasks_table="t",
        executions_table="e",
        coordination_table="c",
        dispatch_queue_url="https://queue.invalid/d",
        dead_letter_queue_url="https://queue.invalid/dl",
        tick_max_claims_per_task=2,
        tick_backlog_seconds=1.5,
        catchup_max_runs=9,
        tick_heartbeat_seconds=30,
    )
    assert Settings.from_env(settings.to_env()) == settings


def test_unset_fairness_settings_are_the_defaults(environment: pytest.MonkeyPatch) -> None:
    environment.setenv("DYNACRON_CATCHUP_MAX_RUNS", "")
    settings = Settings.from_env(os.environ)
    assert settings.tick_max_claims_per_task == Settings.tick_max_claims_per_task
    assert settings.tick_backlog_seconds == Settings.tick_backlog_seconds
    assert settings.catchup_max_runs == Settings.catchup_max_runs
    assert settings.tick_heartbeat_seconds == Settings.tick_heartbeat_seconds


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("DYNACRON_TICK_MAX_CLAIMS_PER_TASK", "0"),
        ("DYNACRON_TICK_MAX_CLAIMS_PER_TASK", "many"),
        ("DYNACRON_TICK_BACKLOG_SECONDS", "-0.5"),
        ("DYNACRON_CATCHUP_MAX_RUNS", "0"),
        ("DYNACRON_TICK_HEARTBEAT_SECONDS", "0"),
        # A heartbeat as rare as the misfire grace would make every quiet minute an outage.
        ("DYNACRON_TICK_HEARTBEAT_SECONDS", "60"),
    ],
)
def test_a_bad_fairness_setting_is_refused_naming_the_variable(
    environment: pytest.MonkeyPatch, name: str, value: str
) -> None:
    environment.setenv(name, value)
    with pytest.raises(ValueError, match=name):
        Settings.from_env(os.environ)


def test_the_roles_targets_may_name_are_read_from_the_environment(
    environment: pytest.MonkeyPatch,
) -> None:
    # Unset (local mode, tests): no grant to check a role against
    assert Settings.from_env(os.environ).target_policy.role_patterns is None

    environment.setenv("AWS_REGION", "eu-west-1")
    environment.setenv(
        "DYNACRON_TARGET_ROLES",
        "arn:aws:iam::123456789012:role/dynacron-target/*, arn:aws:iam::*:role/ops",
    )
    settings = Settings.from_env(os.environ)
    assert settings.target_policy.role_patterns == (
        "arn:aws:iam::123456789012:role/dynacron-target/*",
        "arn:aws:iam::*:role/ops",
    )
    assert Settings.from_env({**os.environ, **settings.to_env()}) == settings

    # Set but empty (the operator's target_roles is): no role at all
    environment.setenv("DYNACRON_TARGET_ROLES", "")
    assert Settings.from_env(os.environ).target_policy.role_patterns == ()
