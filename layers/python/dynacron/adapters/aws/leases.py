"""Per-shard tick leases in the coordination table (the ``ShardLeases`` port on DynamoDB;
the client is injected).

A lease says which tick invocation works a shard, and until when. Every change
is one conditional write naming the state it expects:

- ``acquire``: the lease is free, has expired, or is already ours;
- ``request_handover``: someone else holds it; ask them to pass it on;
- ``renew``: we hold it and nobody is waiting for it;
- ``hand_over``: we hold it and someone is waiting: make them the holder;
- ``release``: we hold it (or were waiting for it) and stop.

A handover is one write, so a shard is never worked by two invocations at once
and never left without one while its successor is waiting.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from dynacron.adapters.aws.errors import translating
from dynacron.adapters.aws.items import conditional_write, from_item, to_item
from dynacron.definitions.resources import COORDINATION
from dynacron.domain.instants import format_instant, parse_instant
from dynacron.ports import ShardLease

# A lease record outlives its last holder by this long, then DynamoDB's TTL removes it.
RECORD_RETENTION = timedelta(days=1)
if COORDINATION.ttl_attribute is None:
    raise RuntimeError("lease records expire through the coordination table's TTL attribute")
EXPIRES_AT: str = COORDINATION.ttl_attribute


class DynamoShardLeases:
    def __init__(self, client: Any, table_name: str) -> None:
        self._client = translating(client)
        self._table = table_name

    @staticmethod
    def _key(shard: int) -> dict[str, Any]:
        return to_item({COORDINATION.partition_key.name: f"tick-lease#{shard}"})

    def get(self, shard: int) -> ShardLease | None:
        response = self._client.get_item(
            TableName=self._table, Key=self._key(shard), ConsistentRead=True
        )
        if "Item" not in response:
            return None
        values = from_item(response["Item"])
        return ShardLease(
            owner=values["owner"],
            lease_until=parse_instant(values["lease_until"]),
            successor=values.get("successor"),
        )

    def acquire(self, shard: int, owner: str, now: datetime, until: datetime) -> bool:
        """Take the shard's lease if it is free, expired or already ours."""
        item = {
            **self._key(shard),
            **to_item(
                {
                    "owner": owner,
                    "lease_until": format_instant(until),
                    EXPIRES_AT: record_expiry(until),
                }
            ),
        }
        return self._conditional(
            self._client.put_item,
            Item=item,
            ConditionExpression=("attribute_not_exists(#key) OR #until <= :now OR #owner = :owner"),
            ExpressionAttributeNames={
                "#key": COORDINATION.partition_key.name,
                "#until": "lease_until",
                "#owner": "owner",
            },
            ExpressionAttributeValues=to_item({":now": format_instant(now), ":owner": owner}),
        )

    def request_handover(self, shard: int, owner: str) -> bool:
        """Ask the current holder to pass the lease to ``owner`` at its next renewal."""
        return self._update(
            shard,
            "SET #successor = :owner",
            "attribute_exists(#owner) AND #owner <> :owner",
            {":owner": owner},
        )

    def renew(self, shard: int, owner: str, until: datetime) -> bool:
        """Extend our lease; False if it is no longer ours or a successor is waiting."""
        return self._update(
            shard,
            "SET #until = :until, #expires = :expires",
            "#owner = :owner AND attribute_not_exists(#successor)",
            {":owner": owner, ":until": format_instant(until), ":expires": record_expiry(until)},
        )

    def hand_over(self, shard: int, owner: str, until: datetime) -> bool:
        """Make the waiting successor the holder, until ``until``; False if we hold nothing."""
        return self._update(
            shard,
            "SET #owner = #successor, #until = :until, #expires = :expires REMOVE #successor",
            "#owner = :owner AND attribute_exists(#successor)",
            {":owner": owner, ":until": format_instant(until), ":expires": record_expiry(until)},
        )

    def release(self, shard: int, owner: str) -> bool:
        """Give the lease up, or withdraw our request for it; True if we held it."""
        released = self._conditional(
            self._client.delete_item,
            ConditionExpression="#owner = :owner",
            ExpressionAttributeNames={"#owner": "owner"},
            ExpressionAttributeValues=to_item({":owner": owner}),
            Key=self._key(shard),
        )
        if not released:
            self._update(shard, "REMOVE #successor", "#successor = :owner", {":owner": owner})
        return released

    def _update(self, shard: int, update: str, condition: str, values: dict[str, Any]) -> bool:
        names = {
            "#owner": "owner",
            "#successor": "successor",
            "#until": "lease_until",
            "#expires": EXPIRES_AT,
        }
        used = {name: attr for name, attr in names.items() if name in update + condition}
        return self._conditional(
            self._client.update_item,
            Key=self._key(shard),
            UpdateExpression=update,
            ConditionExpression=condition,
            ExpressionAttributeNames=used,
            ExpressionAttributeValues=to_item(values),
        )

    def _conditional(self, write: Any, **request: Any) -> bool:
        return conditional_write(write, self._table, **request)


def record_expiry(until: datetime) -> int:
    return int((until + RECORD_RETENTION).timestamp())
