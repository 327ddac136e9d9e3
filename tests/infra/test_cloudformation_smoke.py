"""The template's tables and queues, created by CloudFormation in moto, run a task end to end.

The code is pointed at what the stack created exactly as Lambda points it: through
the environment the template gives the functions. A table, key, index or variable
name that drifts between infrastructure and code fails here.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import boto3
import pytest

from dynacron.definitions.resources import DEAD_LETTER_QUEUE, DISPATCH_QUEUE, UNDELIVERED_QUEUE
from dynacron.domain.clock import SettableClock
from dynacron.domain.executions.execution import ExecutionStatus
from dynacron.domain.tasks.task import shard_for
from dynacron.entry.composition import Dynacron
from dynacron.entry.settings import LOOPBACK_NETWORKS, Settings
from dynacron.local.aws import REGION
from dynacron.local.gateway import LocalContext, proxy_event
from dynacron.local.runtime import sqs_event
from tests.conftest import sleep_moving
from tests.infra.test_template import function
from tests.integration.api_client import ALICE
from tests.support import FakeLambdaContext, Sink

# What moto's CloudFormation can create, and what the code needs to run.
DEPLOYED_TYPES = ("AWS::DynamoDB::Table", "AWS::SQS::Queue")


@dataclass(frozen=True)
class CreatedStack:
    physical_ids: dict[str, str]
    function_environment: dict[str, str]


def resolve(value: Any, physical_ids: dict[str, str]) -> str:
    """A template value as CloudFormation resolves it: a Ref names what it created."""
    if isinstance(value, dict) and "Fn::Join" in value:
        # The API's URL (the worker's DYNACRON_API_URL): the API is not created here,
        # and the URL is only written into delivery bodies, never called.
        separator, parts = value["Fn::Join"]
        pseudo = {"AWS::Region": REGION, "AWS::URLSuffix": "amazonaws.com"}
        return str(separator).join(
            pseudo.get(p["Ref"], physical_ids.get(p["Ref"], p["Ref"]))
            if isinstance(p, dict)
            else str(p)
            for p in parts
        )
    if isinstance(value, dict):
        (kind, target), *_ = value.items()
        assert kind == "Ref", value
        return physical_ids[target]
    return str(value)


@pytest.fixture
def created_stack(aws: tuple[Any, Any], template: dict[str, Any]) -> CreatedStack:
    resources = {
        logical_id: resource
        for logical_id, resource in template["Resources"].items()
        if resource["Type"] in DEPLOYED_TYPES
    }
    cloudformation = boto3.client("cloudformation", region_name=REGION)
    cloudformation.create_stack(
        StackName="dynacron-smoke",
        TemplateBody=json.dumps({"AWSTemplateFormatVersion": "2010-09-09", "Resources": resources}),
    )
    created = cloudformation.describe_stack_resources(StackName="dynacron-smoke")
    physical_ids = {
        r["LogicalResourceId"]: r["PhysicalResourceId"] for r in created["StackResources"]
    }
    assert set(physical_ids) == set(resources)
    variables = function(template, "Worker")["Environment"]["Variables"]
    return CreatedStack(
        physical_ids=physical_ids,
        function_environment={name: resolve(v, physical_ids) for name, v in variables.items()},
    )


@pytest.fixture
def deployed(aws: tuple[Any, Any], created_stack: CreatedStack, clock: SettableClock) -> Dynacron:
    """dynacron configured as Lambda configures it, but calling handlers on loopback."""
    settings = dataclasses.replace(
        Settings.from_env(created_stack.function_environment),
        delivery_allow_networks=LOOPBACK_NETWORKS,
    )
    dynamodb, sqs = aws
    return Dynacron(
        settings,
        dynamodb=dynamodb,
        sqs=sqs,
        clock=clock,
        sleep=sleep_moving(clock),
    )


def test_a_task_runs_end_to_end_on_the_resources_the_template_created(
    aws: tuple[Any, Any],
    created_stack: CreatedStack,
    deployed: Dynacron,
    clock: SettableClock,
    sink: Sink,
) -> None:
    _, sqs = aws
    # Given a task registered through the API handler, due in five seconds
    body = {"at": (clock.now() + timedelta(seconds=5)).isoformat(), "handler_url": sink.url}
    event = proxy_event(
        "POST", "/tasks", {"Content-Type": "application/json"}, json.dumps(body).encode(), "::1"
    )
    event["requestContext"]["identity"]["userArn"] = ALICE  # as API Gateway's IAM auth sets
    response = deployed.api(event, LocalContext("api"))
    assert response["statusCode"] == 201, response["body"]
    task_id = json.loads(response["body"])["task_id"]

    # When its shard's looping tick runs, as the schedule starts it
    shard = shard_for(task_id, deployed.settings.shard_count)
    ticked = deployed.tick({"shard": shard, "loop": True}, FakeLambdaContext("tick-1"))
    assert ticked["claimed"] == 1

    # And the worker gets the batch Lambda would build from the dispatch queue
    queue_url = deployed.settings.dispatch_queue_url
    assert queue_url in created_stack.physical_ids.values()
    messages = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10)["Messages"]
    arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])
    result = deployed.worker(
        sqs_event(messages, arn["Attributes"]["QueueArn"]), LocalContext("worker")
    )

    # Then the handler was called once and the execution is recorded SUCCEEDED
    assert result == {"batchItemFailures": []}
    (delivery,) = sink.snapshot()
    assert delivery.body["task_id"] == task_id
    page = deployed.executions.list_for_task(task_id, limit=10, token=None)
    assert [e.status for e in page.items] == [ExecutionStatus.SUCCEEDED]


def test_a_message_that_keeps_failing_lands_in_the_template_s_undelivered_queue(
    aws: tuple[Any, Any], created_stack: CreatedStack, deployed: Dynacron
) -> None:
    _, sqs = aws
    dispatch_url = created_stack.function_environment[DISPATCH_QUEUE.env_var]
    undelivered_url = created_stack.function_environment[UNDELIVERED_QUEUE.env_var]
    dead_letter_url = created_stack.function_environment[DEAD_LETTER_QUEUE.env_var]
    sqs.send_message(QueueUrl=dispatch_url, MessageBody="{}")
    assert DISPATCH_QUEUE.max_receive_count is not None
    for _ in range(DISPATCH_QUEUE.max_receive_count):
        (message,) = sqs.receive_message(QueueUrl=dispatch_url)["Messages"]
        # The worker failed it: it becomes visible again at once.
        sqs.change_message_visibility(
            QueueUrl=dispatch_url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0
        )
    assert "Messages" not in sqs.receive_message(QueueUrl=dispatch_url)
    # SQS moved it to the undelivered queue, whose function (decision 0022) passes a
    # body that is not a dispatch on to the dead-letter queue, as it was
    messages = sqs.receive_message(QueueUrl=undelivered_url)["Messages"]
    arn = sqs.get_queue_attributes(QueueUrl=undelivered_url, AttributeNames=["QueueArn"])
    result = deployed.undelivered(
        sqs_event(messages, arn["Attributes"]["QueueArn"]), LocalContext("undelivered")
    )
    assert result == {"batchItemFailures": []}
    (dead,) = sqs.receive_message(QueueUrl=dead_letter_url)["Messages"]
    assert dead["Body"] == "{}"
