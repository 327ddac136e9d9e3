"""DynamoDB's item format and the few things every DynamoDB adapter does with it:
encode and decode items, a conditional write that says whether it lost, pages
of one partition with tokens bound to their listing.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.exceptions import ClientError

from dynacron.definitions.resources import (
    IndexDefinition,
)
from dynacron.domain.errors import InvalidRequest
from dynacron.domain.instants import format_instant, parse_instant
from dynacron.ports import (
    Page,
)

if TYPE_CHECKING:
    from types_boto3_dynamodb.client import DynamoDBClient
    from types_boto3_dynamodb.type_defs import QueryOutputTypeDef

T = TypeVar("T")


serializer = TypeSerializer()


deserializer = TypeDeserializer()


BATCH_GET_LIMIT = 100


def batch_get(
    client: DynamoDBClient,
    table: str,
    keys: list[dict[str, Any]],
    id_attribute: str,
    consistent: bool,
) -> dict[str, dict[str, Any]]:
    """The items of ``keys`` that exist, by their ``id_attribute``, in BatchGetItem
    calls of at most ``BATCH_GET_LIMIT`` keys (keys DynamoDB leaves unprocessed are
    asked for again)."""
    items: dict[str, dict[str, Any]] = {}
    for start in range(0, len(keys), BATCH_GET_LIMIT):
        chunk = keys[start : start + BATCH_GET_LIMIT]
        request: dict[str, Any] = {table: {"Keys": chunk, "ConsistentRead": consistent}}
        while request:
            response = client.batch_get_item(RequestItems=request)
            for item in response["Responses"].get(table, []):
                items[str(item.get(id_attribute, {}).get("S", ""))] = item
            request = response.get("UnprocessedKeys") or {}
    return items


def to_item(values: dict[str, Any]) -> dict[str, Any]:
    return {k: serializer.serialize(_without_nones(v)) for k, v in values.items() if v is not None}


def _without_nones(value: Any) -> Any:
    # DynamoDB stores an absent attribute better than a NULL one, nested maps too.
    if isinstance(value, dict):
        return {k: _without_nones(v) for k, v in value.items() if v is not None}
    return value


def from_item(item: dict[str, Any]) -> dict[str, Any]:
    return {k: deserializer.deserialize(v) for k, v in item.items()}


def is_condition_failure(error: ClientError) -> bool:
    return bool(error.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException")


def cancelled_by(error: ClientError) -> list[str]:
    """The failing condition of each item of a cancelled transaction ('' where none)."""
    if error.response.get("Error", {}).get("Code") != "TransactionCanceledException":
        raise error
    reasons = error.response.get("CancellationReasons", [])
    return ["" if r.get("Code") in (None, "None") else str(r["Code"]) for r in reasons]


def is_transaction_refusal(error: ClientError) -> bool:
    return bool(error.response.get("Error", {}).get("Code") == "TransactionCanceledException")


def conditional_write(write: Callable[..., object], table: str, **request: Any) -> bool:
    """Run one conditional write; False if its condition failed, other errors raise."""
    try:
        write(TableName=table, **request)
    except ClientError as error:
        if is_condition_failure(error):
            return False
        raise
    return True


def encode_page_token(last_key: dict[str, Any] | None, listing: str) -> str | None:
    if not last_key:
        return None
    return base64.urlsafe_b64encode(
        json.dumps({"listing": listing, "key": last_key}).encode()
    ).decode()


def decode_page_token(token: str | None, listing: str) -> dict[str, Any] | None:
    """The start key in ``token``, which must come from ``listing``: another listing's
    key (GET /tasks's, given to a task's executions) is not a key of this one."""
    if not token:
        return None
    try:
        page = json.loads(base64.urlsafe_b64decode(token.encode()))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        page = None
    key = page.get("key") if isinstance(page, dict) else None
    if not isinstance(key, dict) or page.get("listing") != listing:
        raise InvalidRequest("next_token", "is not a token this API returned")
    return key


@dataclass(frozen=True)
class PartitionQuery:
    """The items of one partition (``key_name`` = ``key_value``) of a table or index."""

    table: str
    key_name: str
    key_value: str
    index: IndexDefinition | None = None
    newest_first: bool = False
    # Only the items whose index sort key begins with this (``begins_with``).
    sort_prefix: str | None = None


@dataclass(frozen=True)
class QueryFilter:
    """A FilterExpression and the placeholders it names (``#...``, ``:...``, plain values)."""

    expression: str
    names: dict[str, str]
    values: dict[str, Any]


def query_page(
    client: DynamoDBClient,
    query: PartitionQuery,
    limit: int,
    token: str | None,
    parse: Callable[[dict[str, Any]], T],
) -> Page[T]:
    """One page of ``query``, resumed from a caller's ``token``.

    A token is only accepted for the partition it came from (a tenant's token is
    no use in another's), and one DynamoDB rejects is the caller's mistake (4xx).
    """
    kwargs = _query_request(query, token)
    kwargs["Limit"] = limit
    response = _query(client, kwargs, from_token=token is not None)
    return Page(
        items=[parse(i) for i in response.get("Items", [])],
        next_token=encode_page_token(response.get("LastEvaluatedKey"), _listing(query)),
    )


def filtered_query_page(
    client: DynamoDBClient,
    query: PartitionQuery,
    limit: int,
    token: str | None,
    parse: Callable[[dict[str, Any]], T],
    *,
    where: QueryFilter,
    key_names: tuple[str, ...],
    max_queries: int,
    evaluated_per_query: int,
) -> Page[T]:
    """Up to ``limit`` items of ``query`` that ``where`` keeps, in at most
    ``max_queries`` Query calls of at most ``evaluated_per_query`` items each.

    DynamoDB applies a filter after it reads (``Limit`` counts what it read), so a
    sparse match could take any number of calls: after ``max_queries`` the page
    ends, perhaps short or empty, with a token where reading stopped. A page that
    fills up mid-call ends at its last item, whose ``key_names`` (the index's keys
    and the table's) make the token. Tokens are those of ``query_page``.
    """
    kwargs = _query_request(query, token)
    kwargs["FilterExpression"] = where.expression
    kwargs["ExpressionAttributeNames"] |= where.names
    kwargs["ExpressionAttributeValues"] |= to_item(where.values)
    found: list[dict[str, Any]] = []
    last_key: dict[str, Any] | None = None
    for call in range(max_queries):
        # DynamoDB bills what a call reads, matched or not, and the next page reads
        # again from after the last item returned: each call reads what the page
        # still lacks, twice as much as the call before, up to evaluated_per_query.
        kwargs["Limit"] = min(evaluated_per_query, max(1, limit - len(found)) << call)
        response = _query(client, kwargs, from_token=call == 0 and token is not None)
        items = response.get("Items", [])
        last_key = response.get("LastEvaluatedKey")
        for position, item in enumerate(items):
            found.append(item)
            if len(found) == limit:
                read_past = position < len(items) - 1 or last_key is not None
                last_key = {name: item[name] for name in key_names} if read_past else None
                return Page([parse(i) for i in found], encode_page_token(last_key, _listing(query)))
        if last_key is None:
            break
        kwargs["ExclusiveStartKey"] = last_key
    return Page([parse(i) for i in found], encode_page_token(last_key, _listing(query)))


def _listing(query: PartitionQuery) -> str:
    listing = f"{query.table}/{query.index.name if query.index else ''}"
    if query.sort_prefix is None:
        return listing
    # A prefix's token resumes that prefix's listing only (named by a digest: a
    # prefix may be long, and the token must stay within what the API accepts).
    digest = hashlib.sha256(query.sort_prefix.encode()).hexdigest()[:16]
    return f"{listing}/{digest}"


def _query_request(query: PartitionQuery, token: str | None) -> dict[str, Any]:
    """The Query of ``query``'s partition, from where ``token`` (checked) left off."""
    kwargs: dict[str, Any] = {
        "TableName": query.table,
        "KeyConditionExpression": "#key = :key",
        "ExpressionAttributeNames": {"#key": query.key_name},
        "ExpressionAttributeValues": to_item({":key": query.key_value}),
        "ScanIndexForward": not query.newest_first,
    }
    if query.index is not None:
        kwargs["IndexName"] = query.index.name
    if query.sort_prefix is not None:
        if query.index is None:
            raise ValueError("a sort key prefix is only queried on an index")
        kwargs["KeyConditionExpression"] += " AND begins_with(#sort, :prefix)"
        kwargs["ExpressionAttributeNames"]["#sort"] = query.index.sort_key.name
        kwargs["ExpressionAttributeValues"][":prefix"] = {"S": query.sort_prefix}
    start_key = decode_page_token(token, _listing(query))
    if start_key:
        if start_key.get(query.key_name) != {"S": query.key_value}:
            raise InvalidRequest("next_token", "is not a token this API returned")
        kwargs["ExclusiveStartKey"] = start_key
    return kwargs


def _query(
    client: DynamoDBClient, kwargs: dict[str, Any], *, from_token: bool
) -> QueryOutputTypeDef:
    try:
        response = client.query(**kwargs)
    except ClientError as error:
        # A start key DynamoDB rejects came in the caller's token (4xx).
        resumed = from_token and "ExclusiveStartKey" in kwargs
        if resumed and error.response.get("Error", {}).get("Code") == "ValidationException":
            raise InvalidRequest("next_token", "is not a token this API returned") from None
        raise
    return response


def instant_or_none(value: str | None) -> datetime | None:
    return parse_instant(value) if value is not None else None


def optional_instant(value: datetime | None) -> str | None:
    return format_instant(value) if value is not None else None
