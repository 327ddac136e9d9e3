"""Shared limit state in the coordination table (DynamoDB adapter; the client is injected).

Every worker reads and writes the same few items, each change one conditional write:

(``<host>`` is a host as one tenant sees it, ``<tenant>/<host>``: decision 0020)

- ``host#<host>``: the host's breaker and Retry-After pause, guarded by ``version``;
- ``rate#<host>``: the host's token bucket, one number (GCRA's ``tat``), moved on
  only while it stays within the bucket: no read on the way to a token;
- ``slot#<scope>#<i>``: slot ``i`` of a concurrency limit, a lease held by one
  execution until it releases it or ``lease_until`` passes (a dead worker's slot
  frees itself, as a dead worker's execution lease does); its holder extends it
  if it runs short before the handler call.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from dynacron.adapters.aws.errors import translating
from dynacron.adapters.aws.expressions import apply_to_record
from dynacron.adapters.aws.items import batch_get, conditional_write, from_item, to_item
from dynacron.adapters.aws.leases import EXPIRES_AT, record_expiry
from dynacron.definitions.resources import (
    COORDINATION,
    HOST_KEY_PREFIX,
    RATE_KEY_PREFIX,
    SLOT_KEY_PREFIX,
)
from dynacron.domain.conditions import Transition
from dynacron.domain.coordination import transitions
from dynacron.domain.coordination.limits import HostState, RateLimit, take_token
from dynacron.domain.instants import parse_instant

if TYPE_CHECKING:
    from types_boto3_dynamodb.client import DynamoDBClient

# Racing writers can make both GCRA writes miss; after this many rounds, wait.
RATE_ROUNDS = 3
KEY = COORDINATION.partition_key.name


class DynamoLimitStore:
    def __init__(
        self, client: DynamoDBClient, table_name: str, rng: random.Random | None = None
    ) -> None:
        self._client = translating(client)
        self._table = table_name
        self._rng = rng or random.Random()

    # Breaker and pause -----------------------------------------------------------

    def host(self, host: str) -> HostState:
        response = self._client.get_item(
            TableName=self._table, Key=_key(f"{HOST_KEY_PREFIX}{host}"), ConsistentRead=True
        )
        item = response.get("Item")
        return transitions.host_from_record(host, from_item(item) if item else None)

    def hosts(self, hosts: Sequence[str]) -> list[HostState]:
        """One consistent BatchGetItem (the same read units as a GetItem each, one
        round trip and a third of their CPU for a wave of ten)."""
        if len(hosts) <= 1:
            return [self.host(host) for host in hosts]
        keys = [_key(f"{HOST_KEY_PREFIX}{host}") for host in dict.fromkeys(hosts)]
        items = batch_get(self._client, self._table, keys, KEY, consistent=True)
        return [
            transitions.host_from_record(host, from_item(item) if item else None)
            for host in hosts
            for item in [items.get(f"{HOST_KEY_PREFIX}{host}")]
        ]

    def apply_host(self, host: str, transition: Transition, now: datetime) -> bool:
        """One conditional write of the host's breaker state."""
        # Kept while a pause or an open breaker still matters, then a day more.
        kept = [now] + [
            parse_instant(transition.sets[name])
            for name in ("paused_until", "breaker_until")
            if transition.sets.get(name)
        ]
        return self._apply(f"{HOST_KEY_PREFIX}{host}", transition, record_expiry(max(kept)))

    # Token bucket ------------------------------------------------------------------

    def take_token(self, host: str, limit: RateLimit, now: datetime) -> float:
        """Take one token of ``host``'s bucket; returns 0, or the seconds to wait."""
        at = now.timestamp()
        key = _key(f"{RATE_KEY_PREFIX}{host}")
        for _ in range(RATE_ROUNDS):
            # An empty or idle bucket (tat in the past) starts again from now...
            if self._move_tat(
                key,
                "SET #tat = :next, #expires = :expires",
                "attribute_not_exists(#tat) OR #tat < :now",
                {":next": _number(at + limit.interval), ":now": _number(at)},
                now,
            ):
                return 0.0
            # ...a busy one moves on by one token while it stays within the burst.
            if self._move_tat(
                key,
                "SET #tat = #tat + :interval, #expires = :expires",
                "#tat >= :now AND #tat <= :latest",
                {
                    ":interval": _number(limit.interval),
                    ":now": _number(at),
                    ":latest": _number(at + limit.tolerance),
                },
                now,
            ):
                return 0.0
            decision = take_token(limit, self._tat(key), at)
            if not decision.allowed:
                return decision.wait_seconds
        return limit.interval

    def _move_tat(
        self,
        key: dict[str, Any],
        update: str,
        condition: str,
        values: dict[str, Any],
        now: datetime,
    ) -> bool:
        return self._conditional(
            self._client.update_item,
            Key=key,
            UpdateExpression=update,
            ConditionExpression=condition,
            ExpressionAttributeNames={"#tat": "tat", "#expires": EXPIRES_AT},
            ExpressionAttributeValues=to_item({**values, ":expires": record_expiry(now)}),
        )

    def _tat(self, key: dict[str, Any]) -> float | None:
        item = self._client.get_item(TableName=self._table, Key=key, ConsistentRead=True)
        tat = from_item(item["Item"]).get("tat") if "Item" in item else None
        return float(tat) if tat is not None else None

    # Concurrency slots ---------------------------------------------------------------

    def slots(self, scope: str, limit: int) -> list[str]:
        """The slots' keys a taker tries, from a random one so that waiters spread out."""
        first = self._rng.randrange(limit)
        return [SLOT_KEY_PREFIX + s for s in transitions.slots_to_try(scope, limit, first)]

    def apply_slot(self, slot: str, transition: Transition) -> bool:
        """One conditional write on the slot; one held until ``lease_until`` is kept a
        day longer."""
        until = transition.sets.get(transitions.LEASE_UNTIL)
        return self._apply(slot, transition, record_expiry(parse_instant(until)) if until else None)

    def _apply(self, key: str, transition: Transition, expires_at: int | None = None) -> bool:
        """One conditional write of ``transition`` on the record at ``key``."""
        expiry = {EXPIRES_AT: expires_at} if expires_at is not None else None
        return apply_to_record(self._client, self._table, {KEY: key}, transition, also_sets=expiry)

    def _conditional(self, write: Callable[..., object], **request: Any) -> bool:
        return conditional_write(write, self._table, **request)


def _key(value: str) -> dict[str, Any]:
    return to_item({KEY: value})


def _number(value: float) -> Decimal:
    return Decimal(f"{value:.6f}")
