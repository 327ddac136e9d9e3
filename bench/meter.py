"""Counts every AWS request a boto3 client makes and what DynamoDB and SQS would bill for it.

Hooks into botocore's event system (``before-parameter-build`` and
``after-call``), so the product code runs unchanged. moto answers
``ReturnConsumedCapacity`` with a constant (1 write, 0.5 read) whatever the
item size or indexes, so the units are reckoned here by AWS's documented rules
and moto's figure is kept beside them for reference:

- a write costs 1 WCU per started KB of the larger of the item before and after;
  a failed conditional write still costs that;
- a global secondary index is written whenever its entry changes, following the
  projection declared in ``dynacron.definitions.resources``: an entry that appears or
  disappears costs one write, one whose key changed a delete plus a put, and one
  whose key stayed but any projected attribute changed one write (so an ALL
  index is rewritten by every change to its item, a KEYS_ONLY one only when its
  key moves, an INCLUDE one also when an attribute it includes changes); an
  entry is its projected attributes plus 100 bytes;
- a strongly consistent read costs 1 RCU per started 4 KB per item (GetItem,
  BatchGetItem), an eventually consistent one half that; a Query costs 0.5 RCU
  per started 4 KB of everything it returned (eventually consistent, as every
  GSI read is);
- SQS bills each request per started 64 KB of payload.

Optionally sleeps ``latency_seconds`` before every call: the simulated round
trip to AWS for the tick-throughput benchmark.
"""

from __future__ import annotations

import json
import math
import re
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from boto3.dynamodb.types import TypeDeserializer

from dynacron.definitions.resources import IndexDefinition, TableDefinition

_deserializer = TypeDeserializer()
WRITES = {"PutItem", "UpdateItem", "DeleteItem"}
CAPACITY_OPERATIONS = WRITES | {"GetItem", "BatchGetItem", "Query", "Scan", "BatchWriteItem"}


@dataclass
class Call:
    service: str
    operation: str
    caller: str
    ok: bool
    table: str | None = None
    wcu: float = 0.0
    rcu: float = 0.0
    index_wcu: float = 0.0
    items_read: int = 0
    billed_requests: int = 1
    emulator_capacity: float | None = None


@dataclass
class Meter:
    """Attach with ``meter.attach(client)``; ``raw_dynamodb``, unmetered, takes snapshots."""

    tables: dict[str, TableDefinition]
    raw_dynamodb: Any
    latency_seconds: float = 0.0
    calls: list[Call] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def attach(self, client: Any) -> Any:
        events = client.meta.events
        events.register("before-parameter-build", self._before)
        events.register("after-call", self._after)
        if self.latency_seconds:
            events.register("before-call", self._delay)
        return client

    def reset(self) -> list[Call]:
        with self._lock:
            calls, self.calls = self.calls, []
        return calls

    def _delay(self, **_: Any) -> None:
        time.sleep(self.latency_seconds)

    def _before(
        self, params: dict[str, Any], model: Any, context: dict[str, Any], **_: Any
    ) -> None:
        operation = model.name
        context["bench"] = {"caller": _caller(), "params": dict(params)}
        if model.service_model.service_name != "dynamodb":
            return
        if operation in CAPACITY_OPERATIONS:
            params["ReturnConsumedCapacity"] = "INDEXES"
        if operation in WRITES:
            context["bench"]["before"] = self._snapshot(params)

    def _after(
        self,
        http_response: Any,
        parsed: dict[str, Any],
        model: Any,
        context: dict[str, Any],
        **_: Any,
    ) -> None:
        bench = context.get("bench")
        if bench is None:
            return
        service = model.service_model.service_name
        params = bench["params"]
        call = Call(
            service=service,
            operation=model.name,
            caller=bench["caller"],
            ok=http_response.status_code < 300,
            table=params.get("TableName") or next(iter(params.get("RequestItems", {})), None),
        )
        if service == "dynamodb":
            self._dynamodb_units(call, params, parsed, bench)
        elif service == "sqs":
            call.billed_requests = _sqs_billed_requests(model.name, params)
        with self._lock:
            self.calls.append(call)

    def _dynamodb_units(
        self, call: Call, params: dict[str, Any], parsed: dict[str, Any], bench: dict[str, Any]
    ) -> None:
        consumed = parsed.get("ConsumedCapacity")
        if isinstance(consumed, dict):
            call.emulator_capacity = float(consumed.get("CapacityUnits", 0))
        elif isinstance(consumed, list):
            call.emulator_capacity = float(sum(c.get("CapacityUnits", 0) for c in consumed))
        definition = self.tables.get(call.table or "")
        if call.operation in WRITES and definition is not None:
            before = bench.get("before")
            after = self._snapshot(params) if call.ok else before
            size = max(item_size(before or {}), item_size(after or {}))
            call.wcu = max(1, math.ceil(size / 1024))
            if call.ok:
                call.index_wcu = index_write_units(definition, before, after)
        elif call.operation == "GetItem":
            item = parsed.get("Item") or {}
            call.items_read = int(bool(item))
            call.rcu = read_units([item_size(item)], consistent=params.get("ConsistentRead", False))
        elif call.operation == "BatchGetItem":
            requested = params.get("RequestItems", {})
            for table, rows in parsed.get("Responses", {}).items():
                consistent = bool(requested.get(table, {}).get("ConsistentRead", False))
                call.items_read += len(rows)
                call.rcu += sum(read_units([item_size(i)], consistent=consistent) for i in rows)
        elif call.operation in ("Query", "Scan"):
            items = parsed.get("Items", [])
            call.items_read = int(parsed.get("ScannedCount", len(items)))
            sizes = [item_size(i) + (100 if params.get("IndexName") else 0) for i in items]
            call.rcu = read_units([sum(sizes)], consistent=params.get("ConsistentRead", False))

    def _snapshot(self, params: dict[str, Any]) -> dict[str, Any] | None:
        definition = self.tables.get(params.get("TableName", ""))
        if definition is None:
            return None
        source = params.get("Key") or params.get("Item") or {}
        names = [definition.partition_key.name] + (
            [definition.sort_key.name] if definition.sort_key else []
        )
        key = {name: source[name] for name in names if name in source}
        item = self.raw_dynamodb.get_item(
            TableName=params["TableName"], Key=key, ConsistentRead=True
        )
        return item.get("Item")


def add_latency(client: Any, seconds: float) -> Any:
    """Sleep ``seconds`` before every request ``client`` makes: a simulated round trip."""

    def delay(**_: Any) -> None:
        time.sleep(seconds)

    client.meta.events.register("before-call", delay)
    return client


def read_units(sizes: list[int], consistent: bool) -> float:
    units = sum(max(1, math.ceil(size / 4096)) for size in sizes)
    return float(units) if consistent else units / 2


def _sqs_billed_requests(operation: str, params: dict[str, Any]) -> int:
    if operation == "SendMessageBatch":
        payload = sum(len(e["MessageBody"].encode()) for e in params.get("Entries", []))
    elif operation == "SendMessage":
        payload = len(params.get("MessageBody", "").encode())
    else:
        return 1
    return max(1, math.ceil(payload / (64 * 1024)))


def index_write_units(
    definition: TableDefinition, before: dict[str, Any] | None, after: dict[str, Any] | None
) -> float:
    """The index writes AWS bills for one item write, ``before`` and ``after`` the write.

    Per index: an entry put or deleted is one write each, a moved key a delete plus
    a put, a changed projected attribute (same key) one write; an unchanged entry,
    or no entry before or after (a sparse index), none.
    """
    table_keys = [k.name for k in (definition.partition_key, definition.sort_key) if k]
    units = 0.0
    for index in definition.indexes:
        old = _index_entry(before, index, table_keys)
        new = _index_entry(after, index, table_keys)
        if old == new:
            continue
        key_names = (index.partition_key.name, index.sort_key.name, *table_keys)
        if (
            old is not None
            and new is not None
            and _key_of(old, key_names) == _key_of(new, key_names)
        ):
            units += max(_entry_units(old), _entry_units(new))  # rewritten in place
            continue
        units += sum(_entry_units(entry) for entry in (old, new) if entry is not None)
    return units


def _entry_units(entry: dict[str, Any]) -> int:
    return max(1, math.ceil((item_size(entry) + 100) / 1024))


def _key_of(entry: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    return {name: entry.get(name) for name in names}


def _index_entry(
    item: dict[str, Any] | None, index: IndexDefinition, table_keys: list[str]
) -> dict[str, Any] | None:
    """What ``index`` holds of ``item``: its projected attributes, or None if it has no
    entry there (an item without the index's key attributes is not in a sparse index)."""
    names = [index.partition_key.name, index.sort_key.name]
    if item is None or any(n not in item for n in names):
        return None
    if index.projection == "ALL":
        return item
    if index.projection == "KEYS_ONLY":
        return {n: item[n] for n in names + table_keys if n in item}
    if index.projection == "INCLUDE":
        kept = names + table_keys + list(index.non_key_attributes)
        return {n: item[n] for n in kept if n in item}
    raise ValueError(f"index {index.name}: projection {index.projection} is not metered")


def item_size(item: dict[str, Any]) -> int:
    """An item's size by DynamoDB's rules: attribute names plus values."""
    return sum(len(name.encode()) + _value_size(value) for name, value in item.items())


def _value_size(value: dict[str, Any]) -> int:
    ((kind, inner),) = value.items()
    if kind == "S":
        return len(inner.encode())
    if kind == "N":
        digits = len(str(Decimal(inner)).replace("-", "").replace(".", "").lstrip("0")) or 1
        return math.ceil(digits / 2) + 1
    if kind == "B":
        return len(inner)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "M":
        return 3 + sum(len(k.encode()) + _value_size(v) + 1 for k, v in inner.items())
    if kind == "L":
        return 3 + sum(_value_size(v) + 1 for v in inner)
    if kind in ("SS", "NS", "BS"):
        return sum(_value_size({kind[0]: v}) for v in inner)
    raise ValueError(f"unknown attribute type {kind}")


# Public helpers that write for many callers: the call is named by their caller.
SHARED_HELPERS = frozenset({"conditional_write"})
# The client wrapper every AWS adapter calls through (adapters/aws/errors.py), and
# the transition writes every execution change goes through (adapters/aws/expressions.py).
PASS_THROUGH_MODULES = frozenset(
    {"dynacron.adapters.aws.errors", "dynacron.adapters.aws.expressions"}
)
# Callers are named by the port they carry out: ``DynamoTaskStore.claim`` is ``TaskStore.claim``.
BACKEND_PREFIX = re.compile(r"^(Dynamo|Sqs)(?=[A-Z])")


def _caller() -> str:
    """The public dynacron method that made the call: where each unit goes (a private
    helper such as ``ExecutionStore._write`` is named by the method that called it)."""
    frame = sys._getframe(2)
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        name = frame.f_code.co_name
        public = not name.startswith("_") and name not in SHARED_HELPERS
        ours = module.startswith("dynacron.") and not module.startswith("dynacron.local")
        # A store that carries out transitions: named by the move (``begin``, ``finish``),
        # even from a private helper (a batch's changes are each written by one, on the
        # store's own threads, where no public method is on the stack).
        move = getattr(frame.f_locals.get("transition"), "move", "")
        if (public or move) and ours and module not in PASS_THROUGH_MODULES:
            owner = frame.f_locals.get("self")
            port = BACKEND_PREFIX.sub("", type(owner).__name__) if owner is not None else ""
            prefix = f"{port}." if port else ""
            return prefix + (move or frame.f_code.co_name)
        frame = frame.f_back
    return "bench"


def summarise(calls: list[Call], fires: int) -> dict[str, Any]:
    """Totals per fire, and per caller/operation so a reader sees where each unit goes."""
    rows: dict[tuple[str, str, str], dict[str, float]] = {}
    for call in calls:
        key = (
            call.service,
            call.caller,
            call.operation + ("" if call.ok else " (condition failed)"),
        )
        row = rows.setdefault(key, Counter())  # type: ignore[arg-type]
        row["requests"] += 1
        row["billed_requests"] += call.billed_requests
        row["wcu"] += call.wcu
        row["index_wcu"] += call.index_wcu
        row["rcu"] += call.rcu
        row["items_read"] += call.items_read
    breakdown = [
        {
            "service": s,
            "caller": c,
            "operation": o,
            **{k: round(v / fires, 4) for k, v in row.items()},
        }
        for (s, c, o), row in sorted(rows.items())
    ]
    total = {
        k: round(sum(r[k] for r in breakdown), 4)
        for k in ("requests", "billed_requests", "wcu", "index_wcu", "rcu")
    }
    total["write_units"] = round(total["wcu"] + total["index_wcu"], 4)
    total["sqs_requests"] = round(
        sum(r["billed_requests"] for r in breakdown if r["service"] == "sqs"), 4
    )
    total["dynamodb_requests"] = round(
        sum(r["requests"] for r in breakdown if r["service"] == "dynamodb"), 4
    )
    return {"fires": fires, "per_fire": total, "breakdown": breakdown}


def dumps(value: Any) -> str:
    return json.dumps(value, indent=2, default=str)
