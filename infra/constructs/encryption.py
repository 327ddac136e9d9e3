"""Your own key (decision 0059): a customer-managed KMS key, imported by its ARN,
and the grants each function needs to use the tables and queues it encrypts."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from aws_cdk import Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from infra.config import SchedulerConfig

# What a caller of a table or queue encrypted with the key asks KMS for (AWS's
# guides for DynamoDB and SQS): DynamoDB decrypts the table key for any read or
# write; SQS decrypts a data key to read a message and generates one to send.
DECRYPT = "kms:Decrypt"
GENERATE_DATA_KEY = "kms:GenerateDataKey"
KEY_USERS = ("dynamodb:", "sqs:")
SENDS = ("sqs:SendMessage",)


def customer_key(scope: Construct, config: SchedulerConfig) -> kms.IKey | None:
    """The operator's key by ARN (no lookup: synthesis needs no account), or None."""
    if config.kms_key_arn is None:
        return None
    return kms.Key.from_key_arn(scope, "CustomerKey", config.kms_key_arn)


def grant_key_use(key: kms.IKey, functions: Iterable[lambda_.Function]) -> None:
    """Give each function's role the key's actions its own grants call for, once all
    its other grants are in place: ``kms:Decrypt`` for a role that touches any table or
    queue, ``kms:GenerateDataKey`` too where it sends to a queue. A grant already on
    the role (an SQS event source's ``kms:Decrypt``) is not added twice."""
    for function in functions:
        role = function.role
        assert role is not None, function.node.path
        granted = _actions(role)
        needed: set[str] = set()
        if any(action.startswith(KEY_USERS) for action in granted):
            needed.add(DECRYPT)
        if any(action in SENDS for action in granted):
            needed.add(GENERATE_DATA_KEY)
        missing = sorted(needed - granted)
        if missing:
            role.add_to_principal_policy(
                iam.PolicyStatement(actions=missing, resources=[key.key_arn])
            )


def _actions(role: iam.IRole) -> set[str]:
    """Every action the role's default policy grants, as synthesis will write it."""
    policy = role.node.try_find_child("DefaultPolicy")
    if not isinstance(policy, iam.Policy):
        return set()
    document: Any = Stack.of(role).resolve(policy.document.to_json())
    actions: set[str] = set()
    for statement in (document or {}).get("Statement", []):
        listed = statement.get("Action", [])
        actions.update([listed] if isinstance(listed, str) else listed)
    return actions
