"""A task as a DynamoDB item, and back; an item that cannot be read as a task
is told apart (``UnreadableTask``) rather than raised.
"""

from __future__ import annotations

import contextlib
import json
import zlib
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, TypeVar

from dynacron.adapters.aws.items import (
    deserializer,
    from_item,
    instant_or_none,
    short_digest,
    to_item,
)
from dynacron.definitions.resources import (
    DUE_INDEX,
    TENANT_ATTRIBUTE,
    TENANT_INDEX_PARTS,
    TENANT_PART_ATTRIBUTE,
)
from dynacron.domain.coordination.tenants import DEFAULT_TENANT
from dynacron.domain.instants import parse_instant
from dynacron.domain.schedules.expressions import Schedule
from dynacron.domain.tasks.record import (
    retry_from_map as retry_from_map,
)
from dynacron.domain.tasks.record import (
    retry_to_map as retry_to_map,
)
from dynacron.domain.tasks.record import (
    schedule_from_map,
    task_from_record,
    task_record,
)
from dynacron.domain.tasks.task import UNREADABLE_SCHEDULE, DuePlacement, Task, TaskStatus
from dynacron.ports import REASON_LIMIT, UnreadableTask, UnreadableTaskError, reason_of

T = TypeVar("T")


def task_to_item(task: Task, placement: DuePlacement | None) -> dict[str, Any]:
    """``task`` as an item (``domain.tasks.record``), filed in the due index at
    ``placement``; DynamoDB's numbers are decimal, so a rate is one."""
    record = task_record(task)
    limits = record["limits"]
    if limits and "rate_per_second" in limits:
        record["limits"] = {**limits, "rate_per_second": Decimal(str(limits["rate_per_second"]))}
    record[DUE_INDEX.partition_key.name] = placement.key if placement else None
    record[TENANT_PART_ATTRIBUTE] = tenant_part(task.tenant_id, task.task_id)
    return to_item(record)


def tenant_part(tenant_id: str, task_id: str) -> str:
    """The tenant-index partition of a task (decision 0053): a function of its id
    alone, so every write of the task (create, PATCH, a fire's put) gives it the
    same one and only a create ever changes the index."""
    return tenant_part_key(tenant_id, zlib.crc32(task_id.encode()) % TENANT_INDEX_PARTS)


def tenant_part_key(tenant_id: str, part: int) -> str:
    """The value of ``tenant_id``'s part ``part`` (0 to ``TENANT_INDEX_PARTS`` - 1): 64
    bits of a SHA-256 of the tenant, not the tenant itself, so that every task item
    carries 18 bytes here whatever its tenant's id (an IAM principal's ARN is 40 to
    over 100): an item over 1 KB costs every claim a second write unit. Two tenants
    sharing a prefix (one chance in 2^64 a pair) share partitions: a listing then
    reads the other's entries and leaves them out (the item's ``tenant_id`` decides),
    so nothing is shown across tenants."""
    return f"{short_digest(tenant_id)}#{part}"


def task_from_item(item: dict[str, Any]) -> Task:
    return task_from_record(from_item(item))


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


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
            seen_version=plain_version(item.get("version")),
        )


def plain_version(version: Any) -> Any:
    """A stored ``version`` attribute (undecoded, None if missing) as a plain value:
    what a set-aside's condition compares with (``transitions.set_aside``)."""
    return deserializer.deserialize(version) if version is not None else None


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
            values[name] = deserializer.deserialize(value)

    unreadable_schedule: Schedule = UNREADABLE_SCHEDULE

    def text(name: str) -> str | None:
        value = values.get(name)
        return value if isinstance(value, str) else None

    return Task(
        task_id=read.task_id,
        name=text("name") or read.task_id,
        schedule=_or(unreadable_schedule, lambda: schedule_from_map(values["schedule"])),
        handler_url=text("handler_url"),
        handler_name=text("handler"),
        payload=_or({}, lambda: dict(json.loads(values["payload"]))),
        status=TaskStatus.ERROR,
        status_reason=text("status_reason") or read.reason,
        next_run_at=_or(None, lambda: instant_or_none(values.get("next_run_at"))),
        created_at=_or(_EPOCH, lambda: parse_instant(values["created_at"])),
        updated_at=_or(_EPOCH, lambda: parse_instant(values["updated_at"])),
        version=_or(0, lambda: int(values["version"])),
        tenant_id=text(TENANT_ATTRIBUTE) or DEFAULT_TENANT,
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
