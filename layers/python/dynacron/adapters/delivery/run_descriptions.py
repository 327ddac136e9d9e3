"""Describing a tracked run as its task's role (decision 0049): the reaper's rare
look at a run whose end event never arrived."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from dynacron.adapters.delivery.target_calls import execution_arn, failure_of
from dynacron.adapters.delivery.targets import AssumedRoles
from dynacron.domain.executions.completion import RunState, run_end_of_description, run_name
from dynacron.domain.executions.execution import Execution
from dynacron.domain.tasks.targets import TargetService
from dynacron.domain.tasks.task import Task
from dynacron.ports.runs import RunDescriptionFailed


class TargetRunDescriber:
    """DescribeExecution (Step Functions) or ListTasks and DescribeTasks (ECS), as
    the task's role: one or two calls a long-overdue tracked execution."""

    def __init__(self, roles: AssumedRoles) -> None:
        self._roles = roles

    def describe(self, task: Task, execution: Execution) -> RunState:
        target = task.target
        assert target is not None
        assert target.tracked
        ecs = target.service is TargetService.ECS
        name = run_name(execution.execution_id, execution.attempt, ecs=ecs)
        operation = "DescribeTasks" if ecs else "DescribeExecution"
        try:
            client = self._roles.client(target.role_arn, task.tenant_id, target.service.client_name)
            description = (
                self._ecs_task(client, target.arn, name)
                if ecs
                else self._execution(client, target.arn, name)
            )
        except (ClientError, BotoCoreError) as error:
            failure = failure_of(error, operation)
            raise RunDescriptionFailed(failure.error, retryable=failure.retryable) from error
        return run_end_of_description(
            description, ecs=ecs, missing=f"{operation} found no run named {name}"
        )

    @staticmethod
    def _execution(client: Any, state_machine_arn: str, name: str) -> dict[str, Any] | None:
        arn = execution_arn(state_machine_arn, name)
        try:
            answer: dict[str, Any] = client.describe_execution(executionArn=arn)
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") == "ExecutionDoesNotExist":
                return None
            raise
        return answer

    @staticmethod
    def _ecs_task(client: Any, cluster_arn: str, started_by: str) -> dict[str, Any] | None:
        # A stopped task is listed for a while after it stopped (about an hour).
        for desired in ("RUNNING", "STOPPED"):
            arns = client.list_tasks(
                cluster=cluster_arn, startedBy=started_by, desiredStatus=desired
            ).get("taskArns", [])
            if arns:
                tasks = client.describe_tasks(cluster=cluster_arn, tasks=arns[:1]).get("tasks", [])
                if tasks:
                    task: dict[str, Any] = tasks[0]
                    return task
        return None
