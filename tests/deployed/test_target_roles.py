"""AWS targets with the template's roles: the worker assumes only the roles under
the operator's pattern (by default /dynacron-target/ of the stack's account), and
calls the target as that role: every kind, each call seen arriving in moto (a
Lambda function on moto's Docker-free Lambda, which answers with what it got)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

import boto3
import pytest
from moto.core.config import default_user_config

from dynacron.definitions.environment import TARGET_ROLES_VAR
from dynacron.domain.tasks.targets import (
    STATE_MACHINE_NAME_CHARS,
    external_id_for,
    service_token,
)
from dynacron.local.aws import REGION
from tests.deployed.harness import Deployment
from tests.deployed.steps import delete_tasks, executions, register, task_view

_tenants = itertools.count(1)


@pytest.fixture
def principal(deployed: Deployment) -> Iterator[str]:
    caller = f"arn:aws:iam::000000000000:user/targets-{next(_tenants)}"
    yield caller
    delete_tasks(deployed, caller)


def role_for(principal: str, path: str, name: str) -> str:
    trust = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"AWS": "*"},
                "Action": "sts:AssumeRole",
                "Condition": {"StringEquals": {"sts:ExternalId": external_id_for(principal)}},
            }
        ],
    }
    iam = boto3.client("iam", region_name=REGION)
    role = iam.create_role(RoleName=name, Path=path, AssumeRolePolicyDocument=json.dumps(trust))
    return str(role["Role"]["Arn"])


def queue(name: str) -> tuple[str, str]:
    sqs = boto3.client("sqs", region_name=REGION)
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]
    return url, arn["QueueArn"]


def run_once(deployed: Deployment, principal: str, task: dict[str, Any]) -> dict[str, Any]:
    due = datetime.fromisoformat(task_view(deployed, principal, task["task_id"])["next_run_at"])
    if due > deployed.clock.now():
        deployed.clock.set(due)
    deployed.run_due(task["task_id"])
    (execution,) = executions(deployed, principal, task["task_id"])
    return execution


def test_an_sqs_target_is_called_as_a_role_under_the_operators_pattern(
    deployed: Deployment, principal: str
) -> None:
    # Given a role under /dynacron-target/ trusting this tenant's external id
    role = role_for(principal, "/dynacron-target/", "deployed-jobs-writer")
    url, arn = queue("deployed-target-jobs")
    task = register(
        deployed,
        principal,
        rate="1 minute",
        target={"arn": arn, "role_arn": role, "input": "run <dynacron.execution-id>"},
        retry={"max_attempts": 1},
    )

    # When it runs, the queue receives the call and the execution SUCCEEDED
    execution = run_once(deployed, principal, task)
    assert execution["status"] == "SUCCEEDED", execution
    sqs = boto3.client("sqs", region_name=REGION)
    (message,) = sqs.receive_message(QueueUrl=url)["Messages"]
    assert message["Body"] == f"run {execution['execution_id']}"


# A target kind: the resource made as a user would, the target's fields, and what
# its call left behind (the execution given), asserted.
Check = Callable[[dict[str, Any]], None]
Made = tuple[dict[str, Any], Check]


def _lambda_target(role: str, monkeypatch: pytest.MonkeyPatch) -> Made:
    # moto's Lambda without Docker answers a synchronous Invoke with its payload
    monkeypatch.setitem(default_user_config, "lambda", {"use_docker": False})
    arn = boto3.client("lambda", region_name=REGION).create_function(
        FunctionName="deployed-nightly",
        Runtime="python3.12",
        Role=role,
        Handler="index.handler",
        Code={"ZipFile": b"PK"},
    )["FunctionArn"]

    def check(execution: dict[str, Any]) -> None:
        assert json.loads(execution["result_excerpt"])["execution_id"] == execution["execution_id"]

    return {"arn": arn, "lambda_parameters": {"invocation_type": "RequestResponse"}}, check


def _sns_target(role: str, monkeypatch: pytest.MonkeyPatch) -> Made:
    sns = boto3.client("sns", region_name=REGION)
    topic = sns.create_topic(Name="deployed-hourly")["TopicArn"]
    url, arn = queue("deployed-hourly-reader")
    sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=arn)

    def check(execution: dict[str, Any]) -> None:
        (message,) = boto3.client("sqs", region_name=REGION).receive_message(QueueUrl=url)[
            "Messages"
        ]
        sent = json.loads(json.loads(message["Body"])["Message"])
        assert sent["execution_id"] == execution["execution_id"]

    return {"arn": topic}, check


def _eventbridge_target(role: str, monkeypatch: pytest.MonkeyPatch) -> Made:
    events = boto3.client("events", region_name=REGION)
    bus = events.create_event_bus(Name="deployed-ops")["EventBusArn"]
    url, arn = queue("deployed-ops-reader")
    events.put_rule(
        Name="deployed-ops-runs",
        EventBusName="deployed-ops",
        EventPattern=json.dumps({"source": ["billing"]}),
    )
    events.put_targets(
        Rule="deployed-ops-runs", EventBusName="deployed-ops", Targets=[{"Id": "q", "Arn": arn}]
    )

    def check(execution: dict[str, Any]) -> None:
        (message,) = boto3.client("sqs", region_name=REGION).receive_message(QueueUrl=url)[
            "Messages"
        ]
        event = json.loads(message["Body"])
        assert event["detail-type"] == "Invoice Run"
        assert event["detail"] == {"execution": execution["execution_id"]}

    parameters = {"source": "billing", "detail_type": "Invoice Run"}
    return {
        "arn": bus,
        "input": '{"execution": "<dynacron.execution-id>"}',
        "eventbridge_parameters": parameters,
    }, check


def _step_functions_target(role: str, monkeypatch: pytest.MonkeyPatch) -> Made:
    states = boto3.client("stepfunctions", region_name=REGION)
    machine = states.create_state_machine(
        name="deployed-etl",
        definition=json.dumps({"StartAt": "Go", "States": {"Go": {"Type": "Pass", "End": True}}}),
        roleArn=role,
    )["stateMachineArn"]

    def check(execution: dict[str, Any]) -> None:
        (run,) = states.list_executions(stateMachineArn=machine)["executions"]
        # named by the execution id: an attempt that runs again starts no second run
        assert run["name"] == service_token(execution["execution_id"], STATE_MACHINE_NAME_CHARS)
        described = states.describe_execution(executionArn=run["executionArn"])
        assert json.loads(described["input"])["execution_id"] == execution["execution_id"]

    return {"arn": machine}, check


def _ecs_target(role: str, monkeypatch: pytest.MonkeyPatch) -> Made:
    ecs = boto3.client("ecs", region_name=REGION)
    cluster = ecs.create_cluster(clusterName="deployed-batch")["cluster"]["clusterArn"]
    definition = ecs.register_task_definition(
        family="deployed-report",
        # no awsvpc network mode: moto's RunTask cannot attach a network interface
        containerDefinitions=[{"name": "report", "image": "report:1", "memory": 512}],
    )["taskDefinition"]["taskDefinitionArn"]

    def check(execution: dict[str, Any]) -> None:
        (arn,) = ecs.list_tasks(cluster=cluster)["taskArns"]
        tags = ecs.list_tags_for_resource(resourceArn=arn)["tags"]
        assert {"key": "dynacron:execution-id", "value": execution["execution_id"]} in tags

    fargate = {
        "launch_type": "FARGATE",
        "network_configuration": {
            "awsvpc_configuration": {"subnets": ["subnet-0123456789abcdef0"]}
        },
    }
    return {"arn": cluster, "ecs_parameters": {"task_definition_arn": definition, **fargate}}, check


@pytest.mark.parametrize(
    "make",
    [_lambda_target, _sns_target, _eventbridge_target, _step_functions_target, _ecs_target],
    ids=["lambda", "sns", "eventbridge", "step-functions", "ecs"],
)
def test_every_target_kind_is_called_as_its_role_and_recorded(
    deployed: Deployment,
    principal: str,
    monkeypatch: pytest.MonkeyPatch,
    make: Callable[[str, pytest.MonkeyPatch], Made],
) -> None:
    # Given a role under /dynacron-target/ trusting this tenant, and a target of each kind
    role = role_for(principal, "/dynacron-target/", f"deployed-{make.__name__.strip('_')}")
    target, check = make(role, monkeypatch)
    task = register(
        deployed,
        principal,
        rate="1 minute",
        target={**target, "role_arn": role},
        retry={"max_attempts": 1},
    )
    # When it runs, the execution SUCCEEDED and the call arrived, as the execution
    execution = run_once(deployed, principal, task)
    assert execution["status"] == "SUCCEEDED", execution
    check(execution)


def test_a_role_outside_the_operators_pattern_is_refused_and_never_assumed(
    deployed: Deployment, principal: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    role = role_for(principal, "/", "deployed-elsewhere")
    url, arn = queue("deployed-target-elsewhere")
    body = {
        "rate": "1 minute",
        "target": {"arn": arn, "role_arn": role},
        "retry": {"max_attempts": 3},
    }

    # The API refuses it: the template tells it the roles the worker may assume
    status, problem = deployed.api("POST", "/tasks", body, principal=principal)
    assert status == 422, problem
    assert "target.role_arn" in json.dumps(problem)
    assert "role/dynacron-target/*" in json.dumps(problem)

    # A task registered before the operator narrowed target_roles (an API whose
    # environment names no pattern) runs, and the worker's own role refuses it
    monkeypatch.delitem(deployed.function("api").environment, TARGET_ROLES_VAR)
    older_api = deployed.another_environment("api")
    answer = older_api.invoke(deployed.api_event("POST", "/tasks", body, principal))
    assert answer["statusCode"] == 201, answer
    execution = run_once(deployed, principal, json.loads(answer["body"]))

    # Refused by the worker's own role, not retried, and nothing was sent
    assert execution["status"] == "FAILED", execution
    assert "sts:AssumeRole" in execution["error"]
    assert execution["attempt"] == 1
    assert "Messages" not in boto3.client("sqs", region_name=REGION).receive_message(QueueUrl=url)
