"""An AWS double for the tick-throughput benchmark: each call waits, then a tiny model answers.

Why: in-process moto spends some 20 ms of CPU on every call on this machine,
all under the GIL, so a tick measured against it measures the emulator. Here
every request the real boto3 clients make is answered from botocore's
``before-send`` event, the documented point where a handler may return a
response that fulfils the request, after ``latency_seconds`` of sleeping. The
request is still built, serialised and signed by botocore, and the JSON answer
is parsed by it, exactly as with the real service; only the network and the
service are replaced. Nothing leaves the process.

The model holds items in DynamoDB's wire format and knows exactly what a tick
asks for: Query on a table or an index (key condition, sort-key order,
``Limit``, ``ExclusiveStartKey``/``LastEvaluatedKey``), strongly consistent
BatchGetItem, GetItem, PutItem and UpdateItem with condition expressions (a
failed condition is a ``ConditionalCheckFailedException``), SQS
SendMessageBatch and GetQueueAttributes. Anything else raises
``NotImplementedError``, so the benchmark fails instead of measuring a guess.
Expressions are the small grammar dynacron writes: ``SET a = b, c = d + e``,
``REMOVE x, y``; conditions of comparisons and ``attribute_(not_)exists``
joined by AND/OR, without parentheses.

The model's own CPU time is summed in ``model_cpu_seconds`` (per-thread CPU
clock), so the caller can tell the tick's CPU from the double's.
"""

from __future__ import annotations

import bisect
import hashlib
import io
import json
import re
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import boto3
from botocore.awsrequest import AWSResponse

from dynacron.definitions.resources import QUEUES, TABLES, Key, TableDefinition
from dynacron.entry.settings import Settings

REGION = "us-east-1"
ACCOUNT = "000000000000"
Item = dict[str, Any]


class ConditionFailed(Exception):
    def __init__(self, old: Item | None) -> None:
        super().__init__("The conditional request failed")
        self.old = old


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

    def store(self, item: Item) -> None:
        key = self.key_of(item)
        old = self.items.get(key)
        for view, keys in self.views():
            if old is not None and all(k.name in old for k in keys):
                entries = self.partitions[(view, _scalar_text(old[keys[0].name]))]
                entry = (self.position(old, keys), key)
                at = bisect.bisect_left(entries, entry)
                assert entries[at] == entry, "index out of step with the items"
                del entries[at]
            if all(k.name in item for k in keys):
                entries = self.partitions.setdefault((view, _scalar_text(item[keys[0].name])), [])
                bisect.insort(entries, (self.position(item, keys), key))
        self.items[key] = item


class AwsDouble:
    """DynamoDB and SQS in a dict, behind real boto3 clients that wait ``latency_seconds``."""

    def __init__(self, latency_seconds: float, prefix: str = "dynacron") -> None:
        self.latency_seconds = latency_seconds
        self.prefix = prefix
        self.tables = {d.default_name(prefix): Table(d) for d in TABLES}
        self.queues: dict[str, list[dict[str, Any]]] = {
            self.queue_url(q.default_name(prefix)): [] for q in QUEUES
        }
        self.calls: Counter[str] = Counter()
        self.model_cpu_seconds = 0.0
        self._lock = threading.Lock()
        self._operations: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
            "dynamodb.Query": self._query,
            "dynamodb.BatchGetItem": self._batch_get_item,
            "dynamodb.GetItem": self._get_item,
            "dynamodb.PutItem": self._put_item,
            "dynamodb.UpdateItem": self._update_item,
            "sqs.SendMessageBatch": self._send_message_batch,
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

    def put(self, table_name: str, item: Item) -> None:
        """Store an item directly (filling the table before a measurement; no latency)."""
        self.tables[table_name].store(item)

    def messages(self, queue_url: str) -> list[dict[str, Any]]:
        return list(self.queues[queue_url])

    def _answer(self, request: Any, event_name: str, **_: Any) -> AWSResponse:
        """The model's answer, returned ``latency_seconds`` after the request was sent."""
        sent_at = time.perf_counter()
        cpu_before = time.thread_time()
        _, service, operation = event_name.split(".")[:3]
        name = f"{service}.{operation}"
        if name not in self._operations:
            raise NotImplementedError(f"the AWS double does not model {name}")
        params = json.loads(request.body or b"{}")
        status = 200
        with self._lock:
            self.calls[name] += 1
            try:
                body = self._operations[name](params)
            except ConditionFailed as failure:
                status = 400
                body = {
                    "__type": "com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException",
                    "message": str(failure),
                }
                if failure.old is not None:
                    body["Item"] = failure.old
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
        )
        table = self.tables[params["TableName"]]
        view = params.get("IndexName")
        keys = dict(table.views())[view]
        names = params.get("ExpressionAttributeNames", {})
        values = params.get("ExpressionAttributeValues", {})
        conditions = params["KeyConditionExpression"].split(" AND ")
        between = _BETWEEN.match(" AND ".join(conditions[1:]))
        if between is not None:  # ``k BETWEEN :a AND :b`` is ``k >= :a AND k <= :b``
            key, low, high = between.groups()
            conditions = [conditions[0], f"{key} >= {low}", f"{key} <= {high}"]
        elif len(conditions) > 2:
            raise NotImplementedError(params["KeyConditionExpression"])
        partition, operator, partition_value = _comparison(conditions[0])
        if names.get(partition, partition) != keys[0].name or operator != "=":
            raise NotImplementedError(f"partition key condition {conditions[0]!r}")
        sort_key_holds = _condition(" AND ".join(conditions[1:]), names, values)
        entries = table.partitions.get((view, _scalar_text(values[partition_value])), [])
        first = 0
        if params.get("ExclusiveStartKey"):
            after = table.position(params["ExclusiveStartKey"], keys)
            first = bisect.bisect_right(entries, after, key=lambda entry: entry[0])
        limit = params.get("Limit", len(entries))
        page: list[Item] = []
        for _, key in entries[first:]:
            if len(page) == limit:
                break
            if sort_key_holds(table.items[key]):
                page.append(table.items[key])
        shown = list(dict.fromkeys([k.name for k in keys] + table.key_names()))
        index = next((i for i in table.definition.indexes if i.name == view), None)
        projected = page
        if index is not None and index.projection == "KEYS_ONLY":
            projected = [{n: item[n] for n in shown} for item in page]
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
        for table_name, request in params["RequestItems"].items():
            _only(request, "Keys", "ConsistentRead")
            table = self.tables[table_name]
            keys = request["Keys"]
            if len(keys) > 100:
                raise ValueError("BatchGetItem takes at most 100 keys")
            responses[table_name] = [
                table.items[table.key_of(k)] for k in keys if table.key_of(k) in table.items
            ]
        return {"Responses": responses, "UnprocessedKeys": {}}

    def _get_item(self, params: dict[str, Any]) -> dict[str, Any]:
        _only(params, "TableName", "Key", "ConsistentRead")
        table = self.tables[params["TableName"]]
        item = table.items.get(table.key_of(params["Key"]))
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
        self._check(params, table.items.get(key))
        table.store(params["Item"])
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
        old = table.items.get(key)
        self._check(params, old)
        new = _updated(
            dict(old or params["Key"]),
            params["UpdateExpression"],
            params.get("ExpressionAttributeNames", {}),
            params.get("ExpressionAttributeValues", {}),
        )
        table.store(new)
        returned = params.get("ReturnValues", "NONE")
        if returned == "ALL_NEW":
            return {"Attributes": new}
        if returned != "NONE":
            raise NotImplementedError(f"ReturnValues {returned}")
        return {}

    @staticmethod
    def _check(params: dict[str, Any], old: Item | None) -> None:
        condition = params.get("ConditionExpression")
        if condition is None:
            return
        names = params.get("ExpressionAttributeNames", {})
        values = params.get("ExpressionAttributeValues", {})
        if not _condition(condition, names, values)(old or {}):
            wants_old = params.get("ReturnValuesOnConditionCheckFailure") == "ALL_OLD"
            raise ConditionFailed(old if wants_old else None)

    # SQS

    def _send_message_batch(self, params: dict[str, Any]) -> dict[str, Any]:
        _only(params, "QueueUrl", "Entries")
        queue = self.queues[params["QueueUrl"]]
        entries = params["Entries"]
        if not 1 <= len(entries) <= 10:
            raise ValueError("SendMessageBatch takes 1 to 10 entries")
        successful = []
        for entry in entries:
            _only(entry, "Id", "MessageBody", "DelaySeconds")
            message_id = str(uuid.uuid4())
            queue.append(
                {
                    "MessageId": message_id,
                    "Body": entry["MessageBody"],
                    "DelaySeconds": entry.get("DelaySeconds", 0),
                }
            )
            successful.append(
                {
                    "Id": entry["Id"],
                    "MessageId": message_id,
                    "MD5OfMessageBody": hashlib.md5(entry["MessageBody"].encode()).hexdigest(),
                }
            )
        return {"Successful": successful, "Failed": []}

    def _get_queue_attributes(self, params: dict[str, Any]) -> dict[str, Any]:
        _only(params, "QueueUrl", "AttributeNames")
        queue = self.queues[params["QueueUrl"]]
        # Nothing receives from the double's queues: every message is waiting.
        known = {
            "ApproximateNumberOfMessages": str(len(queue)),
            "ApproximateNumberOfMessagesNotVisible": "0",
        }
        return {"Attributes": {n: known[n] for n in params["AttributeNames"]}}


class _Body(io.BytesIO):
    """What botocore reads an HTTP response body from."""

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self.getvalue()


def _only(params: dict[str, Any], *allowed: str) -> None:
    unknown = set(params) - set(allowed)
    if unknown:
        raise NotImplementedError(f"the AWS double does not model {sorted(unknown)}")


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


def _comparison(text: str) -> tuple[str, str, str]:
    match = _COMPARISON.match(text)
    if match is None:
        raise NotImplementedError(f"condition {text!r}")
    left, operator, right = match.groups()
    return left, operator, right


def _operand(token: str, item: Item, names: dict[str, str], values: dict[str, Any]) -> Any:
    if token.startswith(":"):
        return values[token]
    return item.get(names.get(token, token))


def _condition(text: str, names: dict[str, str], values: dict[str, Any]) -> Callable[[Item], bool]:
    """A condition of comparisons and attribute_(not_)exists joined by AND/OR (AND binding
    first), parsed once; an empty one always holds."""
    if not text.strip():
        return lambda item: True
    if "(" in text.replace("attribute_exists(", "").replace("attribute_not_exists(", ""):
        raise NotImplementedError(f"parentheses in {text!r}")
    alternatives = [
        [_clause(clause, names, values) for clause in alternative.split(" AND ")]
        for alternative in text.split(" OR ")
    ]
    return lambda item: any(all(c(item) for c in clauses) for clauses in alternatives)


def _clause(text: str, names: dict[str, str], values: dict[str, Any]) -> Callable[[Item], bool]:
    function = _FUNCTION.match(text)
    if function is not None:
        kind, token = function.groups()
        name = names.get(token, token)
        if kind == "attribute_exists":
            return lambda item: name in item
        return lambda item: name not in item
    left, operator, right = _comparison(text)
    return lambda item: _compare(
        _operand(left, item, names, values), operator, _operand(right, item, names, values)
    )


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


def _updated(item: Item, expression: str, names: dict[str, str], values: dict[str, Any]) -> Item:
    """``SET a = b, c = d + e`` and ``REMOVE x, y``, in that grammar and nothing more."""
    parts = _CLAUSES.split(expression)
    if parts[0].strip():
        raise NotImplementedError(f"update expression {expression!r}")
    assignments: list[tuple[str, Any]] = []
    removals: list[str] = []
    for action, body in zip(parts[1::2], parts[2::2], strict=True):
        for element in (e.strip() for e in body.split(",")):
            if action == "REMOVE":
                removals.append(names.get(element, element))
                continue
            target, _, source = (s.strip() for s in element.partition("="))
            assignments.append((names.get(target, target), _value(source, item, names, values)))
    # Every operand is read from the item as it was before this update.
    for name, value in assignments:
        item[name] = value
    for name in removals:
        item.pop(name, None)
    return item


def _value(source: str, item: Item, names: dict[str, str], values: dict[str, Any]) -> Any:
    for operator in (" + ", " - "):
        if operator in source:
            left, right = (
                _operand(t.strip(), item, names, values) for t in source.split(operator, 1)
            )
            if left is None or right is None or "N" not in left or "N" not in right:
                raise NotImplementedError(f"arithmetic on {source!r}")
            a, b = Decimal(left["N"]), Decimal(right["N"])
            return {"N": str(a + b if operator == " + " else a - b)}
    if "(" in source:
        raise NotImplementedError(f"function in {source!r}")
    value = _operand(source, item, names, values)
    if value is None:
        raise NotImplementedError(f"SET from a missing attribute {source!r}")
    return value
