"""The harness itself: each function's calls are judged against its own role, by the
ARN they really touch, and a missing grant fails as AWS would fail it."""

from __future__ import annotations

import json
import threading
from typing import Any

import httpx
import pytest
from botocore.exceptions import ClientError

from dynacron.definitions.resources import COORDINATION, DUE_INDEX, TENANT_KEY_PREFIX
from tests.deployed.conftest import Assembly
from tests.deployed.harness import ACCESS_DENIED, DEFAULT_STACK, Deployment, Mutation, create_stack
from tests.integration.api_client import ALICE

HOOK = "http://127.0.0.1:9/"  # never called: these tasks are not run


def grant_statement(
    stack: str, template: dict[str, Any], role_of: str, action: str, resource: str
) -> Mutation:
    """The mutation removing ``action`` from the statement of ``role_of``'s policy
    that grants it on the resource whose logical id starts with ``resource``."""
    for logical_id, found in template["Resources"].items():
        if found["Type"] != "AWS::IAM::Policy" or not logical_id.startswith(role_of):
            continue
        for index, statement in enumerate(found["Properties"]["PolicyDocument"]["Statement"]):
            actions = statement["Action"]
            resources = json.dumps(statement["Resource"])
            if action in ([actions] if isinstance(actions, str) else actions) and (
                f'"{resource}' in resources and "/index/" not in resources
            ):
                return Mutation(stack, logical_id, index, action)
    raise AssertionError(f"{role_of} has no {action} on {resource}")


def test_a_dependency_fails_with_access_denied_without_the_api_s_update_on_tasks(
    emulator: None, assembly: Assembly, deployed: Deployment
) -> None:
    # Given the stack with UpdateItem removed from the API role's tasks grant
    template = assembly.template(DEFAULT_STACK)
    mutation = grant_statement(
        "dynacron-crippled",
        template,
        "SchedulerApiFunctionRole",
        "dynamodb:UpdateItem",
        "SchedulerStorageTasks",
    )
    crippled = create_stack(mutation.stack, template, deployed.clock, assembly.directory, mutation)
    status, upstream = crippled.api(
        "POST", "/tasks", {"rate": "1 minute", "handler_url": HOOK}, principal=ALICE
    )
    assert status == 201, upstream

    # When a task is registered after it (the upstream is marked as having dependents)
    body = {"after": upstream["task_id"], "handler_url": HOOK}
    status, problem = crippled.api("POST", "/tasks", body, principal=ALICE)

    # Then the API fails as it would on AWS, having been refused that one call
    assert status == 500, problem
    api = crippled.function("api")
    refused = [c for c in api.calls.calls if api.role.denial(c)]
    assert [(c.action, c.resource.rsplit("/", 1)[0]) for c in refused] == [
        ("dynamodb:UpdateItem", "arn:aws:dynamodb:us-east-1:123456789012:table")
    ]
    # And with the template's own grants the same request succeeds
    status, upstream = deployed.api(
        "POST", "/tasks", {"rate": "1 minute", "handler_url": HOOK}, principal=ALICE
    )
    body = {"after": upstream["task_id"], "handler_url": HOOK}
    assert deployed.api("POST", "/tasks", body, principal=ALICE)[0] == 201


def test_a_query_on_an_index_is_judged_by_the_index_s_arn(deployed: Deployment) -> None:
    # The API may query the tenant index of the tasks table, not its due index
    api = deployed.function("api")
    with pytest.raises(ClientError) as refused:
        api.dynamodb.query(
            TableName=api.app.settings.tasks_table,
            IndexName=DUE_INDEX.name,
            KeyConditionExpression="#k = :v",
            ExpressionAttributeNames={"#k": DUE_INDEX.partition_key.name},
            ExpressionAttributeValues={":v": {"S": "0#0"}},
        )
    assert refused.value.response["Error"]["Code"] == ACCESS_DENIED
    assert f"table/{api.app.settings.tasks_table}/index/{DUE_INDEX.name}" in str(refused.value)


def test_the_worker_may_read_tenant_records_but_not_the_tick_s_leases(
    deployed: Deployment,
) -> None:
    worker = deployed.function("worker")
    table = worker.app.settings.coordination_table
    key = COORDINATION.partition_key.name
    # The condition on the leading key decides: a tenant's record is readable
    worker.dynamodb.get_item(TableName=table, Key={key: {"S": f"{TENANT_KEY_PREFIX}someone"}})
    with pytest.raises(ClientError) as refused:
        worker.dynamodb.get_item(TableName=table, Key={key: {"S": "lease#0"}})
    assert refused.value.response["Error"]["Code"] == ACCESS_DENIED


def test_the_api_served_on_loopback_authorises_each_method_as_the_template_says(
    deployed: Deployment,
) -> None:
    signed = deployed.serve_api(principal=ALICE)
    unsigned = deployed.serve_api(principal=None)
    try:
        for server in (signed, unsigned):
            threading.Thread(target=server.serve_forever, daemon=True).start()
        base = f"http://127.0.0.1:{signed.server_port}"
        assert httpx.get(f"{base}/tasks").status_code == 200
        base = f"http://127.0.0.1:{unsigned.server_port}"
        assert httpx.get(f"{base}/tasks").status_code == 403
    finally:
        for server in (signed, unsigned):
            server.shutdown()
            server.server_close()
