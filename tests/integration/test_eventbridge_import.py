"""`dynacron tasks import-eventbridge`: schedules read from EventBridge Scheduler
(moto, in-process) become tasks through POST /tasks/batch (the real API handler,
reached by the client through a transport that hands each request to it), once."""

from __future__ import annotations

import dataclasses
from typing import Any

import boto3
import pytest

from dynacron.cli.eventbridge_import import import_schedules, read_schedules
from dynacron.cli.eventbridge_schedules import SOURCE_TAG, schedule_digest, translate_schedule
from dynacron.entry.composition import Dynacron
from dynacron.local.aws import REGION
from tests.integration.api_client import client_of

ROLE = "arn:aws:iam::123456789012:role/dynacron-target/scheduler"
QUEUE = f"arn:aws:sqs:{REGION}:123456789012:jobs"


@pytest.fixture
def targets_allowed(system: Dynacron, aws: tuple[Any, Any]) -> Dynacron:
    dynamodb, sqs = aws
    settings = dataclasses.replace(system.settings, target_region=REGION)
    return Dynacron(settings, dynamodb=dynamodb, sqs=sqs, clock=system.clock)


def create_schedules(scheduler: Any) -> None:
    scheduler.create_schedule_group(Name="nightly")
    target = {"Arn": QUEUE, "RoleArn": ROLE, "RetryPolicy": {"MaximumRetryAttempts": 2}}
    scheduler.create_schedule(
        Name="weekdays",
        GroupName="nightly",
        ScheduleExpression="cron(0 9 ? * 2-6 *)",
        ScheduleExpressionTimezone="Europe/Paris",
        FlexibleTimeWindow={"Mode": "FLEXIBLE", "MaximumWindowInMinutes": 5},
        Target={**target, "DeadLetterConfig": {"Arn": f"{QUEUE}-dlq"}},
    )
    scheduler.create_schedule(
        Name="every-five",
        GroupName="nightly",
        ScheduleExpression="rate(5 minutes)",
        FlexibleTimeWindow={"Mode": "OFF"},
        State="DISABLED",
        Target=target,
    )
    scheduler.create_schedule(
        Name="in-2031",
        GroupName="nightly",
        ScheduleExpression="cron(0 9 1 1 ? 2031)",
        FlexibleTimeWindow={"Mode": "OFF"},
        Target=target,
    )
    scheduler.create_schedule(
        Name="elsewhere",
        ScheduleExpression="rate(1 hour)",
        FlexibleTimeWindow={"Mode": "OFF"},
        Target=target,
    )


def test_schedules_are_imported_once_and_what_cannot_be_is_reported(
    targets_allowed: Dynacron,
) -> None:
    scheduler = boto3.client("scheduler", region_name=REGION)
    create_schedules(scheduler)
    client = client_of(targets_allowed)
    # Given the schedules of one group, translated
    schedules = [translate_schedule(s) for s in read_schedules(scheduler, "nightly")]
    assert sorted(s.name for s in schedules) == ["every-five", "in-2031", "weekdays"]
    # A dry run creates nothing
    dry = {o.schedule.name: o.result for o in import_schedules(schedules, None)}
    assert dry == {"weekdays": "would create", "every-five": "would create", "in-2031": "refused"}
    assert list(client.iter_tasks()) == []
    # When they are imported
    outcomes = {o.schedule.name: o for o in import_schedules(schedules, client)}
    # Then two tasks exist, the year-bound cron is refused with its reason
    assert outcomes["in-2031"].result == "refused"
    assert "no year field" in (outcomes["in-2031"].problem or "")
    assert outcomes["weekdays"].result == "created"
    weekdays = client.get_task(outcomes["weekdays"].task_id or "")
    assert (weekdays.schedule.kind, weekdays.schedule.expression) == ("cron", "0 9 ? * 1-5")
    assert weekdays.timezone == "Europe/Paris"
    assert weekdays.jitter_seconds == 300
    assert weekdays.retry.max_attempts == 3
    assert weekdays.target is not None
    assert weekdays.target.arn == QUEUE
    assert any("dead-letter queue" in n for n in outcomes["weekdays"].schedule.notes)
    # The disabled schedule's task is paused
    every_five = client.get_task(outcomes["every-five"].task_id or "")
    assert every_five.status == "PAUSED"
    # And importing again (days later: by the tag, not the key's 24 hours) creates nothing
    again = {o.schedule.name: o.result for o in import_schedules(schedules, client)}
    assert again == {
        "weekdays": "already imported",
        "every-five": "already imported",
        "in-2031": "refused",
    }
    tagged = list(client.iter_tasks(tag=SOURCE_TAG))
    assert len(tagged) == 2
    arns = {s.arn for s in schedules}
    assert {t.tags[SOURCE_TAG] for t in tagged} < {schedule_digest(a) for a in arns}
    # All groups when none is named
    assert len(list(read_schedules(scheduler, None))) == 4


def test_the_cli_s_dry_run_reports_each_schedule_and_what_it_cannot_map(
    aws: tuple[Any, Any],
) -> None:
    import json

    from typer.testing import CliRunner

    from dynacron.cli.main import app

    scheduler = boto3.client("scheduler", region_name=REGION)
    create_schedules(scheduler)
    runner = CliRunner()
    # Nothing is sent to an API in a dry run (none listens on this port)
    args = ["tasks", "--url", "http://127.0.0.1:9", "--json", "import-eventbridge"]
    result = runner.invoke(app, [*args, "--group", "nightly", "--dry-run", "--region", REGION])
    # The year-bound schedule is not importable: the exit status says so
    assert result.exit_code == 1, result.output
    report = {r["schedule"]: r for r in json.loads(result.stdout)}
    assert report["weekdays"]["result"] == "would create"
    assert any("dead-letter queue" in n for n in report["weekdays"]["not_mapped"])
    assert report["in-2031"]["result"] == "refused"
    assert "no year field" in report["in-2031"]["problem"]
    text = runner.invoke(app, ["tasks", "import-eventbridge", "--dry-run", "--region", REGION])
    assert "default/elsewhere: would create" in text.stdout
    assert "nightly/in-2031: refused" in text.stdout
