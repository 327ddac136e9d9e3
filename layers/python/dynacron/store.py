"""DynamoDB adapters: tasks, executions and the tick's cursors.

Clients are injected. Every state transition is one conditional write that names
the state it expects, so concurrent ticks, workers and API calls cannot both win.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any, Generic, TypeVar

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.exceptions import ClientError

from dynacron.domain.errors import InvalidRequest, LimitExceeded
from dynacron.domain.executions import (
    Dispatch,
    Execution,
    ExecutionStatus,
    HandlerCallRecord,
    ResultSummary,
)
from dynacron.domain.instants import format_instant, parse_instant
from dynacron.domain.limits import RateLimit, TaskLimits
from dynacron.domain.retry import RetryPolicy
from dynacron.domain.schedules import (
    AfterSchedule,
    CronSchedule,
    FixedDelaySchedule,
    OneTimeSchedule,
    RateSchedule,
    Schedule,
    Window,
)
from dynacron.domain.tasks import (
    DEFAULT_CATCHUP_WINDOW_SECONDS,
    UNREADABLE_SCHEDULE,
    CatchUp,
    CatchUpPolicy,
    Claim,
    DuePlacement,
    Overlap,
    Task,
    TaskStatus,
    shard_for,
    task_id_of,
)
from dynacron.domain.tenants import DEFAULT_TENANT
from dynacron.domain.uptime import Outage, ShardHistory
from dynacron.domain.wallclock import Ambiguous, DstPolicy, Nonexistent
from dynacron.queue import upstream_from_map, upstream_to_map
from dynacron.resources import (
    CURSOR_KEY_PREFIX,
    DEAD_LETTER_INDEX,
    DEPENDENTS_INDEX,
    DUE_INDEX,
    EXECUTIONS,
    LEASE_INDEX,
    LEASE_SHARDS,
    TENANT_INDEX,
    TENANT_KEY_PREFIX,
    IndexDefinition,
)

T = TypeVar("T")
_serializer = TypeSerializer()
_deserializer = TypeDeserializer()
BATCH_GET_LIMIT = 100


def _to_item(values: dict[str, Any]) -> dict[str, Any]:
    return {k: _serializer.serialize(_without_nones(v)) for k, v in values.items() if v is not None}


def _without_nones(value: Any) -> Any:
    # DynamoDB stores an absent attribute better than a NULL one, nested maps too.
    if isinstance(value, dict):
        return {k: _without_nones(v) for k, v in value.items() if v is not None}
    return value


def _from_item(item: dict[str, Any]) -> dict[str, Any]:
    return {k: _deserializer.deserialize(v) for k, v in item.items()}


def _is_condition_failure(error: ClientError) -> bool:
    return bool(error.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException")


def _cancelled_by(error: ClientError) -> list[str]:
    """The failing condition of each item of a cancelled transaction ('' where none)."""
    if error.response.get("Error", {}).get("Code") != "TransactionCanceledException":
        raise error
    reasons = error.response.get("CancellationReasons", [])
    return ["" if r.get("Code") in (None, "None") else str(r["Code"]) for r in reasons]


def tenant_key(tenant_id: str) -> dict[str, Any]:
    """The coordination-table key of a tenant's record (task count, signing secrets)."""
    return _to_item({"key": f"{TENANT_KEY_PREFIX}{tenant_id}"})


def _is_transaction_refusal(error: ClientError) -> bool:
    return bool(error.response.get("Error", {}).get("Code") == "TransactionCanceledException")


def conditional_write(write: Any, table: str, **request: Any) -> bool:
    """Run one conditional write; False if its condition failed, other errors raise."""
    try:
        write(TableName=table, **request)
    except ClientError as error:
        if _is_condition_failure(error):
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
class Page(Generic[T]):
    items: list[T]
    next_token: str | None


def _schedule_to_map(schedule: Schedule) -> dict[str, Any]:
    window = {
        "start_at": _optional_instant(schedule.window.start_at),
        "end_at": _optional_instant(schedule.window.end_at),
    }
    match schedule:
        case CronSchedule():
            return {
                "kind": "cron",
                "expression": schedule.expression,
                "timezone": schedule.timezone,
                "dst_nonexistent": schedule.dst.nonexistent.value,
                "dst_ambiguous": schedule.dst.ambiguous.value,
                "seed": schedule.seed,
                **window,
            }
        case RateSchedule():
            return {
                "kind": "rate",
                "expression": schedule.expression,
                "every_seconds": schedule.every_seconds,
                "anchor": format_instant(schedule.anchor),
                **window,
            }
        case OneTimeSchedule():
            return {"kind": "at", "at": format_instant(schedule.at), **window}
        case FixedDelaySchedule():
            return {"kind": "fixed_delay", "delay_seconds": schedule.delay_seconds, **window}
        case AfterSchedule():
            return {"kind": "after", "upstream_task_id": schedule.upstream_task_id, **window}


def _schedule_from_map(values: dict[str, Any]) -> Schedule:
    # Items written before a field existed lack it: each missing field is its default.
    window = Window(
        start_at=_instant_or_none(values.get("start_at")),
        end_at=_instant_or_none(values.get("end_at")),
    )
    match values["kind"]:
        case "cron":
            return CronSchedule(
                expression=values["expression"],
                timezone=values["timezone"],
                dst=DstPolicy(
                    nonexistent=Nonexistent(values.get("dst_nonexistent", Nonexistent.SHIFT)),
                    ambiguous=Ambiguous(values.get("dst_ambiguous", Ambiguous.FIRST)),
                ),
                seed=values.get("seed"),
                window=window,
            )
        case "rate":
            return RateSchedule(
                every_seconds=int(values["every_seconds"]),
                anchor=parse_instant(values["anchor"]),
                window=window,
            )
        case "at":
            return OneTimeSchedule(at=parse_instant(values["at"]), window=window)
        case "fixed_delay":
            return FixedDelaySchedule(delay_seconds=int(values["delay_seconds"]), window=window)
        case "after":
            return AfterSchedule(upstream_task_id=values["upstream_task_id"], window=window)
    raise ValueError(f"unknown schedule kind {values['kind']!r}")


def _instant_or_none(value: str | None) -> datetime | None:
    return parse_instant(value) if value is not None else None


def _optional_instant(value: datetime | None) -> str | None:
    return format_instant(value) if value is not None else None


def _retry_to_map(policy: RetryPolicy) -> dict[str, int]:
    return {
        "max_attempts": policy.max_attempts,
        "base_delay_seconds": policy.base_delay_seconds,
        "max_delay_seconds": policy.max_delay_seconds,
    }


def _retry_from_map(values: dict[str, Any] | None) -> RetryPolicy:
    if not values:
        return RetryPolicy()
    return RetryPolicy(**{name: int(value) for name, value in values.items()})


def limits_to_map(limits: TaskLimits) -> dict[str, Any] | None:
    rate = limits.rate_limit
    values = {
        "max_concurrency": limits.max_concurrency,
        "host_max_concurrency": limits.host_max_concurrency,
        "rate_per_second": Decimal(str(rate.per_second)) if rate else None,
        "rate_burst": rate.burst if rate else None,
    }
    return {k: v for k, v in values.items() if v is not None} or None


def limits_from_map(values: dict[str, Any] | None) -> TaskLimits:
    if not values:
        return TaskLimits()

    def whole(name: str) -> int | None:
        return int(values[name]) if name in values else None

    per_second = values.get("rate_per_second")
    return TaskLimits(
        max_concurrency=whole("max_concurrency"),
        host_max_concurrency=whole("host_max_concurrency"),
        rate_limit=(
            RateLimit(float(per_second), whole("rate_burst") or 1)
            if per_second is not None
            else None
        ),
    )


def task_to_item(task: Task, placement: DuePlacement | None) -> dict[str, Any]:
    return _to_item(
        {
            "task_id": task.task_id,
            "name": task.name,
            "schedule": _schedule_to_map(task.schedule),
            "handler_url": task.handler_url,
            "handler": task.handler_name,
            "retry": _retry_to_map(task.retry),
            # JSON text keeps floats exact and lets the size limit be measured.
            "payload": json.dumps(task.payload, separators=(",", ":")),
            "status": task.status.value,
            "next_run_at": _optional_instant(task.next_run_at),
            DUE_INDEX.partition_key.name: placement.key if placement else None,
            "version": task.version,
            "created_at": format_instant(task.created_at),
            "updated_at": format_instant(task.updated_at),
            "last_scheduled_at": _optional_instant(task.last_scheduled_at),
            "catchup": task.catchup.policy.value,
            "catchup_window_seconds": task.catchup.window_seconds,
            "jitter_seconds": task.jitter_seconds,
            TENANT_INDEX.partition_key.name: task.tenant_id,
            "overlap": task.overlap.value,
            "pause_note": task.pause_note,
            "status_reason": task.status_reason,
            "running_execution": task.running_execution,
            "buffered_at": _optional_instant(task.buffered_at),
            "has_dependents": task.has_dependents or None,
            DEPENDENTS_INDEX.partition_key.name: task.upstream_task_id,
            "limits": limits_to_map(task.limits),
            "resumed_at": _optional_instant(task.resumed_at),
        }
    )


def task_from_item(item: dict[str, Any]) -> Task:
    values = _from_item(item)
    return Task(
        task_id=values["task_id"],
        name=values["name"],
        schedule=_schedule_from_map(values["schedule"]),
        handler_url=values.get("handler_url"),
        handler_name=values.get("handler"),
        retry=_retry_from_map(values.get("retry")),
        payload=json.loads(values["payload"]),
        status=TaskStatus(values["status"]),
        next_run_at=_instant_or_none(values.get("next_run_at")),
        version=int(values["version"]),
        created_at=parse_instant(values["created_at"]),
        updated_at=parse_instant(values["updated_at"]),
        last_scheduled_at=_instant_or_none(values.get("last_scheduled_at")),
        catchup=CatchUpPolicy(
            policy=CatchUp(values.get("catchup", CatchUp.RUN_ONCE)),
            window_seconds=int(
                values.get("catchup_window_seconds", DEFAULT_CATCHUP_WINDOW_SECONDS)
            ),
        ),
        jitter_seconds=int(values.get("jitter_seconds", 0)),
        tenant_id=values.get(TENANT_INDEX.partition_key.name, DEFAULT_TENANT),
        overlap=Overlap(values.get("overlap", Overlap.ALLOW)),
        pause_note=values.get("pause_note"),
        running_execution=values.get("running_execution"),
        buffered_at=_instant_or_none(values.get("buffered_at")),
        limits=limits_from_map(values.get("limits")),
        has_dependents=bool(values.get("has_dependents", False)),
        status_reason=values.get("status_reason"),
        resumed_at=_instant_or_none(values.get("resumed_at")),
    )


# A reason is kept short: it is shown to the owner and stored on the item.
REASON_LIMIT = 500
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class UnreadableTaskError(ValueError):
    """A stored task item that cannot be decoded into a ``Task``."""


@dataclass(frozen=True)
class UnreadableTask:
    """A stored task that cannot be decoded: written around the API (by hand, a bug,
    a migration). What the tick needs to set it aside without decoding it."""

    task_id: str
    reason: str
    # The stored ``version`` attribute as it was read (None if missing): the
    # set-aside write is conditional on it.
    seen_version: dict[str, Any] | None


def reason_of(error: BaseException) -> str:
    """An exception as a short, readable reason."""
    return f"{type(error).__name__}: {error}"[:REASON_LIMIT]


def read_task_item(item: dict[str, Any]) -> Task | UnreadableTask:
    """The task an item holds, or why it cannot be read.

    Any exception counts: an item written around the API can break decoding
    anywhere (a bad instant, an unknown kind, a missing or mistyped field).
    """
    try:
        return task_from_item(item)
    except Exception as error:
        return UnreadableTask(
            task_id=str(item.get("task_id", {}).get("S", "")),
            reason=f"the stored task cannot be read ({reason_of(error)})"[:REASON_LIMIT],
            seen_version=item.get("version"),
        )


def shown_task_item(item: dict[str, Any]) -> Task:
    """The task an item holds, for its owner to see: an unreadable item is shown as
    an ERROR task with what could be read, every other field at its default."""
    read = read_task_item(item)
    if isinstance(read, Task):
        return read
    values: dict[str, Any] = {}
    for name, value in item.items():
        # Each attribute alone: one that is not even a DynamoDB value hides no other.
        with contextlib.suppress(Exception):
            values[name] = _deserializer.deserialize(value)

    unreadable_schedule: Schedule = UNREADABLE_SCHEDULE

    def text(name: str) -> str | None:
        value = values.get(name)
        return value if isinstance(value, str) else None

    return Task(
        task_id=read.task_id,
        name=text("name") or read.task_id,
        schedule=_or(unreadable_schedule, lambda: _schedule_from_map(values["schedule"])),
        handler_url=text("handler_url"),
        handler_name=text("handler"),
        payload=_or({}, lambda: dict(json.loads(values["payload"]))),
        status=TaskStatus.ERROR,
        status_reason=text("status_reason") or read.reason,
        next_run_at=_or(None, lambda: _instant_or_none(values.get("next_run_at"))),
        created_at=_or(_EPOCH, lambda: parse_instant(values["created_at"])),
        updated_at=_or(_EPOCH, lambda: parse_instant(values["updated_at"])),
        version=_or(0, lambda: int(values["version"])),
        tenant_id=text(TENANT_INDEX.partition_key.name) or DEFAULT_TENANT,
    )


def _or(default: T, read: Callable[[], T]) -> T:
    try:
        return read()
    except Exception:
        return default


def _readable(read: Task | UnreadableTask) -> Task:
    if isinstance(read, UnreadableTask):
        raise UnreadableTaskError(f"task {read.task_id}: {read.reason}")
    return read


def _next_version(seen: dict[str, Any] | None) -> int:
    try:
        return int((seen or {})["N"]) + 1
    except (KeyError, TypeError, ValueError):
        return 1


class TaskStore:
    """Tasks. The ``*_owned`` methods are the API's: each is scoped to one tenant.

    A tenant's writes are conditioned on ``tenant_id`` and its listing queries the
    tenant index, so another tenant's task is, to a caller, exactly a missing one.
    """

    def __init__(self, client: Any, table_name: str, coordination_table: str = "") -> None:
        self._client = client
        self._table = table_name
        self._coordination = coordination_table

    def create_within_quota(
        self, task: Task, placement: DuePlacement | None, max_tasks: int, fresh_secret: str
    ) -> None:
        """Store ``task`` and count it against its tenant's quota, in one transaction.

        The tenant's record gets its first signing secret here if it has none, so
        a worker only ever reads it.
        """
        try:
            self._client.transact_write_items(
                TransactItems=[
                    {
                        "Put": {
                            "TableName": self._table,
                            "Item": task_to_item(task, placement),
                            "ConditionExpression": "attribute_not_exists(task_id)",
                        }
                    },
                    {
                        "Update": {
                            "TableName": self._coordination,
                            "Key": tenant_key(task.tenant_id),
                            "UpdateExpression": (
                                "SET task_count = if_not_exists(task_count, :zero) + :one, "
                                "signing_secrets = if_not_exists(signing_secrets, :secrets)"
                            ),
                            "ConditionExpression": (
                                "attribute_not_exists(task_count) OR task_count < :max"
                            ),
                            "ExpressionAttributeValues": _to_item(
                                {
                                    ":zero": 0,
                                    ":one": 1,
                                    ":max": max_tasks,
                                    ":secrets": [fresh_secret],
                                }
                            ),
                        }
                    },
                ]
            )
        except ClientError as error:
            if _cancelled_by(error)[1:2] == ["ConditionalCheckFailed"]:
                raise LimitExceeded(
                    "max_tasks_per_tenant",
                    "tenant",
                    f"this tenant already has {max_tasks} tasks, the most allowed; "
                    "delete some first",
                ) from None
            raise

    def get_owned(self, tenant_id: str, task_id: str) -> Task | None:
        """The task if it exists and belongs to ``tenant_id``, else None (either way)."""
        item = self._get_item(task_id)
        task = shown_task_item(item) if item else None
        # GetItem takes no condition: the owner is checked here, the one place
        # every tenant-scoped read goes through.
        return task if task is not None and task.tenant_id == tenant_id else None

    def page_owned(self, tenant_id: str, limit: int, token: str | None) -> Page[Task]:
        """One page of a tenant's tasks, oldest first.

        The tenant index holds keys only (``resources.TENANT_INDEX``), so the page's
        ids come from it and the tasks from one eventually consistent BatchGetItem,
        as current as the index itself. A task deleted in between is left out.
        """
        ids = query_page(
            self._client,
            PartitionQuery(self._table, TENANT_INDEX.partition_key.name, tenant_id, TENANT_INDEX),
            limit,
            token,
            lambda key: str(key["task_id"]["S"]),
        )
        items = self._batch_items(ids.items, consistent=False)
        owner = {"S": tenant_id}
        return Page(
            items=[
                shown_task_item(items[task_id])
                for task_id in ids.items
                if task_id in items and items[task_id].get(TENANT_INDEX.partition_key.name) == owner
            ],
            next_token=ids.next_token,
        )

    def delete_owned(self, tenant_id: str, task_id: str) -> bool:
        """Delete a tenant's task and release its quota; False if it has no such task."""
        try:
            self._client.transact_write_items(
                TransactItems=[
                    {
                        "Delete": {
                            "TableName": self._table,
                            "Key": _to_item({"task_id": task_id}),
                            "ConditionExpression": "#tenant = :tenant",
                            "ExpressionAttributeNames": {
                                "#tenant": TENANT_INDEX.partition_key.name
                            },
                            "ExpressionAttributeValues": _to_item({":tenant": tenant_id}),
                        }
                    },
                    {
                        "Update": {
                            "TableName": self._coordination,
                            "Key": tenant_key(tenant_id),
                            "UpdateExpression": "SET task_count = task_count - :one",
                            "ConditionExpression": "task_count > :zero",
                            "ExpressionAttributeValues": _to_item({":zero": 0, ":one": 1}),
                        }
                    },
                ]
            )
        except ClientError as error:
            if _cancelled_by(error)[:1] == ["ConditionalCheckFailed"]:
                return False
            raise
        return True

    def _get_item(self, task_id: str) -> dict[str, Any] | None:
        response = self._client.get_item(
            TableName=self._table, Key=_to_item({"task_id": task_id}), ConsistentRead=True
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
        tasks, unreadable = self.read_many(task_ids)
        if unreadable:
            raise UnreadableTaskError(f"task {unreadable[0].task_id}: {unreadable[0].reason}")
        return tasks

    def read_many(self, task_ids: Iterable[str]) -> tuple[list[Task], list[UnreadableTask]]:
        """As ``get_many``, with the tasks that cannot be decoded apart, not raised."""
        tasks: list[Task] = []
        unreadable: list[UnreadableTask] = []
        for item in self._batch_items(task_ids, consistent=True).values():
            read = read_task_item(item)
            if isinstance(read, Task):
                tasks.append(read)
            else:
                unreadable.append(read)
        return tasks, unreadable

    def _batch_items(self, task_ids: Iterable[str], consistent: bool) -> dict[str, dict[str, Any]]:
        """The stored items of ``task_ids`` that exist, by id, in BatchGetItem calls."""
        ids = list(dict.fromkeys(task_ids))
        items: dict[str, dict[str, Any]] = {}
        for start in range(0, len(ids), BATCH_GET_LIMIT):
            keys = [_to_item({"task_id": i}) for i in ids[start : start + BATCH_GET_LIMIT]]
            request: dict[str, Any] = {self._table: {"Keys": keys, "ConsistentRead": consistent}}
            while request:
                response = self._client.batch_get_item(RequestItems=request)
                for item in response["Responses"].get(self._table, []):
                    items[str(item.get("task_id", {}).get("S", ""))] = item
                request = response.get("UnprocessedKeys") or {}
        return items

    def set_aside(self, task: Task | UnreadableTask, reason: str, now: datetime) -> bool:
        """Mark a task ERROR with ``reason``, out of the due index, if it is still at the
        version read: nothing else of it is needed, so an item that cannot be decoded
        is set aside too. False if it changed meanwhile."""
        seen = _serializer.serialize(task.version) if isinstance(task, Task) else task.seen_version
        return self._set_aside(task.task_id, reason, now, seen_version=seen)

    def set_aside_by_id(
        self, task_id: str, reason: str, now: datetime, *, release_slot_of: str | None = None
    ) -> bool:
        """``set_aside`` for a task not read yet, conditional on its version as stored now.

        With ``release_slot_of``, the run slot that execution holds is freed too (its
        end could not be handled, so nothing else would ever free it), if it still
        holds it; otherwise the slot is left as it is.
        """
        seen = self.stored_version(task_id)
        if release_slot_of is not None and self._set_aside(
            task_id, reason, now, seen_version=seen, release_slot_of=release_slot_of
        ):
            return True
        return self._set_aside(task_id, reason, now, seen_version=seen)

    def _set_aside(
        self,
        task_id: str,
        reason: str,
        now: datetime,
        *,
        seen_version: dict[str, Any] | None,
        release_slot_of: str | None = None,
    ) -> bool:
        names = {
            "#status": "status",
            "#version": "version",
            "#bucket": DUE_INDEX.partition_key.name,
        }
        values = _to_item(
            {
                ":error": TaskStatus.ERROR.value,
                ":reason": reason[:REASON_LIMIT],
                ":now": format_instant(now),
                ":next": _next_version(seen_version),
            }
        )
        condition = "attribute_exists(task_id) AND "
        if seen_version is None:
            condition += "attribute_not_exists(#version)"
        else:
            condition += "#version = :seen"
            values[":seen"] = seen_version
        removes = ["#bucket"]
        if release_slot_of is not None:
            condition += " AND running_execution = :slot"
            values[":slot"] = _serializer.serialize(release_slot_of)
            removes += ["running_execution", "buffered_at"]
        try:
            self._client.update_item(
                TableName=self._table,
                Key=_to_item({"task_id": task_id}),
                UpdateExpression=(
                    "SET #status = :error, status_reason = :reason, updated_at = :now, "
                    "#version = :next REMOVE " + ", ".join(removes)
                ),
                ConditionExpression=condition,
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
            )
        except ClientError as error:
            if _is_condition_failure(error):
                return False
            raise
        return True

    def stored_version(self, task_id: str) -> dict[str, Any] | None:
        """The ``version`` attribute as stored, undecoded (None if missing)."""
        item = self._get_item(task_id) or {}
        version: dict[str, Any] | None = item.get("version")
        return version

    def replace(
        self,
        task: Task,
        placement: DuePlacement | None,
        expected_version: int,
        unchanged: dict[str, int] | None = None,
    ) -> bool:
        """Store ``task`` whole, if the stored one is still at ``expected_version``.

        Pause, resume, PATCH and the release of a run slot all go through here: any
        write in between (a tick's claim, another change) bumped the version, and
        this one is refused rather than undoing it. ``unchanged`` (task id to
        version) must also still hold, in one transaction: the tasks a dependency
        chain was checked against.
        """
        put = {
            "TableName": self._table,
            "Item": task_to_item(task, placement),
            "ConditionExpression": "#version = :expected",
            "ExpressionAttributeNames": {"#version": "version"},
            "ExpressionAttributeValues": _to_item({":expected": expected_version}),
        }
        try:
            if not unchanged:
                self._client.put_item(**put)
                return True
            checks = [
                {
                    "ConditionCheck": {
                        "TableName": self._table,
                        "Key": _to_item({"task_id": task_id}),
                        "ConditionExpression": "#version = :expected",
                        "ExpressionAttributeNames": {"#version": "version"},
                        "ExpressionAttributeValues": _to_item({":expected": version}),
                    }
                }
                for task_id, version in unchanged.items()
            ]
            self._client.transact_write_items(TransactItems=[{"Put": put}, *checks])
        except ClientError as error:
            if _is_condition_failure(error) or _is_transaction_refusal(error):
                return False
            raise
        return True

    def mark_has_dependents(self, tenant_id: str, task_id: str) -> bool:
        """Note that some task runs after ``task_id``; a new version, so that a whole-item
        write based on an older read cannot erase the mark. False (and nothing
        written) if ``tenant_id`` has no such task."""
        try:
            self._client.update_item(
                TableName=self._table,
                Key=_to_item({"task_id": task_id}),
                UpdateExpression="SET has_dependents = :yes, #version = #version + :one",
                ConditionExpression="#tenant = :tenant",
                ExpressionAttributeNames={
                    "#version": "version",
                    "#tenant": TENANT_INDEX.partition_key.name,
                },
                ExpressionAttributeValues=_to_item({":yes": True, ":one": 1, ":tenant": tenant_id}),
            )
        except ClientError as error:
            if not _is_condition_failure(error):
                raise
            return False
        return True

    def dependents(self, task_id: str) -> list[str]:
        """Ids of the tasks set to run after ``task_id`` (``after``), from the sparse index."""
        ids: list[str] = []
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "IndexName": DEPENDENTS_INDEX.name,
            "KeyConditionExpression": "#after = :task",
            "ExpressionAttributeNames": {"#after": DEPENDENTS_INDEX.partition_key.name},
            "ExpressionAttributeValues": _to_item({":task": task_id}),
        }
        while True:
            response = self._client.query(**kwargs)
            ids += [_from_item(i)["task_id"] for i in response.get("Items", [])]
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
            "ExpressionAttributeValues": _to_item(values),
            "Limit": limit,
        }
        if start_key:
            kwargs["ExclusiveStartKey"] = start_key
        response = self._client.query(**kwargs)
        ids = [_from_item(i)["task_id"] for i in response.get("Items", [])]
        return ids, response.get("LastEvaluatedKey")

    def claim(self, claim: Claim, placement: DuePlacement | None, now: datetime) -> bool:
        """Advance a task past the occurrence(s) in ``claim``, if nobody else did first.

        Guarded by the version read with the claim: of any number of concurrent
        claimers of the same occurrence exactly one succeeds.
        """
        names = {
            "#status": "status",
            "#version": "version",
            "#bucket": DUE_INDEX.partition_key.name,
        }
        values: dict[str, Any] = {
            ":expected_version": claim.task.version,
            ":active": TaskStatus.ACTIVE.value,
            ":one": 1,
            ":now": format_instant(now),
        }
        sets = ["#version = #version + :one", "updated_at = :now"]
        if claim.scheduled_at is not None:
            values[":scheduled"] = format_instant(claim.scheduled_at)
            sets.append("last_scheduled_at = :scheduled")
        if claim.takes_slot:
            values[":running"] = claim.execution_id
            sets.append("running_execution = :running")
        if claim.buffered is not None:
            values[":buffered"] = format_instant(claim.buffered)
            sets.append("buffered_at = :buffered")
        removes: list[str] = []
        if claim.awaits_finish:
            # fixed_delay: out of the due index until its execution finishes.
            removes += ["next_run_at", "#bucket"]
        elif claim.next_run_at is None or placement is None:
            values[":completed"] = TaskStatus.COMPLETED.value
            sets.append("#status = :completed")
            removes += ["next_run_at", "#bucket"]
        else:
            values[":next"] = format_instant(claim.next_run_at)
            values[":placement"] = placement.key
            sets += ["next_run_at = :next", "#bucket = :placement"]
        expression = "SET " + ", ".join(sets)
        if removes:
            expression += " REMOVE " + ", ".join(removes)
        try:
            self._client.update_item(
                TableName=self._table,
                Key=_to_item({"task_id": claim.task.task_id}),
                UpdateExpression=expression,
                ConditionExpression="#version = :expected_version AND #status = :active",
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=_to_item(values),
            )
        except ClientError as error:
            if _is_condition_failure(error):
                return False
            raise
        return True


def dead_letter_partition(tenant_id: str) -> str:
    """Each tenant's dead letters are one partition of the dead-letter index."""
    return f"dead-letter#{tenant_id}"


ERROR_LIMIT = 2000
_NAME = re.compile(r"#(\w+)")
_VALUE = re.compile(r":(\w+)")


def execution_from_item(item: dict[str, Any]) -> Execution:
    values = _from_item(item)

    def instant(name: str) -> datetime | None:
        return parse_instant(values[name]) if name in values else None

    scheduled_at = instant("scheduled_at")
    assert scheduled_at is not None
    return Execution(
        execution_id=values["execution_id"],
        task_id=values["task_id"],
        scheduled_at=scheduled_at,
        status=ExecutionStatus(values["status"]),
        attempt=int(values.get("attempt", 1)),
        started_at=instant("started_at"),
        completed_at=instant("completed_at"),
        error=values.get("error"),
        first_attempt=int(values.get("first_attempt", 1)),
        retry=_retry_from_map(values.get("retry")),
        next_attempt_at=instant("next_attempt_at"),
        lease_until=instant("lease_until"),
        lease_token=values.get("lease_token"),
        accepted_at=instant("accepted_at"),
        callback_digest=values.get("callback_digest"),
        dead_lettered_at=instant("dead_lettered_at"),
        tenant_id=values.get("tenant_id", DEFAULT_TENANT),
        upstream=upstream_from_map(values.get("upstream")),
        result=_result_from_map(values.get("result")),
        lease_indexed=LEASE_INDEX.partition_key.name in values,
    )


def _result_from_map(values: dict[str, Any] | None) -> ResultSummary | None:
    if values is None:
        return None
    status_code = values.get("status_code")
    return ResultSummary(
        status_code=int(status_code) if status_code is not None else None,
        excerpt=values.get("excerpt"),
    )


@dataclass(frozen=True)
class BeginResult:
    began: bool
    # Begun: the execution as it now is. Refused: as it was, which says why
    # (finished, held by another worker, waiting for another attempt).
    current: Execution | None = None
    # Begun, but the handler-call record asked for was not saved: this one still
    # counts (a call in progress, or a success to replay).
    held_call: HandlerCallRecord | None = None


# The executions table's TTL attribute: DynamoDB deletes an item some time after it.
if EXECUTIONS.ttl_attribute is None:
    raise RuntimeError("executions expire through the executions table's TTL attribute")
EXPIRES_AT: str = EXECUTIONS.ttl_attribute

# The handler-call record's attributes on the execution item (its answer is ``result``).
CALL_STATUS = "call_status"
CALL_EXPIRES_AT = "call_expires_at"
CALL_IN_PROGRESS_UNTIL = "call_in_progress_until"
# A record may be replaced when there is none, it expired, or its call in progress
# timed out: Powertools' own condition for saving an in-progress record.
_CALL_REPLACEABLE = (
    f"(attribute_not_exists(#{CALL_STATUS}) OR #{CALL_EXPIRES_AT} < :call_now"
    f" OR (#{CALL_STATUS} = :call_in_progress AND attribute_exists(#{CALL_IN_PROGRESS_UNTIL})"
    f" AND #{CALL_IN_PROGRESS_UNTIL} < :call_now_ms))"
)


def _call_sets(call: HandlerCallRecord) -> dict[str, Any]:
    sets: dict[str, Any] = {CALL_STATUS: call.status, CALL_EXPIRES_AT: call.expires_at}
    if call.in_progress_until_ms is not None:
        sets[CALL_IN_PROGRESS_UNTIL] = call.in_progress_until_ms
    if call.response is not None:
        sets["result"] = {
            "status_code": call.response.status_code,
            "excerpt": call.response.excerpt,
        }
    return sets


def _replaceable_values(now_ms: int) -> dict[str, Any]:
    return {
        ":call_now": now_ms // 1000,
        ":call_now_ms": now_ms,
        ":call_in_progress": HandlerCallRecord.IN_PROGRESS,
    }


def call_from_item(item: dict[str, Any] | None) -> HandlerCallRecord | None:
    """The handler-call record kept on an execution item, if it holds one."""
    values = _from_item(item or {})
    if CALL_STATUS not in values:
        return None
    until = values.get(CALL_IN_PROGRESS_UNTIL)
    completed = values[CALL_STATUS] == HandlerCallRecord.COMPLETED
    return HandlerCallRecord(
        status=values[CALL_STATUS],
        expires_at=int(values[CALL_EXPIRES_AT]),
        in_progress_until_ms=int(until) if until is not None else None,
        response=_result_from_map(values.get("result")) if completed else None,
    )


class ExecutionStore:
    """Executions and their leases. Each state transition is one conditional write.

    Every write by a lease holder names the ``lease_token`` it holds, and every
    change of holder (begin, requeue, take_over, redrive) writes a new token: of
    a reaper and a late worker acting on one execution, only one can win.
    """

    def __init__(
        self, client: Any, table_name: str, retention: timedelta, lease_shards: int = LEASE_SHARDS
    ) -> None:
        self._client = client
        self._table = table_name
        self._retention = retention
        self._lease_shards = lease_shards

    @property
    def lease_shards(self) -> int:
        return self._lease_shards

    def _key(self, execution_id: str) -> dict[str, Any]:
        return _to_item({"task_id": task_id_of(execution_id), "execution_id": execution_id})

    def _lease_shard(self, execution_id: str) -> str:
        return str(shard_for(execution_id, self._lease_shards))

    def _expiry(self, *ends: datetime | None) -> int:
        """The TTL (epoch seconds): ``retention`` after the latest of ``ends``.

        Each write that starts, moves on or ends an execution passes the moment it
        matters until (now, its lease's end, its next attempt), never its
        scheduled time: a backfilled or caught-up occurrence may be years old,
        and must not be born expired (with its lease and idempotency record).
        """
        return int((max(end for end in ends if end is not None) + self._retention).timestamp())

    def _write(
        self,
        execution_id: str,
        condition: str,
        sets: dict[str, Any],
        *,
        removes: tuple[str, ...] = (),
        computed: tuple[str, ...] = (),
        values: dict[str, Any] | None = None,
        return_values: str = "NONE",
    ) -> tuple[bool, dict[str, Any] | None]:
        """One conditional UpdateItem: ``sets`` become ``#name = :name``.

        Returns whether the condition held, and the item: the new one when asked
        for with ``return_values``, the old one when the condition failed.
        """
        assignments = [f"#{name} = :{name}" for name in sets] + list(computed)
        clauses = []
        if assignments:
            clauses.append("SET " + ", ".join(assignments))
        if removes:
            clauses.append("REMOVE " + ", ".join(f"#{name}" for name in removes))
        expression = " ".join(clauses)
        text = f"{expression} {condition}"
        all_values = {f":{name}": value for name, value in sets.items()} | (values or {})
        used_values = {f":{v}" for v in _VALUE.findall(text)}
        names = {f"#{n}": n for n in set(_NAME.findall(text))}
        values_used = _to_item({k: v for k, v in all_values.items() if k in used_values})
        try:
            response = self._client.update_item(
                TableName=self._table,
                Key=self._key(execution_id),
                UpdateExpression=expression,
                ConditionExpression=condition,
                ReturnValues=return_values,
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
                **({"ExpressionAttributeNames": names} if names else {}),
                **({"ExpressionAttributeValues": values_used} if values_used else {}),
            )
        except ClientError as error:
            if _is_condition_failure(error):
                return False, error.response.get("Item")
            raise
        return True, response.get("Attributes")

    def begin(
        self,
        dispatch: Dispatch,
        *,
        now: datetime,
        lease_until: datetime,
        lease_token: str,
        callback_digest: str,
        retry: RetryPolicy,
        tenant_id: str = DEFAULT_TENANT,
        call: HandlerCallRecord | None = None,
        call_now_ms: int = 0,
    ) -> BeginResult:
        """Start ``dispatch``'s attempt: RUNNING under a new lease.

        Allowed for an execution never seen before (one conditional put), or one
        QUEUED for exactly this attempt (one conditional update). Anything else
        (finished, running elsewhere, waiting for another attempt) means the
        message is a duplicate or stale, and is refused.

        The lease stays out of the lease index: the SQS message that began the
        attempt stays undeleted until the attempt has moved on, and comes back
        if the worker dies (decision 0015). What outlives the message (a 202, a
        follow-up, a dead letter's copy, a queued retry) is indexed again.

        With ``call`` (in progress), the same write saves the handler-call record
        if the one there may be replaced (by the wall clock's ``call_now_ms``). If
        not, the attempt begins all the same and ``held_call`` is the record that
        still counts.
        """
        running = {
            "status": ExecutionStatus.RUNNING.value,
            "attempt": dispatch.attempt,
            "started_at": format_instant(now),
            "lease_token": lease_token,
            "lease_until": format_instant(lease_until),
            "callback_digest": callback_digest,
            EXPIRES_AT: self._expiry(lease_until),
        }
        item = {
            "task_id": dispatch.task_id,
            "execution_id": dispatch.execution_id,
            "scheduled_at": format_instant(dispatch.scheduled_at),
            "first_attempt": dispatch.attempt,
            "retry": _retry_to_map(retry),
            "tenant_id": tenant_id,
            "upstream": upstream_to_map(dispatch.upstream) if dispatch.upstream else None,
            **running,
            **(_call_sets(call) if call is not None else {}),
        }
        try:
            self._client.put_item(
                TableName=self._table,
                Item=_to_item(item),
                ConditionExpression="attribute_not_exists(execution_id)",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
            return BeginResult(True, execution_from_item(_to_item(item)))
        except ClientError as error:
            if not _is_condition_failure(error):
                raise
            old = error.response.get("Item")
        current = execution_from_item(old) if old else None
        if current is None or current.status is not ExecutionStatus.QUEUED:
            return BeginResult(False, current)
        queued = "#status = :queued AND #attempt = :attempt"
        values = {":queued": ExecutionStatus.QUEUED.value}
        removes = ("next_attempt_at", "lease_shard")
        if call is not None:
            began, new = self._write(
                dispatch.execution_id,
                f"{queued} AND {_CALL_REPLACEABLE}",
                running | _call_sets(call),
                removes=removes,
                values=values | _replaceable_values(call_now_ms),
                return_values="ALL_NEW",
            )
            if began and new:
                return BeginResult(True, execution_from_item(new))
        began, new = self._write(
            dispatch.execution_id,
            queued,
            running,
            removes=removes,
            values=values,
            return_values="ALL_NEW",
        )
        if not (began and new):
            return BeginResult(False, current)
        if call is None:
            return BeginResult(True, execution_from_item(new))
        held = call_from_item(new)
        if held is None:  # deleted in between: save this call's record after all
            return self.save_call(dispatch.execution_id, lease_token, call, call_now_ms)
        return BeginResult(True, execution_from_item(new), held)

    def enqueue(
        self,
        dispatch: Dispatch,
        *,
        retry: RetryPolicy,
        lease_until: datetime,
        lease_token: str,
        tenant_id: str,
    ) -> bool:
        """Record a new execution QUEUED for its first attempt; False if the id exists.

        For runs that do not come from the tick (trigger, backfill, dependents,
        a buffered occurrence): the record comes first, so asking twice creates
        nothing twice, and if the message is then lost its lease runs out and the
        reaper sends it.
        """
        item = {
            "task_id": dispatch.task_id,
            "execution_id": dispatch.execution_id,
            "scheduled_at": format_instant(dispatch.scheduled_at),
            "status": ExecutionStatus.QUEUED.value,
            "attempt": 1,
            "first_attempt": 1,
            "retry": _retry_to_map(retry),
            "next_attempt_at": format_instant(dispatch.not_before or dispatch.scheduled_at),
            "lease_token": lease_token,
            "lease_until": format_instant(lease_until),
            "lease_shard": self._lease_shard(dispatch.execution_id),
            "tenant_id": tenant_id,
            EXPIRES_AT: self._expiry(lease_until, dispatch.not_before),
            "upstream": upstream_to_map(dispatch.upstream) if dispatch.upstream else None,
        }
        return self._put_new(item)

    def record_skipped(
        self, task: Task, execution_id: str, scheduled_at: datetime, reason: str, now: datetime
    ) -> bool:
        """An occurrence of ``task`` that never runs, and why: SKIPPED from the start."""
        return self._put_new(
            {
                "task_id": task.task_id,
                "tenant_id": task.tenant_id,
                "execution_id": execution_id,
                "scheduled_at": format_instant(scheduled_at),
                "status": ExecutionStatus.SKIPPED.value,
                "attempt": 0,
                "completed_at": format_instant(now),
                "error": reason[:ERROR_LIMIT],
                EXPIRES_AT: self._expiry(now),
            }
        )

    def _put_new(self, item: dict[str, Any]) -> bool:
        try:
            self._client.put_item(
                TableName=self._table,
                Item=_to_item(item),
                ConditionExpression="attribute_not_exists(execution_id)",
            )
        except ClientError as error:
            if _is_condition_failure(error):
                return False
            raise
        return True

    def renew(
        self,
        execution_id: str,
        lease_token: str,
        lease_until: datetime,
        accepted_at: datetime | None = None,
    ) -> bool:
        """Extend a running lease (a heartbeat); ``accepted_at`` marks a 202 answer,
        whose lease outlives the worker's message and so joins the lease index."""
        sets: dict[str, Any] = {
            "lease_until": format_instant(lease_until),
            EXPIRES_AT: self._expiry(lease_until),
        }
        if accepted_at is not None:
            sets["accepted_at"] = format_instant(accepted_at)
            sets["lease_shard"] = self._lease_shard(execution_id)
        return self._held_write(execution_id, lease_token, sets)

    def finish(
        self,
        execution_id: str,
        lease_token: str,
        status: ExecutionStatus,
        now: datetime,
        *,
        follow_up_token: str | None = None,
        follow_up_until: datetime | None = None,
        error: str | None = None,
        result: ResultSummary | None = None,
        call: HandlerCallRecord | None = None,
    ) -> bool:
        """End a running attempt for good (SUCCEEDED, or SKIPPED).

        With ``follow_up_token``, a short lease stays on it until what its end
        owes is done (``release``): dependents started, the task's run slot freed.
        If the finisher dies first, the reaper does it. Without, the lease goes.
        With ``call`` (completed), the same write saves the handler-call record.
        """
        sets: dict[str, Any] = {
            "status": status.value,
            "completed_at": format_instant(now),
            EXPIRES_AT: self._expiry(now, follow_up_until),
        }
        # The callback digest stays (as it does through requeue and dead_letter):
        # a replayed callback of this attempt is then told the execution ended
        # (409), not that its token is wrong. The next attempt's begin replaces it.
        removes: tuple[str, ...] = ("accepted_at",)
        if call is not None:
            sets |= _call_sets(call)
            removes += (CALL_IN_PROGRESS_UNTIL,)
        if follow_up_token is not None and follow_up_until is not None:
            sets["lease_token"] = follow_up_token
            sets["lease_until"] = format_instant(follow_up_until)
            sets["lease_shard"] = self._lease_shard(execution_id)
        else:
            removes += ("lease_token", "lease_until", "lease_shard")
        if result is not None:
            sets["result"] = {"status_code": result.status_code, "excerpt": result.excerpt}
        if error is None:
            removes += ("error",)
        else:
            sets["error"] = error[:ERROR_LIMIT]
        return self._held_write(execution_id, lease_token, sets, removes=removes)

    def requeue(
        self,
        execution_id: str,
        lease_token: str,
        *,
        expected: ExecutionStatus,
        attempt: int,
        not_before: datetime,
        lease_until: datetime,
        new_token: str,
        error: str | None = None,
    ) -> bool:
        """QUEUED for ``attempt`` from now on, due at ``not_before``, under a new lease."""
        sets: dict[str, Any] = {
            "status": ExecutionStatus.QUEUED.value,
            "attempt": attempt,
            "next_attempt_at": format_instant(not_before),
            "lease_until": format_instant(lease_until),
            "lease_shard": self._lease_shard(execution_id),
            "lease_token": new_token,
            EXPIRES_AT: self._expiry(not_before, lease_until),
        }
        if error is not None:
            sets["error"] = error[:ERROR_LIMIT]
        return self._held_write(
            execution_id,
            lease_token,
            sets,
            removes=("accepted_at",),
            expected=expected,
        )

    def dead_letter(
        self,
        execution_id: str,
        lease_token: str,
        *,
        now: datetime,
        error: str,
        lease_until: datetime,
        new_token: str,
        tenant_id: str,
    ) -> bool:
        """FAILED and listed as a dead letter, in its tenant's partition.

        A short lease stays on it until the copy for the dead-letter queue is sent
        (``release``); if the sender dies first, the reaper sends the copy.
        """
        return self._held_write(
            execution_id,
            lease_token,
            {
                "status": ExecutionStatus.FAILED.value,
                "completed_at": format_instant(now),
                EXPIRES_AT: self._expiry(now, lease_until),
                "error": error[:ERROR_LIMIT],
                DEAD_LETTER_INDEX.partition_key.name: dead_letter_partition(tenant_id),
                DEAD_LETTER_INDEX.sort_key.name: format_instant(now),
                "lease_until": format_instant(lease_until),
                "lease_shard": self._lease_shard(execution_id),
                "lease_token": new_token,
            },
            removes=("accepted_at", "next_attempt_at"),
        )

    def record_undelivered(
        self,
        dispatch: Dispatch,
        *,
        now: datetime,
        error: str,
        retry: RetryPolicy,
        tenant_id: str,
        lease_until: datetime,
        lease_token: str,
    ) -> bool:
        """A dispatch whose attempt never began, recorded FAILED and listed as a dead
        letter of ``tenant_id`` (decision 0022); False if the execution has a record.

        One conditional put, so reading the same message twice records it once. As
        with ``dead_letter``, a short lease stays until the copy for the dead-letter
        queue is sent and the task's run slot freed; if that is cut short, the reaper
        does it.
        """
        return self._put_new(
            {
                "task_id": dispatch.task_id,
                "execution_id": dispatch.execution_id,
                "scheduled_at": format_instant(dispatch.scheduled_at),
                "status": ExecutionStatus.FAILED.value,
                "attempt": dispatch.attempt,
                "first_attempt": dispatch.attempt,
                "retry": _retry_to_map(retry),
                "tenant_id": tenant_id,
                "completed_at": format_instant(now),
                "error": error[:ERROR_LIMIT],
                DEAD_LETTER_INDEX.partition_key.name: dead_letter_partition(tenant_id),
                DEAD_LETTER_INDEX.sort_key.name: format_instant(now),
                "lease_token": lease_token,
                "lease_until": format_instant(lease_until),
                "lease_shard": self._lease_shard(dispatch.execution_id),
                # From when the record stops mattering, never from the occurrence.
                "expires_at": int((now + self._retention).timestamp()),
                "upstream": upstream_to_map(dispatch.upstream) if dispatch.upstream else None,
            }
        )

    def dead_letter_queued(
        self,
        execution_id: str,
        seen_token: str,
        *,
        attempt: int,
        now: datetime,
        error: str,
        lease_until: datetime,
        new_token: str,
        tenant_id: str,
    ) -> bool:
        """A QUEUED attempt whose message SQS gave up on before it began: FAILED and
        listed, as ``dead_letter`` does for a running one. Only while it is still
        queued for that ``attempt`` under ``seen_token`` (the reaper resending it, or
        its message beginning, makes this fail)."""
        ok, _ = self._write(
            execution_id,
            "#status = :queued AND #attempt = :attempt AND #lease_token = :seen",
            {
                "status": ExecutionStatus.FAILED.value,
                "completed_at": format_instant(now),
                "error": error[:ERROR_LIMIT],
                DEAD_LETTER_INDEX.partition_key.name: dead_letter_partition(tenant_id),
                DEAD_LETTER_INDEX.sort_key.name: format_instant(now),
                "lease_until": format_instant(lease_until),
                "lease_shard": self._lease_shard(execution_id),
                "lease_token": new_token,
            },
            removes=("next_attempt_at",),
            values={
                ":queued": ExecutionStatus.QUEUED.value,
                ":attempt": attempt,
                ":seen": seen_token,
            },
        )
        return ok

    def set_aside(self, execution_id: str, reason: str, now: datetime) -> bool:
        """Take an execution out of the lease index for good, saying why: handling its
        expired lease raised, and would again every time. Its status is left as it is."""
        ok, _ = self._write(
            execution_id,
            "attribute_exists(execution_id)",
            {"set_aside_reason": reason[:ERROR_LIMIT], "set_aside_at": format_instant(now)},
            removes=("lease_shard",),
        )
        return ok

    def release(self, execution_id: str, lease_token: str) -> bool:
        """Drop a lease whose obligation is met, leaving the execution out of the lease index."""
        ok, _ = self._write(
            execution_id,
            "#lease_token = :held",
            {},
            removes=("lease_token", "lease_until", "lease_shard"),
            values={":held": lease_token},
        )
        return ok

    def save_call(
        self, execution_id: str, lease_token: str, call: HandlerCallRecord, call_now_ms: int
    ) -> BeginResult:
        """Save an in-progress handler-call record on the attempt ``lease_token`` began,
        if the one there may be replaced: as ``begin`` would have, asked again.
        Not ``began`` if the attempt is no longer held with that token."""
        ok, old = self._write(
            execution_id,
            f"#status = :running AND #lease_token = :held AND {_CALL_REPLACEABLE}",
            _call_sets(call),
            values={":running": ExecutionStatus.RUNNING.value, ":held": lease_token}
            | _replaceable_values(call_now_ms),
            return_values="ALL_NEW",
        )
        if ok and old:
            return BeginResult(True, execution_from_item(old))
        current = execution_from_item(old) if old else None
        if current is None or current.status is not ExecutionStatus.RUNNING:
            return BeginResult(False, current)
        if current.lease_token != lease_token:
            return BeginResult(False, current)
        return BeginResult(True, current, call_from_item(old))

    def held_call(self, execution_id: str) -> HandlerCallRecord | None:
        """The handler-call record kept on the execution, if any (expired ones too)."""
        response = self._client.get_item(
            TableName=self._table, Key=self._key(execution_id), ConsistentRead=True
        )
        return call_from_item(response.get("Item"))

    def keep_call(self, execution_id: str, call: HandlerCallRecord) -> bool:
        """Save a completed handler-call record, whoever holds the lease now: a success
        reached after the lease was lost is replayed by the attempt that took over
        (unless that one has succeeded already)."""
        ok, _ = self._write(
            execution_id,
            "attribute_exists(execution_id) AND #status <> :succeeded",
            _call_sets(call),
            removes=(CALL_IN_PROGRESS_UNTIL,),
            values={":succeeded": ExecutionStatus.SUCCEEDED.value},
        )
        return ok

    def clear_call(self, execution_id: str, in_progress_until_ms: int | None) -> bool:
        """Drop the in-progress handler-call record saved with ``in_progress_until_ms``:
        the call did not succeed, the next one may run. A record saved since by another
        call (after this one's had expired) is left alone."""
        mine = (
            f"#{CALL_IN_PROGRESS_UNTIL} = :mine"
            if in_progress_until_ms is not None
            else f"attribute_not_exists(#{CALL_IN_PROGRESS_UNTIL})"
        )
        ok, _ = self._write(
            execution_id,
            f"#{CALL_STATUS} = :in_progress AND {mine}",
            {},
            removes=(CALL_STATUS, CALL_EXPIRES_AT, CALL_IN_PROGRESS_UNTIL),
            values={":in_progress": HandlerCallRecord.IN_PROGRESS, ":mine": in_progress_until_ms},
        )
        return ok

    def take_over(
        self,
        execution_id: str,
        seen_token: str,
        *,
        cutoff: datetime,
        new_token: str,
        lease_until: datetime,
    ) -> bool:
        """Claim a lease still held by ``seen_token`` that ended before ``cutoff`` (the
        reaper's move, and a redelivered message's). A holder that renewed or finished
        meanwhile makes this fail. The new lease is in the lease index: if the taker
        dies too, the reaper carries on."""
        ok, _ = self._write(
            execution_id,
            "#lease_token = :seen AND #lease_until < :cutoff",
            {
                "lease_token": new_token,
                "lease_until": format_instant(lease_until),
                "lease_shard": self._lease_shard(execution_id),
                EXPIRES_AT: self._expiry(lease_until),
            },
            values={":seen": seen_token, ":cutoff": format_instant(cutoff)},
        )
        return ok

    def watch(self, execution_id: str, seen_token: str) -> bool:
        """Put a running lease still held by ``seen_token`` into the lease index, unchanged.

        For a live attempt whose message arrived again: once the reaper watches the
        lease, that copy of the message may be deleted. False if the holder moved
        on meanwhile (whatever it moved to is watched, or final).
        """
        ok, _ = self._write(
            execution_id,
            "#status = :running AND #lease_token = :seen",
            {"lease_shard": self._lease_shard(execution_id)},
            values={":running": ExecutionStatus.RUNNING.value, ":seen": seen_token},
        )
        return ok

    def redrive(
        self,
        tenant_id: str,
        execution_id: str,
        *,
        now: datetime,
        lease_until: datetime,
        new_token: str,
    ) -> Execution | None:
        """A dead letter of ``tenant_id`` QUEUED again under the same execution id, with a
        fresh retry budget and the next attempt number; None if it is not one."""
        ok, item = self._write(
            execution_id,
            "#status = :failed AND #dead_letter = :partition",
            {
                "status": ExecutionStatus.QUEUED.value,
                "next_attempt_at": format_instant(now),
                "lease_until": format_instant(lease_until),
                "lease_shard": self._lease_shard(execution_id),
                "lease_token": new_token,
                EXPIRES_AT: self._expiry(now, lease_until),
            },
            computed=("#attempt = #attempt + :one", "#first_attempt = #attempt + :one"),
            removes=(
                DEAD_LETTER_INDEX.partition_key.name,
                DEAD_LETTER_INDEX.sort_key.name,
                "completed_at",
            ),
            values={
                ":failed": ExecutionStatus.FAILED.value,
                ":one": 1,
                ":partition": dead_letter_partition(tenant_id),
            },
            return_values="ALL_NEW",
        )
        return execution_from_item(item) if ok and item else None

    def _held_write(
        self,
        execution_id: str,
        lease_token: str,
        sets: dict[str, Any],
        *,
        removes: tuple[str, ...] = (),
        expected: ExecutionStatus = ExecutionStatus.RUNNING,
    ) -> bool:
        ok, _ = self._write(
            execution_id,
            "#status = :expected AND #lease_token = :held",
            sets,
            removes=removes,
            values={":expected": expected.value, ":held": lease_token},
        )
        return ok

    def expired_leases(self, shard: int, cutoff: datetime, limit: int) -> list[str]:
        """Ids of executions in one lease shard whose lease ended before ``cutoff``."""
        ids: list[str] = []
        start_key: dict[str, Any] | None = None
        while len(ids) < limit:
            kwargs: dict[str, Any] = {
                "TableName": self._table,
                "IndexName": LEASE_INDEX.name,
                "KeyConditionExpression": "#shard = :shard AND #until < :cutoff",
                "ExpressionAttributeNames": {
                    "#shard": LEASE_INDEX.partition_key.name,
                    "#until": LEASE_INDEX.sort_key.name,
                },
                "ExpressionAttributeValues": _to_item(
                    {":shard": str(shard), ":cutoff": format_instant(cutoff)}
                ),
                "Limit": limit - len(ids),
            }
            if start_key:
                kwargs["ExclusiveStartKey"] = start_key
            response = self._client.query(**kwargs)
            ids += [_from_item(i)["execution_id"] for i in response.get("Items", [])]
            start_key = response.get("LastEvaluatedKey")
            if not start_key:
                break
        return ids

    def dead_letters(self, tenant_id: str, limit: int, token: str | None) -> Page[Execution]:
        """A tenant's dead-lettered executions, most recent first (its own index partition)."""
        partition = dead_letter_partition(tenant_id)
        query = PartitionQuery(
            self._table, DEAD_LETTER_INDEX.partition_key.name, partition, DEAD_LETTER_INDEX, True
        )
        return query_page(self._client, query, limit, token, execution_from_item)

    def get(self, execution_id: str) -> Execution | None:
        response = self._client.get_item(
            TableName=self._table, Key=self._key(execution_id), ConsistentRead=True
        )
        item = response.get("Item")
        return execution_from_item(item) if item else None

    def list_for_task(self, task_id: str, limit: int, token: str | None) -> Page[Execution]:
        """A task's executions, newest scheduled time first."""
        query = PartitionQuery(self._table, "task_id", task_id, newest_first=True)
        return query_page(self._client, query, limit, token, execution_from_item)

    def owner_of(self, dispatch: Dispatch) -> str:
        """The tenant of a dispatch whose task is gone or cannot be read: as the message
        says, or, for a message sent before messages said, as another execution of
        the task recorded it."""
        if dispatch.tenant_id is not None:
            return dispatch.tenant_id
        recorded = self.list_for_task(dispatch.task_id, 1, None).items
        return recorded[0].tenant_id if recorded else DEFAULT_TENANT


@dataclass(frozen=True)
class ShardCursor:
    """What one shard's tick reads first: where to start, and when it last ran."""

    bucket: datetime | None
    history: ShardHistory


def _outage_to_text(outage: Outage) -> str:
    return f"{format_instant(outage.last_tick)}/{format_instant(outage.next_tick)}"


def _outage_from_text(text: str) -> Outage:
    last_tick, _, next_tick = text.partition("/")
    return Outage(last_tick=parse_instant(last_tick), next_tick=parse_instant(next_tick))


class CursorStore:
    """Per-shard tick cursors: the oldest due-index bucket that may still hold work,
    and the shard's heartbeat (``last_tick_at``, ``ticking_since``, ``outages``)."""

    def __init__(self, client: Any, table_name: str) -> None:
        self._client = client
        self._table = table_name

    @staticmethod
    def _key(shard: int) -> dict[str, Any]:
        return _to_item({"key": f"{CURSOR_KEY_PREFIX}{shard}"})

    def get(self, shard: int) -> datetime | None:
        return self.read(shard).bucket

    def read(self, shard: int, heartbeat: timedelta = timedelta(0)) -> ShardCursor:
        """The shard's cursor and tick history, in one strongly consistent read."""
        response = self._client.get_item(
            TableName=self._table, Key=self._key(shard), ConsistentRead=True
        )
        values = _from_item(response.get("Item") or {})
        bucket = values.get("bucket")
        return ShardCursor(
            bucket=parse_instant(bucket) if bucket else None,
            history=ShardHistory(
                ticking_since=_instant_or_none(values.get("ticking_since")),
                last_tick=_instant_or_none(values.get("last_tick_at")),
                outages=tuple(_outage_from_text(o) for o in values.get("outages", [])),
                heartbeat=heartbeat,
            ),
        )

    def record_tick(self, shard: int, history: ShardHistory, seen: ShardHistory) -> bool:
        """Store ``history`` (``seen`` recorded after one more tick), if the stored one
        is still ``seen``: of two ticks of one shard, one records an outage, once."""
        assert history.last_tick is not None
        assert history.ticking_since is not None
        values: dict[str, Any] = {
            ":last": format_instant(history.last_tick),
            ":since": format_instant(history.ticking_since),
            ":outages": [_outage_to_text(o) for o in history.outages],
        }
        if seen.last_tick is None:
            condition = "attribute_not_exists(#last)"
        else:
            condition = "#last = :seen"
            values[":seen"] = format_instant(seen.last_tick)
        try:
            self._client.update_item(
                TableName=self._table,
                Key=self._key(shard),
                UpdateExpression="SET #last = :last, #since = :since, #outages = :outages",
                ConditionExpression=condition,
                ExpressionAttributeNames={
                    "#last": "last_tick_at",
                    "#since": "ticking_since",
                    "#outages": "outages",
                },
                ExpressionAttributeValues=_to_item(values),
            )
        except ClientError as error:
            if _is_condition_failure(error):
                return False
            raise
        return True

    def advance(self, shard: int, bucket: datetime) -> bool:
        """Move the cursor forward to ``bucket``; never backwards."""
        try:
            self._client.update_item(
                TableName=self._table,
                Key=self._key(shard),
                UpdateExpression="SET #bucket = :bucket",
                ConditionExpression="attribute_not_exists(#bucket) OR #bucket < :bucket",
                ExpressionAttributeNames={"#bucket": "bucket"},
                ExpressionAttributeValues=_to_item({":bucket": format_instant(bucket)}),
            )
        except ClientError as error:
            if _is_condition_failure(error):
                return False
            raise
        return True


@dataclass(frozen=True)
class PartitionQuery:
    """The items of one partition (``key_name`` = ``key_value``) of a table or index."""

    table: str
    key_name: str
    key_value: str
    index: IndexDefinition | None = None
    newest_first: bool = False


def query_page(
    client: Any,
    query: PartitionQuery,
    limit: int,
    token: str | None,
    parse: Callable[[dict[str, Any]], T],
) -> Page[T]:
    """One page of ``query``, resumed from a caller's ``token``.

    A token is only accepted for the partition it came from (a tenant's token is
    no use in another's), and one DynamoDB rejects is the caller's mistake (4xx).
    """
    kwargs: dict[str, Any] = {
        "TableName": query.table,
        "KeyConditionExpression": "#key = :key",
        "ExpressionAttributeNames": {"#key": query.key_name},
        "ExpressionAttributeValues": _to_item({":key": query.key_value}),
        "ScanIndexForward": not query.newest_first,
        "Limit": limit,
    }
    if query.index is not None:
        kwargs["IndexName"] = query.index.name
    listing = f"{query.table}/{query.index.name if query.index else ''}"
    start_key = decode_page_token(token, listing)
    if start_key:
        if start_key.get(query.key_name) != {"S": query.key_value}:
            raise InvalidRequest("next_token", "is not a token this API returned")
        kwargs["ExclusiveStartKey"] = start_key
    try:
        response = client.query(**kwargs)
    except ClientError as error:
        if start_key and error.response.get("Error", {}).get("Code") == "ValidationException":
            raise InvalidRequest("next_token", "is not a token this API returned") from None
        raise
    return Page(
        items=[parse(i) for i in response.get("Items", [])],
        next_token=encode_page_token(response.get("LastEvaluatedKey"), listing),
    )


class TenantStore:
    """Each tenant's record in the coordination table: its task count and signing secrets.

    Secrets are newest first; during a rotation the previous one stays valid, and
    deliveries carry a signature under each, until the next rotation drops it.
    """

    def __init__(self, client: Any, coordination_table: str) -> None:
        self._client = client
        self._table = coordination_table

    def _read(self, tenant_id: str) -> dict[str, Any]:
        response = self._client.get_item(
            TableName=self._table, Key=tenant_key(tenant_id), ConsistentRead=True
        )
        return _from_item(response.get("Item") or {})

    def signing_secrets(self, tenant_id: str) -> list[str]:
        """Active secrets, newest first; empty for a tenant that never registered a task."""
        return list(self._read(tenant_id).get("signing_secrets", []))

    def task_count(self, tenant_id: str) -> int:
        return int(self._read(tenant_id).get("task_count", 0))

    def ensure_secret(self, tenant_id: str, fresh_secret: str) -> list[str]:
        """The tenant's secrets, storing ``fresh_secret`` as its first if it has none."""
        response = self._client.update_item(
            TableName=self._table,
            Key=tenant_key(tenant_id),
            UpdateExpression="SET signing_secrets = if_not_exists(signing_secrets, :fresh)",
            ExpressionAttributeValues=_to_item({":fresh": [fresh_secret]}),
            ReturnValues="ALL_NEW",
        )
        return list(_from_item(response["Attributes"])["signing_secrets"])

    def rotate_secret(self, tenant_id: str, fresh_secret: str) -> list[str] | None:
        """Make ``fresh_secret`` current and keep the one it replaces; None on a race."""
        current = self.ensure_secret(tenant_id, fresh_secret)
        if current[0] == fresh_secret:
            return current  # it had none: the fresh one is its first
        rotated = [fresh_secret, current[0]]
        try:
            self._client.update_item(
                TableName=self._table,
                Key=tenant_key(tenant_id),
                UpdateExpression="SET signing_secrets = :rotated",
                ConditionExpression="signing_secrets = :current",
                ExpressionAttributeValues=_to_item({":rotated": rotated, ":current": current}),
            )
        except ClientError as error:
            if _is_condition_failure(error):
                return None
            raise
        return rotated


def chunks(items: list[T], size: int) -> Iterator[list[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
