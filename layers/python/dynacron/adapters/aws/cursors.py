"""Per-shard tick cursors and heartbeats in the coordination table (the ``CursorStore`` port)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from botocore.exceptions import ClientError

from dynacron.adapters.aws.errors import translating
from dynacron.adapters.aws.items import (
    from_item,
    instant_or_none,
    is_condition_failure,
    to_item,
)
from dynacron.definitions.resources import (
    CURSOR_KEY_PREFIX,
)
from dynacron.domain.coordination.uptime import Outage, ShardHistory
from dynacron.domain.instants import format_instant, parse_instant
from dynacron.ports import (
    ShardCursor,
)


def _outage_to_text(outage: Outage) -> str:
    return f"{format_instant(outage.last_tick)}/{format_instant(outage.next_tick)}"


def _outage_from_text(text: str) -> Outage:
    last_tick, _, next_tick = text.partition("/")
    return Outage(last_tick=parse_instant(last_tick), next_tick=parse_instant(next_tick))


class DynamoCursorStore:
    """Per-shard tick cursors: the oldest due-index bucket that may still hold work,
    and the shard's heartbeat (``last_tick_at``, ``ticking_since``, ``outages``)."""

    def __init__(self, client: Any, table_name: str) -> None:
        self._client = translating(client)
        self._table = table_name

    @staticmethod
    def _key(shard: int) -> dict[str, Any]:
        return to_item({"key": f"{CURSOR_KEY_PREFIX}{shard}"})

    def get(self, shard: int) -> datetime | None:
        return self.read(shard).bucket

    def read(self, shard: int, heartbeat: timedelta = timedelta(0)) -> ShardCursor:
        """The shard's cursor and tick history, in one strongly consistent read."""
        response = self._client.get_item(
            TableName=self._table, Key=self._key(shard), ConsistentRead=True
        )
        values = from_item(response.get("Item") or {})
        bucket = values.get("bucket")
        return ShardCursor(
            bucket=parse_instant(bucket) if bucket else None,
            history=ShardHistory(
                ticking_since=instant_or_none(values.get("ticking_since")),
                last_tick=instant_or_none(values.get("last_tick_at")),
                outages=tuple(_outage_from_text(o) for o in values.get("outages", [])),
                heartbeat=heartbeat,
            ),
        )

    def record_tick(self, shard: int, history: ShardHistory, seen: ShardHistory) -> bool:
        """Store ``history`` (``seen`` recorded after one more tick), if the stored one
        is still ``seen``: of two ticks of one shard, one records an outage, once."""
        assert history.last_tick is not None
        assert history.ticking_since is not None
        values: dict[str, Any] = {
            ":last": format_instant(history.last_tick),
            ":since": format_instant(history.ticking_since),
            ":outages": [_outage_to_text(o) for o in history.outages],
        }
        if seen.last_tick is None:
            condition = "attribute_not_exists(#last)"
        else:
            condition = "#last = :seen"
            values[":seen"] = format_instant(seen.last_tick)
        try:
            self._client.update_item(
                TableName=self._table,
                Key=self._key(shard),
                UpdateExpression="SET #last = :last, #since = :since, #outages = :outages",
                ConditionExpression=condition,
                ExpressionAttributeNames={
                    "#last": "last_tick_at",
                    "#since": "ticking_since",
                    "#outages": "outages",
                },
                ExpressionAttributeValues=to_item(values),
            )
        except ClientError as error:
            if is_condition_failure(error):
                return False
            raise
        return True

    def advance(self, shard: int, bucket: datetime) -> bool:
        """Move the cursor forward to ``bucket``; never backwards."""
        try:
            self._client.update_item(
                TableName=self._table,
                Key=self._key(shard),
                UpdateExpression="SET #bucket = :bucket",
                ConditionExpression="attribute_not_exists(#bucket) OR #bucket < :bucket",
                ExpressionAttributeNames={"#bucket": "bucket"},
                ExpressionAttributeValues=to_item({":bucket": format_instant(bucket)}),
            )
        except ClientError as error:
            if is_condition_failure(error):
                return False
            raise
        return True
