"""A task as a DynamoDB item, and back; an item that cannot be read as a task
is told apart (``UnreadableTask``) rather than raised.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, TypeVar

from dynacron.adapters.aws.items import (
    deserializer,
    from_item,
    instant_or_none,
    optional_instant,
    to_item,
)
from dynacron.definitions.resources import (
    DEPENDENTS_INDEX,
    DUE_INDEX,
    TAGS_ATTRIBUTE,
    TENANT_INDEX,
)
from dynacron.domain.coordination.limits import RateLimit, TaskLimits
from dynacron.domain.coordination.tenants import DEFAULT_TENANT
from dynacron.domain.executions.retry import RetryPolicy
from dynacron.domain.instants import format_instant, parse_instant
from dynacron.domain.schedules.expressions import (
    AfterSchedule,
    CronSchedule,
    FixedDelaySchedule,
    OneTimeSchedule,
    RateSchedule,
    Schedule,
    Window,
)
from dynacron.domain.schedules.wallclock import Ambiguous, DstPolicy, Nonexistent
from dynacron.domain.tasks.task import (
    DEFAULT_CATCHUP_WINDOW_SECONDS,
    UNREADABLE_SCHEDULE,
    CatchUp,
    CatchUpPolicy,
    DuePlacement,
    Overlap,
    Task,
    TaskStatus,
)
from dynacron.ports import (
    REASON_LIMIT,
    UnreadableTask,
    UnreadableTaskError,
    reason_of,
)

T = TypeVar("T")


def _schedule_to_map(schedule: Schedule) -> dict[str, Any]:
    window = {
        "start_at": optional_instant(schedule.window.start_at),
        "end_at": optional_instant(schedule.window.end_at),
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
        start_at=instant_or_none(values.get("start_at")),
        end_at=instant_or_none(values.get("end_at")),
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


def retry_to_map(policy: RetryPolicy) -> dict[str, int]:
    return {
        "max_attempts": policy.max_attempts,
        "base_delay_seconds": policy.base_delay_seconds,
        "max_delay_seconds": policy.max_delay_seconds,
    }


def retry_from_map(values: dict[str, Any] | None) -> RetryPolicy:
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
    return to_item(
        {
            "task_id": task.task_id,
            "name": task.name,
            "schedule": _schedule_to_map(task.schedule),
            "handler_url": task.handler_url,
            "handler": task.handler_name,
            "retry": retry_to_map(task.retry),
            # JSON text keeps floats exact and lets the size limit be measured.
            "payload": json.dumps(task.payload, separators=(",", ":")),
            "status": task.status.value,
            "next_run_at": optional_instant(task.next_run_at),
            DUE_INDEX.partition_key.name: placement.key if placement else None,
            "version": task.version,
            "created_at": format_instant(task.created_at),
            "updated_at": format_instant(task.updated_at),
            "last_scheduled_at": optional_instant(task.last_scheduled_at),
            "catchup": task.catchup.policy.value,
            "catchup_window_seconds": task.catchup.window_seconds,
            "jitter_seconds": task.jitter_seconds,
            TENANT_INDEX.partition_key.name: task.tenant_id,
            "overlap": task.overlap.value,
            "pause_note": task.pause_note,
            "status_reason": task.status_reason,
            "running_execution": task.running_execution,
            "buffered_at": optional_instant(task.buffered_at),
            "has_dependents": task.has_dependents or None,
            DEPENDENTS_INDEX.partition_key.name: task.upstream_task_id,
            "limits": limits_to_map(task.limits),
            "resumed_at": optional_instant(task.resumed_at),
            # Left out when empty: an untagged task's index entry is its keys alone.
            TAGS_ATTRIBUTE: dict(task.tags) or None,
        }
    )


def task_from_item(item: dict[str, Any]) -> Task:
    values = from_item(item)
    return Task(
        task_id=values["task_id"],
        name=values["name"],
        schedule=_schedule_from_map(values["schedule"]),
        handler_url=values.get("handler_url"),
        handler_name=values.get("handler"),
        retry=retry_from_map(values.get("retry")),
        payload=json.loads(values["payload"]),
        status=TaskStatus(values["status"]),
        next_run_at=instant_or_none(values.get("next_run_at")),
        version=int(values["version"]),
        created_at=parse_instant(values["created_at"]),
        updated_at=parse_instant(values["updated_at"]),
        last_scheduled_at=instant_or_none(values.get("last_scheduled_at")),
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
        buffered_at=instant_or_none(values.get("buffered_at")),
        limits=limits_from_map(values.get("limits")),
        has_dependents=bool(values.get("has_dependents", False)),
        status_reason=values.get("status_reason"),
        resumed_at=instant_or_none(values.get("resumed_at")),
        tags=_tags_from(values.get(TAGS_ATTRIBUTE)),
    )


def _tags_from(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise ValueError("tags is not a map of strings")
    return {str(k): v for k, v in value.items()}


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
            values[name] = deserializer.deserialize(value)

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
        next_run_at=_or(None, lambda: instant_or_none(values.get("next_run_at"))),
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
