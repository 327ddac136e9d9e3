"""Your own key (decision 0059): with ``kms_key_arn`` in context (the user's stack),
every table, queue and log group names the key and every function's role may use
it as its other grants call for; without it (the default stack), nothing names a
key. Both stacks pass cdk-nag: the session's synthesis fails on any finding."""

from __future__ import annotations

from typing import Any

import pytest

from dynacron.definitions.resources import QUEUES, TABLES
from tests.infra.conftest import USER_KMS_KEY_ARN, resources_of

DECRYPT, GENERATE = "kms:Decrypt", "kms:GenerateDataKey"


def _actions(statement: dict[str, Any]) -> list[str]:
    actions = statement["Action"]
    return [actions] if isinstance(actions, str) else list(actions)


def _grants_by_role(template: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    grants: dict[str, list[dict[str, Any]]] = {}
    for policy in resources_of(template, "AWS::IAM::Policy").values():
        for role in policy["Roles"]:
            grants.setdefault(role["Ref"], []).extend(policy["PolicyDocument"]["Statement"])
    return grants


def _function_roles(template: dict[str, Any]) -> set[str]:
    return {
        function["Role"]["Fn::GetAtt"][0]
        for function in resources_of(template, "AWS::Lambda::Function").values()
    }


def test_every_table_queue_and_log_group_is_encrypted_with_the_operator_s_key(
    user_template: dict[str, Any],
) -> None:
    tables = resources_of(user_template, "AWS::DynamoDB::Table")
    queues = resources_of(user_template, "AWS::SQS::Queue")
    log_groups = resources_of(user_template, "AWS::Logs::LogGroup")
    assert len(tables) == len(TABLES)
    assert len(queues) == len(QUEUES)
    for table in tables.values():
        assert table["SSESpecification"] == {
            "SSEEnabled": True,
            "SSEType": "KMS",
            "KMSMasterKeyId": USER_KMS_KEY_ARN,
        }
    for queue in queues.values():
        assert queue["KmsMasterKeyId"] == USER_KMS_KEY_ARN
        assert "SqsManagedSseEnabled" not in queue
    # Each function's logs and the API's access logs.
    assert len(log_groups) == len(resources_of(user_template, "AWS::Lambda::Function")) + 1
    for log_group in log_groups.values():
        assert log_group["KmsKeyId"] == USER_KMS_KEY_ARN
    # Imported by ARN: the stack makes no key and changes no key policy.
    assert resources_of(user_template, "AWS::KMS::Key") == {}


def test_each_function_may_use_the_key_as_its_own_grants_need_and_no_more(
    user_template: dict[str, Any],
) -> None:
    grants = _grants_by_role(user_template)
    roles = _function_roles(user_template)
    for role in roles:
        statements = grants[role]
        others = [a for s in statements for a in _actions(s) if not a.startswith("kms:")]
        key_grants = [s for s in statements if any(a.startswith("kms:") for a in _actions(s))]
        # Only the key itself, by its ARN.
        assert all(s["Resource"] == USER_KMS_KEY_ARN for s in key_grants), key_grants
        key_actions = sorted(a for s in key_grants for a in _actions(s))
        expected = [DECRYPT] if any(a.startswith(("dynamodb:", "sqs:")) for a in others) else []
        if "sqs:SendMessage" in others:
            expected.append(GENERATE)
        assert key_actions == expected, (role, key_actions)
        assert expected, f"{role} touches no table or queue?"


@pytest.mark.parametrize(
    "kind", ["AWS::DynamoDB::Table", "AWS::SQS::Queue", "AWS::Logs::LogGroup", "AWS::IAM::Policy"]
)
def test_without_the_option_no_resource_names_a_key(template: dict[str, Any], kind: str) -> None:
    for logical_id, properties in resources_of(template, kind).items():
        text = str(properties)
        assert "kms" not in text.lower(), logical_id
    for queue in resources_of(template, "AWS::SQS::Queue").values():
        assert queue["SqsManagedSseEnabled"] is True
