"""A user's own stack (``DynacronScheduler`` with their code): a task naming one of
their Python handlers is accepted by the deployed API and run by the worker."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from dynacron.definitions.environment import EXECUTION_RETENTION_DAYS_VAR
from dynacron.definitions.resources import EXECUTIONS
from dynacron.entry.settings import HANDLER_MODULES_VAR
from tests.deployed.harness import Deployment
from tests.infra.conftest import USER_HANDLER
from tests.integration.api_client import ALICE


def test_a_python_handler_task_is_registered_and_run(user_deployed: Deployment) -> None:
    api, worker = user_deployed.function("api"), user_deployed.function("worker")

    # When a task naming the user's handler is registered through the API
    status, task = user_deployed.api(
        "POST",
        "/tasks",
        {"rate": "1 minute", "handler": USER_HANDLER, "payload": {"n": 1}},
        principal=ALICE,
    )
    assert status == 201, task

    # And its occurrence comes due
    user_deployed.clock.set(datetime.fromisoformat(task["next_run_at"]))
    user_deployed.run_due(task["task_id"])

    # Then the user's function ran in the worker with its payload, and it succeeded
    user_function = worker.app.handlers.get(USER_HANDLER)
    assert user_function is not None
    calls = user_function.__globals__["CALLS"]
    assert [payload for _, payload in calls] == [{"n": 1}]
    status, page = user_deployed.api("GET", f"/tasks/{task['task_id']}/executions", principal=ALICE)
    assert [e["status"] for e in page["items"]] == ["SUCCEEDED"]
    # The template names the same handler modules for the API as for the worker
    assert api.environment[HANDLER_MODULES_VAR] == worker.environment[HANDLER_MODULES_VAR]


def test_the_stack_s_history_retention_sets_each_execution_s_expiry(
    user_deployed: Deployment,
) -> None:
    # Given the user's stack keeps history a week (execution_retention_days=7)
    worker = user_deployed.function("worker")
    assert worker.environment[EXECUTION_RETENTION_DAYS_VAR] == "7"
    status, task = user_deployed.api(
        "POST",
        "/tasks",
        {"rate": "1 minute", "handler": USER_HANDLER, "payload": {"n": 2}},
        principal=ALICE,
    )
    assert status == 201, task
    # When an occurrence runs and ends
    user_deployed.clock.set(datetime.fromisoformat(task["next_run_at"]))
    user_deployed.run_due(task["task_id"])
    status, page = user_deployed.api("GET", f"/tasks/{task['task_id']}/executions", principal=ALICE)
    (execution,) = page["items"]
    assert execution["status"] == "SUCCEEDED"
    # Then its record expires (DynamoDB's TTL) a week after it stopped mattering (its
    # end's follow-up lease, seconds after the end), not 90 days
    table = worker.environment[EXECUTIONS.env_var]
    item = worker.dynamodb.get_item(
        TableName=table,
        Key={
            "task_id": {"S": task["task_id"]},
            "execution_id": {"S": execution["execution_id"]},
        },
        ConsistentRead=True,
    )["Item"]
    ended = datetime.fromisoformat(execution["completed_at"])
    expires = datetime.fromtimestamp(int(item[EXECUTIONS.ttl_attribute]["N"]), UTC)
    assert timedelta(days=7) <= expires - ended <= timedelta(days=7, minutes=1), expires - ended
