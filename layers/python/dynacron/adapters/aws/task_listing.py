"""A tenant's task ids, a page at a time (``GET /tasks``): from the tenant index
in order of creation, or from the name index in order of name."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dynacron.adapters.aws.items import (
    MergeOrder,
    PartCursor,
    QueryFilter,
    decode_page_token,
    encode_page_token,
    merged_page,
    short_digest,
    to_item,
)
from dynacron.adapters.aws.task_items import tenant_part, tenant_part_key
from dynacron.definitions.resources import (
    NAME_INDEX,
    NAME_KEYS_BACKFILLED_KEY,
    TAGS_ATTRIBUTE,
    TENANT_ATTRIBUTE,
    TENANT_INDEX,
    TENANT_INDEX_PARTS,
    TENANT_PART_ATTRIBUTE,
    IndexDefinition,
)
from dynacron.domain.coordination.tenants import DEFAULT_TENANT
from dynacron.domain.errors import InvalidRequest
from dynacron.domain.tasks.listing import name_key, normalised_name
from dynacron.domain.tasks.tags import TagFilter
from dynacron.ports import Page

if TYPE_CHECKING:
    from types_boto3_dynamodb.client import DynamoDBClient

# A filtered listing page's work: at most this many Query calls over all the
# tenant index's parts (two a part, the first of about the page's share of it),
# each reading at most this many index entries (the index's keys and at most 2 KB
# of tags). The merge reads only the part whose next entry may come first, so a
# page that runs out of calls still moves on: the token keeps how far each part
# was read (decision 0053).
FILTERED_QUERIES = 2 * TENANT_INDEX_PARTS
EVALUATED_PER_QUERY = 1000
# The most bytes an index sort key holds (DynamoDB): a longer one in a token is none
# this API gave.
SORT_KEY_BYTES = 1024


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
    """One page of ``tenant_id``'s task ids, oldest first (or newest), merged from
    the tenant index's parts (decision 0053); with ``tags``, filtered by DynamoDB
    on the index in at most ``max_queries`` Query calls over all the parts (a page
    may then hold fewer than ``limit``, even none, and still have a next token).

    The token holds each part's position (the created_at and task id of the last
    entry read past) and the least created_at its next entry may have, so the next
    page reads no part before it must; it names the tenant's listing, and the parts
    queried are the caller's own whatever it says."""
    listing = _listing(table, TENANT_INDEX, tenant_id)
    names: dict[str, str] = {"#key": TENANT_INDEX.partition_key.name}
    values: dict[str, Any] = {}
    filter_expression = None
    if tags:
        where = _tags_filter(tags)
        filter_expression = where.expression
        names |= where.names
        values |= to_item(where.values)
    parts = []
    for number, state in enumerate(_decode_positions(token, listing, tenant_id)):
        request: dict[str, Any] = {
            "TableName": table,
            "IndexName": TENANT_INDEX.name,
            "KeyConditionExpression": "#key = :key",
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": {":key": {"S": tenant_part_key(tenant_id, number)}}
            | values,
            "ScanIndexForward": not newest_first,
        }
        if filter_expression is not None:
            request["FilterExpression"] = filter_expression
        if state is None:
            parts.append(PartCursor(number, request, read_to_end=True))
        else:
            parts.append(PartCursor(number, request, start=state[0], bound=state[1]))
    order = MergeOrder(TENANT_INDEX.sort_key.name, _TENANT_KEYS, descending=newest_first)
    entries = merged_page(
        client,
        parts,
        order,
        limit,
        from_token=token is not None,
        max_queries=max_queries if tags else None,
        evaluated_per_query=evaluated_per_query,
    )
    return Page([_task_id_of(entry) for entry in entries], _positions_token(parts, order, listing))


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
    those whose name starts with ``name_prefix`` if given, merged from the name
    index's parts (keys only; decision 0053).

    A name key holds its task's id, so it is unique: the token is the last name key
    on the page, and each part resumes past it by its key condition (never a start
    key taken from the token)."""
    prefix = None if name_prefix is None else normalised_name(name_prefix)
    listing = _listing(table, NAME_INDEX, tenant_id, prefix)
    after = _decode_after(token, listing, prefix)
    condition, bounds = _name_range(prefix, after, descending)
    parts = [
        PartCursor(
            number,
            {
                "TableName": table,
                "IndexName": NAME_INDEX.name,
                "KeyConditionExpression": "#key = :key" + condition,
                "ExpressionAttributeNames": {"#key": NAME_INDEX.partition_key.name}
                | ({"#sort": NAME_INDEX.sort_key.name} if condition else {}),
                "ExpressionAttributeValues": {":key": {"S": tenant_part_key(tenant_id, number)}}
                | {name: {"S": value} for name, value in bounds.items()},
                "ScanIndexForward": not descending,
            },
            # A range's ends are inclusive: the last key of the page before, and
            # a key just past the prefix's, are left out.
            keep=lambda entry: _in_range(entry, prefix, after),
        )
        for number in range(TENANT_INDEX_PARTS)
    ]
    order = MergeOrder(NAME_INDEX.sort_key.name, _NAME_KEYS, descending=descending)
    entries = merged_page(client, parts, order, limit, from_token=token is not None)
    last = str(entries[-1][NAME_INDEX.sort_key.name]["S"]) if entries else None
    done = all(part.finished for part in parts)
    next_token = None if done or last is None else encode_page_token({"after": last}, listing)
    return Page([_task_id_of(entry) for entry in entries], next_token)


# The keys an entry's position is told by: the index's and the table's.
_TENANT_KEYS = (TENANT_INDEX.partition_key.name, TENANT_INDEX.sort_key.name, "task_id")
_NAME_KEYS = (NAME_INDEX.partition_key.name, NAME_INDEX.sort_key.name, "task_id")


def _listing(table: str, index: IndexDefinition, tenant_id: str, prefix: str | None = None) -> str:
    """What a token is bound to: the table, the index, the tenant and the prefix
    (the last two by digest, to keep a token short): another tenant's token, or
    another prefix's, is refused."""
    listing = f"{table}/{index.name}/{short_digest(tenant_id)}"
    return listing if prefix is None else f"{listing}/{short_digest(prefix)}"


def _refused() -> InvalidRequest:
    return InvalidRequest("next_token", "is not a token this API returned")


def _decode_positions(
    token: str | None, listing: str, tenant_id: str
) -> list[tuple[dict[str, Any] | None, str | None] | None]:
    """Each part's (start key, bound) from ``token``, or None for a part read to its
    end; a part's start key is rebuilt on the caller's own partition."""
    if not token:
        return [(None, None)] * TENANT_INDEX_PARTS
    key = decode_page_token(token, listing)
    assert key is not None
    states = key.get("parts")
    if not isinstance(states, list) or len(states) != TENANT_INDEX_PARTS:
        raise _refused()
    decoded: list[tuple[dict[str, Any] | None, str | None] | None] = []
    for number, state in enumerate(states):
        if state == 0:
            decoded.append(None)
            continue
        if not isinstance(state, list) or len(state) != 2:
            raise _refused()
        at, bound = state
        if bound is not None and not isinstance(bound, str):
            raise _refused()
        if at is None:
            decoded.append((None, bound))
            continue
        if not (isinstance(at, list) and len(at) == 2 and all(isinstance(v, str) for v in at)):
            raise _refused()
        start = {
            TENANT_INDEX.partition_key.name: {"S": tenant_part_key(tenant_id, number)},
            TENANT_INDEX.sort_key.name: {"S": at[0]},
            "task_id": {"S": at[1]},
        }
        decoded.append((start, bound))
    return decoded


def _positions_token(parts: list[PartCursor], order: MergeOrder, listing: str) -> str | None:
    if all(part.finished for part in parts):
        return None
    states: list[Any] = []
    for part in parts:
        if part.finished:
            states.append(0)
            continue
        position = part.position()
        at = None if position is None else [position[order.sort_key]["S"], position["task_id"]["S"]]
        bound = part.buffered[0][order.sort_key]["S"] if part.buffered else part.bound
        states.append([at, bound])
    return encode_page_token({"parts": states}, listing)


def _decode_after(token: str | None, listing: str, prefix: str | None) -> str | None:
    if not token:
        return None
    key = decode_page_token(token, listing)
    assert key is not None
    after = key.get("after")
    if not isinstance(after, str) or not after or len(after.encode()) > SORT_KEY_BYTES:
        raise _refused()
    if prefix and not after.startswith(prefix):
        raise _refused()
    return after


def _name_range(
    prefix: str | None, after: str | None, descending: bool
) -> tuple[str, dict[str, str]]:
    """The key condition on name keys (beside the partition's) of a page that starts
    past ``after`` (None: at the start) among those that begin with ``prefix``."""
    if after is None:
        if prefix is None:
            return "", {}
        return " AND begins_with(#sort, :prefix)", {":prefix": prefix}
    if descending:
        if prefix is None:
            return " AND #sort < :after", {":after": after}
        return " AND #sort BETWEEN :prefix AND :after", {":prefix": prefix, ":after": after}
    end = None if prefix is None else _past_prefix(prefix)
    if end is None:
        return " AND #sort > :after", {":after": after}
    return " AND #sort BETWEEN :after AND :end", {":after": after, ":end": end}


def _past_prefix(prefix: str) -> str | None:
    """The least string after every string that begins with ``prefix`` (None: none is)."""
    chars = list(prefix)
    while chars:
        code = ord(chars.pop()) + 1
        if code <= 0x10FFFF:
            # Surrogates are no characters (and UTF-8 has none): go past them.
            return "".join(chars) + chr(0xE000 if 0xD800 <= code <= 0xDFFF else code)
    return None


def _in_range(entry: dict[str, Any], prefix: str | None, after: str | None) -> bool:
    key = str(entry[NAME_INDEX.sort_key.name]["S"])
    return key != after and (prefix is None or key.startswith(prefix))


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

    def write(item: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        name = item.get("name", {}).get("S")
        values: dict[str, Any] = {
            ":key": {"S": name_key(name or _task_id_of(item), _task_id_of(item))}
        }
        if name is None:
            return "attribute_not_exists(#name)", values
        return "#name = :name", values | {":name": {"S": name}}

    return _backfill_pages(
        client,
        table,
        NAME_INDEX.sort_key.name,
        ("#name", "name"),
        write,
        page_size=page_size,
        start_after=start_after,
        before_write=before_write,
    )


def backfill_tenant_parts(client: DynamoDBClient, table: str, *, page_size: int = 500) -> int:
    """Give every task item written before the write-sharded indexes its tenant part
    (decision 0053), so that the tenant and name indexes list it; returns how many
    were given one (``dynacron admin backfill-tenant-parts``)."""
    return sum(
        page.given for page in backfill_tenant_part_pages(client, table, page_size=page_size)
    )


def backfill_tenant_part_pages(
    client: DynamoDBClient,
    table: str,
    *,
    page_size: int = 500,
    start_after: str | None = None,
    before_write: Callable[[], None] = lambda: None,
) -> Iterator[BackfillPage]:
    """As ``backfill_name_key_pages``, for the tenant part: the condition names the
    part's absence and the tenant it was computed from, so an item given its part by
    a create or PATCH meanwhile, or deleted, is left alone."""

    def write(item: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        tenant = item.get(TENANT_ATTRIBUTE, {}).get("S")
        part = tenant_part(tenant or DEFAULT_TENANT, _task_id_of(item))
        values: dict[str, Any] = {":key": {"S": part}}
        if tenant is None:
            return "attribute_not_exists(#name)", values
        return "#name = :name", values | {":name": {"S": tenant}}

    return _backfill_pages(
        client,
        table,
        TENANT_PART_ATTRIBUTE,
        ("#name", TENANT_ATTRIBUTE),
        write,
        page_size=page_size,
        start_after=start_after,
        before_write=before_write,
    )


def _backfill_pages(
    client: DynamoDBClient,
    table: str,
    attribute: str,
    source: tuple[str, str],
    write: Callable[[dict[str, Any]], tuple[str, dict[str, Any]]],
    *,
    page_size: int,
    start_after: str | None,
    before_write: Callable[[], None],
) -> Iterator[BackfillPage]:
    """Set ``attribute`` (``#key``) on every item that lacks it, a Scan page at a time:
    ``write`` gives, for an item read with its ``source`` attribute (``#name``), the
    condition on that attribute and the values (``:key``, the attribute's)."""
    names = {"#key": attribute, source[0]: source[1]}
    start: dict[str, Any] | None = None if start_after is None else {"task_id": {"S": start_after}}
    while True:
        scan: dict[str, Any] = {
            "TableName": table,
            "FilterExpression": "attribute_not_exists(#key)",
            "ProjectionExpression": f"task_id, {source[0]}",
            "ExpressionAttributeNames": names,
            "Limit": page_size,
        }
        if start is not None:
            scan["ExclusiveStartKey"] = start
        response = client.scan(**scan)
        given = changed = 0
        for item in response.get("Items", []):
            source_condition, values = write(item)
            # attribute_exists(task_id): an update never makes an item, so a task
            # deleted since the Scan stays deleted.
            condition = "attribute_exists(task_id) AND attribute_not_exists(#key) AND "
            before_write()
            try:
                client.update_item(
                    TableName=table,
                    Key={"task_id": {"S": _task_id_of(item)}},
                    UpdateExpression="SET #key = :key",
                    ConditionExpression=condition + source_condition,
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


def backfilled(client: DynamoDBClient, coordination_table: str, record: str) -> str | None:
    """When a backfill (its ``record`` key) last went over the whole tasks table."""
    item = client.get_item(
        TableName=coordination_table,
        Key={"key": {"S": record}},
        ConsistentRead=True,
    ).get("Item")
    return None if item is None else str(item["finished_at"]["S"])


def record_backfilled(
    client: DynamoDBClient, coordination_table: str, record: str, at: str
) -> None:
    """Note that a backfill (its ``record`` key) went over the whole tasks table,
    finishing ``at``: every writer since sets what it sets, so no task lacks it."""
    client.put_item(
        TableName=coordination_table,
        Item={"key": {"S": record}, "finished_at": {"S": at}},
    )


def name_keys_backfilled(client: DynamoDBClient, coordination_table: str) -> str | None:
    """When a backfill last went over the whole tasks table (ISO 8601), if one has."""
    return backfilled(client, coordination_table, NAME_KEYS_BACKFILLED_KEY)


def record_name_keys_backfilled(client: DynamoDBClient, coordination_table: str, at: str) -> None:
    """Note that a backfill went over the whole tasks table, finishing ``at``: every
    writer since gives a task its key, so none is left without one."""
    record_backfilled(client, coordination_table, NAME_KEYS_BACKFILLED_KEY, at)
