"""Each tenant's calendars in the coordination table (the ``CalendarStore`` port):
one record per tenant, read and written by the API only."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dynacron.adapters.aws.errors import translating
from dynacron.adapters.aws.expressions import apply_to_record
from dynacron.adapters.aws.items import from_item, to_item
from dynacron.definitions.resources import CALENDARS_KEY_PREFIX
from dynacron.domain.conditions import Transition

if TYPE_CHECKING:
    from types_boto3_dynamodb.client import DynamoDBClient


def calendars_key(tenant_id: str) -> dict[str, Any]:
    return {"key": f"{CALENDARS_KEY_PREFIX}{tenant_id}"}


class DynamoCalendarStore:
    """The record ``calendars#<tenant>``: the calendars as JSON text and a version."""

    def __init__(self, client: DynamoDBClient, coordination_table: str) -> None:
        self._client = translating(client)
        self._table = coordination_table

    def read(self, tenant_id: str) -> dict[str, Any] | None:
        """The tenant's record (one consistent read); None if it has none."""
        item = self._client.get_item(
            TableName=self._table, Key=to_item(calendars_key(tenant_id)), ConsistentRead=True
        ).get("Item")
        return from_item(item) if item else None

    def apply(self, tenant_id: str, transition: Transition) -> bool:
        """One conditional write of ``transition`` on the tenant's record."""
        return apply_to_record(self._client, self._table, calendars_key(tenant_id), transition)
