"""AWS targets on moto: each service receives its call, carrying the execution
id and scheduled time, idempotent where the service allows; the role is assumed
with the tenant's external id and kept; errors land in the worker's outcome
classes. Lambda's Invoke runs code only in Docker in moto, so its requests and
errors run on botocore's Stubber, and one task end to end on moto's Docker-free
Lambda (it answers with the payload it got); every other service runs on moto.
"""

from __future__ import annotations

import dataclasses
import io
import json
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from botocore.response import StreamingBody
from botocore.stub import Stubber
from moto.core.config import default_user_config
from moto.iam.access_control import IAMPolicy, PermissionResult

from dynacron.adapters.delivery.targets import AssumedRoles, TargetDelivery, client_factory
from dynacron.api.requests import TaskCreate
from dynacron.domain.clock import SettableClock
from dynacron.domain.executions.execution import Dispatch, ExecutionStatus
from dynacron.domain.tasks.specs import ScheduleSpec, TaskSpec, new_task
from dynacron.domain.tasks.targets import (
    AwsVpcConfiguration,
    EcsParameters,
    InvocationType,
    LaunchType,
    Target,
    external_id_for,
)
from dynacron.domain.tasks.task import Task, execution_id_for
from dynacron.entry.composition import Dynacron, target_delivery
from dynacron.entry.settings import Settings
from dynacron.local.aws import REGION
from tests.conftest import sleep_moving
from tests.integration.api_client import ALICE, call
from tests.integration.test_worker import only_execution, receive, run_batch

ACCOUNT = "123456789012"
BOB = "arn:aws:iam::000000000000:user/bob"
SCHEDULED = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
TRUST = {
    "Version": "2012-10-17",
    "Statement": [
        {
            "Effect": "Allow",
            "Principal": {"AWS": f"arn:aws:iam::{ACCOUNT}:root"},
            "Action": "sts:AssumeRole",
            "Condition": {"StringEquals": {"sts:ExternalId": external_id_for(ALICE)}},
        }
    ],
}


@dataclasses.dataclass
class Roles:
    """Role clients on moto, with every AssumeRole the worker sent."""

    roles: AssumedRoles
    assumed: list[dict[str, Any]]
    role_arn: str
    stubs: dict[str, Any]


@pytest.fixture
def roles(aws: tuple[Any, Any], clock: SettableClock) -> Roles:
    iam = boto3.client("iam", region_name=REGION)
    role_arn = iam.create_role(
        RoleName="runner", Path="/dynacron-target/", AssumeRolePolicyDocument=json.dumps(TRUST)
    )["Role"]["Arn"]
    make = client_factory(REGION, None, 5.0)
    assumed: list[dict[str, Any]] = []
    stubs: dict[str, Any] = {}

    def recorded(service: str, credentials: dict[str, str] | None) -> Any:
        if service in stubs:
            return stubs[service]
        client = make(service, credentials)
        if service == "sts":
            client.meta.events.register(
                "provide-client-params.sts.AssumeRole",
                lambda params, **_: assumed.append(dict(params)),
            )
        return client

    return Roles(AssumedRoles(recorded, clock), assumed, role_arn, stubs)


def task_with(target: Target, tenant: str = ALICE, payload: dict[str, Any] | None = None) -> Task:
    spec = TaskSpec(schedule=ScheduleSpec(rate="1 minute"), target=target, payload=payload or {})
    return new_task(spec, SCHEDULED, task_id="nightly", tenant_id=tenant)


def dispatch(attempt: int = 1) -> Dispatch:
    execution_id = execution_id_for("nightly", SCHEDULED)
    return Dispatch(
        task_id="nightly", execution_id=execution_id, scheduled_at=SCHEDULED, attempt=attempt
    )


def queue(name: str, **attributes: str) -> tuple[str, str]:
    sqs = boto3.client("sqs", region_name=REGION)
    url = sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]
    return url, arn["QueueArn"]


def bodies(url: str) -> list[str]:
    sqs = boto3.client("sqs", region_name=REGION)
    found: list[str] = []
    while batch := sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages"):
        found += [m["Body"] for m in batch]
        for m in batch:
            sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    return found


def test_an_sqs_target_receives_the_envelope_an_http_handler_would(roles: Roles) -> None:
    url, arn = queue("jobs")
    delivery = TargetDelivery(roles.roles)

    result = delivery.deliver(
        task_with(Target(arn, roles.role_arn), payload={"n": 1}), dispatch(), "token"
    )

    assert result.ok, result.failure
    (body,) = bodies(url)
    assert json.loads(body) == {
        "task_id": "nightly",
        "execution_id": "nightly_20261130T120000.000Z",
        "scheduled_at": "2026-11-30T12:00:00.000Z",
        "attempt": 1,
        "payload": {"n": 1},
    }


def test_a_fifo_queue_gets_one_message_however_many_attempts_send_it(roles: Roles) -> None:
    url, arn = queue("jobs.fifo", FifoQueue="true")
    target = Target(
        arn, roles.role_arn, input='{"run": "<dynacron.execution-id>"}', message_group_id="g"
    )
    delivery = TargetDelivery(roles.roles)

    for attempt in (1, 2):
        assert delivery.deliver(task_with(target), dispatch(attempt), "token").ok

    assert bodies(url) == ['{"run": "nightly_20261130T120000.000Z"}']


EXECUTION_ATTRIBUTES = {
    "dynacron.execution-id": "nightly_20261130T120000.000Z",
    "dynacron.scheduled-time": "2026-11-30T12:00:00.000Z",
    "dynacron.task-id": "nightly",
    "dynacron.attempt": "2",
}


def attributes(url: str) -> dict[str, str]:
    sqs = boto3.client("sqs", region_name=REGION)
    (message,) = sqs.receive_message(QueueUrl=url, MessageAttributeNames=["All"])["Messages"]
    return {k: v["StringValue"] for k, v in message.get("MessageAttributes", {}).items()}


def test_an_sqs_message_carries_the_execution_whatever_its_input(roles: Roles) -> None:
    url, arn = queue("jobs")
    target = Target(arn, roles.role_arn, input="run the nightly report")

    assert TargetDelivery(roles.roles).deliver(task_with(target), dispatch(2), "t").ok

    assert attributes(url) == EXECUTION_ATTRIBUTES


def test_an_sns_message_carries_the_execution_to_its_subscribers(roles: Roles) -> None:
    sns = boto3.client("sns", region_name=REGION)
    topic = sns.create_topic(Name="alerts")["TopicArn"]
    url, queue_arn = queue("alert-reader")
    sns.subscribe(
        TopicArn=topic,
        Protocol="sqs",
        Endpoint=queue_arn,
        Attributes={"RawMessageDelivery": "true"},
    )
    target = Target(topic, roles.role_arn, input="disk nearly full")

    assert TargetDelivery(roles.roles).deliver(task_with(target), dispatch(2), "t").ok

    assert attributes(url) == EXECUTION_ATTRIBUTES


def test_an_sns_target_publishes_to_its_subscribers(roles: Roles) -> None:
    sns = boto3.client("sns", region_name=REGION)
    topic = sns.create_topic(Name="alerts")["TopicArn"]
    url, queue_arn = queue("alert-reader")
    sns.subscribe(
        TopicArn=topic,
        Protocol="sqs",
        Endpoint=queue_arn,
        Attributes={"RawMessageDelivery": "true"},
    )
    target = Target(topic, roles.role_arn, input="due at <aws.scheduler.scheduled-time>")

    assert TargetDelivery(roles.roles).deliver(task_with(target), dispatch(), "t").ok

    assert bodies(url) == ["due at 2026-11-30T12:00:00.000Z"]


def test_an_eventbridge_target_puts_an_event_with_its_source_and_detail_type(
    roles: Roles,
) -> None:
    events = boto3.client("events", region_name=REGION)
    bus = events.create_event_bus(Name="jobs")["EventBusArn"]
    url, queue_arn = queue("event-reader")
    events.put_rule(Name="all", EventBusName="jobs", EventPattern='{"source": ["billing"]}')
    events.put_targets(Rule="all", EventBusName="jobs", Targets=[{"Id": "q", "Arn": queue_arn}])
    target = Target(
        bus,
        roles.role_arn,
        input='{"execution": "<dynacron.execution-id>"}',
        source="billing",
        detail_type="Invoice Run",
    )

    result = TargetDelivery(roles.roles).deliver(task_with(target), dispatch(), "t")

    assert result.ok, result.failure
    (body,) = bodies(url)
    event = json.loads(body)
    assert (event["source"], event["detail-type"]) == ("billing", "Invoice Run")
    assert event["detail"] == {"execution": "nightly_20261130T120000.000Z"}


def test_a_step_functions_execution_is_named_by_the_execution_id_and_started_once(
    roles: Roles,
) -> None:
    states = boto3.client("stepfunctions", region_name=REGION)
    machine = states.create_state_machine(
        name="etl",
        definition=json.dumps({"StartAt": "Done", "States": {"Done": {"Type": "Succeed"}}}),
        roleArn=roles.role_arn,
    )["stateMachineArn"]
    delivery = TargetDelivery(roles.roles)
    target = Target(machine, roles.role_arn)

    first = delivery.deliver(task_with(target), dispatch(1), "t")
    again = delivery.deliver(task_with(target), dispatch(2), "t")

    assert first.ok, first.failure
    assert again.ok, again.failure
    assert again.excerpt is not None
    assert "earlier attempt" in again.excerpt
    (execution,) = states.list_executions(stateMachineArn=machine)["executions"]
    assert execution["name"] == "nightly_20261130T120000.000Z"
    started = states.describe_execution(executionArn=execution["executionArn"])
    assert json.loads(started["input"])["scheduled_at"] == "2026-11-30T12:00:00.000Z"


def test_an_ecs_target_runs_one_task_tagged_with_the_execution(roles: Roles) -> None:
    ecs = boto3.client("ecs", region_name=REGION)
    cluster = ecs.create_cluster(clusterName="main")["cluster"]["clusterArn"]
    definition = ecs.register_task_definition(
        family="report",
        containerDefinitions=[{"name": "report", "image": "report:1", "memory": 128}],
    )["taskDefinition"]["taskDefinitionArn"]
    target = Target(
        cluster,
        roles.role_arn,
        input='{"containerOverrides": [{"name": "report", "environment": '
        '[{"name": "RUN", "value": "<dynacron.execution-id>"}]}]}',
        ecs=EcsParameters(
            definition,
            launch_type=LaunchType.FARGATE,
            network=AwsVpcConfiguration(("subnet-0123456789abcdef0",), ("sg-0123abcd",)),
        ),
    )

    result = TargetDelivery(roles.roles).deliver(task_with(target), dispatch(), "t")

    assert result.ok, result.failure
    (task_arn,) = ecs.list_tasks(cluster="main")["taskArns"]
    (task,) = ecs.describe_tasks(cluster="main", tasks=[task_arn], include=["TAGS"])["tasks"]
    assert {"key": "dynacron:execution-id", "value": "nightly_20261130T120000.000Z"} in task["tags"]
    (override,) = task["overrides"]["containerOverrides"]
    assert override["environment"] == [{"name": "RUN", "value": "nightly_20261130T120000.000Z"}]


def test_the_role_is_assumed_with_the_tenants_external_id_and_kept(
    roles: Roles, clock: SettableClock
) -> None:
    _url, arn = queue("jobs")
    delivery = TargetDelivery(roles.roles)
    target = Target(arn, roles.role_arn)

    for _ in range(3):
        assert delivery.deliver(task_with(target), dispatch(), "t").ok
    assert [(a["RoleArn"], a["ExternalId"]) for a in roles.assumed] == [
        (roles.role_arn, f"dynacron:{ALICE}")
    ]

    # Another tenant naming the same role gets its own external id, never alice's.
    delivery.deliver(task_with(target, tenant=BOB), dispatch(), "t")
    assert [a["ExternalId"] for a in roles.assumed] == [f"dynacron:{ALICE}", f"dynacron:{BOB}"]


def trust_allows(role_arn: str, sent: dict[str, Any]) -> bool:
    """Whether the role's trust policy, as stored in IAM, lets the worker assume it
    with what it sent (moto's STS accepts any call: its policy evaluator judges)."""
    iam = boto3.client("iam", region_name=REGION)
    document = iam.get_role(RoleName=role_arn.rsplit("/", 1)[1])["Role"]["AssumeRolePolicyDocument"]
    verdict = IAMPolicy(json.dumps(document) if isinstance(document, dict) else document)
    return (
        verdict.is_action_permitted(
            "sts:AssumeRole",
            principal=f"arn:aws:iam::{ACCOUNT}:root",
            incoming_condition_values={"sts:ExternalId": sent["ExternalId"]},
        )
        is PermissionResult.PERMITTED
    )


def test_a_tenant_naming_another_tenants_role_is_refused_by_its_trust_policy(
    roles: Roles,
) -> None:
    # Given alice's role, whose trust policy names alice's external id
    _, arn = queue("jobs")
    delivery = TargetDelivery(roles.roles)
    target = Target(arn, roles.role_arn)

    # When alice's task and bob's task (naming alice's role) are delivered
    delivery.deliver(task_with(target), dispatch(), "t")
    delivery.deliver(task_with(target, tenant=BOB), dispatch(), "t")

    # Then the role accepts alice's call and refuses bob's: his external id is his own
    alice, bob = roles.assumed
    assert trust_allows(roles.role_arn, alice)
    assert not trust_allows(roles.role_arn, bob)


def test_credentials_are_renewed_shortly_before_they_expire(
    roles: Roles, clock: SettableClock
) -> None:
    _url, arn = queue("jobs")
    delivery = TargetDelivery(roles.roles)
    target = Target(arn, roles.role_arn)
    delivery.deliver(task_with(target), dispatch(), "t")
    sts = boto3.client("sts", region_name=REGION)
    expires = sts.assume_role(RoleArn=roles.role_arn, RoleSessionName="probe")["Credentials"][
        "Expiration"
    ]

    clock.set(expires - timedelta(minutes=10))
    delivery.deliver(task_with(target), dispatch(), "t")
    assert len(roles.assumed) == 1
    clock.set(expires - timedelta(minutes=4))
    delivery.deliver(task_with(target), dispatch(), "t")
    assert len(roles.assumed) == 2


def test_records_starting_together_assume_their_role_once(roles: Roles) -> None:
    _, arn = queue("jobs")
    delivery = TargetDelivery(roles.roles)
    target = Target(arn, roles.role_arn)
    start = threading.Barrier(8)

    def deliver() -> bool:
        start.wait()
        return delivery.deliver(task_with(target), dispatch(), "t").ok

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda _: deliver(), range(8)))

    assert all(results)
    assert len(roles.assumed) == 1


def test_the_kept_roles_are_bounded(aws: tuple[Any, Any], clock: SettableClock) -> None:
    _, arn = queue("jobs")
    roles = AssumedRoles(client_factory(REGION, None, 5.0), clock, max_roles=2)
    delivery = TargetDelivery(roles)
    for tenant in ("a1", "b2", "c3", "d4"):
        target = Target(arn, f"arn:aws:iam::{ACCOUNT}:role/r-{tenant}")
        assert delivery.deliver(task_with(target, tenant=tenant), dispatch(), "t").ok
    assert (len(roles), roles.locks) == (2, 2)


def test_roles_that_cannot_be_assumed_leave_nothing_kept(roles: Roles) -> None:
    # Given an STS that refuses every AssumeRole (a role that does not trust us)
    sts = boto3.client("sts", region_name=REGION)
    stub = Stubber(sts)
    for _ in range(5):
        stub.add_client_error("assume_role", "AccessDenied", "not trusted", 403)
    stub.activate()
    roles.stubs["sts"] = sts
    _, arn = queue("jobs")
    delivery = TargetDelivery(roles.roles)

    # When tasks name five roles in turn
    results = [
        delivery.deliver(
            task_with(Target(arn, f"arn:aws:iam::{ACCOUNT}:role/gone-{n}")), dispatch(), "t"
        )
        for n in range(5)
    ]

    # Then each attempt fails for good, saying what the trust policy must name, and
    # no role leaves credentials or a lock behind
    stub.assert_no_pending_responses()
    for result in results:
        assert result.failure is not None
        assert not result.failure.retryable
        assert f"external id {external_id_for(ALICE)!r}" in result.failure.error
    assert (len(roles.roles), roles.roles.locks) == (0, 0)


def test_target_clients_pool_a_connection_for_each_call_a_worker_makes_at_once(
    settings: Settings, clock: SettableClock, roles: Roles
) -> None:
    # A worker with 64 calls in flight, all to one service as one role
    wide = dataclasses.replace(settings, target_region=REGION, worker_concurrency=64)
    delivery = target_delivery(wide, clock)
    assert delivery is not None

    client = delivery.roles.client(roles.role_arn, ALICE, "sqs")

    # keeps 64 connections: past its pool, each call would open one and drop it
    assert client.meta.config.max_pool_connections == 64


def stubbed_lambda(roles: Roles, response: dict[str, Any], expected: dict[str, Any]) -> Stubber:
    client = boto3.client("lambda", region_name=REGION)
    stub = Stubber(client)
    stub.add_response("invoke", response, expected)
    stub.activate()
    roles.stubs["lambda"] = client
    return stub


FUNCTION = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:nightly"


def _payload(text: str) -> StreamingBody:
    return StreamingBody(io.BytesIO(text.encode()), len(text))


def test_a_lambda_target_is_invoked_asynchronously_by_default(roles: Roles) -> None:
    envelope = json.dumps(
        {
            "task_id": "nightly",
            "execution_id": "nightly_20261130T120000.000Z",
            "scheduled_at": "2026-11-30T12:00:00.000Z",
            "attempt": 1,
            "payload": {},
        },
        separators=(",", ":"),
    ).encode()
    stub = stubbed_lambda(
        roles,
        {"StatusCode": 202, "Payload": _payload("")},
        {"FunctionName": FUNCTION, "InvocationType": "Event", "Payload": envelope},
    )

    result = TargetDelivery(roles.roles).deliver(
        task_with(Target(FUNCTION, roles.role_arn)), dispatch(), "t"
    )

    stub.assert_no_pending_responses()
    assert (result.ok, result.status_code) == (True, 202)


def test_a_synchronous_lambda_targets_function_error_fails_the_attempt(roles: Roles) -> None:
    target = Target(
        FUNCTION,
        roles.role_arn,
        input='{"id": "<dynacron.execution-id>"}',
        invocation_type=InvocationType.REQUEST_RESPONSE,
    )
    stubbed_lambda(
        roles,
        {
            "StatusCode": 200,
            "FunctionError": "Unhandled",
            "Payload": _payload('{"errorMessage": "ledger locked"}'),
        },
        {
            "FunctionName": FUNCTION,
            "InvocationType": "RequestResponse",
            "Payload": b'{"id": "nightly_20261130T120000.000Z"}',
        },
    )

    result = TargetDelivery(roles.roles).deliver(task_with(target), dispatch(), "t")

    assert result.failure is not None
    assert result.failure.retryable
    assert "function failed (Unhandled)" in result.failure.error
    assert "ledger locked" in result.failure.error


def test_a_long_answer_is_read_in_part_and_its_connection_let_go(roles: Roles) -> None:
    answer = io.BytesIO(b'"' + b"x" * (200 * 1024) + b'"')
    target = Target(FUNCTION, roles.role_arn, invocation_type=InvocationType.REQUEST_RESPONSE)
    client = boto3.client("lambda", region_name=REGION)
    stub = Stubber(client)
    stub.add_response(
        "invoke", {"StatusCode": 200, "Payload": StreamingBody(answer, 200 * 1024 + 2)}
    )
    stub.activate()
    roles.stubs["lambda"] = client

    result = TargetDelivery(roles.roles).deliver(task_with(target), dispatch(), "t")

    assert result.ok
    assert answer.closed


@pytest.mark.parametrize(
    ("code", "status", "retryable", "says"),
    [
        ("TooManyRequestsException", 429, True, "was throttled"),
        ("ThrottlingException", 400, True, "was throttled"),
        ("ServiceException", 500, True, "service's side"),
        ("AccessDeniedException", 403, False, "was refused (AccessDeniedException: not yours"),
        ("ResourceNotFoundException", 404, False, "was refused (ResourceNotFoundException"),
    ],
)
def test_service_errors_land_in_the_outcome_classes(
    roles: Roles, code: str, status: int, retryable: bool, says: str
) -> None:
    client = boto3.client("lambda", region_name=REGION)
    stub = Stubber(client)
    stub.add_client_error("invoke", code, "not yours", status)
    stub.activate()
    roles.stubs["lambda"] = client

    result = TargetDelivery(roles.roles).deliver(
        task_with(Target(FUNCTION, roles.role_arn)), dispatch(), "t"
    )

    assert result.failure is not None
    assert (result.failure.retryable, result.status_code) == (retryable, status)
    assert says in result.failure.error


# The worker end to end: a task registered through the API, claimed by the tick,
# and run by the worker, on a target whose service throttles or refuses.


@pytest.fixture
def target_system(
    aws: tuple[Any, Any], settings: Settings, clock: SettableClock, roles: Roles
) -> Iterator[Callable[[str, int], Dynacron]]:
    dynamodb, sqs = aws

    def build(code: str, status: int) -> Dynacron:
        client = boto3.client("sqs", region_name=REGION)
        stub = Stubber(client)
        stub.add_client_error("send_message", code, "said the service", status)
        stub.activate()
        roles.stubs["sqs"] = client
        return Dynacron(
            dataclasses.replace(settings, target_region=REGION),
            dynamodb=dynamodb,
            sqs=sqs,
            clock=clock,
            sleep=sleep_moving(clock),
            delivery=TargetDelivery(roles.roles),
        )

    return build


@pytest.mark.parametrize(
    ("code", "status", "final", "says"),
    [
        ("AWS.SimpleQueueService.RequestThrottled", 400, False, "SendMessage was throttled"),
        ("AccessDenied", 403, True, "SendMessage was refused (AccessDenied: said the service)"),
    ],
)
def test_the_worker_retries_a_throttled_target_and_fails_a_refused_one(
    target_system: Callable[[str, int], Dynacron],
    aws: tuple[Any, Any],
    clock: SettableClock,
    roles: Roles,
    code: str,
    status: int,
    final: bool,
    says: str,
) -> None:
    system = target_system(code, status)
    _, arn = queue("jobs")
    task = system.task_service.register(
        ALICE,
        TaskCreate.model_validate(
            {"rate": "1 minute", "target": {"arn": arn, "role_arn": roles.role_arn}}
        ).to_spec(),
    )
    assert task.next_run_at is not None
    clock.set(task.next_run_at + timedelta(milliseconds=5))
    assert sum(r.claimed for r in system.ticker.tick()) == 1

    run_batch(system, receive(system, aws))

    execution = only_execution(system, task.task_id)
    assert execution.error is not None
    assert says in execution.error
    if final:
        assert execution.status is ExecutionStatus.FAILED
    else:
        assert execution.status is ExecutionStatus.QUEUED
        assert execution.next_attempt_at is not None


def test_the_default_worker_delivers_a_registered_target_and_records_its_success(
    api_with_targets: Dynacron, aws: tuple[Any, Any], clock: SettableClock, roles: Roles
) -> None:
    # Given the system as composed (its own delivery) and a task with an SQS target
    system = api_with_targets
    url, arn = queue("jobs")
    status, created = call(
        system,
        "POST",
        "/tasks",
        {"rate": "1 minute", "target": {"arn": arn, "role_arn": roles.role_arn}},
    )
    assert status == 201, created
    clock.set(datetime.fromisoformat(created["next_run_at"]) + timedelta(milliseconds=5))
    assert sum(r.claimed for r in system.ticker.tick()) == 1

    # When the worker runs the dispatched execution
    assert run_batch(system, receive(system, aws)) == {"batchItemFailures": []}

    # Then the queue holds the envelope, and the execution SUCCEEDED with the message id
    execution = only_execution(system, created["task_id"])
    assert execution.status is ExecutionStatus.SUCCEEDED
    (body,) = bodies(url)
    assert json.loads(body)["execution_id"] == execution.execution_id


def test_a_lambda_target_runs_end_to_end_on_motos_lambda_without_docker(
    api_with_targets: Dynacron,
    aws: tuple[Any, Any],
    clock: SettableClock,
    roles: Roles,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given moto's Lambda that answers each call with its own payload (no Docker),
    # a function, and a task with a synchronous Lambda target registered through the API
    monkeypatch.setitem(default_user_config, "lambda", {"use_docker": False})
    function_arn = boto3.client("lambda", region_name=REGION).create_function(
        FunctionName="nightly",
        Runtime="python3.12",
        Role=roles.role_arn,
        Handler="index.handler",
        Code={"ZipFile": b"PK"},
    )["FunctionArn"]
    system = api_with_targets
    status, created = call(
        system,
        "POST",
        "/tasks",
        {
            "rate": "1 minute",
            "payload": {"report": "daily"},
            "target": {
                "arn": function_arn,
                "role_arn": roles.role_arn,
                "lambda_parameters": {"invocation_type": "RequestResponse"},
            },
        },
    )
    assert status == 201, created
    clock.set(datetime.fromisoformat(created["next_run_at"]) + timedelta(milliseconds=5))
    assert sum(r.claimed for r in system.ticker.tick()) == 1

    # When the worker runs the dispatched execution
    assert run_batch(system, receive(system, aws)) == {"batchItemFailures": []}

    # Then the function was invoked with the envelope, and its answer (the envelope,
    # echoed) is the execution's excerpt
    execution = only_execution(system, created["task_id"])
    assert execution.status is ExecutionStatus.SUCCEEDED, execution.error
    assert execution.result is not None
    assert execution.result.status_code == 200
    assert execution.result.excerpt is not None
    envelope = json.loads(execution.result.excerpt)
    assert envelope["execution_id"] == execution.execution_id
    assert envelope["payload"] == {"report": "daily"}


# Registration through the API: the 422s name the field.


@pytest.fixture
def api_with_targets(aws: tuple[Any, Any], settings: Settings, clock: SettableClock) -> Dynacron:
    dynamodb, sqs = aws
    return Dynacron(
        dataclasses.replace(settings, target_region=REGION), dynamodb=dynamodb, sqs=sqs, clock=clock
    )


ROLE = f"arn:aws:iam::{ACCOUNT}:role/runner"
SQS_ARN = f"arn:aws:sqs:{REGION}:{ACCOUNT}:jobs"


@pytest.mark.parametrize(
    ("body", "field", "says"),
    [
        ({"target": {"arn": "jobs", "role_arn": ROLE}}, "target.arn", "is not an ARN"),
        (
            {"target": {"arn": SQS_ARN.replace(REGION, "eu-west-1"), "role_arn": ROLE}},
            "target.arn",
            "region 'eu-west-1'",
        ),
        ({"target": {"arn": SQS_ARN, "role_arn": "runner"}}, "target.role_arn", "IAM role"),
        (
            {"target": {"arn": SQS_ARN, "role_arn": ROLE}, "handler_url": "https://x.test/"},
            "handler",
            "exactly one of 'handler_url', 'handler' or 'target'",
        ),
        (
            {"target": {"arn": SQS_ARN + ".fifo", "role_arn": ROLE}},
            "target.sqs_parameters.message_group_id",
            "FIFO",
        ),
        (
            {"target": {"arn": SQS_ARN, "role_arn": ROLE, "retry_policy": {}}},
            "target.retry_policy",
            "",
        ),
        # The external id is the tenant's: a task cannot choose another.
        (
            {"target": {"arn": SQS_ARN, "role_arn": ROLE, "external_id": "dynacron:alice"}},
            "target.external_id",
            "",
        ),
    ],
)
def test_a_target_the_stack_refuses_is_a_422_naming_the_field(
    api_with_targets: Dynacron, body: dict[str, Any], field: str, says: str
) -> None:
    status, problem = call(api_with_targets, "POST", "/tasks", {"rate": "1 minute", **body})

    assert status == 422, problem
    assert field in json.dumps(problem)
    assert says in json.dumps(problem)
    assert call(api_with_targets, "GET", "/tasks")[1]["items"] == []


def test_a_target_is_shown_back_as_registered(api_with_targets: Dynacron) -> None:
    target = {
        "arn": SQS_ARN + ".fifo",
        "role_arn": ROLE,
        "input": "<dynacron.execution-id>",
        "sqs_parameters": {"message_group_id": "billing"},
    }
    status, created = call(
        api_with_targets, "POST", "/tasks", {"rate": "1 minute", "target": target}
    )
    assert status == 201, created
    assert created["target"] == {
        **target,
        "eventbridge_parameters": None,
        "lambda_parameters": None,
        "ecs_parameters": None,
        "track": None,
    }
    assert created["handler_url"] is None


def test_a_deployment_without_a_region_refuses_targets_saying_what_to_set(
    system: Dynacron,
) -> None:
    status, problem = call(
        system, "POST", "/tasks", {"rate": "1 minute", "target": {"arn": SQS_ARN, "role_arn": ROLE}}
    )
    assert status == 422
    assert "--store emulator" in json.dumps(problem)


def test_a_patch_moves_a_task_between_a_url_and_a_target(api_with_targets: Dynacron) -> None:
    status, task = call(
        api_with_targets,
        "POST",
        "/tasks",
        {"rate": "1 minute", "handler_url": "http://127.0.0.1:9/"},
    )
    assert status == 201, task
    target = {"arn": SQS_ARN, "role_arn": ROLE}

    status, moved = call(api_with_targets, "PATCH", f"/tasks/{task['task_id']}", {"target": target})
    assert status == 200, moved
    assert (moved["handler_url"], moved["target"]["arn"]) == (None, SQS_ARN)

    # Clearing the target with nothing in its place leaves the task without a handler: refused
    status, problem = call(api_with_targets, "PATCH", f"/tasks/{task['task_id']}", {"target": None})
    assert status == 422, problem
    assert "exactly one of 'handler_url', 'handler' or 'target'" in json.dumps(problem)
    assert call(api_with_targets, "GET", f"/tasks/{task['task_id']}")[1]["target"]["arn"] == SQS_ARN


# One deadline per attempt: AssumeRole and the call share the handler timeout.


def slow_sts_roles(clock: SettableClock, sts_seconds: float, read_timeouts: list[float]) -> Any:
    """Role clients on moto whose AssumeRole takes ``sts_seconds``, recording each
    target call's read timeout as botocore will send it."""
    make = client_factory(REGION, None, 5.0)

    def made(service: str, credentials: dict[str, str] | None) -> Any:
        client = make(service, credentials)
        if service == "sts":
            client.meta.events.register(
                "before-call.sts.AssumeRole", lambda **_: time.sleep(sts_seconds)
            )
        else:
            client.meta.events.register(
                "before-call.*.*",
                lambda context, **_: read_timeouts.append(context["read_timeout"]),
            )
        return client

    return AssumedRoles(made, clock)


def test_the_call_gets_what_assume_role_left_of_the_attempts_deadline(
    aws: tuple[Any, Any], clock: SettableClock
) -> None:
    # Given an attempt deadline of 3 s, and an AssumeRole that takes 0.3 s of it (the
    # deadline is wall time: moto's own calls take the rest, seconds on a loaded
    # machine, so a 1 s deadline once ran out before the call)
    url, arn = queue("deadline-jobs")
    read_timeouts: list[float] = []
    role = f"arn:aws:iam::{ACCOUNT}:role/dynacron-target/runner"
    delivery = TargetDelivery(slow_sts_roles(clock, 0.3, read_timeouts), timeout_seconds=3.0)

    # When it delivers
    result = delivery.deliver(task_with(Target(arn, role)), dispatch(), "t")

    # Then the call's read timeout is what was left, not the client's 5 s
    assert result.ok, result.failure
    (read_timeout,) = read_timeouts
    assert 0 < read_timeout <= 2.7
    assert len(bodies(url)) == 1


def test_a_call_is_not_made_once_assume_role_used_the_attempts_deadline(
    aws: tuple[Any, Any], clock: SettableClock
) -> None:
    url, arn = queue("deadline-late")
    read_timeouts: list[float] = []
    role = f"arn:aws:iam::{ACCOUNT}:role/dynacron-target/runner"
    delivery = TargetDelivery(slow_sts_roles(clock, 0.3, read_timeouts), timeout_seconds=0.2)

    result = delivery.deliver(task_with(Target(arn, role)), dispatch(), "t")

    # A retryable failure saying why; nothing was sent
    assert result.failure is not None
    assert result.failure.retryable
    assert "SendMessage was not called" in result.failure.error
    assert read_timeouts == []
    assert bodies(url) == []
