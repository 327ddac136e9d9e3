"""An AWS double for the benchmarks: a tiny model of DynamoDB and SQS, and two ways in.

Why: in-process moto spends some 20 ms of CPU on every call on this machine,
all under the GIL, so a tick measured against it measures the emulator.

``AwsModel`` holds items in DynamoDB's wire format and messages as SQS keeps them,
and answers exactly what dynacron asks for: Query on a table or an index (key
condition, sort-key order, ``Limit``, ``ExclusiveStartKey``/``LastEvaluatedKey``),
BatchGetItem, GetItem, PutItem, UpdateItem and DeleteItem with condition
expressions (a failed condition is a ``ConditionalCheckFailedException``, with the
old item when asked for), and SQS SendMessage(Batch), ReceiveMessage (at most 10,
a visibility timeout, a receive count, the redrive to the dead-letter target after
``maxReceiveCount``), DeleteMessage(Batch) and GetQueueAttributes. Anything else
raises ``NotImplementedError``, so a benchmark fails instead of measuring a guess.
Expressions are the small grammar dynacron writes: ``SET a = b, c = d + e``,
``REMOVE x, y``; conditions of comparisons and ``attribute_(not_)exists`` joined
by AND/OR, without parentheses. Each expression is parsed once and kept.

Given a ``Throughput`` (``bench/aws_limits.py``), the model charges every request
its read and write units per partition, table and index, and refuses what AWS
would refuse with AWS's error (``ServiceError``); it always counts the units and
the calls.

Two ways in:
- ``AwsDouble``: real boto3 clients whose requests are answered at botocore's
  ``before-send`` event, the documented point where a handler may return a
  response that fulfils the request, after ``latency_seconds`` of sleeping. The
  request is still built, serialised and signed by botocore, and the JSON answer
  parsed by it, exactly as with the real service; only the network and the service
  are replaced. Nothing leaves the process. The model's own CPU time is summed in
  ``model_cpu_seconds`` (per-thread CPU clock), so the caller can tell its code's
  CPU from the double's.
- ``bench/client_double.py``: objects with the boto3 clients' methods, taking the
  same parameter dicts, for runs where botocore's own CPU would be the bulk of the
  measurement (the scale benchmark).
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import heapq
import io
import json
import re
import threading
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import boto3
from botocore.awsrequest import AWSResponse

from bench.aws_limits import (
    IN_FLIGHT_PER_QUEUE,
    MAX_VISIBILITY_SECONDS,
    RECEIVE_MAX_MESSAGES,
    Charge,
    Throttle,
    Throughput,
    item_size,
    read_units,
    write_units,
)
from dynacron.definitions.resources import (
    QUEUES,
    TABLES,
    IndexDefinition,
    Key,
    QueueDefinition,
    TableDefinition,
)
from dynacron.entry.settings import Settings

REGION = "us-east-1"
ACCOUNT = "000000000000"
Item = dict[str, Any]


class ServiceError(Exception):
    """An error AWS answers with: its code, HTTP status and the response's other fields."""

    def __init__(self, code: str, message: str, status: int = 400, **fields: Any) -> None:
        super().__init__(message)
        self.code = code
        self.status = status
        self.fields = fields


class ConditionFailed(ServiceError):
    def __init__(self, old: Item | None) -> None:
        fields = {"Item": old} if old is not None else {}
        super().__init__(
            "ConditionalCheckFailedException", "The conditional request failed", **fields
        )


def throttled(throttle: Throttle) -> ServiceError:
    """DynamoDB's answer to a request over its throughput."""
    return ServiceError(
        throttle.code,
        "Throughput exceeds the current capacity for one or more resources.",
        ThrottlingReasons=[{"reason": throttle.reason, "resource": throttle.resource}],
    )


@dataclass
class Table:
    """Items by primary key, and each index's partitions kept in key order.

    A partition is a sorted list of (position, primary key), where the position
    is the sort key followed by the table's keys: unique, and the order Query
    walks (DynamoDB leaves the order of equal index sort keys unspecified; here
    it is the table keys'). Sparse: an item lacking an index key is not in it.
    """

    definition: TableDefinition
    items: dict[tuple[str, ...], Item] = field(default_factory=dict)
    partitions: dict[tuple[str | None, str], list[tuple[tuple[Any, ...], tuple[str, ...]]]] = field(
        default_factory=dict
    )
    # Each item's size (``aws_limits.item_size``), once asked for.
    sizes: dict[tuple[str, ...], int] = field(default_factory=dict)

    def size(self, key: tuple[str, ...]) -> int:
        """The size of the item at ``key``, 0 if there is none."""
        size = self.sizes.get(key)
        if size is None:
            item = self.items.get(key)
            size = self.sizes[key] = item_size(item) if item is not None else 0
        return size

    def key_names(self) -> list[str]:
        keys = [self.definition.partition_key, self.definition.sort_key]
        return [k.name for k in keys if k is not None]

    def key_of(self, item: Item) -> tuple[str, ...]:
        return tuple(_scalar_text(item[name]) for name in self.key_names())

    def views(self) -> list[tuple[str | None, list[Key]]]:
        """The base table (when it has a sort key) and each index: name and keys."""
        views: list[tuple[str | None, list[Key]]] = [
            (i.name, [i.partition_key, i.sort_key]) for i in self.definition.indexes
        ]
        if self.definition.sort_key is not None:
            views.append((None, [self.definition.partition_key, self.definition.sort_key]))
        return views

    def position(self, item: Item, keys: list[Key]) -> tuple[Any, ...]:
        names = dict.fromkeys([k.name for k in keys[1:]] + self.key_names())
        names.pop(keys[0].name, None)
        return tuple(_ordered(item[n]) for n in names)

    def store(self, item: Item | None, key: tuple[str, ...] | None = None) -> None:
        """Store ``item`` (None with its ``key``: delete), keeping every index in step."""
        key = key if item is None else self.key_of(item)
        assert key is not None
        old = self.items.get(key)
        for view, keys in self.views():
            if old is not None and all(k.name in old for k in keys):
                entries = self.partitions[(view, _scalar_text(old[keys[0].name]))]
                entry = (self.position(old, keys), key)
                at = bisect.bisect_left(entries, entry)
                assert entries[at] == entry, "index out of step with the items"
                del entries[at]
            if item is not None and all(k.name in item for k in keys):
                entries = self.partitions.setdefault((view, _scalar_text(item[keys[0].name])), [])
                bisect.insort(entries, (self.position(item, keys), key))
        self.sizes.pop(key, None)
        if item is None:
            self.items.pop(key, None)
        else:
            self.items[key] = item

    def load(self, items: list[Item]) -> None:
        """Store many new items at once (filling a table): each index sorted once."""
        for item in items:
            self.items[self.key_of(item)] = item
        for view, keys in self.views():
            for item in items:
                if all(k.name in item for k in keys):
                    entries = self.partitions.setdefault(
                        (view, _scalar_text(item[keys[0].name])), []
                    )
                    entries.append((self.position(item, keys), self.key_of(item)))
        for entries in self.partitions.values():
            entries.sort()

    def partition_of(self, item: Item) -> str:
        return _scalar_text(item[self.definition.partition_key.name])

    def write_charges(
        self, name: str, key: tuple[str, ...], old: Item | None, new: Item | None
    ) -> list[Charge]:
        """What replacing ``old`` (at ``key``) by ``new`` writes: the item, then each index
        entry that changes (an entry whose key moves is a delete and a put)."""
        sized = new if new is not None else old
        assert sized is not None
        size = max(self.size(key), item_size(new) if new else 0)
        charges = [Charge(name, None, self.partition_of(sized), True, write_units(size))]
        for index in self.definition.indexes:
            before, after = _entry(index, old, self), _entry(index, new, self)
            if before == after:
                continue
            keys = (index.partition_key.name, index.sort_key.name)
            moved = before and after and any(before[k] != after[k] for k in keys)
            for entry in [before, after] if moved else [after or before]:
                if entry:
                    partition = _scalar_text(entry[index.partition_key.name])
                    units = write_units(item_size(entry))
                    charges.append(Charge(name, index.name, partition, True, units))
        return charges


def _entry(index: IndexDefinition, item: Item | None, table: Table) -> Item | None:
    """``item``'s entry in ``index`` (its projected attributes), None if not in it."""
    if item is None or index.partition_key.name not in item or index.sort_key.name not in item:
        return None
    if index.projection == "ALL":
        return item
    names = [index.partition_key.name, index.sort_key.name, *table.key_names()]
    if index.projection == "INCLUDE":
        names += index.non_key_attributes
    return {n: item[n] for n in names if n in item}


@dataclass
class Queue:
    """A standard queue: waiting messages, delayed or invisible ones by when they
    show, and those received and not yet deleted (in flight) by receipt handle."""

    definition: QueueDefinition
    now: Callable[[], float]
    redrive_to: Queue | None = None
    visible: deque[dict[str, Any]] = field(default_factory=deque)
    hidden: list[tuple[float, int, dict[str, Any]]] = field(default_factory=list)
    in_flight: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Called when a message becomes visible at once (a poller waiting may take it).
    on_visible: Callable[[], None] | None = None
    # Messages in flight past which a receive answers nothing (SQS's quota, or this
    # process's share of it when the scale run is split over processes).
    in_flight_quota: int = IN_FLIGHT_PER_QUEUE
    sent: int = 0
    redriven: int = 0
    delayed: int = 0
    _sequence: int = 0

    def send(self, body: str, delay_seconds: int = 0) -> str:
        message_id = str(uuid.uuid4())
        message = {
            "MessageId": message_id,
            "Body": body,
            "SentTimestamp": str(int(self.now() * 1000)),
            "ReceiveCount": 0,
        }
        self.sent += 1
        self._show(message, self.now() + delay_seconds)
        return message_id

    def _show(self, message: dict[str, Any], at: float) -> None:
        if at <= self.now():
            self.visible.append(message)
            if self.on_visible is not None:
                self.on_visible()
            return
        self.delayed += 1
        self._sequence += 1
        heapq.heappush(self.hidden, (at, self._sequence, message))

    def release(self) -> None:
        """Messages whose delay or visibility timeout has passed become visible."""
        now = self.now()
        while self.hidden and self.hidden[0][0] <= now:
            at, _, message = heapq.heappop(self.hidden)
            receipt = message.get("Receipt")
            if receipt is not None:
                if self.in_flight.get(receipt) is not message:
                    continue  # deleted while in flight
                if message["VisibleAt"] != at:
                    continue  # its visibility was changed since
                del self.in_flight[receipt]
                message["Receipt"] = None
            else:
                self.delayed -= 1
            self.visible.append(message)

    def next_showing(self) -> float | None:
        """When the next message shows: entries of messages deleted while in flight,
        or whose visibility was changed since, show nothing and are dropped."""
        hidden = self.hidden
        while hidden:
            at, _, message = hidden[0]
            receipt = message.get("Receipt")
            stale = receipt is not None and (
                self.in_flight.get(receipt) is not message or message["VisibleAt"] != at
            )
            if not stale:
                return at
            heapq.heappop(hidden)
        return None

    def receive(self, most: int, visibility_seconds: float) -> list[dict[str, Any]]:
        """Up to ``most`` visible messages, in flight for ``visibility_seconds``; none
        past the in-flight quota; those received ``maxReceiveCount`` times move on."""
        self.release()
        received: list[dict[str, Any]] = []
        now = self.now()
        while self.visible and len(received) < most and len(self.in_flight) < self.in_flight_quota:
            message = self.visible.popleft()
            limit = self.definition.max_receive_count
            if limit is not None and message["ReceiveCount"] >= limit and self.redrive_to:
                self.redriven += 1
                self.redrive_to.send(message["Body"])
                continue
            message["ReceiveCount"] += 1
            receipt = message["Receipt"] = uuid.uuid4().hex
            self.in_flight[receipt] = message
            message["FirstReceivedAt"] = message.get("FirstReceivedAt", now)
            self._hide(message, now + visibility_seconds)
            received.append(message)
        return received

    def _hide(self, message: dict[str, Any], until: float) -> None:
        message["VisibleAt"] = until
        self._sequence += 1
        heapq.heappush(self.hidden, (until, self._sequence, message))

    def change_visibility(self, receipt: str, seconds: float) -> str | None:
        """ChangeMessageVisibility of one message: invisible for ``seconds`` from now
        (0: visible at once). None, or the error code SQS answers for the entry: the
        handle must be the message's latest and the message in flight
        (``ReceiptHandleIsInvalid`` otherwise; ``MessageNotInflight`` once its
        visibility timeout has run out), and the new timeout may not reach beyond
        12 hours from the message's first receipt (``InvalidParameterValue``)."""
        self.release()
        message = self.in_flight.get(receipt)
        if message is None:
            return "ReceiptHandleIsInvalid"
        now = self.now()
        if now + seconds > message["FirstReceivedAt"] + MAX_VISIBILITY_SECONDS:
            return "InvalidParameterValue"
        if seconds <= 0:
            del self.in_flight[receipt]
            message["Receipt"] = None
            message["VisibleAt"] = now
            self._show(message, now)
            return None
        self._hide(message, now + seconds)
        return None

    def delete(self, receipt: str) -> None:
        self.in_flight.pop(receipt, None)

    def bodies(self) -> list[str]:
        """Every message the queue holds, waiting, hidden or in flight."""
        hidden = [m for _, _, m in self.hidden if m.get("Receipt") is None]
        return [m["Body"] for m in [*self.visible, *hidden, *self.in_flight.values()]]

    def depth(self) -> tuple[int, int, int]:
        """Visible, in flight and delayed, as SQS's approximate counts have them."""
        self.release()
        return len(self.visible), len(self.in_flight), self.delayed


class AwsModel:
    """DynamoDB and SQS in dicts: ``answer`` takes an operation's name and its parameters.

    ``now`` is the model's clock in epoch seconds (the simulation's, in the scale
    benchmark); ``throughput`` enforces DynamoDB's limits when given.
    """

    def __init__(
        self,
        prefix: str = "dynacron",
        now: Callable[[], float] = time.time,
        throughput: Throughput | None = None,
    ) -> None:
        self.prefix = prefix
        self.now = now
        self.throughput = throughput
        self.tables = {d.default_name(prefix): Table(d) for d in TABLES}
        self.queues: dict[str, Queue] = {}
        for definition in sorted(QUEUES, key=lambda q: q.dead_letter is not None):
            target = None
            if definition.dead_letter is not None:
                target = self.queues[self.queue_url(definition.dead_letter.default_name(prefix))]
            self.queues[self.queue_url(definition.default_name(prefix))] = Queue(
                definition, now, target
            )
        self.calls: Counter[str] = Counter()
        # Requests to answer with DynamoDB's throttling error whatever the capacity
        # (the cross-check against moto throttles the same requests in both).
        self.refuses: Callable[[str, dict[str, Any]], bool] | None = None
        self.operations: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
            "dynamodb.Query": self._query,
            "dynamodb.BatchGetItem": self._batch_get_item,
            "dynamodb.GetItem": self._get_item,
            "dynamodb.PutItem": self._put_item,
            "dynamodb.UpdateItem": self._update_item,
            "dynamodb.DeleteItem": self._delete_item,
            "sqs.SendMessage": self._send_message,
            "sqs.SendMessageBatch": self._send_message_batch,
            "sqs.ReceiveMessage": self._receive_message,
            "sqs.DeleteMessage": self._delete_message,
            "sqs.DeleteMessageBatch": self._delete_message_batch,
            "sqs.ChangeMessageVisibility": self._change_message_visibility,
            "sqs.ChangeMessageVisibilityBatch": self._change_message_visibility_batch,
            "sqs.GetQueueAttributes": self._get_queue_attributes,
        }

    @staticmethod
    def queue_url(name: str) -> str:
        return f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/{name}"

    def settings(self, **overrides: Any) -> Settings:
        """Settings naming the double's tables and queues, as ``provision`` would."""
        names = {d.logical_id: d.default_name(self.prefix) for d in TABLES}
        queues = {q.logical_id: self.queue_url(q.default_name(self.prefix)) for q in QUEUES}
        return Settings(
            tasks_table=names["Tasks"],
            executions_table=names["Executions"],
            coordination_table=names["Coordination"],
            dispatch_queue_url=queues["DispatchQueue"],
            dead_letter_queue_url=queues["DeadLetterQueue"],
            **overrides,
        )

    def put(self, table_name: str, item: Item) -> None:
        """Store an item directly (filling the table before a measurement; no latency)."""
        self.tables[table_name].store(item)

    def messages(self, queue_url: str) -> list[dict[str, Any]]:
        return [{"Body": body} for body in self.queues[queue_url].bodies()]

    def answer(self, name: str, params: dict[str, Any]) -> dict[str, Any]:
        """The answer to one request; raises ``ServiceError`` as AWS would answer it."""
        operation = self.operations.get(name)
        if operation is None:
            raise NotImplementedError(f"the AWS double does not model {name}")
        self.calls[name] += 1
        if self.refuses is not None and self.refuses(name, params):
            raise throttled(Throttle("ProvisionedThroughputExceededException", "", ""))
        try:
            return operation(params)
        except Throttle as throttle:
            raise throttled(throttle) from None

    def _charge(self, charges: list[Charge]) -> None:
        if self.throughput is not None:
            self.throughput.admit(charges)

    # DynamoDB

    def _query(self, params: dict[str, Any]) -> dict[str, Any]:
        _only(
            params,
            "TableName",
            "IndexName",
            "KeyConditionExpression",
            "ExpressionAttributeNames",
            "ExpressionAttributeValues",
            "Limit",
            "ExclusiveStartKey",
            "ScanIndexForward",
        )
        if params.get("ScanIndexForward") is False:
            raise NotImplementedError("Query newest first")
        table = self.tables[params["TableName"]]
        view = params.get("IndexName")
        keys = dict(table.views())[view]
        names = params.get("ExpressionAttributeNames", {})
        values = params.get("ExpressionAttributeValues", {})
        partition_key, bounds = _key_condition(params["KeyConditionExpression"], _frozen(names))
        if partition_key[0] != keys[0].name:
            raise NotImplementedError(
                f"partition key condition {params['KeyConditionExpression']!r}"
            )
        partition = _scalar_text(values[partition_key[1]])
        entries = table.partitions.get((view, partition), [])
        first, last = _sort_key_range(entries, bounds, values)
        if params.get("ExclusiveStartKey"):
            after = table.position(params["ExclusiveStartKey"], keys)
            first = max(first, bisect.bisect_right(entries, after, key=lambda entry: entry[0]))
        limit = params.get("Limit", len(entries))
        page = [table.items[key] for _, key in entries[first : min(last, first + limit)]]
        shown = list(dict.fromkeys([k.name for k in keys] + table.key_names()))
        index = next((i for i in table.definition.indexes if i.name == view), None)
        projected = page
        if index is not None and index.projection != "ALL":
            projected = [_entry(index, item, table) or {} for item in page]
        size = sum(item_size(item) for item in projected)
        units = read_units(size, False)
        self._charge([Charge(params["TableName"], view, partition, False, units)])
        response: dict[str, Any] = {
            "Items": projected,
            "Count": len(projected),
            "ScannedCount": len(projected),
        }
        # As DynamoDB does: a page cut short by Limit carries the key to resume from,
        # even when nothing follows it.
        if page and len(page) == limit:
            response["LastEvaluatedKey"] = {n: page[-1][n] for n in shown}
        return response

    def _batch_get_item(self, params: dict[str, Any]) -> dict[str, Any]:
        _only(params, "RequestItems")
        responses: dict[str, list[Item]] = {}
        unprocessed: dict[str, Any] = {}
        asked = read = 0
        refused: Throttle | None = None
        for name, request in params["RequestItems"].items():
            _only(request, "Keys", "ConsistentRead")
            table = self.tables[name]
            keys = request["Keys"]
            if len(keys) > 100:
                raise ValueError("BatchGetItem takes at most 100 keys")
            consistent = bool(request.get("ConsistentRead"))
            found, left = [], []
            for key in keys:
                asked += 1
                found_at = table.key_of(key)
                item = table.items.get(found_at)
                units = read_units(table.size(found_at), consistent)
                try:
                    self._charge([Charge(name, None, table.partition_of(key), False, units)])
                except Throttle as throttle:
                    refused = throttle
                    left.append(key)
                    continue
                read += 1
                if item is not None:
                    found.append(item)
            responses[name] = found
            if left:
                unprocessed[name] = {"Keys": left, "ConsistentRead": consistent}
        if refused is not None and not read:
            # Only a request of which nothing could be read is refused whole.
            raise refused
        return {"Responses": responses, "UnprocessedKeys": unprocessed}

    def _get_item(self, params: dict[str, Any]) -> dict[str, Any]:
        _only(params, "TableName", "Key", "ConsistentRead")
        table = self.tables[params["TableName"]]
        key = table.key_of(params["Key"])
        item = table.items.get(key)
        units = read_units(table.size(key), bool(params.get("ConsistentRead")))
        partition = table.partition_of(params["Key"])
        self._charge([Charge(params["TableName"], None, partition, False, units)])
        return {"Item": item} if item is not None else {}

    def _put_item(self, params: dict[str, Any]) -> dict[str, Any]:
        _only(
            params,
            "TableName",
            "Item",
            "ConditionExpression",
            "ExpressionAttributeNames",
            "ExpressionAttributeValues",
            "ReturnValuesOnConditionCheckFailure",
        )
        table = self.tables[params["TableName"]]
        key = table.key_of(params["Item"])
        self._write(params, table, key, lambda old: params["Item"])
        return {}

    def _update_item(self, params: dict[str, Any]) -> dict[str, Any]:
        _only(
            params,
            "TableName",
            "Key",
            "UpdateExpression",
            "ConditionExpression",
            "ExpressionAttributeNames",
            "ExpressionAttributeValues",
            "ReturnValues",
            "ReturnValuesOnConditionCheckFailure",
        )
        table = self.tables[params["TableName"]]
        key = table.key_of(params["Key"])
        plan = _update_plan(
            params["UpdateExpression"], _frozen(params.get("ExpressionAttributeNames", {}))
        )
        values = params.get("ExpressionAttributeValues", {})
        new = self._write(params, table, key, lambda old: plan(dict(old or params["Key"]), values))
        returned = params.get("ReturnValues", "NONE")
        if returned == "ALL_NEW":
            return {"Attributes": new}
        if returned != "NONE":
            raise NotImplementedError(f"ReturnValues {returned}")
        return {}

    def _delete_item(self, params: dict[str, Any]) -> dict[str, Any]:
        _only(
            params,
            "TableName",
            "Key",
            "ConditionExpression",
            "ExpressionAttributeNames",
            "ExpressionAttributeValues",
        )
        table = self.tables[params["TableName"]]
        self._write(params, table, table.key_of(params["Key"]), lambda old: None)
        return {}

    def _write(
        self,
        params: dict[str, Any],
        table: Table,
        key: tuple[str, ...],
        change: Callable[[Item | None], Item | None],
    ) -> Item | None:
        """Check the condition, charge the write, store the new item (or delete it)."""
        name = params["TableName"]
        old = table.items.get(key)
        condition = params.get("ConditionExpression")
        if condition is not None:
            holds = _condition(condition, _frozen(params.get("ExpressionAttributeNames", {})))
            if not holds(old or {}, params.get("ExpressionAttributeValues", {})):
                # A refused write still costs its units on the table, none on an index.
                partition = table.partition_of(params.get("Key") or params["Item"])
                units = write_units(table.size(key))
                self._charge([Charge(name, None, partition, True, units)])
                wants_old = params.get("ReturnValuesOnConditionCheckFailure") == "ALL_OLD"
                raise ConditionFailed(old if wants_old else None)
        new = change(old)
        if old is None and new is None:
            partition = table.partition_of(params["Key"])
            self._charge([Charge(name, None, partition, True, 1.0)])
            return None
        self._charge(table.write_charges(name, key, old, new))
        table.store(new, key)
        return new

    # SQS

    def _queue(self, params: dict[str, Any]) -> Queue:
        return self.queues[params["QueueUrl"]]

    def _send_message(self, params: dict[str, Any]) -> dict[str, Any]:
        _only(params, "QueueUrl", "MessageBody", "DelaySeconds", "MessageAttributes")
        message_id = self._queue(params).send(params["MessageBody"], params.get("DelaySeconds", 0))
        return {"MessageId": message_id, "MD5OfMessageBody": _md5(params["MessageBody"])}

    def _send_message_batch(self, params: dict[str, Any]) -> dict[str, Any]:
        _only(params, "QueueUrl", "Entries")
        queue = self._queue(params)
        entries = params["Entries"]
        if not 1 <= len(entries) <= 10:
            raise ValueError("SendMessageBatch takes 1 to 10 entries")
        successful = []
        for entry in entries:
            _only(entry, "Id", "MessageBody", "DelaySeconds")
            message_id = queue.send(entry["MessageBody"], entry.get("DelaySeconds", 0))
            successful.append(
                {
                    "Id": entry["Id"],
                    "MessageId": message_id,
                    "MD5OfMessageBody": _md5(entry["MessageBody"]),
                }
            )
        return {"Successful": successful, "Failed": []}

    def _receive_message(self, params: dict[str, Any]) -> dict[str, Any]:
        _only(
            params,
            "QueueUrl",
            "MaxNumberOfMessages",
            "VisibilityTimeout",
            "WaitTimeSeconds",
            "MessageSystemAttributeNames",
        )
        queue = self._queue(params)
        most = params.get("MaxNumberOfMessages", 1)
        if not 1 <= most <= RECEIVE_MAX_MESSAGES:
            raise ValueError("ReceiveMessage takes 1 to 10 messages")
        visibility = params.get("VisibilityTimeout", queue.definition.visibility_timeout_seconds)
        messages = [
            {
                "MessageId": m["MessageId"],
                "ReceiptHandle": m["Receipt"],
                "Body": m["Body"],
                "MD5OfBody": _md5(m["Body"]),
                "Attributes": {
                    "SentTimestamp": m["SentTimestamp"],
                    "ApproximateReceiveCount": str(m["ReceiveCount"]),
                },
            }
            for m in queue.receive(most, visibility)
        ]
        return {"Messages": messages} if messages else {}

    def _delete_message(self, params: dict[str, Any]) -> dict[str, Any]:
        _only(params, "QueueUrl", "ReceiptHandle")
        self._queue(params).delete(params["ReceiptHandle"])
        return {}

    def _delete_message_batch(self, params: dict[str, Any]) -> dict[str, Any]:
        _only(params, "QueueUrl", "Entries")
        queue = self._queue(params)
        for entry in params["Entries"]:
            queue.delete(entry["ReceiptHandle"])
        return {"Successful": [{"Id": e["Id"]} for e in params["Entries"]], "Failed": []}

    def _change_message_visibility(self, params: dict[str, Any]) -> dict[str, Any]:
        _only(params, "QueueUrl", "ReceiptHandle", "VisibilityTimeout")
        code = self._queue(params).change_visibility(
            params["ReceiptHandle"], _visibility(params["VisibilityTimeout"])
        )
        if code is not None:
            raise ServiceError(code, f"{code} for {params['ReceiptHandle']}")
        return {}

    def _change_message_visibility_batch(self, params: dict[str, Any]) -> dict[str, Any]:
        _only(params, "QueueUrl", "Entries")
        queue = self._queue(params)
        entries = params["Entries"]
        if not 1 <= len(entries) <= RECEIVE_MAX_MESSAGES:
            raise ValueError("ChangeMessageVisibilityBatch takes 1 to 10 entries")
        successful, failed = [], []
        for entry in entries:
            _only(entry, "Id", "ReceiptHandle", "VisibilityTimeout")
            code = queue.change_visibility(
                entry["ReceiptHandle"], _visibility(entry.get("VisibilityTimeout", 0))
            )
            if code is None:
                successful.append({"Id": entry["Id"]})
            else:
                failed.append(
                    {"Id": entry["Id"], "SenderFault": True, "Code": code, "Message": code}
                )
        return {"Successful": successful, "Failed": failed}

    def _get_queue_attributes(self, params: dict[str, Any]) -> dict[str, Any]:
        _only(params, "QueueUrl", "AttributeNames")
        visible, in_flight, delayed = self._queue(params).depth()
        known = {
            "ApproximateNumberOfMessages": str(visible),
            "ApproximateNumberOfMessagesNotVisible": str(in_flight),
            "ApproximateNumberOfMessagesDelayed": str(delayed),
        }
        return {"Attributes": {n: known[n] for n in params["AttributeNames"]}}


class AwsDouble(AwsModel):
    """The model behind real boto3 clients that wait ``latency_seconds`` (``before-send``)."""

    def __init__(self, latency_seconds: float, prefix: str = "dynacron") -> None:
        super().__init__(prefix)
        self.latency_seconds = latency_seconds
        self.model_cpu_seconds = 0.0
        self._lock = threading.Lock()

    def clients(self) -> tuple[Any, Any]:
        """Real boto3 DynamoDB and SQS clients whose requests this double answers."""
        made = []
        for service in ("dynamodb", "sqs"):
            client = boto3.client(
                service,
                region_name=REGION,
                aws_access_key_id="double",
                aws_secret_access_key="double",
            )
            client.meta.events.register(f"before-send.{service}", self._answer)
            made.append(client)
        return made[0], made[1]

    def _answer(self, request: Any, event_name: str, **_: Any) -> AWSResponse:
        """The model's answer, returned ``latency_seconds`` after the request was sent."""
        sent_at = time.perf_counter()
        cpu_before = time.thread_time()
        _, service, operation = event_name.split(".")[:3]
        params = json.loads(request.body or b"{}")
        status = 200
        with self._lock:
            try:
                body = self.answer(f"{service}.{operation}", params)
            except ServiceError as error:
                status = error.status
                body = {
                    "__type": f"com.amazonaws.dynamodb.v20120810#{error.code}",
                    "message": str(error),
                }
                body.update(error.fields)
        content = json.dumps(body).encode()
        headers = {
            "x-amzn-RequestId": str(uuid.uuid4()),
            "Content-Type": "application/x-amz-json-1.0",
            "Content-Length": str(len(content)),
        }
        response = AWSResponse(request.url, status, headers, _Body(content))
        spent = time.thread_time() - cpu_before
        with self._lock:
            self.model_cpu_seconds += spent
        # The service's own work is part of a real round trip, so the model's time
        # is taken out of the wait rather than added to it.
        remaining = self.latency_seconds - (time.perf_counter() - sent_at)
        if remaining > 0:
            time.sleep(remaining)
        return response


class _Body(io.BytesIO):
    """What botocore reads an HTTP response body from."""

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self.getvalue()


def _visibility(seconds: Any) -> int:
    """A VisibilityTimeout as SQS takes it: whole seconds, 0 to 12 hours."""
    if not isinstance(seconds, int) or not 0 <= seconds <= MAX_VISIBILITY_SECONDS:
        raise ServiceError("InvalidParameterValue", f"VisibilityTimeout {seconds!r}")
    return seconds


def _md5(text: str) -> str:
    return hashlib.md5(text.encode()).hexdigest()


def _only(params: dict[str, Any], *allowed: str) -> None:
    unknown = set(params) - set(allowed)
    if unknown:
        raise NotImplementedError(f"the AWS double does not model {sorted(unknown)}")


def _frozen(names: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(names.items())


def _scalar_text(value: dict[str, Any]) -> str:
    ((kind, inner),) = value.items()
    if kind not in ("S", "N"):
        raise NotImplementedError(f"key of type {kind}")
    return str(inner)


def _ordered(value: dict[str, Any]) -> Any:
    """A scalar as DynamoDB orders it: strings by their bytes, numbers by value."""
    ((kind, inner),) = value.items()
    if kind == "S":
        return inner.encode()
    if kind == "N":
        return Decimal(inner)
    raise NotImplementedError(f"ordering of type {kind}")


_BETWEEN = re.compile(r"^\s*(\S+) BETWEEN (\S+) AND (\S+)\s*$")
_COMPARISON = re.compile(r"^\s*(\S+)\s*(=|<>|<=|>=|<|>)\s*(\S+)\s*$")
_FUNCTION = re.compile(r"^\s*(attribute_exists|attribute_not_exists)\((\S+)\)\s*$")
Test = Callable[[Item, dict[str, Any]], bool]


def _comparison(text: str) -> tuple[str, str, str]:
    match = _COMPARISON.match(text)
    if match is None:
        raise NotImplementedError(f"condition {text!r}")
    left, operator, right = match.groups()
    return left, operator, right


@functools.lru_cache(maxsize=4096)
def _key_condition(
    text: str, names: tuple[tuple[str, str], ...]
) -> tuple[tuple[str, str], list[tuple[str, str]]]:
    """A Query's key condition: (partition key name, its value's placeholder), and the
    sort key's bounds as (operator, placeholder) (``BETWEEN`` is ``>=`` and ``<=``)."""
    named = dict(names)
    conditions = text.split(" AND ")
    between = _BETWEEN.match(" AND ".join(conditions[1:]))
    if between is not None:
        key, low, high = between.groups()
        conditions = [conditions[0], f"{key} >= {low}", f"{key} <= {high}"]
    elif len(conditions) > 2:
        raise NotImplementedError(text)
    partition, operator, value = _comparison(conditions[0])
    if operator != "=":
        raise NotImplementedError(f"partition key condition {conditions[0]!r}")
    bounds = []
    for condition in conditions[1:]:
        _, operator, bound = _comparison(condition)
        if operator == "<>" or not bound.startswith(":"):
            raise NotImplementedError(f"sort key condition {condition!r}")
        bounds.append((operator, bound))
    return (named.get(partition, partition), value), bounds


def _sort_key_range(
    entries: list[tuple[tuple[Any, ...], tuple[str, ...]]],
    bounds: list[tuple[str, str]],
    values: dict[str, Any],
) -> tuple[int, int]:
    """The slice of a partition's ``entries`` (sorted by sort key first) the bounds keep."""
    low, high = 0, len(entries)

    def sort_key(entry: tuple[tuple[Any, ...], tuple[str, ...]]) -> Any:
        return entry[0][0]

    for operator, placeholder in bounds:
        bound = _ordered(values[placeholder])
        if operator in (">=", "="):
            low = max(low, bisect.bisect_left(entries, bound, key=sort_key))
        if operator == ">":
            low = max(low, bisect.bisect_right(entries, bound, key=sort_key))
        if operator in ("<=", "="):
            high = min(high, bisect.bisect_right(entries, bound, key=sort_key))
        if operator == "<":
            high = min(high, bisect.bisect_left(entries, bound, key=sort_key))
    return low, high


@functools.lru_cache(maxsize=4096)
def _condition(text: str, names: tuple[tuple[str, str], ...]) -> Test:
    """A condition of comparisons and attribute_(not_)exists joined by AND/OR (AND binding
    first), parsed once; an empty one always holds."""
    if not text.strip():
        return lambda item, values: True
    if "(" in text.replace("attribute_exists(", "").replace("attribute_not_exists(", ""):
        raise NotImplementedError(f"parentheses in {text!r}")
    named = dict(names)
    alternatives = [
        [_clause(clause, named) for clause in alternative.split(" AND ")]
        for alternative in text.split(" OR ")
    ]
    return lambda item, values: any(
        all(c(item, values) for c in clauses) for clauses in alternatives
    )


def _operand(token: str, names: dict[str, str]) -> Callable[[Item, dict[str, Any]], Any]:
    if token.startswith(":"):
        return lambda item, values: values[token]
    name = names.get(token, token)
    return lambda item, values: item.get(name)


def _clause(text: str, names: dict[str, str]) -> Test:
    function = _FUNCTION.match(text)
    if function is not None:
        kind, token = function.groups()
        name = names.get(token, token)
        if kind == "attribute_exists":
            return lambda item, values: name in item
        return lambda item, values: name not in item
    left, operator, right = _comparison(text)
    first, second = _operand(left, names), _operand(right, names)
    return lambda item, values: _compare(first(item, values), operator, second(item, values))


def _compare(left: Any, operator: str, right: Any) -> bool:
    if left is None or right is None:
        return False  # a comparison with a missing attribute is false in DynamoDB
    if operator in ("=", "<>"):
        same = _ordered(left) == _ordered(right) if _is_scalar(left, right) else left == right
        return bool(same) if operator == "=" else not same
    if not _is_scalar(left, right):
        return False
    a, b = _ordered(left), _ordered(right)
    if operator == "<":
        return bool(a < b)
    if operator == "<=":
        return bool(a <= b)
    if operator == ">":
        return bool(a > b)
    return bool(a >= b)


def _is_scalar(left: dict[str, Any], right: dict[str, Any]) -> bool:
    return left.keys() == right.keys() and next(iter(left)) in ("S", "N")


_CLAUSES = re.compile(r"\b(SET|REMOVE)\b")


@functools.lru_cache(maxsize=4096)
def _update_plan(
    expression: str, names: tuple[tuple[str, str], ...]
) -> Callable[[Item, dict[str, Any]], Item]:
    """``SET a = b, c = d + e`` and ``REMOVE x, y``, in that grammar and nothing more,
    parsed once: the function applies it to an item with the request's values."""
    named = dict(names)
    parts = _CLAUSES.split(expression)
    if parts[0].strip():
        raise NotImplementedError(f"update expression {expression!r}")
    assignments: list[tuple[str, Callable[[Item, dict[str, Any]], Any]]] = []
    removals: list[str] = []
    for action, body in zip(parts[1::2], parts[2::2], strict=True):
        for element in (e.strip() for e in body.split(",")):
            if action == "REMOVE":
                removals.append(named.get(element, element))
                continue
            target, _, source = (s.strip() for s in element.partition("="))
            assignments.append((named.get(target, target), _value(source, named)))

    def apply(item: Item, values: dict[str, Any]) -> Item:
        # Every operand is read from the item as it was before this update.
        computed = [(name, value(item, values)) for name, value in assignments]
        for name, value in computed:
            item[name] = value
        for name in removals:
            item.pop(name, None)
        return item

    return apply


def _value(source: str, names: dict[str, str]) -> Callable[[Item, dict[str, Any]], Any]:
    for operator in (" + ", " - "):
        if operator in source:
            left, right = (_operand(t.strip(), names) for t in source.split(operator, 1))
            return _arithmetic(left, right, operator == " + ", source)
    if "(" in source:
        raise NotImplementedError(f"function in {source!r}")
    operand = _operand(source, names)

    def plain(item: Item, values: dict[str, Any]) -> Any:
        value = operand(item, values)
        if value is None:
            raise NotImplementedError(f"SET from a missing attribute {source!r}")
        return value

    return plain


def _arithmetic(
    left: Callable[[Item, dict[str, Any]], Any],
    right: Callable[[Item, dict[str, Any]], Any],
    adding: bool,
    source: str,
) -> Callable[[Item, dict[str, Any]], Any]:
    def arithmetic(item: Item, values: dict[str, Any]) -> Any:
        a, b = left(item, values), right(item, values)
        if a is None or b is None or "N" not in a or "N" not in b:
            raise NotImplementedError(f"arithmetic on {source!r}")
        x, y = Decimal(a["N"]), Decimal(b["N"])
        return {"N": str(x + y if adding else x - y)}

    return arithmetic
