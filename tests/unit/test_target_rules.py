"""AWS targets' pure rules: what registration refuses (naming the field), the
placeholders, the idempotency keys and the tenant-bound external id."""

from __future__ import annotations

import dataclasses
import re
from datetime import UTC, datetime

import pytest

from dynacron.domain.errors import InvalidRequest
from dynacron.domain.tasks.record import task_from_record, task_record
from dynacron.domain.tasks.specs import ScheduleSpec, TaskSpec, new_task
from dynacron.domain.tasks.targets import (
    AwsVpcConfiguration,
    EcsParameters,
    InvocationType,
    LaunchType,
    Target,
    TargetPolicy,
    check_target,
    external_id_for,
    iam_wildcard_matches,
    partition_of,
    placeholder_values,
    service_token,
    substitute,
)

NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)
ROLE = "arn:aws:iam::123456789012:role/dynacron-target/runner"
QUEUE = "arn:aws:sqs:us-east-1:123456789012:jobs"
DEFINITION = "arn:aws:ecs:us-east-1:123456789012:task-definition/report:3"
POLICY = TargetPolicy(partition="aws", region="us-east-1")


def target(arn: str = QUEUE, **fields: object) -> Target:
    return Target(arn=arn, role_arn=ROLE, **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "arn",
    [
        "arn:aws:lambda:us-east-1:123456789012:function:nightly",
        "arn:aws:lambda:us-east-1:123456789012:function:nightly:live",
        QUEUE,
        "arn:aws:sns:us-east-1:123456789012:alerts",
        "arn:aws:events:us-east-1:123456789012:event-bus/default",
        "arn:aws:states:us-east-1:123456789012:stateMachine:etl",
        # Step Functions takes more than letters and digits in a name.
        "arn:aws:states:us-east-1:123456789012:stateMachine:etl.v2+nightly@ops",
    ],
)
def test_each_service_a_target_calls_is_accepted(arn: str) -> None:
    POLICY.check(target(arn))


def test_a_fifo_queues_name_may_be_80_characters_with_its_suffix() -> None:
    arn = "arn:aws:sqs:us-east-1:123456789012:" + "q" * 75 + ".fifo"
    POLICY.check(target(arn, message_group_id="g"))


@pytest.mark.parametrize(
    ("given", "field", "says"),
    [
        (target("sqs:jobs"), "target.arn", "is not an ARN"),
        (target("arn:aws:s3:::bucket"), "target.arn", "service 's3' is not a target"),
        (target("arn:aws:sqs::123456789012:jobs"), "target.arn", "names no region"),
        (target("arn:aws:lambda:us-east-1:123456789012:nightly"), "target.arn", "function:NAME"),
        (target("arn:aws:states:us-east-1:123456789012:execution:x:y"), "target.arn", "stateM"),
        (Target(arn=QUEUE, role_arn="arn:aws:iam::123456789012:user/bob"), "target.role_arn", ""),
        (Target(arn=QUEUE, role_arn="my-role"), "target.role_arn", "IAM role's ARN"),
        (
            target("arn:aws:sqs:us-east-1:123456789012:jobs.fifo"),
            "target.sqs_parameters.message_group_id",
            "required for a FIFO queue",
        ),
        (
            target(message_group_id="g", arn="arn:aws:sns:us-east-1:123456789012:t"),
            "target.sqs",
            "",
        ),
        (target(detail_type="x"), "target.eventbridge_parameters", "EventBridge targets only"),
        (
            target(invocation_type=InvocationType.REQUEST_RESPONSE),
            "target.lambda_parameters",
            "Lambda targets only",
        ),
        (
            target("arn:aws:events:us-east-1:123456789012:event-bus/b", source="aws.ec2"),
            "target.eventbridge_parameters.source",
            "aws.*",
        ),
        (
            target("arn:aws:events:us-east-1:123456789012:event-bus/b", input="[1, 2]"),
            "target.input",
            "JSON object",
        ),
        (
            target("arn:aws:states:us-east-1:123456789012:stateMachine:etl", input="{oops"),
            "target.input",
            "must be JSON",
        ),
        (
            target("arn:aws:states:us-east-1:123456789012:stateMachine:etl#2"),
            "target.arn",
            "stateMachine:NAME",
        ),
        (
            target("arn:aws:sqs:us-east-1:123456789012:" + "q" * 76 + ".fifo"),
            "target.arn",
            "1 to 80 characters, a FIFO queue's .fifo included",
        ),
        (
            target("arn:aws:sns:us-east-1:123456789012:" + "t" * 252 + ".fifo"),
            "target.arn",
            "1 to 256 characters",
        ),
        (target(input=""), "target.input", "SQS sends no empty message"),
        (
            target("arn:aws:sns:us-east-1:123456789012:alerts", input=""),
            "target.input",
            "leave input out to send the envelope",
        ),
        (target("arn:aws:ecs:us-east-1:123456789012:cluster/main"), "target.ecs_parameters", ""),
        (
            # Not RunTask's casing: every call would be refused.
            target(
                "arn:aws:ecs:us-east-1:123456789012:cluster/main",
                ecs=EcsParameters(DEFINITION),
                input='{"ContainerOverrides": []}',
            ),
            "target.input",
            "which take containerOverrides, cpu,",
        ),
        (
            target(
                "arn:aws:ecs:us-east-1:123456789012:cluster/main",
                ecs=EcsParameters(DEFINITION, launch_type=LaunchType.FARGATE),
            ),
            "target.ecs_parameters.network_configuration",
            "FARGATE",
        ),
        (
            target(
                "arn:aws:ecs:us-east-1:123456789012:cluster/main",
                ecs=EcsParameters(DEFINITION, network=AwsVpcConfiguration(("vpc-1",))),
            ),
            "target.ecs_parameters.network_configuration.awsvpc_configuration.subnets",
            "not a subnet id",
        ),
    ],
)
def test_a_malformed_target_is_refused_naming_its_field(
    given: Target, field: str, says: str
) -> None:
    with pytest.raises(InvalidRequest) as refused:
        check_target(given)
    assert refused.value.field.startswith(field)
    assert says in refused.value.message


@pytest.mark.parametrize(
    ("given", "field", "says"),
    [
        (target("arn:aws:sqs:eu-west-1:123456789012:jobs"), "target.arn", "region 'eu-west-1'"),
        (target("arn:aws-cn:sqs:us-east-1:123456789012:jobs"), "target.arn", "partition"),
        (
            Target(arn=QUEUE, role_arn="arn:aws-us-gov:iam::123456789012:role/r"),
            "target.role_arn",
            "partition",
        ),
        (
            target(
                "arn:aws:ecs:us-east-1:123456789012:cluster/main",
                ecs=EcsParameters(DEFINITION.replace("us-east-1", "us-west-2")),
            ),
            "target.ecs_parameters.task_definition_arn",
            "region",
        ),
    ],
)
def test_a_target_outside_the_stacks_partition_or_region_is_refused(
    given: Target, field: str, says: str
) -> None:
    with pytest.raises(InvalidRequest) as refused:
        POLICY.check(given)
    assert (refused.value.field, says in refused.value.message) == (field, True)


# The default target_roles, as the stack resolves it: roles under /dynacron-target/.
GRANTED = TargetPolicy(
    partition="aws",
    region="us-east-1",
    role_patterns=("arn:aws:iam::123456789012:role/dynacron-target/*",),
)


@pytest.mark.parametrize(
    "role_arn",
    [ROLE, "arn:aws:iam::123456789012:role/dynacron-target/team/a/runner"],
)
def test_a_role_under_the_operators_pattern_is_accepted(role_arn: str) -> None:
    GRANTED.check(Target(arn=QUEUE, role_arn=role_arn))


@pytest.mark.parametrize(
    "role_arn",
    [
        "arn:aws:iam::123456789012:role/runner",  # outside the path
        "arn:aws:iam::123456789012:role/Dynacron-Target/runner",  # IAM's ARNs count case
        "arn:aws:iam::210987654321:role/dynacron-target/runner",  # another account
    ],
)
def test_a_role_the_worker_may_not_assume_is_refused_at_registration(role_arn: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        GRANTED.check(Target(arn=QUEUE, role_arn=role_arn))
    assert refused.value.field == "target.role_arn"
    assert "arn:aws:iam::123456789012:role/dynacron-target/*" in refused.value.message


def test_an_operator_who_allows_no_role_refuses_every_target_saying_so() -> None:
    policy = dataclasses.replace(GRANTED, role_patterns=())
    with pytest.raises(InvalidRequest, match="target_roles is empty") as refused:
        policy.check(target())
    assert refused.value.field == "target.role_arn"


@pytest.mark.parametrize(
    ("pattern", "arn", "matches"),
    [
        ("arn:aws:iam::1:role/a?c", "arn:aws:iam::1:role/abc", True),
        ("arn:aws:iam::1:role/a?c", "arn:aws:iam::1:role/abbc", False),
        ("arn:aws:iam::*:role/ops/*", "arn:aws:iam::2:role/ops/x/y", True),
        ("arn:aws:iam::1:role/a.c", "arn:aws:iam::1:role/abc", False),  # a dot is a dot
        ("arn:aws:iam::1:role/r", "arn:aws:iam::1:role/r2", False),  # the whole ARN
    ],
)
def test_iam_wildcards_match_as_iam_matches_them(pattern: str, arn: str, matches: bool) -> None:
    assert iam_wildcard_matches(pattern, arn) is matches


def test_a_deployment_without_targets_refuses_every_one_saying_why() -> None:
    with pytest.raises(InvalidRequest, match="emulator") as refused:
        TargetPolicy(refusal="local mode calls them only on an AWS emulator").check(target())
    assert refused.value.field == "target"


def test_the_partition_follows_the_region() -> None:
    assert [partition_of(r) for r in ("us-east-1", "cn-north-1", "us-gov-west-1")] == [
        "aws",
        "aws-cn",
        "aws-us-gov",
    ]


def test_a_task_names_exactly_one_of_a_url_a_python_handler_or_a_target() -> None:
    spec = TaskSpec(schedule=ScheduleSpec(rate="1 minute"), target=target())
    assert new_task(spec, NOW, task_id="t", tenant_id="acme").target == target()
    for both in (
        dataclasses.replace(spec, handler_url="https://example.com/hook"),
        dataclasses.replace(spec, handler_name="nightly"),
    ):
        with pytest.raises(InvalidRequest, match="exactly one of 'handler_url', 'handler' or"):
            new_task(both, NOW, task_id="t", tenant_id="acme")


def test_a_target_is_stored_and_read_back_whole() -> None:
    every_field = target(
        "arn:aws:ecs:us-east-1:123456789012:cluster/main",
        input='{"containerOverrides": []}',
        ecs=EcsParameters(
            DEFINITION,
            launch_type=LaunchType.FARGATE,
            network=AwsVpcConfiguration(("subnet-0123456789abcdef0",), ("sg-0123abcd",), True),
            platform_version="LATEST",
            group="reports",
        ),
    )
    spec = TaskSpec(schedule=ScheduleSpec(rate="1 minute"), target=every_field)
    task = new_task(spec, NOW, task_id="t", tenant_id="acme")
    assert task_from_record(task_record(task)).target == every_field


def test_placeholders_are_replaced_in_dynacrons_names_and_eventbridge_schedulers() -> None:
    values = placeholder_values("t1", "t1_20261130T120000Z", "2026-11-30T12:00:00Z", 2)
    text = (
        '{"id": "<dynacron.execution-id>", "at": "<aws.scheduler.scheduled-time>", '
        '"n": <aws.scheduler.attempt-number>, "task": "<dynacron.task-id>", '
        '"same": "<aws.scheduler.execution-id>"}'
    )
    assert substitute(text, values) == (
        '{"id": "t1_20261130T120000Z", "at": "2026-11-30T12:00:00Z", "n": 2, "task": "t1", '
        '"same": "t1_20261130T120000Z"}'
    )


@pytest.mark.parametrize("limit", [64, 80, 128])
def test_an_execution_id_becomes_a_service_key_within_its_bound(limit: int) -> None:
    plain = "a1b2_20261130T120000.000Z-trigger"
    assert service_token(plain, limit) == plain
    long_ids = [f"{'t' * 70}_20261130T12000{n}Z-after-0badf00d" for n in range(3)]
    keys = [service_token(i, limit) for i in long_ids]
    assert all(len(k) <= limit and re.fullmatch(r"[A-Za-z0-9_.-]+", k) for k in keys)
    assert len(set(keys)) == 3
    assert keys == [service_token(i, limit) for i in long_ids]


def test_an_odd_character_never_maps_two_ids_to_one_key() -> None:
    assert service_token("a:b", 80) != service_token("a-b", 80)


def test_the_external_id_is_the_tenants_and_differs_between_tenants() -> None:
    assert external_id_for("acme") == "dynacron:acme"
    assert external_id_for("acme") != external_id_for("globex")
    principal = "arn:aws:iam::123456789012:role/ci"
    assert external_id_for(principal) == f"dynacron:{principal}"
    odd = external_id_for("tenant with spaces")
    assert re.fullmatch(r"dynacron:sha256:[0-9a-f]{64}", odd)
    assert odd != external_id_for("tenant with  spaces")


def test_a_tenant_id_sts_would_refuse_is_digested_and_no_tenant_can_take_a_digest() -> None:
    # \w would take "é": STS takes only ASCII in an external id.
    accented = external_id_for("équipe-café")
    assert accented.startswith("dynacron:sha256:")
    assert accented.isascii()
    # A tenant named as another's digested form does not get that form.
    digest = accented.removeprefix("dynacron:")
    assert external_id_for(digest) != accented
    assert external_id_for(digest).startswith("dynacron:sha256:")
