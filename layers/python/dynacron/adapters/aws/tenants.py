"""Tenants' records in the coordination table (the ``TenantStore`` port)."""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING, Any

from dynacron.adapters.aws.errors import translating
from dynacron.adapters.aws.expressions import apply_to_record
from dynacron.adapters.aws.items import from_item, to_item
from dynacron.definitions.resources import TENANT_KEY_PREFIX
from dynacron.domain.conditions import Transition
from dynacron.domain.coordination.tenants import TenantQuota

if TYPE_CHECKING:
    from types_boto3_dynamodb.client import DynamoDBClient


def tenant_key(tenant_id: str) -> dict[str, Any]:
    """The coordination-table key of a tenant's record (task count, signing secrets)."""
    return to_item({"key": f"{TENANT_KEY_PREFIX}{tenant_id}"})


class DynamoTenantStore:
    """Each tenant's record in the coordination table: its task count and signing secrets.

    Secrets are newest first; during a rotation the previous one stays valid, and
    deliveries carry a signature under each, until the next rotation drops it.
    """

    def __init__(self, client: DynamoDBClient, coordination_table: str) -> None:
        self._client = translating(client)
        self._table = coordination_table

    def _read(self, tenant_id: str) -> dict[str, Any]:
        response = self._client.get_item(
            TableName=self._table, Key=tenant_key(tenant_id), ConsistentRead=True
        )
        return from_item(response.get("Item") or {})

    def signing_secrets(self, tenant_id: str) -> list[str]:
        """Active secrets, newest first; empty for a tenant that never registered a task."""
        return list(self._read(tenant_id).get("signing_secrets", []))

    def task_count(self, tenant_id: str) -> int:
        return int(self._read(tenant_id).get("task_count", 0))

    def quota(self, tenant_id: str) -> TenantQuota:
        """The ``max_tasks``, ``rate_per_second`` and ``private_networks`` an operator
        set on the record."""
        return _quota_of(self._read(tenant_id))

    def private_grants(self) -> dict[str, tuple[str, ...]]:
        """Every tenant's ``private_networks``: one scan of the tenants' records that
        hold one (an operator's command, not a delivery's path)."""
        grants: dict[str, tuple[str, ...]] = {}
        paginator = self._client.get_paginator("scan")
        for page in paginator.paginate(
            TableName=self._table,
            FilterExpression="begins_with(#key, :prefix) AND attribute_exists(private_networks)",
            ExpressionAttributeNames={"#key": "key"},
            ExpressionAttributeValues=to_item({":prefix": TENANT_KEY_PREFIX}),
        ):
            for item in page.get("Items", []):
                record = from_item(item)
                tenant_id = str(record["key"]).removeprefix(TENANT_KEY_PREFIX)
                grants[tenant_id] = _quota_of(record).private_networks
        return grants

    def set_quota(self, tenant_id: str, quota: TenantQuota) -> None:
        """One update of the record: each limit set, or removed where None."""
        values: dict[str, Any] = {
            "max_tasks": quota.max_tasks,
            "rate_per_second": quota.rate_per_second,
            "private_networks": list(quota.private_networks) or None,
        }
        sets = [f"{name} = :{name}" for name, value in values.items() if value is not None]
        removes = [name for name, value in values.items() if value is None]
        expression = " ".join(
            part
            for part in (
                f"SET {', '.join(sets)}" if sets else "",
                f"REMOVE {', '.join(removes)}" if removes else "",
            )
            if part
        )
        request: dict[str, Any] = {
            "TableName": self._table,
            "Key": tenant_key(tenant_id),
            "UpdateExpression": expression,
        }
        if sets:
            request["ExpressionAttributeValues"] = to_item(
                {
                    f":{name}": Decimal(str(value)) if isinstance(value, float) else value
                    for name, value in values.items()
                    if value is not None
                }
            )
        self._client.update_item(**request)

    def ensure_secret(self, tenant_id: str, fresh_secret: str) -> list[str]:
        """The tenant's secrets, storing ``fresh_secret`` as its first if it has none."""
        response = self._client.update_item(
            TableName=self._table,
            Key=tenant_key(tenant_id),
            UpdateExpression="SET signing_secrets = if_not_exists(signing_secrets, :fresh)",
            ExpressionAttributeValues=to_item({":fresh": [fresh_secret]}),
            ReturnValues="ALL_NEW",
        )
        return list(from_item(response["Attributes"])["signing_secrets"])

    def apply(self, tenant_id: str, transition: Transition) -> bool:
        """One conditional write of ``transition`` on the tenant's record."""
        return apply_to_record(
            self._client, self._table, from_item(tenant_key(tenant_id)), transition
        )


def _quota_of(record: dict[str, Any]) -> TenantQuota:
    max_tasks, rate = record.get("max_tasks"), record.get("rate_per_second")
    return TenantQuota(
        max_tasks=None if max_tasks is None else int(max_tasks),
        rate_per_second=None if rate is None else float(rate),
        private_networks=tuple(str(n) for n in record.get("private_networks") or ()),
    )
