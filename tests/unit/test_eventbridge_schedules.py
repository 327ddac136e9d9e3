"""EventBridge Scheduler's expressions and schedules as dynacron tasks: the
translation alone (cli.eventbridge_schedules), checked against dynacron's own
cron evaluator where it matters (which days a translated cron names)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from dynacron.api.requests import TaskCreate
from dynacron.cli.eventbridge_schedules import (
    SOURCE_TAG,
    UnmappableSchedule,
    schedule_digest,
    translate_cron,
    translate_expression,
    translate_schedule,
)
from dynacron.domain.schedules.cron import compile_cron

ARN = "arn:aws:scheduler:us-east-1:123456789012:schedule/nightly/report"
ROLE = "arn:aws:iam::123456789012:role/dynacron-target/scheduler"


@pytest.mark.parametrize(
    ("eventbridge", "dynacron"),
    [
        ("0 9 ? * MON-FRI *", "0 9 ? * MON-FRI"),
        ("0 9 ? * 2-6 *", "0 9 ? * 1-5"),  # 1 is Sunday in EventBridge
        ("15 10 ? * 6#3 *", "15 10 ? * 5#3"),  # third Friday
        ("0 18 ? * 6L *", "0 18 ? * 5L"),  # last Friday
        ("0 0 ? * L *", "0 0 ? * 6"),  # the week's last day: Saturday
        ("0 0 ? * 1,7 *", "0 0 ? * 0,6"),
        ("0/15 * * * ? *", "0/15 * * * ?"),
        ("0 12 L * ? *", "0 12 L * ?"),
        ("0 8 15W * ? *", "0 8 15W * ?"),
        ("0 8 LW JAN,JUL ? *", "0 8 LW JAN,JUL ?"),
        ("0 8 ? * 1/2 *", "0 8 ? * 0/2"),
    ],
)
def test_cron_fields_are_carried_over_with_the_days_of_the_week_renumbered(
    eventbridge: str, dynacron: str
) -> None:
    assert translate_cron(eventbridge) == dynacron
    compile_cron(dynacron)  # dynacron's evaluator takes it


def test_a_translated_weekday_cron_names_the_same_days() -> None:
    # EventBridge's 2-6 is Monday to Friday; the translation must fire on those.
    spec = compile_cron(translate_cron("0 9 ? * 2-6 *"))
    # Wall-clock times are naive by design (cron knows no zone): a Saturday noon.
    times = spec.wall_times_from(datetime(2027, 3, 6, 12))  # noqa: DTZ001
    fires = [next(times) for _ in range(5)]
    assert [f.strftime("%a") for f in fires] == ["Mon", "Tue", "Wed", "Thu", "Fri"]


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ("0 9 ? * MON 2027", "year '2027'"),
        ("0 9 ? * MON 2027-2029", "no year field"),
        ("0 9 ? * MON", "has 5 fields"),
        ("0 9 ? * 8 *", "day of week '8'"),
    ],
)
def test_a_cron_that_cannot_be_carried_over_is_refused_saying_why(fields: str, said: str) -> None:
    with pytest.raises(UnmappableSchedule, match=said):
        translate_cron(fields)


def test_rate_and_at_expressions() -> None:
    assert translate_expression("rate(5 minutes)") == {"rate": "5 minutes"}
    assert translate_expression("rate(1 day)") == {"rate": "1 day"}
    assert translate_expression("at(2027-01-01T09:00:00)") == {"at": "2027-01-01T09:00:00"}
    with pytest.raises(UnmappableSchedule):
        translate_expression("every(5 minutes)")
    with pytest.raises(UnmappableSchedule):
        translate_expression("at(tomorrow)")


def schedule(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "Arn": ARN,
        "Name": "report",
        "GroupName": "nightly",
        "ScheduleExpression": "cron(30 2 * * ? *)",
        "ScheduleExpressionTimezone": "Europe/Paris",
        "StartDate": datetime(2027, 1, 1, tzinfo=UTC),
        "EndDate": datetime(2027, 12, 31, 23, tzinfo=UTC),
        "State": "ENABLED",
        "FlexibleTimeWindow": {"Mode": "FLEXIBLE", "MaximumWindowInMinutes": 10},
        "Target": {
            "Arn": "arn:aws:states:us-east-1:123456789012:stateMachine:nightly",
            "RoleArn": ROLE,
            "Input": '{"run": "<aws.scheduler.execution-id>"}',
            "RetryPolicy": {"MaximumRetryAttempts": 3, "MaximumEventAgeInSeconds": 3600},
            "DeadLetterConfig": {"Arn": "arn:aws:sqs:us-east-1:123456789012:dlq"},
        },
    }
    base.update(changes)
    return base


def test_a_schedule_becomes_a_task_body_the_api_accepts() -> None:
    imported = translate_schedule(schedule())
    assert imported.body == {
        "name": "report",
        "cron": "30 2 * * ?",
        "timezone": "Europe/Paris",
        "start_at": "2027-01-01T00:00:00Z",
        "end_at": "2027-12-31T23:00:00Z",
        "jitter_seconds": 600,
        "tags": {SOURCE_TAG: schedule_digest(ARN)},
        "target": {
            "arn": "arn:aws:states:us-east-1:123456789012:stateMachine:nightly",
            "role_arn": ROLE,
            "input": '{"run": "<aws.scheduler.execution-id>"}',
        },
        "retry": {"max_attempts": 4},
    }
    TaskCreate.model_validate(imported.body)
    # What has no equivalent is reported, not dropped silently
    notes = " | ".join(imported.notes)
    assert "maximum event age 3600 s not mapped" in notes
    assert "dead-letter queue arn:aws:sqs:us-east-1:123456789012:dlq not mapped" in notes
    assert not imported.paused
    # The key is the ARN's, the same on every run
    assert imported.idempotency_key == translate_schedule(schedule()).idempotency_key


def test_parameters_of_sqs_eventbridge_and_ecs_targets_are_carried_over() -> None:
    sqs = translate_schedule(
        schedule(
            Target={
                "Arn": "arn:aws:sqs:us-east-1:123456789012:jobs.fifo",
                "RoleArn": ROLE,
                "SqsParameters": {"MessageGroupId": "g1"},
            }
        )
    )
    assert sqs.body is not None
    assert sqs.body["target"]["sqs_parameters"] == {"message_group_id": "g1"}
    ecs = translate_schedule(
        schedule(
            Target={
                "Arn": "arn:aws:ecs:us-east-1:123456789012:cluster/batch",
                "RoleArn": ROLE,
                "EcsParameters": {
                    "TaskDefinitionArn": "arn:aws:ecs:us-east-1:123456789012:task-definition/job:3",
                    "LaunchType": "FARGATE",
                    "TaskCount": 2,
                    "NetworkConfiguration": {
                        "awsvpcConfiguration": {
                            "Subnets": ["subnet-1"],
                            "AssignPublicIp": "ENABLED",
                        }
                    },
                    "PlacementStrategy": [{"type": "spread"}],
                },
            }
        )
    )
    assert ecs.body is not None
    assert ecs.body["target"]["ecs_parameters"] == {
        "task_definition_arn": "arn:aws:ecs:us-east-1:123456789012:task-definition/job:3",
        "launch_type": "FARGATE",
        "network_configuration": {
            "awsvpc_configuration": {
                "subnets": ["subnet-1"],
                "security_groups": [],
                "assign_public_ip": "ENABLED",
            }
        },
    }
    TaskCreate.model_validate(ecs.body)
    assert any("TaskCount 2 not mapped" in n for n in ecs.notes)
    assert any("PlacementStrategy not mapped" in n for n in ecs.notes)


@pytest.mark.parametrize(
    ("changes", "said"),
    [
        ({"ScheduleExpression": "cron(0 9 ? * MON 2027)"}, "no year field"),
        (
            {"Target": {"Arn": "arn:aws:scheduler:::aws-sdk:s3:listBuckets", "RoleArn": ROLE}},
            "universal target",
        ),
        (
            {"Target": {"Arn": "arn:aws:kinesis:us-east-1:1:stream/s", "RoleArn": ROLE}},
            "cannot call service 'kinesis'",
        ),
    ],
)
def test_a_schedule_that_cannot_be_carried_over_is_refused_with_its_reason(
    changes: dict[str, Any], said: str
) -> None:
    imported = translate_schedule(schedule(**changes))
    assert imported.body is None
    assert said in imported.notes[0]


def test_windows_and_retries_beyond_dynacron_s_bounds_are_cut_and_reported() -> None:
    imported = translate_schedule(
        schedule(
            FlexibleTimeWindow={"Mode": "FLEXIBLE", "MaximumWindowInMinutes": 60},
            State="DISABLED",
            Target={"Arn": "arn:aws:sns:us-east-1:1:t", "RoleArn": ROLE, "RetryPolicy": {}},
        )
    )
    assert imported.body is not None
    assert imported.body["jitter_seconds"] == 900
    assert imported.body["retry"] == {"max_attempts": 100}  # EventBridge's default is 185
    assert imported.paused
    notes = " | ".join(imported.notes)
    assert "60 minutes cut" in notes
    assert "185 retries cut to dynacron's 99" in notes
    assert "DISABLED" in notes
