"""docs/deploy.md's idle cost is the template's: counts read from it, rates from the bench.

The table is written by ``python -m bench.idle_cost``; this fails while the doc says
something else than the synthesized stack and ``bench/results/cost.json`` give (a
default changed, an alarm added, the cost benchmark rerun): rerun it then.
"""

from __future__ import annotations

from typing import Any

from bench.idle_cost import (
    DEPLOY_DOC,
    Alarm,
    doc_section,
    load_cost,
    render,
    stack_counts,
)
from infra.config import SchedulerConfig
from tests.infra.conftest import resources_of


def test_the_idle_cost_in_the_deploy_guide_is_the_templates(template: dict[str, Any]) -> None:
    expected = render(stack_counts(template), load_cost())
    assert doc_section(DEPLOY_DOC.read_text()) == expected, (
        "docs/deploy.md's idle cost is stale: run python -m bench.idle_cost"
    )


def test_the_counts_are_the_templates(template: dict[str, Any]) -> None:
    counts = stack_counts(template)
    defaults = SchedulerConfig()
    # one looping tick per shard, at the tick's memory; the reaper on its own schedule
    assert counts.looping_ticks == defaults.shard_count
    assert counts.tick_memory_mb == defaults.tick_memory_mb
    assert len(counts.other_scheduled) == 1
    assert len(counts.alarms) == len(resources_of(template, "AWS::CloudWatch::Alarm"))
    assert counts.tables == len(resources_of(template, "AWS::DynamoDB::Table"))
    assert counts.queues == len(resources_of(template, "AWS::SQS::Queue"))
    assert counts.sqs_event_sources == len(
        resources_of(template, "AWS::Lambda::EventSourceMapping")
    )


def test_a_metric_math_alarm_is_billed_for_each_metric_it_reads() -> None:
    def stat(name: str, period: int = 60) -> dict[str, Any]:
        return {
            "Id": name.lower(),
            "MetricStat": {"Metric": {"MetricName": name}, "Period": period},
        }

    template = {
        "Resources": {
            "Rate": {
                "Type": "AWS::CloudWatch::Alarm",
                "Properties": {
                    "Metrics": [
                        stat("Failures"),
                        stat("Attempts"),
                        {"Id": "rate", "Expression": "failures / attempts"},
                    ]
                },
            },
            "Fast": {"Type": "AWS::CloudWatch::Alarm", "Properties": {"Period": 10}},
            "Tick": {"Type": "AWS::Lambda::Function", "Properties": {"MemorySize": 512}},
            "Every": {
                "Type": "AWS::Events::Rule",
                "Properties": {
                    "ScheduleExpression": "rate(1 minute)",
                    "Targets": [{"Arn": {"Fn::GetAtt": ["Tick", "Arn"]}, "Input": '{"loop":true}'}],
                },
            },
        }
    }
    counts = stack_counts(template)
    assert set(counts.alarms) == {Alarm("Rate", 2, False), Alarm("Fast", 1, True)}
    assert (counts.looping_ticks, counts.tick_memory_mb) == (1, 512)
