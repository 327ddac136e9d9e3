"""Per-shard tick cursors and heartbeats in the coordination table (the ``CursorStore`` port)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from dynacron.adapters.aws.errors import translating
from dynacron.adapters.aws.expressions import apply_to_record
from dynacron.adapters.aws.items import (
    from_item,
    instant_or_none,
    to_item,
)
from dynacron.definitions.resources import (
    CURSOR_KEY_PREFIX,
)
from dynacron.domain.conditions import Transition
from dynacron.domain.coordination import transitions
from dynacron.domain.coordination.uptime import ShardHistory
from dynacron.domain.instants import parse_instant
from dynacron.ports import (
    ShardCursor,
)

if TYPE_CHECKING:
    from types_boto3_dynamodb.client import DynamoDBClient


class DynamoCursorStore:
    """Per-shard tick cursors: the oldest due-index bucket that may still hold work,
    and the shard's heartbeat (``last_tick_at``, ``ticking_since``, ``outages``)."""

    def __init__(self, client: DynamoDBClient, table_name: str) -> None:
        self._client = translating(client)
        self._table = table_name

    @staticmethod
    def _key(shard: int) -> dict[str, Any]:
        return {"key": f"{CURSOR_KEY_PREFIX}{shard}"}

    def get(self, shard: int) -> datetime | None:
        return self.read(shard).bucket

    def read(self, shard: int, heartbeat: timedelta = timedelta(0)) -> ShardCursor:
        """The shard's cursor and tick history, in one strongly consistent read."""
        response = self._client.get_item(
            TableName=self._table, Key=to_item(self._key(shard)), ConsistentRead=True
        )
        values = from_item(response.get("Item") or {})
        bucket = values.get("bucket")
        return ShardCursor(
            bucket=parse_instant(bucket) if bucket else None,
            history=ShardHistory(
                ticking_since=instant_or_none(values.get("ticking_since")),
                last_tick=instant_or_none(values.get("last_tick_at")),
                outages=tuple(transitions.outage_from_text(o) for o in values.get("outages", [])),
                heartbeat=heartbeat,
            ),
        )

    def apply(self, shard: int, transition: Transition) -> bool:
        """One conditional write of ``transition`` on the shard's cursor record."""
        return apply_to_record(self._client, self._table, self._key(shard), transition)
