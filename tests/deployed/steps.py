"""What a scenario does through the deployed API, as one tenant: register a task,
read it and its executions; and what the handler's sink received for a task."""

from __future__ import annotations

from typing import Any

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
