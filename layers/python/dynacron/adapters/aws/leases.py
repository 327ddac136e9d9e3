"""Per-shard tick leases in the coordination table (the ``ShardLeases`` port on DynamoDB;
the client is injected).

A lease says which tick invocation works a shard, and until when. Every change
is one conditional write of a ``domain.coordination.transitions`` transition
(acquire, request a handover, renew, hand over, release) that the tick loop
builds and ``apply`` carries out. A handover is one write, so a shard is never
worked by two invocations at once and never left without one while its successor is waiting.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from dynacron.adapters.aws.errors import translating
from dynacron.adapters.aws.expressions import apply_to_record
from dynacron.adapters.aws.items import from_item, to_item
from dynacron.definitions.resources import COORDINATION
from dynacron.domain.conditions import Transition
from dynacron.domain.coordination import transitions
from dynacron.domain.instants import parse_instant
from dynacron.ports import ShardLease

if TYPE_CHECKING:
    from types_boto3_dynamodb.client import DynamoDBClient

# A lease record outlives its last holder by this long, then DynamoDB's TTL removes it.
RECORD_RETENTION = timedelta(days=1)
if COORDINATION.ttl_attribute is None:
    raise RuntimeError("lease records expire through the coordination table's TTL attribute")
EXPIRES_AT: str = COORDINATION.ttl_attribute


class DynamoShardLeases:
    def __init__(self, client: DynamoDBClient, table_name: str) -> None:
        self._client = translating(client)
        self._table = table_name

    @staticmethod
    def _key(shard: int) -> dict[str, Any]:
        return {COORDINATION.partition_key.name: f"tick-lease#{shard}"}

    def get(self, shard: int) -> ShardLease | None:
        response = self._client.get_item(
            TableName=self._table, Key=to_item(self._key(shard)), ConsistentRead=True
        )
        if "Item" not in response:
            return None
        values = from_item(response["Item"])
        return ShardLease(
            owner=values["owner"],
            lease_until=parse_instant(values["lease_until"]),
            successor=values.get("successor"),
        )

    def apply(self, shard: int, transition: Transition) -> bool:
        """One conditional write; a lease held until ``lease_until`` is kept a day longer."""
        until = transition.sets.get(transitions.LEASE_UNTIL)
        expiry = {EXPIRES_AT: record_expiry(parse_instant(until))} if until else None
        return apply_to_record(
            self._client, self._table, self._key(shard), transition, also_sets=expiry
        )


def record_expiry(until: datetime) -> int:
    return int((until + RECORD_RETENTION).timestamp())
