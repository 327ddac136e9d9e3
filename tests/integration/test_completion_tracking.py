"""Completion tracking on moto (decision 0049): a Step Functions or ECS target with
``track: "completion"`` stays RUNNING until its run's state-change event arrives,
then ends as the run did, retried and dead-lettered by the task's policy; a lost
event is recovered by the reaper describing the run once the tracked lease is
overdue. Moto runs no container and no state machine to its end, so the events
are delivered here in the shape AWS documents; the clock is injected, so a
3-hour run takes no time.
"""

from __future__ import annotations

import dataclasses
import json
import time
from datetime import datetime, timedelta
from typing import Any

import boto3
import pytest

from dynacron.api.requests import TaskCreate
from dynacron.domain.clock import SettableClock
from dynacron.domain.executions.completion import CHECK_AFTER, ECS_EVENT, STEP_FUNCTIONS_EVENT
from dynacron.domain.executions.execution import Execution, ExecutionStatus
from dynacron.domain.tasks.task import Task
from dynacron.entry.composition import Dynacron
from dynacron.entry.settings import Settings
from dynacron.local.aws import REGION
from tests.conftest import sleep_moving
from tests.integration.api_client import ALICE, call
from tests.integration.test_target_delivery import Roles, roles
from tests.integration.test_worker import only_execution, receive, run_batch

__all__ = ["roles"]  # the fixture, shared with the target tests

THREE_HOURS = timedelta(hours=3)
FARGATE = {
    "launch_type": "FARGATE",
    "network_configuration": {"awsvpc_configuration": {"subnets": ["subnet-0123456789abcdef0"]}},
}


@pytest.fixture
def system(
    aws: tuple[Any, Any], settings: Settings, clock: SettableClock, roles: Roles
) -> Dynacron:
    dynamodb, sqs = aws
    return Dynacron(
        dataclasses.replace(settings, target_region=REGION),
        dynamodb=dynamodb,
        sqs=sqs,
        clock=clock,
        sleep=sleep_moving(clock),
        target_clients=lambda service, credentials: roles.roles._make_client(service, credentials),
    )


def state_machine(roles: Roles) -> str:
    states = boto3.client("stepfunctions", region_name=REGION)
    return states.create_state_machine(
        name="etl",
        definition=json.dumps(
            {"StartAt": "Wait", "States": {"Wait": {"Type": "Pass", "End": True}}}
        ),
        roleArn=roles.role_arn,
    )["stateMachineArn"]


def ecs_cluster() -> tuple[str, str]:
    ecs = boto3.client("ecs", region_name=REGION)
    cluster = ecs.create_cluster(clusterName="batch")["cluster"]["clusterArn"]
    definition = ecs.register_task_definition(
        family="report", containerDefinitions=[{"name": "report", "image": "r:1", "memory": 128}]
    )["taskDefinition"]["taskDefinitionArn"]
    return cluster, definition


def register(system: Dynacron, target: dict[str, Any], **fields: Any) -> Task:
    create = {"rate": "1 day", "target": {**target, "track": "completion"}, **fields}
    return system.task_service.register(ALICE, TaskCreate.model_validate(create).to_spec())


def run_due(system: Dynacron, aws: tuple[Any, Any], clock: SettableClock, task: Task) -> Execution:
    assert task.next_run_at is not None
    clock.set(task.next_run_at + timedelta(milliseconds=5))
    assert sum(r.claimed for r in system.ticker.tick()) == 1
    assert run_batch(system, receive(system, aws)) == {"batchItemFailures": []}
    return only_execution(system, task.task_id)


def sent_later(system: Dynacron, aws: tuple[Any, Any]) -> list[dict[str, Any]]:
    """The retry's message: sent with SQS's own delay (up to the backoff's second),
    which moto keeps in real time."""
    deadline = time.monotonic() + 5
    while not (messages := receive(system, aws)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert messages, "the retry was never sent"
    return messages


def step_functions_event(
    machine: str, name: str, status: str, started: datetime, stopped: datetime, **more: Any
) -> dict[str, Any]:
    """``Step Functions Execution Status Change``, as AWS documents it."""
    execution_arn = machine.replace(":stateMachine:", ":execution:") + f":{name}"
    return {
        "version": "0",
        "id": "315c1398-40ff-a850-213b-158f73e60175",
        "detail-type": STEP_FUNCTIONS_EVENT,
        "source": "aws.states",
        "account": "123456789012",
        "time": stopped.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": REGION,
        "resources": [execution_arn],
        "detail": {
            "executionArn": execution_arn,
            "stateMachineArn": machine,
            "name": name,
            "status": status,
            "startDate": int(started.timestamp() * 1000),
            "stopDate": int(stopped.timestamp() * 1000),
            "input": "{}",
            "output": None,
            **more,
        },
    }


def ecs_event(
    task: dict[str, Any], exit_code: int | None, started: datetime, stopped: datetime
) -> dict[str, Any]:
    """``ECS Task State Change`` of a stopped task, as AWS documents it."""
    return {
        "version": "0",
        "id": "9bcdac79-b31f-4d3d-9410-fbd727c29fab",
        "detail-type": ECS_EVENT,
        "source": "aws.ecs",
        "account": "123456789012",
        "time": stopped.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": REGION,
        "resources": [task["taskArn"]],
        "detail": {
            "clusterArn": task["clusterArn"],
            "taskArn": task["taskArn"],
            "taskDefinitionArn": task["taskDefinitionArn"],
            "startedBy": task["startedBy"],
            "lastStatus": "STOPPED",
            "desiredStatus": "STOPPED",
            "stopCode": "EssentialContainerExited",
            "stoppedReason": "Essential container in task exited",
            "containers": [
                {"name": "report", "lastStatus": "STOPPED", "exitCode": exit_code}
                if exit_code is not None
                else {"name": "report", "lastStatus": "STOPPED"}
            ],
            "createdAt": started.strftime("%Y-%m-%dT%H:%M:%S.000Z"),
            "startedAt": started.strftime("%Y-%m-%dT%H:%M:%S.000Z"),
            "stoppedAt": stopped.strftime("%Y-%m-%dT%H:%M:%S.000Z"),
            "version": 4,
        },
    }


def ecs_tasks(cluster: str) -> list[dict[str, Any]]:
    ecs = boto3.client("ecs", region_name=REGION)
    arns = ecs.list_tasks(cluster=cluster)["taskArns"]
    return ecs.describe_tasks(cluster=cluster, tasks=arns)["tasks"] if arns else []


def test_a_tracked_state_machine_keeps_its_execution_running_until_its_event_ends_it(
    system: Dynacron, aws: tuple[Any, Any], clock: SettableClock, roles: Roles
) -> None:
    # Given a tracked Step Functions target whose execution was started by the worker
    machine = state_machine(roles)
    task = register(system, {"arn": machine, "role_arn": roles.role_arn})
    running = run_due(system, aws, clock, task)
    started_at = clock.now()

    # Then the execution is RUNNING under the tracked lease, and the run carries its name
    assert running.status is ExecutionStatus.RUNNING
    assert running.accepted_at is not None
    assert running.lease_until == started_at + CHECK_AFTER
    states = boto3.client("stepfunctions", region_name=REGION)
    (run,) = states.list_executions(stateMachineArn=machine)["executions"]
    assert run["name"] == f"dynacron-{running.execution_id}-1"
    assert running.run_arn == run["executionArn"]

    # When the state machine's SUCCEEDED event arrives three hours later, twice
    clock.set(started_at + THREE_HOURS)
    event = step_functions_event(
        machine, run["name"], "SUCCEEDED", started_at, started_at + THREE_HOURS, output='{"rows":7}'
    )
    first = system.completions(event, None)
    again = system.completions(event, None)

    # Then it SUCCEEDED once, with the run's duration and output; the copy changed nothing
    assert (first, again) == ({"outcome": "SUCCEEDED"}, {"outcome": "STALE"})
    ended = only_execution(system, task.task_id)
    assert ended.status is ExecutionStatus.SUCCEEDED
    assert ended.result is not None
    assert ended.result.excerpt == (
        'the state machine execution SUCCEEDED with output {"rows":7} after 3h0m0s'
    )


def test_a_failed_state_machine_says_its_error_and_cause(
    system: Dynacron, aws: tuple[Any, Any], clock: SettableClock, roles: Roles
) -> None:
    machine = state_machine(roles)
    task = register(system, {"arn": machine, "role_arn": roles.role_arn}, retry={"max_attempts": 1})
    running = run_due(system, aws, clock, task)
    now = clock.now()

    said = system.completions(
        step_functions_event(
            machine,
            f"dynacron-{running.execution_id}-1",
            "FAILED",
            now,
            now + timedelta(minutes=4, seconds=2),
            error="States.TaskFailed",
            cause="the warehouse was locked",
        ),
        None,
    )

    assert said == {"outcome": "DEAD_LETTERED"}
    ended = only_execution(system, task.task_id)
    assert ended.status is ExecutionStatus.FAILED
    assert ended.error is not None
    assert ended.error.startswith(
        "the state machine execution FAILED: States.TaskFailed: the warehouse was locked after 4m2s"
    )


def test_a_three_hour_ecs_task_exiting_1_is_retried_then_dead_lettered(
    system: Dynacron, aws: tuple[Any, Any], clock: SettableClock, roles: Roles
) -> None:
    # Given a tracked ECS target allowed two attempts
    cluster, definition = ecs_cluster()
    target = {
        "arn": cluster,
        "role_arn": roles.role_arn,
        "ecs_parameters": FARGATE | {"task_definition_arn": definition},
    }
    task = register(system, target, retry={"max_attempts": 2, "base_delay_seconds": 1})
    running = run_due(system, aws, clock, task)
    (first_run,) = ecs_tasks(cluster)
    assert first_run["startedBy"] == f"dynacron-{running.execution_id.replace('.', '/')}-1"

    # When its task stops after three hours with exit code 1
    began = clock.now()
    clock.set(began + THREE_HOURS)
    first_end = ecs_event(first_run, 1, began, began + THREE_HOURS)
    assert system.completions(first_end, None) == {"outcome": "RETRY_SCHEDULED"}

    # Then the next attempt starts a task of its own
    retrying = only_execution(system, task.task_id)
    assert retrying.status is ExecutionStatus.QUEUED
    assert retrying.error is not None
    assert "report exit code 1" in retrying.error
    assert "after 3h0m0s" in retrying.error
    assert retrying.next_attempt_at is not None
    clock.set(retrying.next_attempt_at + timedelta(seconds=1))
    assert run_batch(system, sent_later(system, aws)) == {"batchItemFailures": []}
    assert only_execution(system, task.task_id).status is ExecutionStatus.RUNNING
    second_run = next(t for t in ecs_tasks(cluster) if t["taskArn"] != first_run["taskArn"])
    assert second_run["startedBy"] == f"dynacron-{running.execution_id.replace('.', '/')}-2"

    # And a late copy of the first attempt's end changes nothing
    assert system.completions(first_end, None) == {"outcome": "STALE"}
    assert only_execution(system, task.task_id).status is ExecutionStatus.RUNNING

    # When the second also exits 1 three hours on, it is dead-lettered
    began = clock.now()
    clock.set(began + THREE_HOURS)
    second_end = ecs_event(second_run, 1, began, began + THREE_HOURS)
    assert system.completions(second_end, None) == {"outcome": "DEAD_LETTERED"}
    ended = only_execution(system, task.task_id)
    assert ended.status is ExecutionStatus.FAILED
    assert ended.error is not None
    assert "the ECS task stopped (report exit code 1): Essential container in task exited" in (
        ended.error
    )


def test_an_event_of_another_resource_or_no_end_changes_nothing(
    system: Dynacron, aws: tuple[Any, Any], clock: SettableClock, roles: Roles
) -> None:
    machine = state_machine(roles)
    task = register(system, {"arn": machine, "role_arn": roles.role_arn})
    running = run_due(system, aws, clock, task)
    now = clock.now()
    name = f"dynacron-{running.execution_id}-1"
    # Another tenant's state machine, its execution named after this one
    elsewhere = machine.replace(":etl", ":copycat")
    foreign = step_functions_event(elsewhere, name, "FAILED", now, now)
    starting = step_functions_event(machine, name, "RUNNING", now, now)

    assert system.completions(foreign, None) == {"outcome": "STALE"}
    assert system.completions(starting, None) == {"outcome": "NOT_AN_END"}
    assert only_execution(system, task.task_id).status is ExecutionStatus.RUNNING


def test_a_forged_event_for_another_run_of_the_same_state_machine_changes_nothing(
    system: Dynacron, aws: tuple[Any, Any], clock: SettableClock, roles: Roles
) -> None:
    # Given a tracked run on a state machine others may start runs of too
    machine = state_machine(roles)
    task = register(system, {"arn": machine, "role_arn": roles.role_arn})
    running = run_due(system, aws, clock, task)
    now = clock.now()
    name = f"dynacron-{running.execution_id}-1"
    # When an event names this execution and attempt, but another run's ARN
    forged = step_functions_event(machine, name, "SUCCEEDED", now, now)
    forged["detail"]["executionArn"] = machine.replace(":stateMachine:", ":execution:") + ":other"

    # Then it ends nothing: only the run the attempt started may end it
    assert system.completions(forged, None) == {"outcome": "STALE"}
    still = only_execution(system, task.task_id)
    assert still.status is ExecutionStatus.RUNNING
    assert still.run_arn == running.run_arn
    # and the true run's event still does
    true_end = step_functions_event(machine, name, "FAILED", now, now, error="E", cause="c")
    assert system.completions(true_end, None)["outcome"] != "STALE"


def test_a_lost_event_is_recovered_by_the_reaper_describing_the_run(
    system: Dynacron, aws: tuple[Any, Any], clock: SettableClock, roles: Roles
) -> None:
    # Given a tracked state machine run whose events are all lost
    machine = state_machine(roles)
    task = register(system, {"arn": machine, "role_arn": roles.role_arn})
    running = run_due(system, aws, clock, task)
    assert running.lease_until is not None
    skew = system.settings.lease_terms.clock_skew

    # When the tracked lease is overdue and the run still goes on
    clock.set(running.lease_until + skew + timedelta(seconds=1))
    first = system.lease_reaper.reap()

    # Then the reaper described it and extended the lease: no attempt failed
    assert first.outcomes == {"STILL_RUNNING": 1}
    still = only_execution(system, task.task_id)
    assert still.status is ExecutionStatus.RUNNING
    assert still.lease_until == clock.now() + CHECK_AFTER

    # When the run is stopped and the next look comes
    states = boto3.client("stepfunctions", region_name=REGION)
    (run,) = states.list_executions(stateMachineArn=machine)["executions"]
    states.stop_execution(executionArn=run["executionArn"], error="Ops", cause="stopped by hand")
    assert still.lease_until is not None
    clock.set(still.lease_until + skew + timedelta(seconds=1))
    second = system.lease_reaper.reap()

    # Then the execution ends as the run did: ABORTED is a failure, retried
    assert second.outcomes == {"RETRY_SCHEDULED": 1}
    ended = only_execution(system, task.task_id)
    assert ended.status is ExecutionStatus.QUEUED
    assert ended.error is not None
    assert "the state machine execution ABORTED" in ended.error


def test_a_reaper_run_describes_at_most_its_cap_of_tracked_runs_the_rest_next_run(
    system: Dynacron, aws: tuple[Any, Any], clock: SettableClock, roles: Roles
) -> None:
    # Given three tracked runs whose events are all lost, and a reaper allowed two describes
    machine = state_machine(roles)
    tasks = [register(system, {"arn": machine, "role_arn": roles.role_arn}) for _ in range(3)]
    assert tasks[0].next_run_at is not None
    clock.set(tasks[0].next_run_at + timedelta(milliseconds=5))
    assert sum(r.claimed for r in system.ticker.tick()) == 3
    while messages := receive(system, aws):
        assert run_batch(system, messages) == {"batchItemFailures": []}
    running = [only_execution(system, task.task_id) for task in tasks]
    assert {e.status for e in running} == {ExecutionStatus.RUNNING}
    reaper = dataclasses.replace(system.lease_reaper, max_describes_per_run=2)
    overdue = max(e.lease_until for e in running if e.lease_until is not None)
    clock.set(overdue + system.settings.lease_terms.clock_skew + timedelta(seconds=1))

    # When the reaper runs twice
    first, second = reaper.reap(), reaper.reap()

    # Then the first described two and left the third as it was; the second, the third
    assert first.outcomes == {"STILL_RUNNING": 2, "DEFERRED": 1}
    assert second.outcomes == {"STILL_RUNNING": 1}
    after = [only_execution(system, task.task_id) for task in tasks]
    assert {e.status for e in after} == {ExecutionStatus.RUNNING}
    assert all(e.lease_until is not None and e.lease_until > clock.now() for e in after)


def test_looking_at_running_runs_describes_them_as_the_role_the_worker_already_assumed(
    system: Dynacron, aws: tuple[Any, Any], clock: SettableClock, roles: Roles
) -> None:
    # Given a tracked run the worker started, assuming its role once
    machine = state_machine(roles)
    task = register(system, {"arn": machine, "role_arn": roles.role_arn})
    running = run_due(system, aws, clock, task)
    assert len(roles.assumed) == 1
    states = boto3.client("stepfunctions", region_name=REGION)

    # When local mode's watcher looks while it runs (moto's default: RUNNING)
    assert system.completion_tracker.look_at_running() == []
    # Then nothing changed, and the describe used the worker's credentials: one
    # set of roles for both, no second AssumeRole
    assert only_execution(system, task.task_id).lease_until == running.lease_until
    assert len(roles.assumed) == 1

    # When the run is stopped, the next look ends the execution as its event would
    assert running.run_arn is not None
    states.stop_execution(executionArn=running.run_arn, error="Ops", cause="by hand")
    assert system.completion_tracker.look_at_running() == ["RETRY_SCHEDULED"]
    ended = only_execution(system, task.task_id)
    assert ended.status is ExecutionStatus.QUEUED
    assert "the state machine execution ABORTED" in (ended.error or ""), ended.error


def test_a_lost_ecs_event_is_recovered_from_describe_tasks(
    system: Dynacron, aws: tuple[Any, Any], clock: SettableClock, roles: Roles
) -> None:
    cluster, definition = ecs_cluster()
    target = {
        "arn": cluster,
        "role_arn": roles.role_arn,
        "ecs_parameters": FARGATE | {"task_definition_arn": definition},
    }
    task = register(system, target, retry={"max_attempts": 1})
    running = run_due(system, aws, clock, task)
    (run,) = ecs_tasks(cluster)
    boto3.client("ecs", region_name=REGION).stop_task(
        cluster=cluster, task=run["taskArn"], reason="spot capacity reclaimed"
    )
    assert running.lease_until is not None

    clock.set(running.lease_until + system.settings.lease_terms.clock_skew + timedelta(seconds=1))
    report = system.lease_reaper.reap()

    # moto reports a stopped task's containers as having exited 0
    assert report.outcomes == {"SUCCEEDED": 1}
    ended = only_execution(system, task.task_id)
    assert ended.status is ExecutionStatus.SUCCEEDED
    assert ended.result is not None
    assert ended.result.excerpt is not None
    assert "the ECS task stopped (report exit code 0): spot capacity reclaimed" in (
        ended.result.excerpt
    )


def test_tracking_a_target_whose_run_ends_with_the_call_is_a_422(
    system: Dynacron, roles: Roles
) -> None:
    status, problem = call(
        system,
        "POST",
        "/tasks",
        {
            "rate": "1 minute",
            "target": {
                "arn": f"arn:aws:sqs:{REGION}:123456789012:jobs",
                "role_arn": roles.role_arn,
                "track": "completion",
            },
        },
    )

    assert status == 422, problem
    assert "target.track" in json.dumps(problem)
    assert "Step Functions and ECS targets only" in json.dumps(problem)
