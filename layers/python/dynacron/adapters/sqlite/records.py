"""Records as JSON text, and what every SQLite store does with them: page tokens
bound to their listing and partition, instants in their stored form.

A record keeps the DynamoDB item's map shape (the same field names and value
forms), so an item and a row say the same thing in the same words. The codecs
here are the boto-free twins of ``adapters/aws/task_items.py``'s.
"""

from __future__ import annotations

import base64
import binascii
import json
import sqlite3
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from dynacron.domain.coordination.limits import RateLimit, TaskLimits
from dynacron.domain.coordination.tenants import DEFAULT_TENANT
from dynacron.domain.errors import InvalidRequest
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
    Overlap,
    Task,
    TaskStatus,
)
from dynacron.ports import REASON_LIMIT, UnreadableTask, reason_of

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def dump(record: dict[str, Any]) -> str:
    """A record as stored: absent fields are left out, as DynamoDB leaves them out."""
    return json.dumps(_without_nones(record), separators=(",", ":"), sort_keys=True)


def _without_nones(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_nones(v) for k, v in value.items() if v is not None}
    return value


def load(text: str) -> dict[str, Any]:
    """A stored record; ``ValueError`` if the text is not a JSON object."""
    values = json.loads(text)
    if not isinstance(values, dict):
        raise ValueError("the stored record is not a JSON object")
    return values


def instant_or_none(value: Any) -> datetime | None:
    return parse_instant(value) if value is not None else None


def optional_instant(value: datetime | None) -> str | None:
    return format_instant(value) if value is not None else None


# Page tokens --------------------------------------------------------------------


def encode_page_token(listing: str, partition: str, last_key: list[str] | None) -> str | None:
    """An opaque token that resumes ``listing`` of ``partition`` after ``last_key``."""
    if last_key is None:
        return None
    page = {"listing": listing, "partition": partition, "key": last_key}
    return base64.urlsafe_b64encode(json.dumps(page).encode()).decode()


def decode_page_token(
    token: str | None, listing: str, partition: str, key_length: int
) -> list[str] | None:
    """The key ``token`` resumes after; it must come from this listing of this partition
    (another tenant's token, or another listing's, is the caller's mistake)."""
    if not token:
        return None
    try:
        page = json.loads(base64.urlsafe_b64decode(token.encode()))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        page = None
    key = page.get("key") if isinstance(page, dict) else None
    if (
        not isinstance(page, dict)
        or page.get("listing") != listing
        or page.get("partition") != partition
        or not isinstance(key, list)
        or len(key) != key_length
        or not all(isinstance(part, str) for part in key)
    ):
        raise InvalidRequest("next_token", "is not a token this API returned")
    return key


@dataclass(frozen=True)
class Listing:
    """A paged listing of one partition of a table, in the order of ``order`` (columns
    whose values, together, are unique), as a DynamoDB query of one partition is."""

    name: str
    table: str
    partition_column: str
    order: tuple[str, ...]
    newest_first: bool = False

    def page(
        self,
        connection: sqlite3.Connection,
        partition: str,
        limit: int,
        token: str | None,
        where: tuple[str, tuple[Any, ...]] | None = None,
    ) -> tuple[list[sqlite3.Row], str | None]:
        """One page of rows of ``partition`` and the token of the next (None at the end);
        with ``where`` (a condition and its parameters), only the rows it keeps."""
        after = decode_page_token(token, self.name, partition, len(self.order))
        columns = ", ".join(self.order)
        query = f"SELECT * FROM {self.table} WHERE {self.partition_column} = ?"
        parameters: list[Any] = [partition]
        if where is not None:
            query += f" AND ({where[0]})"
            parameters += where[1]
        if after is not None:
            marks = ", ".join("?" * len(after))
            query += f" AND ({columns}) {'<' if self.newest_first else '>'} ({marks})"
            parameters += after
        direction = " DESC" if self.newest_first else ""
        query += " ORDER BY " + ", ".join(c + direction for c in self.order) + " LIMIT ?"
        rows = connection.execute(query, (*parameters, limit + 1)).fetchall()
        page = rows[:limit]
        last = [str(page[-1][column]) for column in self.order] if len(rows) > limit else None
        return page, encode_page_token(self.name, partition, last)


# Tasks --------------------------------------------------------------------------


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
    raise ValueError(f"unknown schedule {schedule!r}")


def _schedule_from_map(values: dict[str, Any]) -> Schedule:
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


def _limits_to_map(limits: TaskLimits) -> dict[str, Any] | None:
    rate = limits.rate_limit
    values = {
        "max_concurrency": limits.max_concurrency,
        "host_max_concurrency": limits.host_max_concurrency,
        "rate_per_second": rate.per_second if rate else None,
        "rate_burst": rate.burst if rate else None,
    }
    return {k: v for k, v in values.items() if v is not None} or None


def _limits_from_map(values: dict[str, Any] | None) -> TaskLimits:
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


def task_to_record(task: Task) -> dict[str, Any]:
    """A task in the item's map shape (its due placement lives in the row's columns)."""
    return {
        "task_id": task.task_id,
        "name": task.name,
        "schedule": _schedule_to_map(task.schedule),
        "handler_url": task.handler_url,
        "handler": task.handler_name,
        "retry": retry_to_map(task.retry),
        "payload": json.dumps(task.payload, separators=(",", ":")),
        "status": task.status.value,
        "next_run_at": optional_instant(task.next_run_at),
        "version": task.version,
        "created_at": format_instant(task.created_at),
        "updated_at": format_instant(task.updated_at),
        "last_scheduled_at": optional_instant(task.last_scheduled_at),
        "catchup": task.catchup.policy.value,
        "catchup_window_seconds": task.catchup.window_seconds,
        "jitter_seconds": task.jitter_seconds,
        "tenant_id": task.tenant_id,
        "overlap": task.overlap.value,
        "pause_note": task.pause_note,
        "status_reason": task.status_reason,
        "running_execution": task.running_execution,
        "buffered_at": optional_instant(task.buffered_at),
        "has_dependents": task.has_dependents or None,
        "after_task_id": task.upstream_task_id,
        "limits": _limits_to_map(task.limits),
        "resumed_at": optional_instant(task.resumed_at),
        "tags": dict(task.tags) or None,
    }


def task_from_record(values: dict[str, Any]) -> Task:
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
        tenant_id=values.get("tenant_id", DEFAULT_TENANT),
        overlap=Overlap(values.get("overlap", Overlap.ALLOW)),
        pause_note=values.get("pause_note"),
        running_execution=values.get("running_execution"),
        buffered_at=instant_or_none(values.get("buffered_at")),
        limits=_limits_from_map(values.get("limits")),
        has_dependents=bool(values.get("has_dependents", False)),
        status_reason=values.get("status_reason"),
        resumed_at=instant_or_none(values.get("resumed_at")),
        tags=_tags_from(values.get("tags")),
    )


def _tags_from(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise ValueError("tags is not a map of strings")
    return dict(value)


def read_task(task_id: str, text: str, version: int | None) -> Task | UnreadableTask:
    """The task a row holds, or why it cannot be read (any exception counts: a row
    written around the API can break decoding anywhere)."""
    try:
        return task_from_record(load(text))
    except Exception as error:
        return UnreadableTask(
            task_id=task_id,
            reason=f"the stored task cannot be read ({reason_of(error)})"[:REASON_LIMIT],
            seen_version=version,
        )


def shown_task(task_id: str, tenant_id: str, text: str, version: int | None) -> Task:
    """The task a row holds, for its owner to see: an unreadable one is shown as an
    ERROR task with what could be read, every other field at its default."""
    read = read_task(task_id, text, version)
    if isinstance(read, Task):
        return read
    try:
        values = load(text)
    except ValueError:
        values = {}

    def text_of(name: str) -> str | None:
        value = values.get(name)
        return value if isinstance(value, str) else None

    def instant(name: str, default: datetime) -> datetime:
        try:
            return parse_instant(values[name])
        except Exception:
            return default

    try:
        schedule = _schedule_from_map(values["schedule"])
    except Exception:
        schedule = UNREADABLE_SCHEDULE
    try:
        payload = dict(json.loads(values["payload"]))
    except Exception:
        payload = {}
    try:
        next_run_at = instant_or_none(values.get("next_run_at"))
    except Exception:
        next_run_at = None
    return Task(
        task_id=task_id,
        name=text_of("name") or task_id,
        schedule=schedule,
        handler_url=text_of("handler_url"),
        handler_name=text_of("handler"),
        payload=payload,
        status=TaskStatus.ERROR,
        status_reason=text_of("status_reason") or read.reason,
        next_run_at=next_run_at,
        created_at=instant("created_at", _EPOCH),
        updated_at=instant("updated_at", _EPOCH),
        version=version or 0,
        tenant_id=tenant_id,
    )
