"""Your own key (decision 0059): the user's stack encrypts its tables and queues with
a customer-managed key (moto's, in the operator's key's place); a task is created
and fired with the template's roles, each call judged for what it asks of KMS too."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import boto3

from dynacron.local.aws import REGION
from tests.deployed.conftest import Assembly
from tests.deployed.harness import (
    KMS_DECRYPT,
    KMS_GENERATE_DATA_KEY,
    USER_STACK,
    Deployment,
    Mutation,
    create_stack,
)
from tests.infra.conftest import USER_HANDLER
from tests.integration.api_client import ALICE


def _key_of(deployment: Deployment) -> str:
    (table, *_) = [
        r["Properties"]
        for r in deployment.template["Resources"].values()
        if r["Type"] == "AWS::DynamoDB::Table"
    ]
    return str(table["SSESpecification"]["KMSMasterKeyId"])


def test_a_task_is_created_and_fired_with_the_key_s_grants(user_deployed: Deployment) -> None:
    # Given the user's stack, encrypted with a key that moto's KMS holds
    key = _key_of(user_deployed)
    assert boto3.client("kms", region_name=REGION).describe_key(KeyId=key)["KeyMetadata"]["Enabled"]
    # When a task is created and its occurrence fires
    status, task = user_deployed.api(
        "POST", "/tasks", {"rate": "1 minute", "handler": USER_HANDLER}, principal=ALICE
    )
    assert status == 201, task
    user_deployed.clock.set(datetime.fromisoformat(task["next_run_at"]))
    user_deployed.run_due(task["task_id"])

    # Then it ran, and every function on the way used the key as its role allows
    status, page = user_deployed.api("GET", f"/tasks/{task['task_id']}/executions", principal=ALICE)
    assert [e["status"] for e in page["items"]] == ["SUCCEEDED"]
    asked = {
        name: {c.action for c in user_deployed.function(name).calls.calls if c.resource == key}
        for name in ("api", "tick", "worker")
    }
    assert KMS_DECRYPT in asked["api"]
    # The tick (or its claim function) sent the occurrence: a fresh data key
    sent = asked["tick"] | {
        c.action for c in user_deployed.function("claim").calls.calls if c.resource == key
    }
    assert KMS_GENERATE_DATA_KEY in sent
    assert KMS_DECRYPT in asked["worker"]


def _key_statement(template: dict[str, Any], role_of: str, action: str) -> tuple[str, int]:
    for logical_id, found in template["Resources"].items():
        if found["Type"] != "AWS::IAM::Policy" or role_of not in logical_id:
            continue
        for index, statement in enumerate(found["Properties"]["PolicyDocument"]["Statement"]):
            actions = statement["Action"]
            if action in ([actions] if isinstance(actions, str) else actions):
                return logical_id, index
    raise AssertionError(f"{role_of} has no {action}")


def test_without_the_key_s_decrypt_the_api_is_refused_as_on_aws(
    emulator: None, assembly: Assembly, user_deployed: Deployment
) -> None:
    # Given the user's stack with kms:Decrypt removed from the API's role
    template = assembly.template(USER_STACK)
    policy, statement = _key_statement(template, "ApiFunctionRole", KMS_DECRYPT)
    mutation = Mutation(f"{USER_STACK}-keyless", policy, statement, KMS_DECRYPT)
    crippled = create_stack(
        mutation.stack, template, user_deployed.clock, assembly.directory, mutation
    )

    # When a task is registered
    status, problem = crippled.api(
        "POST", "/tasks", {"rate": "1 minute", "handler": USER_HANDLER}, principal=ALICE
    )

    # Then the API fails, refused the key on its first table call
    assert status == 500, problem
    api = crippled.function("api")
    refused = {(c.action, c.resource) for c in api.calls.calls if api.role.denial(c)}
    assert refused == {(KMS_DECRYPT, _key_of(crippled))}
