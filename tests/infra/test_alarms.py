"""The alarms of issue 13, read from the synthesised template: a shard whose tick
stopped (missing data breaches), reaper and API errors, the failure rate (metric
math over totals) and queue latency; each notifies the alarm topic and is
described, with what to do, in docs/deploy.md's Monitoring section."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_lambda as lambda_
from aws_cdk.assertions import Template

from dynacron.definitions import metric_names
from dynacron.entry.settings import Settings
from infra.config import SchedulerConfig
from infra.constructs.monitoring import Monitoring
from infra.constructs.queues import Queues
from tests.infra.conftest import resources_of
from tests.infra.test_template import function_id

ROOT = Path(__file__).resolve().parents[2]
SERVICE = {"Name": metric_names.SERVICE_DIMENSION, "Value": metric_names.SERVICE}


def alarms_named(template: dict[str, Any], name: str) -> dict[str, dict[str, Any]]:
    """Alarms whose construct id starts with ``name`` (logical id: path + hash)."""
    return {
        logical_id: alarm
        for logical_id, alarm in resources_of(template, "AWS::CloudWatch::Alarm").items()
        if re.fullmatch(rf"(\w*?)Monitoring{name}\w*[0-9A-F]{{8}}", logical_id)
    }


def alarm_named(template: dict[str, Any], name: str) -> dict[str, Any]:
    (alarm,) = alarms_named(template, name).values()
    return alarm


def assert_notifies_the_topic(template: dict[str, Any], alarm: dict[str, Any]) -> None:
    (topic,) = resources_of(template, "AWS::SNS::Topic")
    assert alarm["AlarmActions"] == [{"Ref": topic}]
    assert alarm["OKActions"] == [{"Ref": topic}]


def heartbeat_shards(alarm: dict[str, Any]) -> list[int]:
    """The shards a tick alarm watches, checking how it reads each one."""
    (expression,) = [m for m in alarm["Metrics"] if "Expression" in m]
    assert expression["ReturnData"] is True
    reads = [m for m in alarm["Metrics"] if "MetricStat" in m]
    assert len(reads) <= 10  # CloudWatch's limit for a metric math alarm
    shards = []
    for read in reads:
        stat = read["MetricStat"]
        assert (stat["Stat"], stat["Period"]) == ("Sum", 60)
        metric = stat["Metric"]
        assert metric["Namespace"] == metric_names.NAMESPACE
        assert metric["MetricName"] == metric_names.TICK_HEARTBEAT
        (shard,) = [
            int(d["Value"])
            for d in metric["Dimensions"]
            if d["Name"] == metric_names.SHARD_DIMENSION
        ]
        assert SERVICE in metric["Dimensions"]
        assert len(metric["Dimensions"]) == 2
        assert read["Id"] == f"shard{shard}"
        shards.append(shard)
    # Missing shards count as no ticks, and the alarm looks at the worst shard
    fills = ", ".join(f"FILL(shard{shard}, 0)" for shard in shards)
    assert expression["Expression"] == f"MIN([{fills}])"
    return shards


def test_a_shard_whose_tick_stops_breaches_its_alarm_even_with_no_data(
    template: dict[str, Any], user_template: dict[str, Any]
) -> None:
    for tmpl, shard_count in ((template, Settings.shard_count), (user_template, 7)):
        alarm = alarm_named(tmpl, "TickStoppedShards")
        assert heartbeat_shards(alarm) == list(range(shard_count))
        # Fewer than one tick a minute, three minutes in a row
        assert alarm["ComparisonOperator"] == "LessThanThreshold"
        assert alarm["Threshold"] == 1
        assert alarm["EvaluationPeriods"] == 3
        # A tick that never starts sends nothing: that must page too
        assert alarm["TreatMissingData"] == "breaching"
        assert_notifies_the_topic(tmpl, alarm)


def test_only_heartbeat_alarms_treat_missing_data_as_breaching(template: dict[str, Any]) -> None:
    breaching = {
        logical_id
        for logical_id, alarm in resources_of(template, "AWS::CloudWatch::Alarm").items()
        if alarm["TreatMissingData"] == "breaching"
    }
    assert breaching == set(alarms_named(template, "TickStoppedShards"))


def monitoring_template(shard_count: int) -> dict[str, Any]:
    """Monitoring alone, for a shard count no session stack has."""
    stack = Stack(App(), "Watched")
    config = SchedulerConfig(shard_count=shard_count)
    code = lambda_.Code.from_inline("def handler(event, context): pass")
    functions = {
        name: lambda_.Function(
            stack, name, runtime=lambda_.Runtime.PYTHON_3_12, handler="index.handler", code=code
        )
        for name in ("api", "tick", "worker", "reaper", "undelivered")
    }
    Monitoring(
        stack,
        "Monitoring",
        config=config,
        queues=Queues(stack, "Queues", config=config),
        functions=functions,
    )
    return dict(Template.from_stack(stack).to_json())


def test_many_shards_are_watched_ten_to_an_alarm() -> None:
    template = monitoring_template(shard_count=23)
    alarms = alarms_named(template, "TickStoppedShards")
    watched = sorted(heartbeat_shards(alarm) for alarm in alarms.values())
    assert watched == [list(range(0, 10)), list(range(10, 20)), list(range(20, 23))]
    assert {re.sub(r"[0-9A-F]{8}$", "", logical_id) for logical_id in alarms} == {
        "MonitoringTickStoppedShards0To9",
        "MonitoringTickStoppedShards10To19",
        "MonitoringTickStoppedShards20To22",
    }
    for alarm in alarms.values():
        assert alarm["TreatMissingData"] == "breaching"


def assert_sum_over_a_minute_above_zero(alarm: dict[str, Any]) -> None:
    assert (alarm["Statistic"], alarm["Period"]) == ("Sum", 60)
    assert (alarm["ComparisonOperator"], alarm["Threshold"]) == ("GreaterThanThreshold", 0)
    assert alarm["EvaluationPeriods"] == 1
    assert alarm["TreatMissingData"] == "notBreaching"


def test_the_reaper_and_the_api_alarm_on_their_errors(template: dict[str, Any]) -> None:
    for concern in ("Reaper", "Api"):
        alarm = alarm_named(template, f"{concern}Errors")
        assert (alarm["Namespace"], alarm["MetricName"]) == ("AWS/Lambda", "Errors")
        assert alarm["Dimensions"] == [
            {"Name": "FunctionName", "Value": {"Ref": function_id(template, concern)}}
        ]
        assert_sum_over_a_minute_above_zero(alarm)
        assert_notifies_the_topic(template, alarm)
    server_errors = alarm_named(template, "ApiServerErrors")
    assert (server_errors["Namespace"], server_errors["MetricName"]) == (
        "AWS/ApiGateway",
        "5XXError",
    )
    (rest_api,) = resources_of(template, "AWS::ApiGateway::RestApi").values()
    (stage,) = resources_of(template, "AWS::ApiGateway::Stage")
    assert server_errors["Dimensions"] == [
        {"Name": "ApiName", "Value": rest_api["Name"]},
        {"Name": "Stage", "Value": {"Ref": stage}},
    ]
    assert_sum_over_a_minute_above_zero(server_errors)
    assert_notifies_the_topic(template, server_errors)


def test_the_failure_rate_alarm_divides_failures_by_attempts_above_a_minimum_volume(
    template: dict[str, Any],
) -> None:
    config = SchedulerConfig()
    alarm = alarm_named(template, "FailureRate")
    reads = {m["Id"]: m["MetricStat"] for m in alarm["Metrics"] if "MetricStat" in m}
    assert {
        name: (s["Metric"]["MetricName"], s["Stat"], s["Period"]) for name, s in reads.items()
    } == {
        "attempts": (metric_names.ATTEMPTS, "Sum", 300),
        "failures": (metric_names.FAILURES, "Sum", 300),
    }
    for stat in reads.values():
        assert stat["Metric"]["Namespace"] == metric_names.NAMESPACE
        assert stat["Metric"]["Dimensions"] == [SERVICE]
    (expression,) = [m for m in alarm["Metrics"] if "Expression" in m]
    assert expression["Expression"] == (
        f"IF(attempts >= {config.failure_rate_alarm_min_attempts}, "
        "100 * FILL(failures, 0) / attempts, 0)"
    )
    assert config.failure_rate_alarm_min_attempts > 2  # one failure among two is no page
    assert alarm["ComparisonOperator"] == "GreaterThanThreshold"
    assert alarm["Threshold"] == config.failure_rate_alarm_percent
    assert alarm["EvaluationPeriods"] == 1
    # No attempts at all is no data: nothing failed
    assert alarm["TreatMissingData"] == "notBreaching"
    assert_notifies_the_topic(template, alarm)


def test_queue_latency_p99_above_its_threshold_alarms(template: dict[str, Any]) -> None:
    alarm = alarm_named(template, "QueueLatencyP99")
    assert (alarm["Namespace"], alarm["MetricName"]) == (
        metric_names.NAMESPACE,
        metric_names.QUEUE_LATENCY,
    )
    assert alarm["Dimensions"] == [SERVICE]
    assert (alarm["ExtendedStatistic"], alarm["Period"]) == ("p99", 300)
    assert alarm["ComparisonOperator"] == "GreaterThanThreshold"
    assert alarm["Threshold"] == SchedulerConfig().queue_latency_alarm_seconds
    assert alarm["TreatMissingData"] == "notBreaching"
    assert_notifies_the_topic(template, alarm)


def test_the_dashboard_shows_heartbeats_outcomes_duration_and_latency(
    template: dict[str, Any],
) -> None:
    (dashboard,) = resources_of(template, "AWS::CloudWatch::Dashboard").values()
    body = json.dumps(dashboard["DashboardBody"])
    for name in (
        metric_names.TICK_HEARTBEAT,
        metric_names.ATTEMPTS,
        metric_names.EXECUTIONS_FINISHED,
        metric_names.HANDLER_DURATION,
        metric_names.QUEUE_LATENCY,
        metric_names.PYTHON_HANDLERS_OVERRUNNING,
        metric_names.CLOCK_STEPS,
    ):
        assert f'\\"{name}\\"' in body, name
    for shard in range(Settings.shard_count):
        assert f'\\"{metric_names.SHARD_DIMENSION}\\",\\"{shard}\\"' in body
    assert "100 * FILL(failures, 0) / attempts" in body


def monitoring_section() -> str:
    text = (ROOT / "docs" / "deploy.md").read_text()
    start = text.index("\n## Monitoring\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def construct_ids(template: dict[str, Any]) -> set[str]:
    return {
        re.sub(r"^\w*?Monitoring|[0-9A-F]{8}$", "", logical_id)
        for logical_id in resources_of(template, "AWS::CloudWatch::Alarm")
    }


def test_every_alarm_has_a_runbook_line_and_the_docs_count_them(
    template: dict[str, Any],
) -> None:
    section = monitoring_section()
    ids = construct_ids(template)
    for construct_id in ids:
        # Its own row of the runbook table (the first column names the alarm)
        documented = re.sub(r"Shards\d+To\d+$", "Shards", construct_id)
        assert re.search(rf"^\| [^|]*`{documented}[`{{]", section, re.MULTILINE), construct_id
    assert f"the default stack has {len(ids)} alarms" in section.lower()


@pytest.mark.parametrize("percent", [-1.0, 100.0])
def test_a_failure_rate_threshold_outside_0_to_100_is_refused(percent: float) -> None:
    with pytest.raises(ValueError, match="failure_rate_alarm_percent"):
        SchedulerConfig(failure_rate_alarm_percent=percent)
