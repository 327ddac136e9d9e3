"""A task's record as stored: its attribute names and the shape of its values.

A record is a plain mapping of the task item's attribute names (those
``dynacron.domain.tasks.transitions`` tests and changes among them) to plain
values: text, whole numbers, booleans, maps and lists; instants as ISO text; the
payload as compact JSON text (floats stay exact, its size can be measured). An
absent field is None here and left out when stored. Both stores keep this record
(DynamoDB as an item, SQLite as JSON text beside its index columns), so an item
and a row say the same thing in the same words.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from dynacron.domain.coordination.limits import RateLimit, TaskLimits
from dynacron.domain.coordination.tenants import DEFAULT_TENANT
from dynacron.domain.executions.notifications import (
    notify_from_map,
    notify_to_map,
    state_from_map,
    state_to_map,
)
from dynacron.domain.executions.retry import RetryPolicy
from dynacron.domain.instants import format_instant, parse_instant
from dynacron.domain.schedules.calendars import rule_from_map, rule_to_map
from dynacron.domain.schedules.expressions import (
    AFTER_WHEN,
    AfterSchedule,
    AfterWhen,
    CronSchedule,
    FixedDelaySchedule,
    OneTimeSchedule,
    RateSchedule,
    Schedule,
    Window,
)
from dynacron.domain.schedules.wallclock import Ambiguous, DstPolicy, Nonexistent
from dynacron.domain.tasks.listing import NAME_KEY, name_key
from dynacron.domain.tasks.skips import skips_from_list, skips_to_list
from dynacron.domain.tasks.targets import target_from_map, target_to_map
from dynacron.domain.tasks.task import (
    DEFAULT_CATCHUP_WINDOW_SECONDS,
    CatchUp,
    CatchUpPolicy,
    FanInState,
    Overlap,
    Task,
    TaskStatus,
    UpstreamEnd,
)

# Attributes the stores index (the AWS resources name the same ones).
AFTER_TASK_ID = "after_task_id"
TAGS = "tags"
SKIPS = "skips"
NOTIFY = "notify"
# What its notifications counted and sent (decision 0057); a transition of its own.
NOTIFY_STATE = "notify_state"


def _optional_instant(value: Any) -> str | None:
    return format_instant(value) if value is not None else None


def _instant_or_none(value: Any) -> Any:
    return parse_instant(value) if value is not None else None


def schedule_to_map(schedule: Schedule) -> dict[str, Any]:
    """A schedule as the record keeps it: its kind, its fields, instants as ISO text."""
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
            return {
                "kind": "after",
                "upstream_task_id": schedule.upstream_task_id,
                # Fan-in (decision 0058); left out for one upstream on success, as before.
                "also_after": list(schedule.also_after) or None,
                "when": None if schedule.when == "success" else schedule.when,
                **window,
            }
    raise ValueError(f"unknown schedule {schedule!r}")


def schedule_from_map(values: dict[str, Any]) -> Schedule:
    """A schedule as ``schedule_to_map`` stored it; raises on one it cannot read."""
    # Records written before a field existed lack it: each missing field is its default.
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
            return AfterSchedule(
                upstream_task_id=values["upstream_task_id"],
                also_after=tuple(str(v) for v in values.get("also_after") or ()),
                when=_after_when(values.get("when") or "success"),
                window=window,
            )
    raise ValueError(f"unknown schedule kind {values['kind']!r}")


def _after_when(value: Any) -> AfterWhen:
    if value not in AFTER_WHEN:
        raise ValueError(f"unknown 'when' {value!r}")
    return value  # type: ignore[no-any-return]


# Fan-in (decision 0058): an upstream names each dependent that follows it after
# another first upstream in an attribute of its own, which one conditional write
# adds without reading the others.
FAN_IN_DEPENDENT_PREFIX = "dependent#"


def fan_in_dependent_attribute(dependent_task_id: str) -> str:
    """The upstream's attribute that names ``dependent_task_id`` as following it."""
    return f"{FAN_IN_DEPENDENT_PREFIX}{dependent_task_id}"


def _end_to_map(end: UpstreamEnd | None) -> dict[str, str] | None:
    if end is None:
        return None
    return {"completed_at": format_instant(end.completed_at), "execution_id": end.execution_id}


def _end_from_map(values: Any) -> UpstreamEnd | None:
    if not values:
        return None
    return UpstreamEnd(parse_instant(values["completed_at"]), str(values["execution_id"]))


def fan_in_to_map(state: FanInState | None) -> dict[str, Any] | None:
    """A fan-in dependent's progress as the record keeps it."""
    if state is None:
        return None
    stored: dict[str, Any] = {
        "ends": {upstream: _end_to_map(end) for upstream, end in state.ends.items()}
    }
    for name, end in (("fired", state.fired), ("through", state.through)):
        if end is not None:
            stored[name] = _end_to_map(end)
    return stored


def fan_in_from_map(values: Any) -> FanInState | None:
    """A fan-in dependent's progress as ``fan_in_to_map`` stored it."""
    if not values:
        return None
    ends = {
        str(upstream): end
        for upstream, stored in (values.get("ends") or {}).items()
        if (end := _end_from_map(stored)) is not None
    }
    return FanInState(
        ends=ends,
        fired=_end_from_map(values.get("fired")),
        through=_end_from_map(values.get("through")),
    )


def retry_to_map(policy: RetryPolicy) -> dict[str, int]:
    """A task's retry policy as the record keeps it."""
    return {
        "max_attempts": policy.max_attempts,
        "base_delay_seconds": policy.base_delay_seconds,
        "max_delay_seconds": policy.max_delay_seconds,
    }


def retry_from_map(values: dict[str, Any] | None) -> RetryPolicy:
    """A retry policy as ``retry_to_map`` stored it; the default if none was."""
    if not values:
        return _DEFAULT_RETRY
    return _retry_policy(tuple((name, int(value)) for name, value in values.items()))


_DEFAULT_RETRY = RetryPolicy()


@functools.lru_cache(maxsize=256)
def _retry_policy(values: tuple[tuple[str, int], ...]) -> RetryPolicy:
    """One policy (immutable) for each set of numbers, not one made and checked per
    read: most tasks share a few. What is invalid raises, and is not kept."""
    return RetryPolicy(**dict(values))


def limits_to_map(limits: TaskLimits) -> dict[str, Any] | None:
    """A task's limits (None if it has none); the rate as a float, which a store whose
    numbers are decimal turns into one."""
    rate = limits.rate_limit
    values = {
        "max_concurrency": limits.max_concurrency,
        "host_max_concurrency": limits.host_max_concurrency,
        "rate_per_second": rate.per_second if rate else None,
        "rate_burst": rate.burst if rate else None,
    }
    return {k: v for k, v in values.items() if v is not None} or None


# Most tasks have no limits: one immutable value for them all, not one made per read.
_NO_LIMITS = TaskLimits()


def limits_from_map(values: dict[str, Any] | None) -> TaskLimits:
    """A task's limits as ``limits_to_map`` stored them; none if none were."""
    if not values:
        return _NO_LIMITS

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


def task_record(task: Task) -> dict[str, Any]:
    """``task`` as stored, but its due placement (a store's index, set beside it)."""
    return {
        "task_id": task.task_id,
        "name": task.name,
        # Derived from the name, written whenever the name is (a claim never is):
        # the name index's sort key (``domain.tasks.listing``).
        NAME_KEY: name_key(task.name, task.task_id),
        "schedule": schedule_to_map(task.schedule),
        "handler_url": task.handler_url,
        "handler": task.handler_name,
        "retry": retry_to_map(task.retry),
        "payload": json.dumps(task.payload, separators=(",", ":")),
        "status": task.status.value,
        "next_run_at": _optional_instant(task.next_run_at),
        "version": task.version,
        "created_at": format_instant(task.created_at),
        "updated_at": format_instant(task.updated_at),
        "last_scheduled_at": _optional_instant(task.last_scheduled_at),
        "catchup": task.catchup.policy.value,
        "catchup_window_seconds": task.catchup.window_seconds,
        "jitter_seconds": task.jitter_seconds,
        "tenant_id": task.tenant_id,
        "overlap": task.overlap.value,
        "pause_note": task.pause_note,
        "status_reason": task.status_reason,
        "running_execution": task.running_execution,
        "buffered_at": _optional_instant(task.buffered_at),
        "has_dependents": task.has_dependents or None,
        AFTER_TASK_ID: task.upstream_task_id,
        "limits": limits_to_map(task.limits),
        "resumed_at": _optional_instant(task.resumed_at),
        # Left out when empty: an untagged task's index entry is its keys alone.
        TAGS: dict(task.tags) or None,
        "target": target_to_map(task.target) if task.target is not None else None,
        # Skips: left out when there are none (a claim rewrites what is left of them).
        SKIPS: skips_to_list(task.skips),
        # Calendars: left out when there are none.
        "calendars": rule_to_map(task.calendars),
        # Notifications (decision 0057): left out for a task that asks for none.
        NOTIFY: notify_to_map(task.notify),
        NOTIFY_STATE: state_to_map(task.notification_state),
        # Fan-in (decision 0058): a dependent's progress, an upstream's dependents.
        "fan_in": fan_in_to_map(task.fan_in),
        **{fan_in_dependent_attribute(d): True for d in task.fan_in_dependents},
    }


def task_from_record(values: dict[str, Any]) -> Task:
    """The task a record holds; raises (anything) if it cannot be decoded."""
    return Task(
        task_id=values["task_id"],
        name=values["name"],
        schedule=schedule_from_map(values["schedule"]),
        handler_url=values.get("handler_url"),
        handler_name=values.get("handler"),
        retry=retry_from_map(values.get("retry")),
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
        tenant_id=values.get("tenant_id", DEFAULT_TENANT),
        overlap=Overlap(values.get("overlap", Overlap.ALLOW)),
        pause_note=values.get("pause_note"),
        running_execution=values.get("running_execution"),
        buffered_at=_instant_or_none(values.get("buffered_at")),
        limits=limits_from_map(values.get("limits")),
        has_dependents=bool(values.get("has_dependents", False)),
        status_reason=values.get("status_reason"),
        resumed_at=_instant_or_none(values.get("resumed_at")),
        tags=tags_from(values.get(TAGS)),
        target=target_from_map(values["target"]) if values.get("target") else None,
        # Skips.
        skips=skips_from_list(values.get(SKIPS)),
        # Calendars.
        calendars=rule_from_map(values.get("calendars")),
        notify=notify_from_map(values.get(NOTIFY)),
        notification_state=state_from_map(values.get(NOTIFY_STATE)),
        fan_in=fan_in_from_map(values.get("fan_in")),
        fan_in_dependents=tuple(
            sorted(
                name.removeprefix(FAN_IN_DEPENDENT_PREFIX)
                for name in values
                if name.startswith(FAN_IN_DEPENDENT_PREFIX)
            )
        ),
    )


def tags_from(value: Any) -> dict[str, str]:
    """Stored tags (none if absent); ``ValueError`` if they are not a map of strings."""
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise ValueError("tags is not a map of strings")
    return {str(k): v for k, v in value.items()}
