"""AWS targets with the template's roles: the worker assumes only the roles under
the operator's pattern (by default /dynacron-target/ of the stack's account), and
calls the target as that role."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import boto3
import pytest

from dynacron.definitions.environment import TARGET_ROLES_VAR
from dynacron.domain.tasks.targets import external_id_for
from dynacron.local.aws import REGION
from tests.deployed.harness import Deployment
from tests.deployed.steps import executions, register, task_view

_tenants = itertools.count(1)


@pytest.fixture
def principal(deployed: Deployment) -> Iterator[str]:
    caller = f"arn:aws:iam::000000000000:user/targets-{next(_tenants)}"
    yield caller
    for task in deployed.api("GET", "/tasks", principal=caller)[1]["items"]:
        deployed.api("DELETE", f"/tasks/{task['task_id']}", principal=caller)


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
