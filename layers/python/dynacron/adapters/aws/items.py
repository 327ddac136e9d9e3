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
from dataclasses import dataclass, field
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
    StoreUnavailable,
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


def _listing(query: PartitionQuery) -> str:
    return f"{query.table}/{query.index.name if query.index else ''}"


def short_digest(text: str) -> str:
    """64 bits of a SHA-256 of ``text``, in hex: what names a tenant or a prefix
    where its own text would be too long (a token, an index key)."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


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
        if "IndexName" in kwargs and _index_not_ready(error):
            raise IndexNotReady(f"index {kwargs['IndexName']} is not ready") from error
        # A start key DynamoDB rejects came in the caller's token (4xx).
        resumed = from_token and "ExclusiveStartKey" in kwargs
        if resumed and error.response.get("Error", {}).get("Code") == "ValidationException":
            raise InvalidRequest("next_token", "is not a token this API returned") from None
        raise
    return response


class IndexNotReady(StoreUnavailable):
    """An index the code queries is missing or still being built: a stack between
    the deploys of an upgrade (docs/deploy.md, "Upgrading"). Transient: a 503 with
    ``Retry-After``, not a 500."""


def _index_not_ready(error: ClientError) -> bool:
    """DynamoDB's words for a missing index ("The table does not have the specified
    index", moto: "Invalid index") and for one still filling ("Cannot read from
    backfilling global secondary index")."""
    found = error.response.get("Error", {})
    if found.get("Code") not in ("ValidationException", "ResourceNotFoundException"):
        return False
    message = str(found.get("Message", "")).lower()
    return any(
        words in message
        for words in ("does not have the specified index", "invalid index", "backfilling")
    )


def instant_or_none(value: str | None) -> datetime | None:
    return parse_instant(value) if value is not None else None


def optional_instant(value: datetime | None) -> str | None:
    return format_instant(value) if value is not None else None


# Merged pages of a write-sharded index (decision 0053) -------------------------


@dataclass
class PartCursor:
    """Where one part (partition) of a merged listing stands.

    ``start`` is the Query's ``ExclusiveStartKey`` for the part's unread entries
    (None: its beginning, or as ``request``'s key condition says); ``bound`` the
    sort key its next entry has at least (at most, newest first), None if unknown.
    """

    number: int
    request: dict[str, Any]
    start: dict[str, Any] | None = None
    bound: str | None = None
    read_to_end: bool = False
    # Which entries read count (the rest are dropped as the filter's would be).
    keep: Callable[[dict[str, Any]], bool] | None = None
    # Entries read and kept but not yet on the page, in the part's order.
    buffered: list[dict[str, Any]] = field(default_factory=list)
    calls: int = 0
    # The key of the part's last entry on this page, once it has one.
    emitted: dict[str, Any] | None = None
    resumed_from: dict[str, Any] | None = field(init=False)

    def __post_init__(self) -> None:
        self.resumed_from = self.start

    @property
    def finished(self) -> bool:
        return self.read_to_end and not self.buffered

    def position(self) -> dict[str, Any] | None:
        """Where the next page resumes this part: after every entry read and kept
        that is on a page, and after every entry read and dropped (the filter's)."""
        if self.buffered:
            return self.emitted if self.emitted is not None else self.resumed_from
        return self.start


@dataclass(frozen=True)
class MergeOrder:
    """A merged listing's order: the index's sort key, smallest first or not;
    entries with the same sort key are ordered by task id."""

    sort_key: str
    key_names: tuple[str, ...]
    descending: bool = False

    def precedes(self, a: tuple[str, str], b: tuple[str, str]) -> bool:
        return a > b if self.descending else a < b


def merged_page(
    client: DynamoDBClient,
    parts: list[PartCursor],
    order: MergeOrder,
    limit: int,
    *,
    from_token: bool,
    max_queries: int | None = None,
    evaluated_per_query: int = 1000,
) -> list[dict[str, Any]]:
    """The next ``limit`` entries of a listing over ``parts``, in ``order``: a lazy
    k-way merge that queries a part only when its next entry may be the page's
    next, each Query reading about the page's share of a part (twice as much at
    each further call to it, up to ``evaluated_per_query``).

    With a filter in the parts' requests, ``max_queries`` bounds the calls: the page
    then ends where the merge stands, perhaps short, and every part's ``position``
    and ``bound`` say where the next one goes on. An entry is put on the page only
    once every other part is known to hold nothing before it, so the pages, one
    after another, hold each entry once, in order.
    """
    page: list[dict[str, Any]] = []
    queries = 0
    while len(page) < limit:
        live = [part for part in parts if not part.finished]
        if not live:
            break
        first = _next_part(live, order)
        if first.buffered:
            entry = first.buffered.pop(0)
            first.emitted = {name: entry[name] for name in order.key_names}
            page.append(entry)
            continue
        if max_queries is not None and queries >= max_queries:
            break
        share = -(-(limit - len(page)) // len(live)) + 4
        _read_part(
            client,
            first,
            order,
            min(evaluated_per_query, share << first.calls),
            from_token=from_token and first.calls == 0,
        )
        queries += 1
    return page


def _next_part(live: list[PartCursor], order: MergeOrder) -> PartCursor:
    """The part the merge looks at next: one whose next entry is unknown (it must be
    read first), else the one whose next entry (or the first it may be) comes first.

    Entries are ranked by sort key, then task id (as one partition ranks them, so a
    merge lists ties as the unsharded index did); a bound ranks before (newest
    first: after) every entry with its sort key, so that such a part is read first.
    """
    best: PartCursor | None = None
    best_rank: tuple[str, str] | None = None
    for part in live:
        if part.buffered:
            head = part.buffered[0]
            rank = (str(head[order.sort_key]["S"]), str(head["task_id"]["S"]))
        elif part.bound is not None:
            rank = (part.bound, _LAST if order.descending else "")
        else:
            return part
        if best_rank is None or order.precedes(rank, best_rank):
            best, best_rank = part, rank
    assert best is not None
    return best


# After every task id (they are hex digits or the API's ids, all below it).
_LAST = "\U0010ffff"


def _read_part(
    client: DynamoDBClient, part: PartCursor, order: MergeOrder, limit: int, *, from_token: bool
) -> None:
    # Called once the part's buffer is empty: everything before ``start`` is on a
    # page or dropped, so the next page resumes here at worst.
    part.resumed_from, part.emitted = part.start, None
    kwargs = dict(part.request, Limit=limit)
    if part.start is not None:
        kwargs["ExclusiveStartKey"] = part.start
    response = _query(client, kwargs, from_token=from_token)
    part.calls += 1
    items = response.get("Items", [])
    part.buffered += items if part.keep is None else [i for i in items if part.keep(i)]
    last = response.get("LastEvaluatedKey")
    if last is None:
        part.read_to_end = True
        return
    part.start = dict(last)
    # Every entry up to the last one evaluated is read: the part's next is past it.
    part.bound = str(last[order.sort_key]["S"])
