"""Executions read back in lists from DynamoDB: a lease shard's expired leases (the
lease index a reaper sweeps), a tenant's dead letters (the dead-letter index) and a
task's history (its partition of the table)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from dynacron.adapters.aws.execution_items import execution_from_item
from dynacron.adapters.aws.items import PartitionQuery, from_item, query_page, to_item
from dynacron.domain.execution_record import dead_letter_partition
from dynacron.domain.executions import Execution
from dynacron.domain.instants import format_instant
from dynacron.ports import Page
from dynacron.resources import DEAD_LETTER_INDEX, LEASE_INDEX


def expired_lease_ids(
    client: Any, table: str, shard: int, cutoff: datetime, limit: int
) -> list[str]:
    """Ids of executions in one lease shard whose lease ended before ``cutoff``."""
    ids: list[str] = []
    start_key: dict[str, Any] | None = None
    while len(ids) < limit:
        kwargs: dict[str, Any] = {
            "TableName": table,
            "IndexName": LEASE_INDEX.name,
            "KeyConditionExpression": "#shard = :shard AND #until < :cutoff",
            "ExpressionAttributeNames": {
                "#shard": LEASE_INDEX.partition_key.name,
                "#until": LEASE_INDEX.sort_key.name,
            },
            "ExpressionAttributeValues": to_item(
                {":shard": str(shard), ":cutoff": format_instant(cutoff)}
            ),
            "Limit": limit - len(ids),
        }
        if start_key:
            kwargs["ExclusiveStartKey"] = start_key
        response = client.query(**kwargs)
        ids += [from_item(i)["execution_id"] for i in response.get("Items", [])]
        start_key = response.get("LastEvaluatedKey")
        if not start_key:
            break
    return ids


def dead_letter_page(
    client: Any, table: str, tenant_id: str, limit: int, token: str | None
) -> Page[Execution]:
    """A tenant's dead-lettered executions, most recent first (its own index partition)."""
    partition = dead_letter_partition(tenant_id)
    query = PartitionQuery(
        table, DEAD_LETTER_INDEX.partition_key.name, partition, DEAD_LETTER_INDEX, True
    )
    return query_page(client, query, limit, token, execution_from_item)


def task_history_page(
    client: Any, table: str, task_id: str, limit: int, token: str | None
) -> Page[Execution]:
    """A task's executions, newest scheduled time first."""
    query = PartitionQuery(table, "task_id", task_id, newest_first=True)
    return query_page(client, query, limit, token, execution_from_item)
