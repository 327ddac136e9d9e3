"""A tenant's task ids, a page at a time (``GET /tasks``): from the tenant index
in order of creation, or from the name index in order of name."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dynacron.adapters.aws.items import PartitionQuery, QueryFilter, filtered_query_page, query_page
from dynacron.definitions.resources import (
    NAME_INDEX,
    NAME_KEYS_BACKFILLED_KEY,
    TAGS_ATTRIBUTE,
    TENANT_INDEX,
)
from dynacron.domain.tasks.listing import name_key, normalised_name
from dynacron.domain.tasks.tags import TagFilter
from dynacron.ports import Page

if TYPE_CHECKING:
    from types_boto3_dynamodb.client import DynamoDBClient

# A filtered listing page's work: at most this many Query calls, each reading at
# most this many index entries (the index's keys and at most 2 KB of tags), so one
# page reads at most 10,000 entries, the default quota of tasks per tenant.
FILTERED_QUERIES = 10
EVALUATED_PER_QUERY = 1000


def tenant_task_ids(
    client: DynamoDBClient,
    table: str,
    tenant_id: str,
    limit: int,
    token: str | None,
    tags: tuple[TagFilter, ...],
    *,
    max_queries: int = FILTERED_QUERIES,
    evaluated_per_query: int = EVALUATED_PER_QUERY,
    newest_first: bool = False,
) -> Page[str]:
    """One page of ``tenant_id``'s task ids, oldest first (or newest); with ``tags``,
    filtered by DynamoDB on the index in at most ``max_queries`` Query calls (a page
    may then hold fewer than ``limit``, even none, and still have a next token)."""
    partition = PartitionQuery(
        table, TENANT_INDEX.partition_key.name, tenant_id, TENANT_INDEX, newest_first
    )
    if not tags:
        return query_page(client, partition, limit, token, _task_id_of)
    return filtered_query_page(
        client,
        partition,
        limit,
        token,
        _task_id_of,
        where=_tags_filter(tags),
        key_names=(TENANT_INDEX.partition_key.name, TENANT_INDEX.sort_key.name, "task_id"),
        max_queries=max_queries,
        evaluated_per_query=evaluated_per_query,
    )


def tenant_task_ids_by_name(
    client: DynamoDBClient,
    table: str,
    tenant_id: str,
    limit: int,
    token: str | None,
    name_prefix: str | None,
    *,
    descending: bool = False,
) -> Page[str]:
    """One page of ``tenant_id``'s task ids in order of name (case-insensitive), only
    those whose name starts with ``name_prefix`` if given: one Query of the name
    index (keys only), ``limit`` entries, half a read unit per 4 KB of them."""
    partition = PartitionQuery(
        table,
        NAME_INDEX.partition_key.name,
        tenant_id,
        NAME_INDEX,
        newest_first=descending,
        sort_prefix=None if name_prefix is None else normalised_name(name_prefix),
    )
    return query_page(client, partition, limit, token, _task_id_of)


def _task_id_of(key: dict[str, Any]) -> str:
    return str(key["task_id"]["S"])


def _tags_filter(tags: tuple[TagFilter, ...]) -> QueryFilter:
    """``tags`` as a FilterExpression on the tenant index's ``tags`` map: every key
    and value is a placeholder, so no tag text is ever read as expression syntax."""
    names = {"#tags": TAGS_ATTRIBUTE}
    values: dict[str, Any] = {}
    terms = []
    for number, tag in enumerate(tags):
        names[f"#tag{number}"] = tag.key
        path = f"#tags.#tag{number}"
        if tag.value is None:
            terms.append(f"attribute_exists({path})")
        else:
            values[f":tag{number}"] = tag.value
            terms.append(f"{path} = :tag{number}")
    return QueryFilter(" AND ".join(terms), names, values)


@dataclass(frozen=True)
class BackfillPage:
    """What one Scan page of the name-key backfill did."""

    scanned: int  # items the Scan read (all of them, with or without the key)
    given: int  # name keys written
    changed_meanwhile: int  # lacked the key when read, rewritten by a create or PATCH since
    resume_after: str | None  # the task id to start after to go on; None: the table is done


def backfill_name_keys(client: DynamoDBClient, table: str, *, page_size: int = 500) -> int:
    """Give every task item written before the name index its name key, so that the
    index lists it; returns how many were given one. Run once after the deploy that
    adds the index (decision 0045; ``dynacron admin backfill-name-keys``)."""
    return sum(page.given for page in backfill_name_key_pages(client, table, page_size=page_size))


def backfill_name_key_pages(
    client: DynamoDBClient,
    table: str,
    *,
    page_size: int = 500,
    start_after: str | None = None,
    before_write: Callable[[], None] = lambda: None,
) -> Iterator[BackfillPage]:
    """The backfill a Scan page at a time, from the start of the table or after the
    task ``start_after`` (a page's ``resume_after``): one conditional update per item
    that lacks the key, each after ``before_write`` returns (a pace). The condition
    names the key's absence and the name it was computed from, so an item that has a
    key (a second run), was created or renamed in between, or was deleted, is left
    alone.
    """
    names = {"#key": NAME_INDEX.sort_key.name, "#name": "name"}
    start: dict[str, Any] | None = None if start_after is None else {"task_id": {"S": start_after}}
    while True:
        scan: dict[str, Any] = {
            "TableName": table,
            "FilterExpression": "attribute_not_exists(#key)",
            "ProjectionExpression": "task_id, #name",
            "ExpressionAttributeNames": names,
            "Limit": page_size,
        }
        if start is not None:
            scan["ExclusiveStartKey"] = start
        response = client.scan(**scan)
        given = changed = 0
        for item in response.get("Items", []):
            task_id = _task_id_of(item)
            name = item.get("name", {}).get("S")
            # attribute_exists(task_id): an update never makes an item, so a task
            # deleted since the Scan stays deleted (a nameless one matched the rest).
            condition = "attribute_exists(task_id) AND attribute_not_exists(#key) AND " + (
                "#name = :name" if name is not None else "attribute_not_exists(#name)"
            )
            values: dict[str, Any] = {":key": {"S": name_key(name or task_id, task_id)}}
            if name is not None:
                values[":name"] = {"S": name}
            before_write()
            try:
                client.update_item(
                    TableName=table,
                    Key={"task_id": {"S": task_id}},
                    UpdateExpression="SET #key = :key",
                    ConditionExpression=condition,
                    ExpressionAttributeNames=names,
                    ExpressionAttributeValues=values,
                )
            except client.exceptions.ConditionalCheckFailedException:
                changed += 1  # its writer gave it its key
                continue
            given += 1
        start = response.get("LastEvaluatedKey")
        yield BackfillPage(
            scanned=response.get("ScannedCount", 0),
            given=given,
            changed_meanwhile=changed,
            resume_after=None if start is None else _task_id_of(start),
        )
        if start is None:
            return


def name_keys_backfilled(client: DynamoDBClient, coordination_table: str) -> str | None:
    """When a backfill last went over the whole tasks table (ISO 8601), if one has."""
    item = client.get_item(
        TableName=coordination_table,
        Key={"key": {"S": NAME_KEYS_BACKFILLED_KEY}},
        ConsistentRead=True,
    ).get("Item")
    return None if item is None else str(item["finished_at"]["S"])


def record_name_keys_backfilled(client: DynamoDBClient, coordination_table: str, at: str) -> None:
    """Note that a backfill went over the whole tasks table, finishing ``at``: every
    writer since gives a task its key, so none is left without one."""
    client.put_item(
        TableName=coordination_table,
        Item={"key": {"S": NAME_KEYS_BACKFILLED_KEY}, "finished_at": {"S": at}},
    )
