"""Idempotency keys of task creations in the coordination table (the ``CreateKeys`` port)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from dynacron.adapters.aws.errors import translating
from dynacron.adapters.aws.expressions import apply_to_record
from dynacron.adapters.aws.items import from_item, to_item
from dynacron.definitions.resources import CREATE_KEY_PREFIX
from dynacron.domain.conditions import Transition
from dynacron.domain.coordination.create_keys import KeyReservation

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

    def apply(self, tenant_id: str, key: str, transition: Transition) -> bool:
        """One conditional write of ``transition`` on the key's record."""
        return apply_to_record(
            self._client, self._table, from_item(create_key_key(tenant_id, key)), transition
        )

    def apply_returning(
        self, tenant_id: str, key: str, transition: Transition
    ) -> KeyReservation | None:
        """``apply``; refused, the reservation that holds the key (one consistent read)."""
        if self.apply(tenant_id, key, transition):
            return None
        held = from_item(
            self._client.get_item(
                TableName=self._table, Key=create_key_key(tenant_id, key), ConsistentRead=True
            ).get("Item")
            or {}
        )
        return KeyReservation(held["task_id"], held["fingerprint"], bool(held.get("created")))

    def apply_each(self, tenant_id: str, changes: Sequence[tuple[str, Transition]]) -> list[bool]:
        """``apply`` of each, one conditional write after another (each its own)."""
        return [self.apply(tenant_id, key, transition) for key, transition in changes]

    def apply_returning_each(
        self, tenant_id: str, changes: Sequence[tuple[str, Transition]]
    ) -> list[KeyReservation | None]:
        """``apply_returning`` of each, one after another."""
        return [self.apply_returning(tenant_id, key, transition) for key, transition in changes]
