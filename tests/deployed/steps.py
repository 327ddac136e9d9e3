"""What a scenario does through the deployed API, as one tenant: register a task,
read it and its executions; and what the handler's sink received for a task."""

from __future__ import annotations

from typing import Any

import boto3

from dynacron.local.aws import REGION
from tests.deployed.harness import Deployment
from tests.support import Delivery, Sink


def register(deployed: Deployment, principal: str, **body: Any) -> dict[str, Any]:
    status, task = deployed.api("POST", "/tasks", body, principal=principal)
    assert status == 201, task
    return dict(task)


def task_view(deployed: Deployment, principal: str, task_id: str) -> dict[str, Any]:
    status, task = deployed.api("GET", f"/tasks/{task_id}", principal=principal)
    assert status == 200, task
    return dict(task)


def executions(deployed: Deployment, principal: str, task_id: str) -> list[dict[str, Any]]:
    status, page = deployed.api("GET", f"/tasks/{task_id}/executions", principal=principal)
    assert status == 200, page
    return list(page["items"])


def deliveries_of(sink: Sink, task_id: str) -> list[Delivery]:
    return [d for d in sink.snapshot() if d.body.get("task_id") == task_id]


def delete_tasks(deployed: Deployment, principal: str) -> None:
    """Delete every task of ``principal``, page after page (a scenario's clean-up,
    so that its tasks do not keep calling a sink that has stopped)."""
    while items := deployed.api("GET", "/tasks?limit=100", principal=principal)[1]["items"]:
        for task in items:
            status, body = deployed.api("DELETE", f"/tasks/{task['task_id']}", principal=principal)
            assert status == 204, body


def count_under(deployed: Deployment, task_id: str, stale: str) -> str:
    """Make the task counted under the census key ``stale`` (one an earlier version
    computed, or a backfill wrote); the key it was counted under."""
    dynamodb = boto3.client("dynamodb", region_name=REGION)
    key = {"task_id": {"S": task_id}}
    tasks = deployed.settings.tasks_table
    counted = str(dynamodb.get_item(TableName=tasks, Key=key)["Item"]["census"]["S"])
    dynamodb.update_item(
        TableName=tasks,
        Key=key,
        UpdateExpression="SET census = :stale",
        ExpressionAttributeValues={":stale": {"S": stale}},
    )
    return counted


def counted_as(deployed: Deployment, task_id: str) -> str:
    """The census key the task is counted under."""
    dynamodb = boto3.client("dynamodb", region_name=REGION)
    item = dynamodb.get_item(
        TableName=deployed.settings.tasks_table, Key={"task_id": {"S": task_id}}
    )["Item"]
    return str(item["census"]["S"])


def census_entries(deployed: Deployment, census_key: str) -> list[dict[str, Any]]:
    """The census entries stored under ``census_key``."""
    dynamodb = boto3.client("dynamodb", region_name=REGION)
    return list(
        dynamodb.scan(
            TableName=deployed.settings.executions_table,
            FilterExpression="execution_id = :key",
            ExpressionAttributeValues={":key": {"S": census_key}},
        )["Items"]
    )
