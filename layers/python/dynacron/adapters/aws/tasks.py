"""Tasks in DynamoDB (the ``TaskStore`` port). The client is injected; every
change is one conditional write naming the version it expects.
"""

from __future__ import annotations

import json
import random
import time
import uuid
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

from botocore.exceptions import ClientError

from dynacron.adapters.aws.create_keys import create_key_key
from dynacron.adapters.aws.errors import translating
from dynacron.adapters.aws.expressions import (
    Placeholders,
    apply_to_record,
    apply_transition,
    write_request,
)
from dynacron.adapters.aws.items import (
    batch_get,
    cancelled_by,
    from_item,
    is_condition_failure,
    is_transaction_refusal,
    to_item,
)
from dynacron.adapters.aws.task_items import (
    _readable,
    plain_version,
    read_task_item,
    shown_task_item,
    task_to_item,
)
from dynacron.adapters.aws.task_listing import (
    EVALUATED_PER_QUERY,
    FILTERED_QUERIES,
    tenant_task_ids,
    tenant_task_ids_by_name,
)
from dynacron.adapters.aws.tenants import tenant_key
from dynacron.definitions.resources import (
    CENSUS_KEY_PREFIX,
    CENSUS_SHARDS,
    CHANGES_KEY_PREFIX,
    DEPENDENTS_INDEX,
    DUE_INDEX,
    TENANT_ATTRIBUTE,
)
from dynacron.domain.conditions import AllOf, Condition, Equals, Missing, Transition
from dynacron.domain.coordination.transitions import mark_key_created
from dynacron.domain.errors import InvalidRequest, LimitExceeded
from dynacron.domain.instants import format_instant
from dynacron.domain.schedules.signatures import (
    CENSUS_KEY,
    COUNTED,
    CensusChange,
    Signature,
    census_change,
    counted_signature,
)
from dynacron.domain.tasks.history import TaskChange, change_from_map, change_to_map
from dynacron.domain.tasks.listing import ALL_TASKS, TaskListing, TaskOrder
from dynacron.domain.tasks.tags import TagFilter, matches_all
from dynacron.domain.tasks.task import (
    DuePlacement,
    Task,
)
from dynacron.domain.tasks.transitions import STATUS, Replacement
from dynacron.ports import (
    Page,
    StoreUnavailable,
    Throttled,
    UnreadableTask,
)
from dynacron.ports.tasks import (
    MAX_STARTED_WITH_CHANGE,
    CensusEntry,
    all_readable,
    sorted_reads,
)

# Tries of one chunk's transaction while others on the tenant's count conflict with it.
_CHUNK_CONFLICT_TRIES = 3
# A transaction holds at most 100 actions: a chunk's puts and the tenant's count.
_CHUNK_PUTS = 99
# And at most 4 MB: a chunk's items, as JSON (a little over their stored size).
_CHUNK_BYTES = 3_500_000


@dataclass(frozen=True)
class _Chunk:
    """Consecutive items of a batch (each with its index) that fit one transaction."""

    start: int
    items: list[tuple[int, dict[str, Any]]]


def _chunks(
    items: list[dict[str, Any]],
    census_items: list[str | None] | None = None,
    puts_per_item: int = 1,
) -> list[_Chunk]:
    """``items`` in order, cut into chunks of at most ``_CHUNK_PUTS`` and
    ``_CHUNK_BYTES``; with ``census_items`` (each item's census entry, or None),
    also so that the puts and the distinct census entries updated fit 99 actions;
    ``puts_per_item`` 2 when each item has its change record put with it."""
    chunks: list[_Chunk] = []
    size = 0
    entries: set[str] = set()
    for index, item in enumerate(items):
        item_size = len(json.dumps(item, separators=(",", ":"), default=str))
        entry = census_items[index] if census_items else None
        more = 1 if entry is not None and entry not in entries else 0
        if (
            not chunks
            or (len(chunks[-1].items) + 1) * puts_per_item + len(entries) + more > _CHUNK_PUTS
            or size + item_size * puts_per_item > _CHUNK_BYTES
        ):
            chunks.append(_Chunk(index, []))
            size = 0
            entries = set()
        chunks[-1].items.append((index, item))
        size += item_size * puts_per_item
        if entry is not None:
            entries.add(entry)
    return chunks


if TYPE_CHECKING:
    from types_boto3_dynamodb.client import DynamoDBClient
    from types_boto3_dynamodb.type_defs import TransactWriteItemTypeDef


class DynamoTaskStore:
    """Tasks. The ``*_owned`` methods are the API's: each is scoped to one tenant.

    A tenant's writes are conditioned on ``tenant_id`` and its listing queries the
    tenant index, so another tenant's task is, to a caller, exactly a missing one.
    """

    def __init__(
        self,
        client: DynamoDBClient,
        table_name: str,
        coordination_table: str = "",
        *,
        filtered_queries: int = FILTERED_QUERIES,
        evaluated_per_query: int = EVALUATED_PER_QUERY,
        census_table: str = "",
    ) -> None:
        self._client = translating(client)
        self._table = table_name
        self._coordination = coordination_table
        # The executions table, where the schedule census lives (``resources``).
        self._census = census_table
        self._filtered_queries = filtered_queries
        self._evaluated_per_query = evaluated_per_query

    def create_within_quota(
        self,
        task: Task,
        placement: DuePlacement | None,
        max_tasks: int,
        fresh_secret: str,
        change: TaskChange | None = None,
    ) -> None:
        """Store ``task`` and count it against its tenant's quota, in one transaction
        (with ``change``'s record).

        The tenant's record gets its first signing secret here if it has none, so
        a worker only ever reads it.
        """
        added = counted_signature(task)
        try:
            self._client.transact_write_items(
                TransactItems=[
                    self._put_new(_counted_item(task, placement, added)),
                    self._counted(task.tenant_id, 1, max_tasks, fresh_secret),
                    *self._recounts(task.tenant_id, task.task_id, CensusChange(added=added)),
                    *self._change_puts(change, task.tenant_id),
                ]
            )
        except ClientError as error:
            reasons = cancelled_by(error)
            if reasons[:1] == ["ConditionalCheckFailed"]:
                raise InvalidRequest("task_id", "a task with this id exists already") from None
            if reasons[1:2] == ["ConditionalCheckFailed"]:
                raise LimitExceeded(
                    "max_tasks_per_tenant",
                    "tenant",
                    f"this tenant already has {max_tasks} tasks, the most allowed; "
                    "delete some first",
                ) from None
            raise

    def _put_new(self, item: dict[str, Any]) -> TransactWriteItemTypeDef:
        """A transaction's put of a task that must not exist yet."""
        return {
            "Put": {
                "TableName": self._table,
                "Item": item,
                "ConditionExpression": "attribute_not_exists(task_id)",
            }
        }

    def _counted(
        self, tenant_id: str, added: int, max_tasks: int, fresh_secret: str
    ) -> TransactWriteItemTypeDef:
        """A transaction's update adding ``added`` tasks to the tenant's count, only if
        they all fit under ``max_tasks``; the record gets its first signing secret here
        if it has none, so a worker only ever reads it."""
        return {
            "Update": {
                "TableName": self._coordination,
                "Key": tenant_key(tenant_id),
                "UpdateExpression": (
                    "SET task_count = if_not_exists(task_count, :zero) + :added, "
                    "signing_secrets = if_not_exists(signing_secrets, :secrets)"
                ),
                "ConditionExpression": "attribute_not_exists(task_count) OR task_count <= :room",
                "ExpressionAttributeValues": to_item(
                    {
                        ":zero": 0,
                        ":added": added,
                        ":room": max_tasks - added,
                        ":secrets": [fresh_secret],
                    }
                ),
            }
        }

    def create_many_within_quota(
        self,
        tasks: Sequence[tuple[Task, DuePlacement | None]],
        max_tasks: int,
        fresh_secret: str,
        changes: Sequence[TaskChange | None] | None = None,
        keys: Sequence[str | None] | None = None,
    ) -> list[Exception | None]:
        """Store one tenant's ``tasks``, counted against its quota, in transactions of
        up to 99 puts and one update of the tenant's count (a transaction holds at
        most 100 actions and 4 MB); with ``changes``, each task's record is put in
        its transaction too (decision 0054).

        Each transaction adds its tasks to the count only if they all fit, so no
        concurrent create can push the count past ``max_tasks``. A chunk refused
        (too few places left, an id taken, a conflict that outlasted its retries) is
        stored task by task instead, each as ``create_within_quota``: the batch fills
        exactly the places left, and each task refused is answered with why. Then
        each stored task's key of ``keys`` is marked created, one conditional write
        each (a transaction holds no room for them).
        """
        outcomes: list[Exception | None] = [None] * len(tasks)
        added = [counted_signature(task) for task, _ in tasks]
        entries = [
            _census_entry(task.tenant_id, task.task_id, signature.key) if signature else None
            for (task, _), signature in zip(tasks, added, strict=True)
        ]
        items = [
            _counted_item(task, placement, signature)
            for (task, placement), signature in zip(tasks, added, strict=True)
        ]
        recorded = list(changes) if changes else [None] * len(tasks)
        for chunk in _chunks(items, entries, 2 if changes else 1):
            tenant_id = tasks[chunk.start][0].tenant_id
            recounts = self._chunk_recounts(
                tenant_id, [(tasks[i][0].task_id, added[i]) for i, _ in chunk.items]
            )
            for index, _ in chunk.items:
                recounts += self._change_puts(recorded[index], tenant_id)
            stored = self._create_chunk(
                tenant_id, [item for _, item in chunk.items], max_tasks, fresh_secret, recounts
            )
            if stored:
                continue
            for index, _ in chunk.items:
                task, placement = tasks[index]
                try:
                    self.create_within_quota(
                        task, placement, max_tasks, fresh_secret, recorded[index]
                    )
                except (LimitExceeded, InvalidRequest) as refused:
                    outcomes[index] = refused
        for (task, _), key, why_not in zip(
            tasks, keys or [None] * len(tasks), outcomes, strict=True
        ):
            if why_not is None and key is not None:
                # Only this task's reservation: one expired and taken since names another.
                mark = mark_key_created(task.task_id)
                key_record = from_item(create_key_key(task.tenant_id, key))
                apply_to_record(self._client, self._coordination, key_record, mark)
        return outcomes

    def _create_chunk(
        self,
        tenant_id: str,
        items: list[dict[str, Any]],
        max_tasks: int,
        fresh_secret: str,
        recounts: list[TransactWriteItemTypeDef],
    ) -> bool:
        """Put ``items`` and add them to the tenant's count (and its census, by
        ``recounts``) in one transaction, if they all fit under ``max_tasks``; False
        if it was refused."""
        if len(items) > max_tasks:
            return False
        puts = [self._put_new(item) for item in items] + recounts
        count = self._counted(tenant_id, len(items), max_tasks, fresh_secret)
        # The same token on the SDK's own retries: a transaction that was applied,
        # though its answer was lost, is not applied again (nor refused for its ids).
        token = uuid.uuid4().hex
        for attempt in range(_CHUNK_CONFLICT_TRIES):
            try:
                self._client.transact_write_items(
                    TransactItems=[*puts, count], ClientRequestToken=token
                )
            except ClientError as error:
                if "TransactionConflict" not in cancelled_by(error):
                    return False
                # Another transaction on the tenant's count at the same moment.
                time.sleep(random.uniform(0.01, 0.05) * (attempt + 1))
                token = uuid.uuid4().hex
            else:
                return True
        return False

    def get_owned(self, tenant_id: str, task_id: str) -> Task | None:
        """The task if it exists and belongs to ``tenant_id``, else None (either way)."""
        item = self._get_item(task_id)
        task = shown_task_item(item) if item else None
        # GetItem takes no condition: the owner is checked here, the one place
        # every tenant-scoped read goes through.
        return task if task is not None and task.tenant_id == tenant_id else None

    def page_owned(
        self,
        tenant_id: str,
        limit: int,
        token: str | None,
        tags: tuple[TagFilter, ...] = (),
        listing: TaskListing = ALL_TASKS,
    ) -> Page[Task]:
        """One page of a tenant's tasks, oldest first (or as ``listing`` says); with
        ``tags``, those with every tag filter matched only.

        The page's ids come from an index of keys (and tags) only, merged from the
        tenant's parts of it (decision 0053): the tenant index in order of creation
        (``resources.TENANT_INDEX``, tag filters applied there by DynamoDB, in at
        most ``filtered_queries`` Query calls) or the name index in order of name
        (``resources.NAME_INDEX``); the tasks from one eventually
        consistent BatchGetItem. A task deleted in between is left out, and so is one
        that no longer matches (its tags, name, status or kind): the table's item,
        not the index, has the last word. No index orders a tenant's tasks by next
        run: one would be rewritten by every claim (decision 0045), so that order is
        refused here.
        """
        if listing.sorted_by is TaskOrder.NEXT_RUN:
            raise InvalidRequest(
                "sort",
                "next_run_at is not offered on DynamoDB (an index in that order would "
                "cost every fire two more writes): sort by name or created_at",
            )
        if listing.sorted_by is TaskOrder.NAME:
            ids = tenant_task_ids_by_name(
                self._client,
                self._table,
                tenant_id,
                limit,
                token,
                listing.name_prefix,
                descending=listing.descending,
            )
        else:
            ids = tenant_task_ids(
                self._client,
                self._table,
                tenant_id,
                limit,
                token,
                tags,
                max_queries=self._filtered_queries,
                evaluated_per_query=self._evaluated_per_query,
                newest_first=listing.descending,
            )
        items = self._batch_items(ids.items, consistent=False)
        owner = {"S": tenant_id}
        shown = [
            shown_task_item(items[task_id])
            for task_id in ids.items
            if task_id in items and items[task_id].get(TENANT_ATTRIBUTE) == owner
        ]
        return Page(
            items=[t for t in shown if matches_all(t.tags, tags) and listing.matches(t)],
            next_token=ids.next_token,
        )

    def delete_owned(self, tenant_id: str, task_id: str, change: TaskChange | None = None) -> bool:
        """Delete a tenant's task and release its quota (and its place in the census),
        recording ``change`` in the same transaction; False if it has no such task. The
        census key read first is a condition of the delete: a change in between is
        retried with the key it left."""
        for _ in range(_CHUNK_CONFLICT_TRIES):
            counted_as = self._counted_as(task_id)
            try:
                return self._delete_counted(tenant_id, task_id, counted_as, change)
            except _CensusMoved:
                continue
        return self._delete_counted(tenant_id, task_id, self._counted_as(task_id), change)

    def _delete_counted(
        self, tenant_id: str, task_id: str, counted_as: str | None, change: TaskChange | None
    ) -> bool:
        placeholders = Placeholders()
        condition = placeholders.condition(
            AllOf(Equals("tenant_id", tenant_id), _counted_under(counted_as))
        )
        delete = {
            "TableName": self._table,
            "Key": to_item({"task_id": task_id}),
            "ConditionExpression": condition,
            **placeholders.request(),
        }
        try:
            self._client.transact_write_items(
                TransactItems=[
                    cast("TransactWriteItemTypeDef", {"Delete": delete}),
                    {
                        "Update": {
                            "TableName": self._coordination,
                            "Key": tenant_key(tenant_id),
                            "UpdateExpression": "SET task_count = task_count - :one",
                            "ConditionExpression": "task_count > :zero",
                            "ExpressionAttributeValues": to_item({":zero": 0, ":one": 1}),
                        }
                    },
                    *self._recounts(tenant_id, task_id, CensusChange(removed=counted_as)),
                    *self._change_puts(change, tenant_id),
                ]
            )
        except ClientError as error:
            if cancelled_by(error)[:1] == ["ConditionalCheckFailed"]:
                if self._counted_as(task_id) != counted_as and self.get_owned(tenant_id, task_id):
                    raise _CensusMoved from None
                return False
            raise
        self._forget_if_empty(tenant_id, task_id, counted_as)
        return True

    def _get_item(self, task_id: str) -> dict[str, Any] | None:
        response = self._client.get_item(
            TableName=self._table, Key=to_item({"task_id": task_id}), ConsistentRead=True
        )
        item: dict[str, Any] | None = response.get("Item")
        return item

    def get(self, task_id: str) -> Task | None:
        """The task, or None if missing; ``UnreadableTaskError`` if it cannot be decoded."""
        item = self._get_item(task_id)
        return _readable(read_task_item(item)) if item else None

    def get_many(self, task_ids: Iterable[str]) -> list[Task]:
        """Strongly consistent reads of up to any number of tasks; missing ones are left
        out; ``UnreadableTaskError`` if one cannot be decoded."""
        return all_readable(self.read_many(task_ids))

    def read_many(self, task_ids: Iterable[str]) -> tuple[list[Task], list[UnreadableTask]]:
        """As ``get_many``, with the tasks that cannot be decoded apart, not raised."""
        items = self._batch_items(task_ids, consistent=True).values()
        return sorted_reads(read_task_item(item) for item in items)

    def _batch_items(self, task_ids: Iterable[str], consistent: bool) -> dict[str, dict[str, Any]]:
        """The stored items of ``task_ids`` that exist, by id, in BatchGetItem calls."""
        keys = [to_item({"task_id": i}) for i in dict.fromkeys(task_ids)]
        return batch_get(self._client, self._table, keys, "task_id", consistent)

    def apply(self, task_id: str, transition: Transition, change: TaskChange | None = None) -> bool:
        """Carry out ``transition`` on the task as one conditional UpdateItem; False if
        it did not hold. Its attribute names are the item's (the due index's
        partition, ``due_bucket``, among them), so the item key is all this adds.

        A transition that pauses or sets the task aside (rare: never a fire) takes it
        out of the census too: its census key is read first and the update, then
        conditional on it, is one transaction with the census's.

        With ``change`` (never a fire), the change's record is written in the same
        transaction (its tenant, if not given, the item's as read)."""
        key = to_item({"task_id": task_id})
        if change is None and not _uncounts(transition):
            return apply_transition(self._client, self._table, key, transition)
        item = self._get_item(task_id) or {}
        if change is not None:
            if not item:
                return False
            if change.tenant_id is None:
                change = change.owned_by(str(from_item({"t": item["tenant_id"]})["t"]))
        counted_as = _census_key_of(item) if _uncounts(transition) else None
        if counted_as is None:
            if change is None:
                return apply_transition(self._client, self._table, key, transition)
            return self._recounted("", task_id, transition, CensusChange(), change)
        uncounted = Transition(
            expects=AllOf(transition.expects, Equals(CENSUS_KEY, counted_as)),
            sets=transition.sets,
            removes=transition.removes | {CENSUS_KEY},
            computes=transition.computes,
            move=transition.move,
        )
        tenant_id = str(from_item({"t": item["tenant_id"]})["t"])
        return self._recounted(
            tenant_id, task_id, uncounted, CensusChange(removed=counted_as), change
        )

    def _recounted(
        self,
        tenant_id: str,
        task_id: str,
        transition: Transition,
        change: CensusChange,
        recorded: TaskChange | None = None,
    ) -> bool:
        """``transition`` on the task, ``change`` to the census and the ``recorded``
        change's record, in one transaction; False if the transition's condition did
        not hold (nothing written).

        A transaction cancelled for a conflict (another one on the task or its census
        entry at the same moment) is no refusal: it is asked again, and ``Throttled``
        raised if the conflict outlasts ``_CHUNK_CONFLICT_TRIES``."""
        key = to_item({"task_id": task_id})
        items = [
            cast(
                "TransactWriteItemTypeDef",
                {"Update": {"TableName": self._table, **write_request(transition, key)}},
            ),
            *self._recounts(tenant_id, task_id, change),
            *self._change_puts(recorded, tenant_id),
        ]
        for attempt in range(_CHUNK_CONFLICT_TRIES):
            try:
                self._client.transact_write_items(TransactItems=items)
            except ClientError as error:
                if is_condition_failure(error):
                    return False
                if not is_transaction_refusal(error):
                    raise
                reasons = cancelled_by(error)
                if "TransactionConflict" not in reasons or "ConditionalCheckFailed" in reasons:
                    return False
                time.sleep(random.uniform(0.01, 0.05) * (attempt + 1))
            else:
                self._forget_if_empty(tenant_id, task_id, change.removed)
                return True
        raise Throttled(f"task {task_id}: its change kept meeting other transactions")

    def apply_each(self, changes: Sequence[tuple[str, Transition]]) -> list[bool | Exception]:
        """One conditional UpdateItem per change, as ``apply``, one after another
        (DynamoDB has no conditional batch write; the tick spreads a page over its
        threads, decision 0043). A throttled or failing change is answered with its
        exception; the store unreachable (any other ``StoreUnavailable``) raises."""
        answers: list[bool | Exception] = []
        for task_id, transition in changes:
            try:
                answers.append(self.apply(task_id, transition))
            except Throttled as throttled:
                answers.append(throttled)
            except StoreUnavailable:
                raise
            except Exception as error:
                answers.append(error)
        return answers

    def stored_version(self, task_id: str) -> Any:
        """The ``version`` attribute as stored now (a consistent GetItem), as a plain
        value; None if the task or its version is missing."""
        version = (self._get_item(task_id) or {}).get("version")
        return plain_version(version)

    def replace(
        self,
        task: Task,
        placement: DuePlacement | None,
        replacement: Replacement,
        change: TaskChange | None = None,
    ) -> bool:
        """Store ``task`` whole, if the stored one meets ``replacement.expects``.

        Pause, resume, PATCH and the release of a run slot all go through here: any
        write in between (a tick's claim, another change) bumped the version, and
        this one is refused rather than undoing it. A conditional PutItem; with
        ``replacement.unchanged`` (the tasks a dependency chain was checked
        against), TransactWriteItems with a ConditionCheck on each of them.

        The census (decision 0046): the write first assumes the task stays counted
        as it is (what every write on a fire's path does), as a condition; refused,
        the stored census key is read and, if it is what differs, the write is tried
        once more with the census's changes in the same transaction. With ``change``,
        its record is one more put of the transaction (decision 0054).
        """
        added = counted_signature(task)
        assumed = added.key if added is not None else None
        outcome = self._replace_counted(task, placement, replacement, assumed, change)
        if outcome is not None:
            return outcome
        counted_as = self._counted_as(task.task_id)
        if counted_as == assumed:
            return False
        return bool(self._replace_counted(task, placement, replacement, counted_as, change))

    def _replace_counted(
        self,
        task: Task,
        placement: DuePlacement | None,
        replacement: Replacement,
        counted_as: str | None,
        change: TaskChange | None = None,
    ) -> bool | None:
        """The replacement of a task stored as counted under ``counted_as``: True if
        written, None if refused."""
        census = census_change(counted_as, task)
        placeholders = Placeholders()
        put: dict[str, Any] = {
            "TableName": self._table,
            "Item": _counted_item(task, placement, counted_signature(task)),
            "ConditionExpression": placeholders.condition(
                AllOf(replacement.expects, _counted_under(counted_as))
            ),
            **placeholders.request(),
        }
        recounts = self._recounts(task.tenant_id, task.task_id, census)
        recounts += self._change_puts(change, task.tenant_id)
        try:
            if not replacement.unchanged and not recounts:
                self._client.put_item(**put)
                return True
            checks = [
                {"ConditionCheck": _condition_check(self._table, task_id, expects)}
                for task_id, expects in replacement.unchanged.items()
            ]
            # Built as plain dicts, as their placeholders are; the stubs type the call.
            items = cast("list[TransactWriteItemTypeDef]", [{"Put": put}, *checks, *recounts])
            self._client.transact_write_items(TransactItems=items)
        except ClientError as error:
            if is_condition_failure(error) or is_transaction_refusal(error):
                return None
            raise
        self._forget_if_empty(task.tenant_id, task.task_id, census.removed)
        return True

    # Change history (decision 0054) ------------------------------------------------

    def _change_puts(
        self, change: TaskChange | None, tenant_id: str
    ) -> list[TransactWriteItemTypeDef]:
        """A transaction's put of ``change``'s record (none without one), in the
        executions table under ``changes#<task id>``."""
        if change is None:
            return []
        owned = change if change.tenant_id else change.owned_by(tenant_id)
        return [
            {
                "Put": {
                    "TableName": self._census,
                    "Item": _change_item(owned),
                    "ConditionExpression": "attribute_not_exists(execution_id)",
                }
            }
        ]

    def record_change(
        self, change: TaskChange, starting: Sequence[tuple[str, Transition]] = ()
    ) -> bool:
        """Record a change that writes no task (a trigger, a backfill), with the
        executions it starts (their records are in the same table): one
        TransactWriteItems, or one PutItem for a change that starts none."""
        if not starting:
            self._client.put_item(TableName=self._census, Item=_change_item(change))
            return True
        if len(starting) > MAX_STARTED_WITH_CHANGE:
            raise ValueError(f"at most {MAX_STARTED_WITH_CHANGE} executions start with a change")
        items: list[TransactWriteItemTypeDef] = [
            cast(
                "TransactWriteItemTypeDef",
                {"Put": {"TableName": self._census, **write_request(created, {})}},
            )
            for _, created in starting
        ]
        items.append({"Put": {"TableName": self._census, "Item": _change_item(change)}})
        # The same token on the SDK's own retries: a transaction that was applied,
        # though its answer was lost, is not refused for the records it wrote.
        token = uuid.uuid4().hex
        for attempt in range(_CHUNK_CONFLICT_TRIES):
            try:
                self._client.transact_write_items(TransactItems=items, ClientRequestToken=token)
            except ClientError as error:
                reasons = cancelled_by(error)  # raises what is no cancelled transaction
                if "ConditionalCheckFailed" in reasons:
                    return False
                if "TransactionConflict" not in reasons:
                    raise
                time.sleep(random.uniform(0.01, 0.05) * (attempt + 1))
                token = uuid.uuid4().hex
            else:
                return True
        raise Throttled(f"task {change.task_id}: its change kept meeting other transactions")

    def changes_page(
        self, tenant_id: str, task_id: str, limit: int, token: str | None
    ) -> Page[TaskChange]:
        """One page of the task's change records, newest first (one Query of its
        partition, backwards), those of ``tenant_id`` only."""
        partition = CHANGES_KEY_PREFIX + task_id
        request: dict[str, Any] = {
            "TableName": self._census,
            "KeyConditionExpression": "task_id = :partition",
            "FilterExpression": "tenant_id = :tenant",
            "ExpressionAttributeValues": to_item({":partition": partition, ":tenant": tenant_id}),
            "ScanIndexForward": False,
            "Limit": limit,
        }
        if token is not None:
            if not token or len(token) > 64 or not token.isascii():
                raise InvalidRequest("next_token", "is not a token this listing gave")
            request["ExclusiveStartKey"] = to_item({"task_id": partition, "execution_id": token})
        response = self._client.query(**request)
        last = response.get("LastEvaluatedKey")
        return Page(
            items=[_change_of(item) for item in response.get("Items", [])],
            next_token=str(from_item(last)["execution_id"]) if last else None,
        )

    def get_change(self, tenant_id: str, task_id: str, change_id: str) -> TaskChange | None:
        """One change record of the tenant's task, or None (a consistent GetItem)."""
        item = self._client.get_item(
            TableName=self._census,
            Key=to_item({"task_id": CHANGES_KEY_PREFIX + task_id, "execution_id": change_id}),
            ConsistentRead=True,
        ).get("Item")
        change = _change_of(item) if item else None
        return change if change is not None and change.tenant_id == tenant_id else None

    # The schedule census (decision 0046) ---------------------------------------------

    def _counted_as(self, task_id: str) -> str | None:
        """The census key the stored task is counted under (a consistent read)."""
        return _census_key_of(self._get_item(task_id) or {})

    def _recounts(
        self, tenant_id: str, task_id: str, change: CensusChange
    ) -> list[TransactWriteItemTypeDef]:
        """A transaction's updates of the census entries one task's ``change`` touches."""
        updates: list[TransactWriteItemTypeDef] = []
        if change.removed is not None:
            updates.append(self._recount(tenant_id, task_id, change.removed, -1, None))
        if change.added is not None:
            updates.append(self._recount(tenant_id, task_id, change.added.key, 1, change.added))
        return updates

    def _forget_if_empty(self, tenant_id: str, task_id: str, removed: str | None) -> None:
        """After a task was taken off census entry ``removed``: delete the entry if it
        now counts no task (or fewer: a decrement of an entry TTL had removed leaves
        ``-1``), so that entries never outnumber the schedules counted and a forecast
        reads no empty ones. Conditional on the count, so an entry a concurrent create
        has just counted stays; a create after the delete makes it again (every
        increment sets its signature). Left behind by a crash in between, an empty
        entry is skipped by every read."""
        if removed is None:
            return
        partition = _census_entry(tenant_id, task_id, removed).split("|")[0]
        try:
            self._client.delete_item(
                TableName=self._census,
                Key=to_item({"task_id": partition, "execution_id": removed}),
                ConditionExpression="tasks <= :zero",
                ExpressionAttributeValues=to_item({":zero": 0}),
            )
        except ClientError as error:
            if not is_condition_failure(error):
                raise

    def _chunk_recounts(
        self, tenant_id: str, tasks: list[tuple[str, Signature | None]]
    ) -> list[TransactWriteItemTypeDef]:
        """One update per census entry a chunk of new tasks adds to (a transaction
        may touch an item once)."""
        counts: dict[tuple[str, str], tuple[str, Signature, int]] = {}
        for task_id, signature in tasks:
            if signature is None:
                continue
            entry = (_census_entry(tenant_id, task_id, signature.key), signature.key)
            _, _, count = counts.get(entry, (task_id, signature, 0))
            counts[entry] = (task_id, signature, count + 1)
        return [
            self._recount(tenant_id, task_id, signature.key, count, signature)
            for task_id, signature, count in counts.values()
        ]

    def _recount(
        self,
        tenant_id: str,
        task_id: str,
        signature_key: str,
        added: int,
        signature: Signature | None,
    ) -> TransactWriteItemTypeDef:
        values: dict[str, Any] = {":added": added}
        update = "ADD tasks :added"
        if signature is not None:
            update += " SET signature = :signature"
            values[":signature"] = signature.text
            if signature.ends_at is not None:
                # A day after its last occurrence the entry may go (TTL).
                update += ", expires_at = :expires, ends_at = :ends"
                values[":expires"] = int(signature.ends_at.timestamp()) + 86_400
                values[":ends"] = format_instant(signature.ends_at)
        return {
            "Update": {
                "TableName": self._census,
                "Key": to_item(
                    {
                        "task_id": _census_entry(tenant_id, task_id, signature_key).split("|")[0],
                        "execution_id": signature_key,
                    }
                ),
                "UpdateExpression": update,
                "ExpressionAttributeValues": to_item(values),
            }
        }

    def census_page(
        self,
        tenant_id: str,
        limit: int,
        token: str | None,
        ending_after: datetime | None = None,
    ) -> Page[CensusEntry]:
        """Up to ``limit`` census entries of the tenant: one Query of each of its
        ``CENSUS_SHARDS`` partitions in turn (a token says which and where in it), the
        shards' counts of one signature summed by the caller (``census_totals``)."""
        shard, start = 0, None
        if token is not None:
            try:
                shard_text, _, start_text = token.partition(":")
                shard, start = int(shard_text), start_text or None
            except ValueError:
                raise InvalidRequest("token", "not a token of this listing") from None
            if not 0 <= shard < CENSUS_SHARDS:
                raise InvalidRequest("token", "not a token of this listing")
        entries: list[CensusEntry] = []
        while len(entries) < limit and shard < CENSUS_SHARDS:
            values = {":partition": f"{CENSUS_KEY_PREFIX}{tenant_id}#{shard}"}
            kwargs: dict[str, Any] = {
                "TableName": self._census,
                "KeyConditionExpression": "task_id = :partition",
                "Limit": limit - len(entries),
            }
            if ending_after is not None:
                # Read, and billed, all the same until TTL takes them a day later.
                kwargs["FilterExpression"] = "attribute_not_exists(ends_at) OR ends_at >= :after"
                values[":after"] = format_instant(ending_after)
            kwargs["ExpressionAttributeValues"] = to_item(values)
            if start is not None:
                kwargs["ExclusiveStartKey"] = to_item(
                    {"task_id": f"{CENSUS_KEY_PREFIX}{tenant_id}#{shard}", "execution_id": start}
                )
            response = self._client.query(**kwargs)
            for item in response.get("Items", []):
                plain = from_item(item)
                if plain.get("signature") and int(plain.get("tasks", 0)) != 0:
                    entries.append(CensusEntry(Signature(plain["signature"]), int(plain["tasks"])))
            last = response.get("LastEvaluatedKey")
            if last:
                start = str(from_item(last)["execution_id"])
            else:
                shard, start = shard + 1, None
        next_token = None if shard >= CENSUS_SHARDS else f"{shard}:{start or ''}"
        return Page(items=entries, next_token=next_token)

    def count_uncounted(self, tenant_id: str, limit: int, token: str | None) -> Page[str]:
        """Count the tasks of one page of the tenant's that the census does not count
        yet: for each, its mark and its entry's count in one transaction, conditional
        on the version read and on no mark."""
        ids = tenant_task_ids(
            self._client,
            self._table,
            tenant_id,
            limit,
            token,
            (),
            max_queries=self._filtered_queries,
            evaluated_per_query=self._evaluated_per_query,
        )
        items = self._batch_items(ids.items, consistent=True)
        counted: list[str] = []
        for task_id in ids.items:
            item = items.get(task_id)
            if item is None or CENSUS_KEY in item:
                continue
            read = read_task_item(item)
            if not isinstance(read, Task) or read.tenant_id != tenant_id:
                continue
            added = counted_signature(read)
            if added is None:
                continue
            mark = Transition(
                expects=AllOf(Equals("version", read.version), Missing(CENSUS_KEY)),
                sets={CENSUS_KEY: added.key},
            )
            if not self._recounted(tenant_id, task_id, mark, CensusChange(added=added)):
                continue  # changed meanwhile: the change counted it, or the next pass will
            counted.append(task_id)
        return Page(items=counted, next_token=ids.next_token)

    def dependents(self, task_id: str) -> list[str]:
        """Ids of the tasks set to run after ``task_id`` (``after``), from the sparse index."""
        ids: list[str] = []
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "IndexName": DEPENDENTS_INDEX.name,
            "KeyConditionExpression": "#after = :task",
            "ExpressionAttributeNames": {"#after": DEPENDENTS_INDEX.partition_key.name},
            "ExpressionAttributeValues": to_item({":task": task_id}),
        }
        while True:
            response = self._client.query(**kwargs)
            ids += [from_item(i)["task_id"] for i in response.get("Items", [])]
            if not response.get("LastEvaluatedKey"):
                return ids
            kwargs["ExclusiveStartKey"] = response["LastEvaluatedKey"]

    def due_task_ids(
        self,
        bucket_key: str,
        now: datetime,
        limit: int,
        start_key: dict[str, Any] | None,
        due_from: datetime | None = None,
    ) -> tuple[list[str], dict[str, Any] | None]:
        """One bounded page of task ids due by ``now`` in one bucket of one shard;
        with ``due_from``, only those due from then on (the sort key's range)."""
        values = {":bucket": bucket_key, ":now": format_instant(now)}
        due = "#next <= :now"
        if due_from is not None:
            due = "#next BETWEEN :from AND :now"
            values[":from"] = format_instant(due_from)
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "IndexName": DUE_INDEX.name,
            "KeyConditionExpression": f"#bucket = :bucket AND {due}",
            "ExpressionAttributeNames": {
                "#bucket": DUE_INDEX.partition_key.name,
                "#next": DUE_INDEX.sort_key.name,
            },
            "ExpressionAttributeValues": to_item(values),
            "Limit": limit,
        }
        if start_key:
            kwargs["ExclusiveStartKey"] = start_key
        response = self._client.query(**kwargs)
        ids = [from_item(i)["task_id"] for i in response.get("Items", [])]
        return ids, response.get("LastEvaluatedKey")


class _CensusMoved(Exception):
    """A delete refused because the task's census key changed since it was read."""


def _census_entry(tenant_id: str, task_id: str, signature_key: str) -> str:
    """The census entry a task counts in: ``<partition>|<sort key>``."""
    shard = zlib.crc32(task_id.encode()) % CENSUS_SHARDS
    return f"{CENSUS_KEY_PREFIX}{tenant_id}#{shard}|{signature_key}"


def _census_key_of(item: dict[str, Any]) -> str | None:
    key = item.get(CENSUS_KEY)
    return key["S"] if isinstance(key, dict) and "S" in key else None


def _counted_under(counted_as: str | None) -> Condition:
    """That the stored task is counted under ``counted_as`` (None: nowhere)."""
    return Missing(CENSUS_KEY) if counted_as is None else Equals(CENSUS_KEY, counted_as)


def _counted_item(
    task: Task, placement: DuePlacement | None, counted: Signature | str | None
) -> dict[str, Any]:
    """The task's item, marked with the census key it is counted under."""
    item = task_to_item(task, placement)
    key = counted.key if isinstance(counted, Signature) else counted
    if key is not None:
        item[CENSUS_KEY] = {"S": key}
    return item


def _uncounts(transition: Transition) -> bool:
    """Whether ``transition`` moves a task to a status the census does not count."""
    status = transition.sets.get(STATUS)
    return status is not None and status not in {s.value for s in COUNTED}


def _condition_check(table: str, task_id: str, expects: Condition) -> dict[str, Any]:
    placeholders = Placeholders()
    return {
        "TableName": table,
        "Key": to_item({"task_id": task_id}),
        "ConditionExpression": placeholders.condition(expects),
        **placeholders.request(),
    }


def _change_item(change: TaskChange) -> dict[str, Any]:
    """A change record as an item of the executions table (``CHANGES_KEY_PREFIX``)."""
    values = change_to_map(change)
    values["changed_task_id"] = values["task_id"]
    values["task_id"] = CHANGES_KEY_PREFIX + change.task_id
    values["execution_id"] = change.change_id
    return to_item({k: v for k, v in values.items() if v is not None})


def _change_of(item: dict[str, Any]) -> TaskChange:
    values = from_item(item)
    return change_from_map({**values, "task_id": values["changed_task_id"]})
