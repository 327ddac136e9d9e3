"""A target as a person names it, where a task's URL would be shown."""

from __future__ import annotations

import pytest

from dynacron.api.requests import TargetModel
from dynacron.api.responses import TaskView
from dynacron.cli.tables import handler_of
from dynacron.cli.target_names import describe_target

ROLE = "arn:aws:iam::1:role/r"


@pytest.mark.parametrize(
    ("arn", "shown"),
    [
        ("arn:aws:sqs:eu-west-1:123456789012:jobs", "SQS queue jobs"),
        ("arn:aws:sns:eu-west-1:123456789012:alerts", "SNS topic alerts"),
        ("arn:aws:lambda:eu-west-1:123456789012:function:resize", "Lambda function resize"),
        (
            "arn:aws:lambda:eu-west-1:123456789012:function:resize:live",
            "Lambda function resize:live",
        ),
        ("arn:aws:events:eu-west-1:123456789012:event-bus/orders", "EventBridge bus orders"),
        (
            "arn:aws:states:eu-west-1:123456789012:stateMachine:nightly",
            "Step Functions state machine nightly",
        ),
        ("arn:aws:ecs:eu-west-1:123456789012:cluster/batch", "ECS cluster batch"),
        ("arn:aws-cn:sqs:cn-north-1:123456789012:jobs", "SQS queue jobs"),
        ("arn:aws:s3:::bucket", "arn:aws:s3:::bucket"),  # not a target's service
        ("not an arn", "not an arn"),
    ],
)
def test_a_target_is_named_by_service_and_resource(arn: str, shown: str) -> None:
    assert describe_target(arn) == shown


def test_an_ecs_target_names_its_task_definition_and_cluster() -> None:
    assert (
        describe_target(
            "arn:aws:ecs:eu-west-1:123456789012:cluster/batch",
            "arn:aws:ecs:eu-west-1:123456789012:task-definition/export:7",
        )
        == "ECS task export:7 on cluster batch"
    )


def test_the_cli_shows_what_each_kind_of_task_calls() -> None:
    def task(**fields: object) -> TaskView:
        base = {"target": None, "handler": None, "handler_url": None}
        return TaskView.model_construct(**{**base, **fields})

    queue = TargetModel(arn="arn:aws:sqs:eu-west-1:1:jobs", role_arn=ROLE)
    assert handler_of(task(target=queue)) == "SQS queue jobs"
    assert handler_of(task(handler="jobs.export")) == "Python handler jobs.export"
    assert handler_of(task(handler_url="https://example.test/h")) == "https://example.test/h"
