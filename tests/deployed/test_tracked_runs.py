"""Completion tracking with the template's roles (decision 0049): the worker starts a
tracked Step Functions execution or ECS task as the target's role; the
state-change event, routed by the stack's rules, reaches the completions function,
which ends the execution with its own role's grants; a lost event is recovered by
the reaper describing the run as the target's role. Moto runs neither a state
machine to its end nor a container, so the events are delivered here in the shape
AWS documents; the clock is the stack's settable one, so three hours take none."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import boto3
import pytest

from dynacron.definitions.resources import DISPATCH_QUEUE
from dynacron.local.aws import REGION
from tests.deployed.harness import Deployment
from tests.deployed.steps import (
    census_entries,
    count_under,
    counted_as,
    delete_tasks,
    executions,
    register,
    task_view,
)
from tests.deployed.test_target_roles import queue, role_for, run_once

_tenants = itertools.count(1)
THREE_HOURS = timedelta(hours=3)
FARGATE = {
    "launch_type": "FARGATE",
    "network_configuration": {"awsvpc_configuration": {"subnets": ["subnet-0123456789abcdef0"]}},
}


@pytest.fixture
def principal(deployed: Deployment) -> Iterator[str]:
    caller = f"arn:aws:iam::000000000000:user/tracked-{next(_tenants)}"
    yield caller
    delete_tasks(deployed, caller)


def the_execution(deployed: Deployment, principal: str, task: dict[str, Any]) -> dict[str, Any]:
    (execution,) = executions(deployed, principal, task["task_id"])
    return execution


def routed(deployed: Deployment, event: dict[str, Any]) -> dict[str, Any]:
    """An event as the stack's rules route it: each rule of the template that
    targets the completions function is put on moto's default bus with its pattern
    (and a queue to watch in the function's place); the event is put on the bus,
    and what the rules deliver is what the function is invoked with."""
    completions = deployed.function("completions")
    events = boto3.client("events", region_name=REGION)
    sqs = boto3.client("sqs", region_name=REGION)
    tap = sqs.create_queue(QueueName="deployed-completions-tap")["QueueUrl"]
    tap_arn = sqs.get_queue_attributes(QueueUrl=tap, AttributeNames=["QueueArn"])["Attributes"]
    for logical_id, resource in deployed.template["Resources"].items():
        rule = resource["Properties"]
        if resource["Type"] != "AWS::Events::Rule" or "EventPattern" not in rule:
            continue
        (target,) = rule["Targets"]
        assert target["Arn"] == {"Fn::GetAtt": [completions.logical_id, "Arn"]}
        events.put_rule(Name=logical_id, EventPattern=json.dumps(rule["EventPattern"]))
        events.put_targets(Rule=logical_id, Targets=[{"Id": "tap", "Arn": tap_arn["QueueArn"]}])
    put = events.put_events(
        Entries=[
            {
                "Source": event["source"],
                "DetailType": event["detail-type"],
                "Detail": json.dumps(event["detail"]),
                "Resources": event["resources"],
            }
        ]
    )
    assert put["FailedEntryCount"] == 0, put
    delivered = sqs.receive_message(QueueUrl=tap, MaxNumberOfMessages=10).get("Messages", [])
    for message in delivered:
        sqs.delete_message(QueueUrl=tap, ReceiptHandle=message["ReceiptHandle"])
    assert len(delivered) == 1, f"{len(delivered)} deliveries of {event['detail-type']}"
    return completions.invoke(json.loads(delivered[0]["Body"]))


def state_machine_event(
    execution_arn: str, machine: str, status: str, began: datetime
) -> dict[str, Any]:
    return {
        "version": "0",
        "id": f"sfn-{execution_arn[-12:]}",
        "detail-type": "Step Functions Execution Status Change",
        "source": "aws.states",
        "account": "123456789012",
        "time": (began + THREE_HOURS).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": REGION,
        "resources": [execution_arn],
        "detail": {
            "executionArn": execution_arn,
            "stateMachineArn": machine,
            "name": execution_arn.rsplit(":", 1)[1],
            "status": status,
            "startDate": int(began.timestamp() * 1000),
            "stopDate": int((began + THREE_HOURS).timestamp() * 1000),
            "input": "{}",
            "output": '{"ok":true}',
        },
    }


def ecs_stopped_event(task: dict[str, Any], exit_code: int, began: datetime) -> dict[str, Any]:
    return {
        "version": "0",
        "id": f"ecs-{task['taskArn'][-12:]}",
        "detail-type": "ECS Task State Change",
        "source": "aws.ecs",
        "account": "123456789012",
        "time": (began + THREE_HOURS).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": REGION,
        "resources": [task["taskArn"]],
        "detail": {
            "clusterArn": task["clusterArn"],
            "taskArn": task["taskArn"],
            "startedBy": task["startedBy"],
            "lastStatus": "STOPPED",
            "desiredStatus": "STOPPED",
            "stopCode": "EssentialContainerExited",
            "stoppedReason": "Essential container in task exited",
            "containers": [{"name": "nightly", "lastStatus": "STOPPED", "exitCode": exit_code}],
            "startedAt": began.strftime("%Y-%m-%dT%H:%M:%S.000Z"),
            "stoppedAt": (began + THREE_HOURS).strftime("%Y-%m-%dT%H:%M:%S.000Z"),
        },
    }


def test_a_tracked_state_machine_ends_its_execution_through_the_stacks_rule(
    deployed: Deployment, principal: str
) -> None:
    # Given a tracked Step Functions target called as a role under /dynacron-target/
    role = role_for(principal, "/dynacron-target/", "deployed-tracked-etl")
    states = boto3.client("stepfunctions", region_name=REGION)
    machine = states.create_state_machine(
        name="deployed-tracked-etl",
        definition=json.dumps({"StartAt": "Go", "States": {"Go": {"Type": "Pass", "End": True}}}),
        roleArn=role,
    )["stateMachineArn"]
    task = register(
        deployed,
        principal,
        rate="1 day",
        target={"arn": machine, "role_arn": role, "track": "completion"},
        # one run at a time: the end frees the task's run slot
        overlap="skip",
    )
    # and a task that runs after it, on a queue
    _, queue_arn = queue("deployed-tracked-after")
    dependent = register(
        deployed, principal, after=task["task_id"], target={"arn": queue_arn, "role_arn": role}
    )
    # ...and a second whose item was changed by hand into one no reader decodes
    unreadable = register(
        deployed, principal, after=task["task_id"], target={"arn": queue_arn, "role_arn": role}
    )
    boto3.client("dynamodb", region_name=REGION).update_item(
        TableName=deployed.settings.tasks_table,
        Key={"task_id": {"S": unreadable["task_id"]}},
        UpdateExpression="SET #created = :nonsense",
        ExpressionAttributeNames={"#created": "created_at"},
        ExpressionAttributeValues={":nonsense": {"S": "the day before yesterday"}},
    )

    # When it runs, the execution stays RUNNING while the state machine runs
    running = run_once(deployed, principal, task)
    assert running["status"] == "RUNNING", running
    held = task_view(deployed, principal, task["task_id"])["running_execution"]
    assert held == running["execution_id"]
    began = deployed.clock.now()
    (run,) = states.list_executions(stateMachineArn=machine)["executions"]

    # and its SUCCEEDED event, three hours on, ends it with the run's duration
    deployed.clock.set(began + THREE_HOURS)
    event = state_machine_event(run["executionArn"], machine, "SUCCEEDED", began)
    assert routed(deployed, event) == {"outcome": "SUCCEEDED"}
    ended = the_execution(deployed, principal, task)
    assert ended["status"] == "SUCCEEDED", ended
    assert ended["result_excerpt"].endswith('with output {"ok":true} after 3h0m0s')
    # and frees the task's run slot, and starts the task that runs after it (the
    # completions function's follow-ups)
    assert task_view(deployed, principal, task["task_id"])["running_execution"] is None
    (started,) = executions(deployed, principal, dependent["task_id"])
    assert started["upstream_execution_id"] == ended["execution_id"]
    # ...and sets the unreadable one aside, saying why
    aside = task_view(deployed, principal, unreadable["task_id"])
    assert aside["status"] == "ERROR", aside
    # A second delivery of the same event changes nothing
    assert routed(deployed, event) == {"outcome": "STALE"}


def test_a_three_hour_ecs_task_exiting_1_is_retried_and_dead_lettered(
    deployed: Deployment, principal: str
) -> None:
    # Given a tracked ECS target allowed two attempts
    role = role_for(principal, "/dynacron-target/", "deployed-tracked-ecs")
    ecs = boto3.client("ecs", region_name=REGION)
    cluster = ecs.create_cluster(clusterName="deployed-tracked")["cluster"]["clusterArn"]
    definition = ecs.register_task_definition(
        family="nightly", containerDefinitions=[{"name": "nightly", "image": "n:1", "memory": 128}]
    )["taskDefinition"]["taskDefinitionArn"]
    task = register(
        deployed,
        principal,
        rate="1 day",
        target={
            "arn": cluster,
            "role_arn": role,
            "track": "completion",
            "ecs_parameters": FARGATE | {"task_definition_arn": definition},
        },
        retry={"max_attempts": 2, "base_delay_seconds": 1},
    )
    assert run_once(deployed, principal, task)["status"] == "RUNNING"

    for attempt in (1, 2):
        # When the attempt's task stops after three hours with exit code 1
        (stopped,) = [
            t
            for t in ecs.describe_tasks(
                cluster=cluster, tasks=ecs.list_tasks(cluster=cluster)["taskArns"]
            )["tasks"]
            if t["startedBy"].endswith(f"-{attempt}")
        ]
        began = deployed.clock.now()
        deployed.clock.set(began + THREE_HOURS)
        said = routed(deployed, ecs_stopped_event(stopped, 1, began))
        execution = the_execution(deployed, principal, task)
        assert "nightly exit code 1" in execution["error"], execution
        if attempt == 1:
            # Then it is retried: the next attempt starts a task of its own
            assert said == {"outcome": "RETRY_SCHEDULED"}
            deployed.clock.set(datetime.fromisoformat(execution["next_attempt_at"]))
            deployed.clock.advance(timedelta(seconds=1))
            # (sent with SQS's own delay, up to the backoff's second: moto keeps it
            # in real time)
            deadline = time.monotonic() + 5
            while the_execution(deployed, principal, task)["status"] != "RUNNING":
                assert time.monotonic() < deadline, "the retry never ran"
                deployed.drain("worker", DISPATCH_QUEUE.env_var)
                time.sleep(0.1)
        else:
            # and, with no attempt left, dead-lettered
            assert said == {"outcome": "DEAD_LETTERED"}
            assert execution["status"] == "FAILED"
            assert execution["dead_lettered_at"] is not None


def test_the_reaper_describes_a_run_whose_event_was_lost_as_the_targets_role(
    deployed: Deployment, principal: str
) -> None:
    role = role_for(principal, "/dynacron-target/", "deployed-tracked-lost")
    states = boto3.client("stepfunctions", region_name=REGION)
    machine = states.create_state_machine(
        name="deployed-tracked-lost",
        definition=json.dumps({"StartAt": "Go", "States": {"Go": {"Type": "Pass", "End": True}}}),
        roleArn=role,
    )["stateMachineArn"]
    task = register(
        deployed,
        principal,
        rate="1 day",
        target={"arn": machine, "role_arn": role, "track": "completion"},
        retry={"max_attempts": 1},
    )
    running = run_once(deployed, principal, task)
    (run,) = states.list_executions(stateMachineArn=machine)["executions"]
    states.stop_execution(executionArn=run["executionArn"], error="Ops", cause="cancelled")

    # When its tracked lease is overdue, the reaper (its own role assuming the
    # target's) describes the run and ends the execution as the run ended
    lease_until = datetime.fromisoformat(running["lease_until"])
    deployed.clock.set(lease_until + timedelta(minutes=5))
    report = deployed.reap()

    assert report.get("DEAD_LETTERED") == 1, report
    ended = the_execution(deployed, principal, task)
    assert ended["status"] == "FAILED", ended
    # (moto's DescribeExecution keeps no error and cause of a stopped execution)
    assert ended["error"].startswith("the state machine execution ABORTED: "), ended


def test_a_tracked_end_recounts_a_task_counted_under_a_stale_census_key(
    deployed: Deployment, principal: str
) -> None:
    # Given a tracked state machine task holding its run slot
    role = role_for(principal, "/dynacron-target/", "deployed-tracked-recount")
    states = boto3.client("stepfunctions", region_name=REGION)
    machine = states.create_state_machine(
        name="deployed-tracked-recount",
        definition=json.dumps({"StartAt": "Go", "States": {"Go": {"Type": "Pass", "End": True}}}),
        roleArn=role,
    )["stateMachineArn"]
    task = register(
        deployed,
        principal,
        rate="1 day",
        target={"arn": machine, "role_arn": role, "track": "completion"},
        overlap="skip",
    )
    began = run_once(deployed, principal, task) and deployed.clock.now()
    (run,) = states.list_executions(stateMachineArn=machine)["executions"]
    # ...counted under a census key its signature no longer gives (one an earlier
    # version computed, or a backfill wrote), whose entry counts it alone
    stale = "an-earlier-signature"
    counted = count_under(deployed, task["task_id"], stale)

    # When its run's end reaches the completions function, which frees the slot
    deployed.clock.set(began + THREE_HOURS)
    event = state_machine_event(run["executionArn"], machine, "SUCCEEDED", began)
    assert routed(deployed, event) == {"outcome": "SUCCEEDED"}

    # Then the task is counted under its own key again and the stale entry, now
    # counting nothing, is deleted (the census DeleteItem of the function's role)
    assert task_view(deployed, principal, task["task_id"])["running_execution"] is None
    assert counted_as(deployed, task["task_id"]) == counted
    assert census_entries(deployed, stale) == []
