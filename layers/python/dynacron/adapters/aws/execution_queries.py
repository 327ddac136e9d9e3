"""Executions read back in lists from DynamoDB: a lease shard's expired leases (the
lease index a reaper sweeps), a tenant's dead letters (the dead-letter index), a
tenant's executions across its tasks (the attention index) and a task's history
(its partition of the table)."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from dynacron.adapters.aws.execution_items import execution_from_item
from dynacron.adapters.aws.items import (
    PartitionQuery,
    batch_get,
    decode_page_token,
    encode_page_token,
    from_item,
    query_page,
    to_item,
)
from dynacron.definitions.resources import (
    ATTENTION_INDEX,
    DEAD_LETTER_INDEX,
    EXECUTIONS,
    LEASE_INDEX,
)
from dynacron.domain.errors import InvalidRequest
from dynacron.domain.executions.attention import AttentionQuery
from dynacron.domain.executions.execution import Execution
from dynacron.domain.executions.record import ATTENTION_AT, ATTENTION_TENANT, dead_letter_partition
from dynacron.domain.instants import format_instant
from dynacron.ports import Page

if TYPE_CHECKING:
    from types_boto3_dynamodb.client import DynamoDBClient

# Index queries (each with one BatchGetItem) a page of executions across tasks may
# take to fill: entries whose item moved on, or of another status, are skipped.
ATTENTION_ROUNDS = 4
_TOKEN_REFUSED = "is not a token this API returned"


def expired_lease_ids(
    client: DynamoDBClient, table: str, shard: int, cutoff: datetime, limit: int
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
    client: DynamoDBClient, table: str, tenant_id: str, limit: int, token: str | None
) -> Page[Execution]:
    """A tenant's dead-lettered executions, most recent first (its own index partition)."""
    partition = dead_letter_partition(tenant_id)
    query = PartitionQuery(
        table, DEAD_LETTER_INDEX.partition_key.name, partition, DEAD_LETTER_INDEX, True
    )
    return query_page(client, query, limit, token, execution_from_item)


def task_history_page(
    client: DynamoDBClient, table: str, task_id: str, limit: int, token: str | None
) -> Page[Execution]:
    """A task's executions, newest scheduled time first."""
    query = PartitionQuery(table, "task_id", task_id, newest_first=True)
    return query_page(client, query, limit, token, execution_from_item)


def attention_page(
    client: DynamoDBClient,
    table: str,
    tenant_id: str,
    query: AttentionQuery,
    limit: int,
    token: str | None,
) -> Page[Execution]:
    """The tenant's listed executions that ``query`` admits, newest first by when they
    were listed: its own partition of the attention index, re-read with
    BatchGetItem. The index is read ``limit`` keys at a time at most, so the next
    page resumes right after the last key read, whatever was skipped."""
    listing = f"{table}/{ATTENTION_INDEX.name}/{query.fingerprint}"
    start_key = _attention_start_key(decode_page_token(token, listing), tenant_id)
    condition, values = "#tenant = :tenant", {":tenant": tenant_id}
    names = {"#tenant": ATTENTION_TENANT}
    since, until = query.bounds
    if since is not None and until is not None:
        condition += " AND #at BETWEEN :since AND :until"
        values |= {":since": since, ":until": until}
    elif since is not None:
        condition += " AND #at >= :since"
        values[":since"] = since
    elif until is not None:
        condition += " AND #at <= :until"
        values[":until"] = until
    if since is not None or until is not None:
        names["#at"] = ATTENTION_AT  # DynamoDB refuses a name the query does not use
    executions: list[Execution] = []
    for _ in range(ATTENTION_ROUNDS):
        request: dict[str, Any] = {
            "TableName": table,
            "IndexName": ATTENTION_INDEX.name,
            "KeyConditionExpression": condition,
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": to_item(values),
            "ScanIndexForward": False,
            "Limit": limit - len(executions),
        }
        if start_key:
            request["ExclusiveStartKey"] = start_key
        try:
            response = client.query(**request)
        except ClientError as error:
            if start_key and error.response.get("Error", {}).get("Code") == "ValidationException":
                raise InvalidRequest("next_token", _TOKEN_REFUSED) from None
            raise
        entries = response.get("Items", [])
        keys = [_table_key(entry) for entry in entries]
        items = batch_get(client, table, keys, "execution_id", consistent=False)
        for entry in entries:
            item = items.get(entry["execution_id"]["S"])
            # The index lags: an entry whose item has moved on to another listing
            # instant is the old place of an execution listed at its new one.
            current = item is not None and item.get(ATTENTION_AT) == entry.get(ATTENTION_AT)
            execution = execution_from_item(item) if item and current else None
            if execution is not None and query.admits(tenant_id, execution):
                executions.append(execution)
        start_key = response.get("LastEvaluatedKey")
        if not start_key or len(executions) >= limit:
            break
    return Page(executions, encode_page_token(start_key, listing))


_ATTENTION_KEY_NAMES = frozenset(
    {EXECUTIONS.partition_key.name, "execution_id", ATTENTION_TENANT, ATTENTION_AT}
)


def _attention_start_key(key: dict[str, Any] | None, tenant_id: str) -> dict[str, Any] | None:
    """A token's start key, if it is one this listing of this tenant returned: a key of
    another tenant's partition, or of another shape, is refused, never queried."""
    if key is None:
        return None
    well_formed = set(key) == _ATTENTION_KEY_NAMES and all(
        isinstance(value, dict) and set(value) == {"S"} and isinstance(value["S"], str)
        for value in key.values()
    )
    if not well_formed or key[ATTENTION_TENANT] != {"S": tenant_id}:
        raise InvalidRequest("next_token", _TOKEN_REFUSED)
    return key


def _table_key(item: dict[str, Any]) -> dict[str, Any]:
    return {name: item[name] for name in (EXECUTIONS.partition_key.name, "execution_id")}
