"""Idempotency keys of task creations in the coordination table (the ``CreateKeys`` port)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING, Any

from dynacron.adapters.aws.errors import translating
from dynacron.adapters.aws.expressions import apply_to_record
from dynacron.adapters.aws.items import from_item, to_item
from dynacron.definitions.resources import CREATE_KEY_PREFIX
from dynacron.domain.coordination import transitions
from dynacron.domain.coordination.create_keys import CreateKey, KeyReservation

if TYPE_CHECKING:
    from types_boto3_dynamodb.client import DynamoDBClient


def create_key_key(tenant_id: str, key: str) -> dict[str, Any]:
    """The record's key: the tenant and the key, unambiguous whatever either holds."""
    return to_item({"key": CREATE_KEY_PREFIX + json.dumps([tenant_id, key])})


class DynamoCreateKeys:
    """One record per tenant and key; DynamoDB's TTL removes it after ``KEY_LIFETIME``
    (until then an expired one counts as absent)."""

    def __init__(self, client: DynamoDBClient, coordination_table: str) -> None:
        self._client = translating(client)
        self._table = coordination_table

    def reserve(
        self, tenant_id: str, key: CreateKey, task_id: str, now: datetime
    ) -> KeyReservation:
        reserved = apply_to_record(
            self._client,
            self._table,
            from_item(create_key_key(tenant_id, key.key)),
            transitions.reserve_create_key(key, task_id, now),
        )
        if reserved:
            return KeyReservation(task_id, key.fingerprint, created=False)
        held = from_item(
            self._client.get_item(
                TableName=self._table,
                Key=create_key_key(tenant_id, key.key),
                ConsistentRead=True,
            ).get("Item")
            or {}
        )
        return KeyReservation(held["task_id"], held["fingerprint"], bool(held.get("created")))

    def mark_created(self, tenant_id: str, key: str, task_id: str) -> None:
        # Only the reservation of this task: one that expired and was taken since
        # names another.
        apply_to_record(
            self._client,
            self._table,
            from_item(create_key_key(tenant_id, key)),
            transitions.mark_key_created(task_id),
        )
