"""DynamoDB adapters: tasks, executions and the tick's cursors.

Clients are injected. Every state transition is one conditional write that names
the state it expects, so concurrent ticks, workers and API calls cannot both win.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Generic, TypeVar

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.exceptions import ClientError

from dynacron.domain.errors import InvalidRequest, LimitExceeded
from dynacron.domain.executions import Dispatch, Execution, ExecutionStatus
from dynacron.domain.instants import format_instant, parse_instant
from dynacron.domain.schedules import (
    CronSchedule,
    OneTimeSchedule,
    RateSchedule,
    Schedule,
    Window,
)
from dynacron.domain.tasks import (
    DEFAULT_CATCHUP_WINDOW_SECONDS,
    DEFAULT_TENANT,
    CatchUp,
    CatchUpPolicy,
    Claim,
    DuePlacement,
    Task,
    TaskStatus,
    task_id_of,
)
from dynacron.domain.wallclock import Ambiguous, DstPolicy, Nonexistent
from dynacron.resources import DUE_INDEX, TENANT_INDEX

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
    return _to_item({"key": f"tenant#{tenant_id}"})


def encode_page_token(last_key: dict[str, Any] | None) -> str | None:
    if not last_key:
        return None
    return base64.urlsafe_b64encode(json.dumps(last_key).encode()).decode()


def decode_page_token(token: str | None) -> dict[str, Any] | None:
    if not token:
        return None
    try:
        key = json.loads(base64.urlsafe_b64decode(token.encode()))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        key = None
    if not isinstance(key, dict):
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
    raise ValueError(f"unknown schedule kind {values['kind']!r}")


def _instant_or_none(value: str | None) -> datetime | None:
    return parse_instant(value) if value is not None else None


def _optional_instant(value: datetime | None) -> str | None:
    return format_instant(value) if value is not None else None


def task_to_item(task: Task, placement: DuePlacement | None) -> dict[str, Any]:
    return _to_item(
        {
            "task_id": task.task_id,
            "name": task.name,
            "schedule": _schedule_to_map(task.schedule),
            "handler_url": task.handler_url,
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
        }
    )


def task_from_item(item: dict[str, Any]) -> Task:
    values = _from_item(item)
    return Task(
        task_id=values["task_id"],
        name=values["name"],
        schedule=_schedule_from_map(values["schedule"]),
        handler_url=values["handler_url"],
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
    )


class TaskStore:
    """Tasks. The ``*_owned`` methods are the API's: each is scoped to one tenant.

    A tenant's writes are conditioned on ``tenant_id`` and its listing queries the
    tenant index, so another tenant's task is, to a caller, exactly a missing one.
    """

    def __init__(self, client: Any, table_name: str, coordination_table: str = "") -> None:
        self._client = client
        self._table = table_name
        self._coordination = coordination_table

    def create(self, task: Task, placement: DuePlacement | None) -> None:
        self._client.put_item(
            TableName=self._table,
            Item=task_to_item(task, placement),
            ConditionExpression="attribute_not_exists(task_id)",
        )

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
        task = self.get(task_id)
        # GetItem takes no condition: the owner is checked here, the one place
        # every tenant-scoped read goes through.
        return task if task is not None and task.tenant_id == tenant_id else None

    def page_owned(self, tenant_id: str, limit: int, token: str | None) -> Page[Task]:
        """One page of a tenant's tasks, oldest first."""
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "IndexName": TENANT_INDEX.name,
            "KeyConditionExpression": "#tenant = :tenant",
            "ExpressionAttributeNames": {"#tenant": TENANT_INDEX.partition_key.name},
            "ExpressionAttributeValues": _to_item({":tenant": tenant_id}),
            "Limit": limit,
        }
        start_key = decode_page_token(token)
        if start_key:
            if start_key.get(TENANT_INDEX.partition_key.name) != {"S": tenant_id}:
                raise InvalidRequest("next_token", "is not a token this API returned")
            kwargs["ExclusiveStartKey"] = start_key
        response = _query_page(self._client, kwargs)
        return Page(
            items=[task_from_item(i) for i in response.get("Items", [])],
            next_token=encode_page_token(response.get("LastEvaluatedKey")),
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

    def get(self, task_id: str) -> Task | None:
        response = self._client.get_item(
            TableName=self._table, Key=_to_item({"task_id": task_id}), ConsistentRead=True
        )
        item = response.get("Item")
        return task_from_item(item) if item else None

    def get_many(self, task_ids: Iterable[str]) -> list[Task]:
        """Strongly consistent reads of up to any number of tasks; missing ones are left out."""
        ids = list(dict.fromkeys(task_ids))
        tasks: list[Task] = []
        for start in range(0, len(ids), BATCH_GET_LIMIT):
            keys = [_to_item({"task_id": i}) for i in ids[start : start + BATCH_GET_LIMIT]]
            request: dict[str, Any] = {self._table: {"Keys": keys, "ConsistentRead": True}}
            while request:
                response = self._client.batch_get_item(RequestItems=request)
                tasks += [task_from_item(i) for i in response["Responses"].get(self._table, [])]
                request = response.get("UnprocessedKeys") or {}
        return tasks

    def page(self, limit: int, token: str | None) -> Page[Task]:
        kwargs: dict[str, Any] = {"TableName": self._table, "Limit": limit}
        start_key = decode_page_token(token)
        if start_key:
            kwargs["ExclusiveStartKey"] = start_key
        response = self._client.scan(**kwargs)
        return Page(
            items=[task_from_item(i) for i in response.get("Items", [])],
            next_token=encode_page_token(response.get("LastEvaluatedKey")),
        )

    def delete(self, task_id: str) -> bool:
        try:
            self._client.delete_item(
                TableName=self._table,
                Key=_to_item({"task_id": task_id}),
                ConditionExpression="attribute_exists(task_id)",
            )
        except ClientError as error:
            if _is_condition_failure(error):
                return False
            raise
        return True

    def due_task_ids(
        self, bucket_key: str, now: datetime, limit: int, start_key: dict[str, Any] | None
    ) -> tuple[list[str], dict[str, Any] | None]:
        """One bounded page of task ids due by ``now`` in one bucket of one shard."""
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "IndexName": DUE_INDEX.name,
            "KeyConditionExpression": "#bucket = :bucket AND #next <= :now",
            "ExpressionAttributeNames": {
                "#bucket": DUE_INDEX.partition_key.name,
                "#next": DUE_INDEX.sort_key.name,
            },
            "ExpressionAttributeValues": _to_item(
                {":bucket": bucket_key, ":now": format_instant(now)}
            ),
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
        removes: list[str] = []
        if claim.next_run_at is None or placement is None:
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
    )


class ExecutionStore:
    def __init__(self, client: Any, table_name: str, retention: timedelta) -> None:
        self._client = client
        self._table = table_name
        self._retention = retention

    def _key(self, execution_id: str) -> dict[str, Any]:
        return _to_item({"task_id": task_id_of(execution_id), "execution_id": execution_id})

    def start(self, dispatch: Dispatch, now: datetime) -> bool:
        """Record RUNNING; False if this execution already finished (a duplicate)."""
        try:
            self._client.update_item(
                TableName=self._table,
                Key=self._key(dispatch.execution_id),
                UpdateExpression=(
                    "SET #status = :running, scheduled_at = :scheduled, attempt = :attempt, "
                    "started_at = :now, expires_at = :expires REMOVE completed_at, #error"
                ),
                ConditionExpression=(
                    "attribute_not_exists(execution_id) OR NOT (#status IN (:succeeded, :skipped))"
                ),
                ExpressionAttributeNames={"#status": "status", "#error": "error"},
                ExpressionAttributeValues=_to_item(
                    {
                        ":running": ExecutionStatus.RUNNING.value,
                        ":succeeded": ExecutionStatus.SUCCEEDED.value,
                        ":skipped": ExecutionStatus.SKIPPED.value,
                        ":scheduled": format_instant(dispatch.scheduled_at),
                        ":attempt": dispatch.attempt,
                        ":now": format_instant(now),
                        ":expires": int((dispatch.scheduled_at + self._retention).timestamp()),
                    }
                ),
            )
        except ClientError as error:
            if _is_condition_failure(error):
                return False
            raise
        return True

    def finish(
        self, execution_id: str, status: ExecutionStatus, now: datetime, error: str | None = None
    ) -> bool:
        """Move a RUNNING execution to a final status."""
        values: dict[str, Any] = {
            ":running": ExecutionStatus.RUNNING.value,
            ":final": status.value,
            ":now": format_instant(now),
        }
        names = {"#status": "status"}
        expression = "SET #status = :final, completed_at = :now"
        if error is not None:
            values[":error"] = error[:2000]
            names["#error"] = "error"
            expression += ", #error = :error"
        try:
            self._client.update_item(
                TableName=self._table,
                Key=self._key(execution_id),
                UpdateExpression=expression,
                ConditionExpression="#status = :running",
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=_to_item(values),
            )
        except ClientError as err:
            if _is_condition_failure(err):
                return False
            raise
        return True

    def get(self, execution_id: str) -> Execution | None:
        response = self._client.get_item(
            TableName=self._table, Key=self._key(execution_id), ConsistentRead=True
        )
        item = response.get("Item")
        return execution_from_item(item) if item else None

    def list_for_task(self, task_id: str, limit: int, token: str | None) -> Page[Execution]:
        """A task's executions, newest scheduled time first."""
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": "task_id = :task",
            "ExpressionAttributeValues": _to_item({":task": task_id}),
            "ScanIndexForward": False,
            "Limit": limit,
        }
        start_key = decode_page_token(token)
        if start_key:
            if start_key.get("task_id") != {"S": task_id}:
                raise InvalidRequest("next_token", "is not a token this API returned")
            kwargs["ExclusiveStartKey"] = start_key
        response = _query_page(self._client, kwargs)
        return Page(
            items=[execution_from_item(i) for i in response.get("Items", [])],
            next_token=encode_page_token(response.get("LastEvaluatedKey")),
        )


class CursorStore:
    """Per-shard tick cursors: the oldest due-index bucket that may still hold work."""

    def __init__(self, client: Any, table_name: str) -> None:
        self._client = client
        self._table = table_name

    @staticmethod
    def _key(shard: int) -> dict[str, Any]:
        return _to_item({"key": f"tick-cursor#{shard}"})

    def get(self, shard: int) -> datetime | None:
        response = self._client.get_item(
            TableName=self._table, Key=self._key(shard), ConsistentRead=True
        )
        item = response.get("Item")
        return parse_instant(_from_item(item)["bucket"]) if item else None

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


def _query_page(client: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """A query whose ``ExclusiveStartKey`` came from a caller: a forged key is a 4xx."""
    try:
        response: dict[str, Any] = client.query(**kwargs)
    except ClientError as error:
        code = error.response.get("Error", {}).get("Code")
        if "ExclusiveStartKey" in kwargs and code == "ValidationException":
            raise InvalidRequest("next_token", "is not a token this API returned") from None
        raise
    return response


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
