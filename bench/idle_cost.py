"""The idle monthly cost of the deployed stack, from its template and the metered cost bench.

Every count (looping ticks, tick memory, tables, queues, event source mappings,
schedules, alarms and the metrics they watch, dashboards, log groups) is read from
the synthesized CloudFormation template; every request rate of an idle shard and of
the reaper from ``bench/results/cost.json`` (``python -m bench.cost``). Nothing
is typed in by hand, so the figures in docs/deploy.md follow the template.

Run: .venv/bin/python -m bench.idle_cost   (synthesizes the default stack, rewrites
the "Idle cost" table of docs/deploy.md). ``tests/infra/test_idle_cost.py`` fails
while the table there differs from what this computes.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import RESULTS

ROOT = RESULTS.parent.parent
DEPLOY_DOC = ROOT / "docs" / "deploy.md"
BEGIN = "<!-- idle-cost:begin (python -m bench.idle_cost) -->"
END = "<!-- idle-cost:end -->"

MINUTES_PER_MONTH = 30 * 24 * 60
SECONDS_PER_MONTH = 60 * MINUTES_PER_MONTH
# us-east-1 list prices (USD), November 2026, free tiers left out.
PRICES = {
    "lambda_arm_per_gb_second": 0.0000133334,
    "lambda_per_million_requests": 0.20,
    "alarm_per_metric_month": 0.10,
    "high_resolution_alarm_per_metric_month": 0.30,
    "dashboard_month": 3.00,
    "logs_ingested_per_gb": 0.50,
    "custom_metric_month": 0.30,
    "waf_web_acl_month": 5.00,
    "waf_rule_month": 1.00,
    "waf_per_million_requests": 0.60,
}
# Lambda's SQS event source polls an empty queue with five long polls of 20 s each
# at a time (AWS Lambda developer guide, "Using Lambda with Amazon SQS").
IDLE_POLLERS_PER_MAPPING = 5
LONG_POLL_SECONDS = 20
# Not metered here: the reaper's run time (it queries the lease index's partitions
# and finds nothing) and the lines Lambda logs for each invocation (START, END,
# REPORT, and the tick's one "tick loop ended").
REAPER_SECONDS_PER_RUN = 0.3
LOG_BYTES_PER_INVOCATION = 700


@dataclass(frozen=True)
class Alarm:
    name: str
    metrics: int
    high_resolution: bool


@dataclass(frozen=True)
class StackCounts:
    """What the idle cost depends on, as the template declares it."""

    looping_ticks: int
    tick_memory_mb: int
    other_scheduled: dict[str, int]  # function logical id -> its memory, for each rate(1 minute)
    functions: int
    layers: int
    tables: int
    on_demand_tables: int
    pitr_tables: int
    queues: int
    sqs_event_sources: int
    scheduled_rules: int
    alarms: tuple[Alarm, ...]
    dashboards: int
    log_groups: int
    web_acls: int = 0
    waf_rules: int = 0


def _resources(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {
        logical_id: resource.get("Properties", {})
        for logical_id, resource in template["Resources"].items()
        if resource["Type"] == kind
    }


def _target_function(target: dict[str, Any]) -> str | None:
    arn = target.get("Arn")
    if isinstance(arn, dict) and "Fn::GetAtt" in arn:
        return str(arn["Fn::GetAtt"][0])
    return None


def _alarm(name: str, properties: dict[str, Any]) -> Alarm:
    if "Metrics" in properties:  # metric math: each metric it reads is billed
        stats = [m["MetricStat"] for m in properties["Metrics"] if "MetricStat" in m]
        periods = [int(s.get("Period", 60)) for s in stats]
        return Alarm(name, len(stats), any(p < 60 for p in periods))
    return Alarm(name, 1, int(properties.get("Period", 60)) < 60)


def _reads_queue(mapping: dict[str, Any], queues: dict[str, Any]) -> bool:
    source = mapping.get("EventSourceArn")
    return isinstance(source, dict) and source.get("Fn::GetAtt", [None])[0] in queues


def stack_counts(template: dict[str, Any]) -> StackCounts:
    functions = _resources(template, "AWS::Lambda::Function")
    rules = _resources(template, "AWS::Events::Rule")
    scheduled = [r for r in rules.values() if "ScheduleExpression" in r]
    looping: list[str] = []
    others: dict[str, int] = {}
    for rule in scheduled:
        assert rule["ScheduleExpression"] == "rate(1 minute)", rule["ScheduleExpression"]
        for target in rule.get("Targets", []):
            function = _target_function(target)
            if function is None:
                continue
            if json.loads(target.get("Input") or "{}").get("loop"):
                looping.append(function)
            else:
                others[function] = int(functions[function].get("MemorySize", 128))
    (tick,) = set(looping)
    tables = _resources(template, "AWS::DynamoDB::Table").values()
    mappings = _resources(template, "AWS::Lambda::EventSourceMapping").values()
    queues = _resources(template, "AWS::SQS::Queue")
    web_acls = _resources(template, "AWS::WAFv2::WebACL")
    return StackCounts(
        looping_ticks=len(looping),
        tick_memory_mb=int(functions[tick].get("MemorySize", 128)),
        other_scheduled=others,
        functions=len(functions),
        layers=len(_resources(template, "AWS::Lambda::LayerVersion")),
        tables=len(tables),
        on_demand_tables=sum(t.get("BillingMode") == "PAY_PER_REQUEST" for t in tables),
        pitr_tables=sum(
            bool(t.get("PointInTimeRecoverySpecification", {}).get("PointInTimeRecoveryEnabled"))
            for t in tables
        ),
        queues=len(queues),
        sqs_event_sources=sum(_reads_queue(m, queues) for m in mappings),
        scheduled_rules=len(scheduled),
        alarms=tuple(
            _alarm(name, p) for name, p in _resources(template, "AWS::CloudWatch::Alarm").items()
        ),
        dashboards=len(_resources(template, "AWS::CloudWatch::Dashboard")),
        log_groups=len(_resources(template, "AWS::Logs::LogGroup")),
        web_acls=len(web_acls),
        waf_rules=sum(len(acl.get("Rules", [])) for acl in web_acls.values()),
    )


@dataclass(frozen=True)
class Row:
    resources: str
    usd: float
    shown: str | None = None  # when the cost needs words, not only a figure


def _usd(value: float) -> str:
    return f"${value:,.2f}"


def _lambda_usd(seconds: float, memory_mb: int) -> float:
    return seconds * memory_mb / 1024 * PRICES["lambda_arm_per_gb_second"]


def idle_rows(counts: StackCounts, cost: dict[str, Any]) -> list[Row]:
    """The month's cost of each part of the stack with nothing due, in USD."""
    dynamo = cost["prices_usd"]
    idle = cost["idle_shard"]
    second = idle["per_shard_second"]
    shards = counts.looping_ticks
    billed = max(idle["billed_seconds_per_invocation"])
    invocations = shards * MINUTES_PER_MONTH
    tick_duration = _lambda_usd(invocations * billed, counts.tick_memory_mb)
    tick_requests = invocations * PRICES["lambda_per_million_requests"] / 1e6
    month = shards * SECONDS_PER_MONTH / 1e6  # millions of shard-seconds
    reads = second["rcu"] * month * dynamo["dynamodb_on_demand_per_million_read_units"]
    writes = second["write_units"] * month * dynamo["dynamodb_on_demand_per_million_write_units"]
    depth_reads = second["sqs_requests"] * month
    depth_usd = depth_reads * dynamo["sqs_standard_per_million_requests"]
    reaper = cost["idle_reaper"]["per_run"]
    runs = MINUTES_PER_MONTH * len(counts.other_scheduled)
    reaper_usd = sum(
        _lambda_usd(MINUTES_PER_MONTH * REAPER_SECONDS_PER_RUN, memory)
        for memory in counts.other_scheduled.values()
    )
    reaper_usd += runs * PRICES["lambda_per_million_requests"] / 1e6
    reaper_usd += runs * reaper["rcu"] * dynamo["dynamodb_on_demand_per_million_read_units"] / 1e6
    polls = (
        counts.sqs_event_sources * IDLE_POLLERS_PER_MAPPING * SECONDS_PER_MONTH / LONG_POLL_SECONDS
    )
    polls_usd = polls / 1e6 * dynamo["sqs_standard_per_million_requests"]
    alarm_metrics = sum(a.metrics for a in counts.alarms)
    alarms_usd = sum(
        a.metrics
        * PRICES[
            "high_resolution_alarm_per_metric_month"
            if a.high_resolution
            else "alarm_per_metric_month"
        ]
        for a in counts.alarms
    )
    log_bytes = (
        idle["emf_bytes_per_shard_second"] * shards * SECONDS_PER_MONTH
        + (invocations + runs) * LOG_BYTES_PER_INVOCATION
    )
    logs_usd = log_bytes / 1e9 * PRICES["logs_ingested_per_gb"]
    published = [(m["name"], shards if m["per_shard"] else 1) for m in idle["metrics"]]
    custom_metrics = sum(count for _, count in published)
    metrics_usd = custom_metrics * PRICES["custom_metric_month"]
    heartbeat = next(
        (b["wcu"] for b in idle["breakdown"] if b["caller"] == "CursorStore.record_tick"), 0.0
    )
    lease = round(second["write_units"] - heartbeat, 4)
    rows = [
        Row(
            f"looping tick: for each of {shards} shards, one {counts.tick_memory_mb} MB arm64 "
            f"invocation a minute, billed {billed:g} s (a minute as the shard's standby, a "
            f"minute as its holder, the overlap: decision 0036); {invocations:,} invocations",
            tick_duration + tick_requests,
            f"{_usd(tick_duration)} + {_usd(tick_requests)}",
        ),
        Row(
            f"DynamoDB requests of the ticks, per shard-second: {second['rcu']:g} read units "
            f"(cursor, due-index queries, the standbys' lease reads) and "
            f"{second['write_units']:g} write units "
            f"(heartbeat {heartbeat:g}, lease renewals and handovers {lease:g})",
            reads + writes,
            f"{_usd(reads)} + {_usd(writes)}",
        ),
        Row(
            f"SQS `GetQueueAttributes` of the ticks (the dispatch queue's depth, one a "
            f"tick, {second['sqs_requests']:g} per shard-second): {depth_reads:.2f} M requests",
            depth_usd,
        ),
        Row(
            f"{len(counts.other_scheduled)} other function(s) on a one-minute schedule (the "
            f"reaper, ≈ {REAPER_SECONDS_PER_RUN} s and {reaper['dynamodb_requests']:g} queries "
            "a run)",
            reaper_usd,
        ),
        Row(
            f"{counts.sqs_event_sources} SQS event source mappings, long-polling empty queues "
            f"({IDLE_POLLERS_PER_MAPPING} polls every {LONG_POLL_SECONDS} s each: "
            f"{polls / 1e6:.2f} M requests)",
            polls_usd,
        ),
        Row(
            f"{len(counts.alarms)} CloudWatch alarms reading {alarm_metrics} metrics",
            alarms_usd,
        ),
        Row(
            f"{counts.dashboards} CloudWatch dashboard{'s' if counts.dashboards != 1 else ''} "
            "(the first three per account are free)",
            counts.dashboards * PRICES["dashboard_month"],
        ),
        Row(
            f"{counts.log_groups} log groups: the ticks' metric lines "
            f"({idle['emf_bytes_per_shard_second']:g} bytes per shard-second) and each "
            f"invocation's own lines, {log_bytes / 1e9:.2f} GB ingested (storage, compressed, "
            "at $0.03 per GB, left out)",
            logs_usd,
        ),
        Row(
            f"{custom_metrics} custom metric{'s' if custom_metrics > 1 else ''} published at rest ("
            + ", ".join(
                f"{name}, one per shard" if count > 1 else name for name, count in published
            )
            + ")",
            metrics_usd,
        ),
        *(
            [
                Row(
                    f"{counts.web_acls} WAF web ACL with {counts.waf_rules} rate-based rules "
                    "(per source address, on the API stage); requests at "
                    f"${PRICES['waf_per_million_requests']:.2f} a million, none at rest",
                    counts.web_acls * PRICES["waf_web_acl_month"]
                    + counts.waf_rules * PRICES["waf_rule_month"],
                )
            ]
            if counts.web_acls
            else []
        ),
        Row(
            f"{counts.tables} DynamoDB tables ({counts.on_demand_tables} on demand, "
            f"{counts.pitr_tables} with point-in-time recovery)",
            0.0,
            "storage only: $0.25 per GB and $0.20 per GB for PITR, ≈ $0 empty",
        ),
        Row(
            f"{counts.queues} SQS queues, {counts.scheduled_rules} scheduled EventBridge rules, "
            f"{counts.functions - 1 - len(counts.other_scheduled)} functions invoked only on "
            f"demand, {counts.layers} layer versions, the REST API, the SNS topic, roles and "
            "policies",
            0.0,
            "$0 (billed per request or invocation)",
        ),
    ]
    return rows


def idle_total(counts: StackCounts, cost: dict[str, Any]) -> float:
    return sum(r.usd for r in idle_rows(counts, cost))


def render(counts: StackCounts, cost: dict[str, Any]) -> str:
    rows = idle_rows(counts, cost)
    total = sum(r.usd for r in rows)
    one_shard = idle_total(dataclasses.replace(counts, looping_ticks=1), cost)
    per_shard = (total - one_shard) / max(1, counts.looping_ticks - 1)
    lines = [
        BEGIN,
        "| resources | idle cost a month |",
        "|---|---|",
        *(f"| {r.resources} | {r.shown or _usd(r.usd)} |" for r in rows),
        f"| **total** | **{_usd(total)}**, of which {_usd(per_shard)} for each looping tick "
        f"(`shard_count=1`: {_usd(one_shard)}) |",
        END,
    ]
    return "\n".join(lines)


def replace_section(document: str, section: str) -> str:
    start, end = document.index(BEGIN), document.index(END) + len(END)
    return document[:start] + section + document[end:]


def doc_section(document: str) -> str:
    start, end = document.index(BEGIN), document.index(END) + len(END)
    return document[start:end]


def load_cost() -> dict[str, Any]:
    return dict(json.loads((RESULTS / "cost.json").read_text()))


def synthesized_template() -> dict[str, Any]:
    """The default stack (cdk.json's context), synthesized with empty dependencies."""
    os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")
    from infra.app import build_app, command_line_context
    from infra.layer import LayerAssets, build_package_layer

    root = Path(tempfile.mkdtemp(prefix="idle-cost-"))
    (root / "dependencies" / "python").mkdir(parents=True)
    layers = LayerAssets(
        dependencies=root / "dependencies", package=build_package_layer(root / "package")
    )
    app = build_app(layers, context=command_line_context([]), outdir=str(root / "cdk.out"))
    (stack,) = app.synth().stacks
    return dict(json.loads(Path(stack.template_full_path).read_text()))


def main() -> None:
    section = render(stack_counts(synthesized_template()), load_cost())
    DEPLOY_DOC.write_text(replace_section(DEPLOY_DOC.read_text(), section))
    print(section)
    print(f"wrote {DEPLOY_DOC.relative_to(ROOT)}", file=sys.stderr)


if __name__ == "__main__":
    main()
