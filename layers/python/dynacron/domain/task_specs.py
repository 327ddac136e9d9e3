"""What a registration asks for (``TaskSpec``) and what a PATCH changes
(``TaskChanges``), and the pure rules that make them a stored ``Task``: the
schedule built from its texts, the PATCH merge, the version bump.

The API turns a request body into one of these once; services and the domain
never see the wire. The checks that need a store or the deployment's settings
(the dependency chain, the handler's URL policy, sizes and intervals) are the
service's, after these.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import Enum
from typing import Any, Final

from dynacron.domain.errors import Conflict, InvalidRequest
from dynacron.domain.instants import format_instant
from dynacron.domain.limits import TaskLimits
from dynacron.domain.retry import RetryPolicy
from dynacron.domain.schedules import (
    AfterSchedule,
    CronSchedule,
    FixedDelaySchedule,
    OneTimeSchedule,
    RateSchedule,
    Schedule,
    Window,
    check_computable,
    load_zone,
    parse_at,
    parse_cron,
    parse_fixed_delay,
    parse_local_instant,
    parse_rate,
)
from dynacron.domain.tasks import (
    MAX_CATCHUP_WINDOW_SECONDS,
    MAX_JITTER_SECONDS,
    UNREADABLE_SCHEDULE,
    CatchUp,
    CatchUpPolicy,
    Overlap,
    Task,
    TaskStatus,
)
from dynacron.domain.wallclock import DstPolicy

# A one-time task may be registered a little late (clock skew, slow clients)
# and still fire at once; further in the past is almost surely a mistake.
AT_PAST_TOLERANCE = timedelta(minutes=5)
# Objects and arrays within objects and arrays (DynamoDB's own limit for a
# document is 32); deeper ones fail to serialise, far deeper ones to parse.
MAX_PAYLOAD_DEPTH = 32
# The fields that say which kind of schedule a task has; exactly one is given.
SCHEDULE_KINDS = ("cron", "rate", "at", "fixed_delay", "after")


class Unset(Enum):
    """A PATCH field sent as null where null clears: a schedule kind or a handler
    (another one replaces it), or the catch-up policy's window."""

    UNSET = "unset"


UNSET: Final = Unset.UNSET


@dataclass(frozen=True)
class ScheduleSpec:
    """When a task runs, as a person wrote it: one kind's text and what qualifies it.

    Instants without an offset are read in ``timezone``; ``build_schedule`` checks
    and parses it all (a rate's grid and a cron's ``H`` need the time and the task id).
    """

    cron: str | None = None
    rate: str | None = None
    at: str | None = None
    fixed_delay: str | None = None
    after: str | None = None
    timezone: str = "UTC"
    dst: DstPolicy | None = None
    anchor: str | None = None
    start_at: str | None = None
    end_at: str | None = None

    def kinds_given(self) -> list[str]:
        return [kind for kind in SCHEDULE_KINDS if getattr(self, kind) is not None]


@dataclass(frozen=True)
class TaskSpec:
    """What a registration asks for. ``name`` defaults to the task id."""

    schedule: ScheduleSpec
    handler_url: str | None = None
    handler_name: str | None = None
    payload: dict[str, Any] = field(default_factory=dict)
    name: str | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    catchup: CatchUp = CatchUp.RUN_ONCE
    # run_all only; None: the default window.
    catchup_window_seconds: int | None = None
    jitter_seconds: int = 0
    overlap: Overlap = Overlap.ALLOW
    limits: TaskLimits = field(default_factory=TaskLimits)


@dataclass(frozen=True)
class TaskChanges:
    """A PATCH: None is "not given, the stored value stays"; ``UNSET`` clears.

    Giving a schedule kind (even ``UNSET``) replaces the stored kind, and drops the
    ``anchor`` and ``dst`` that only fit it; giving a handler (even ``UNSET``)
    replaces both handler fields. A ``catchup`` other than run_all (``UNSET``: the
    stored one) drops the stored window. ``version``, when given, must be the
    task's current one. ``reschedule`` rebuilds the schedule even when no schedule
    field has a value (the request named one, as null).
    """

    version: int | None = None
    name: str | None = None
    cron: str | Unset | None = None
    rate: str | Unset | None = None
    at: str | Unset | None = None
    fixed_delay: str | Unset | None = None
    after: str | Unset | None = None
    timezone: str | None = None
    dst: DstPolicy | None = None
    anchor: str | None = None
    start_at: str | None = None
    end_at: str | None = None
    handler_url: str | Unset | None = None
    handler_name: str | Unset | None = None
    payload: dict[str, Any] | None = None
    retry: RetryPolicy | None = None
    catchup: CatchUp | Unset | None = None
    catchup_window_seconds: int | None = None
    jitter_seconds: int | None = None
    overlap: Overlap | None = None
    reschedule: bool = False

    @property
    def names_kind(self) -> bool:
        return any(getattr(self, kind) is not None for kind in SCHEDULE_KINDS)

    @property
    def touches_schedule(self) -> bool:
        """Whether the schedule is rebuilt and ``next_run_at`` recomputed."""
        qualifiers = (self.timezone, self.dst, self.anchor, self.start_at, self.end_at)
        return self.reschedule or self.names_kind or any(q is not None for q in qualifiers)


def new_task(spec: TaskSpec, now: datetime, *, task_id: str, tenant_id: str) -> Task:
    """The ACTIVE task ``spec`` registers at ``now``; every rule checked that needs
    neither a store nor the deployment's settings."""
    schedule = build_schedule(spec.schedule, now, seed=task_id)
    catchup = catchup_policy(spec.catchup, spec.catchup_window_seconds)
    check_one_handler(spec)
    next_run_at = _first_run(schedule, spec.schedule, now)
    # The tick computes each next occurrence with this same code: a schedule it
    # could not follow is refused here, not discovered when it falls due.
    check_computable(schedule, now)
    return Task(
        task_id=task_id,
        name=spec.name or task_id,
        schedule=schedule,
        handler_url=spec.handler_url,
        handler_name=spec.handler_name,
        retry=spec.retry,
        payload=spec.payload,
        status=TaskStatus.ACTIVE,
        next_run_at=next_run_at,
        created_at=now,
        updated_at=now,
        catchup=catchup,
        jitter_seconds=spec.jitter_seconds,
        overlap=spec.overlap,
        limits=spec.limits,
        tenant_id=tenant_id,
    )


def apply_changes(task: Task, changes: TaskChanges, now: datetime) -> Task:
    """``task`` with ``changes`` merged in, one version later.

    Without a schedule field, the schedule and ``next_run_at`` stay. With one, the
    schedule is rebuilt from the stored one overlaid with the changes and
    ``next_run_at`` recomputed so that no occurrence is lost or doubled: an
    occurrence already due keeps its place (it runs, under the new handler and
    payload), otherwise the new schedule's first occurrence from now on that is
    later than the last one dispatched. See docs/decisions/0011-patch-semantics.md.
    """
    if changes.version is not None and changes.version != task.version:
        raise Conflict(
            f"task {task.task_id!r} is at version {task.version}, not {changes.version}; "
            "read it again"
        )
    if task.schedule is UNREADABLE_SCHEDULE and not changes.names_kind:
        raise InvalidRequest("schedule", "the stored schedule cannot be read; give a new one")
    spec = merged(spec_of(task), changes)
    _check_stored_bounds(spec)
    changed = task
    if changes.touches_schedule:
        schedule = build_schedule(spec.schedule, now, seed=task.task_id)
        check_computable(schedule, now)
        changed = _rescheduled(task, schedule, spec.schedule, now)
    check_one_handler(spec)
    return dataclasses.replace(
        changed,
        name=spec.name or task.name,
        handler_url=spec.handler_url,
        handler_name=spec.handler_name,
        payload=spec.payload,
        retry=spec.retry,
        catchup=catchup_policy(spec.catchup, spec.catchup_window_seconds),
        jitter_seconds=spec.jitter_seconds,
        overlap=spec.overlap,
        version=task.version + 1,
        updated_at=now,
    )


def spec_of(task: Task) -> TaskSpec:
    """The spec that would register ``task`` again (its schedule's instants in UTC)."""
    schedule = task.schedule
    texts: dict[str, Any] = {}
    if isinstance(schedule, CronSchedule):
        texts = {"cron": schedule.expression, "dst": schedule.dst}
    elif isinstance(schedule, RateSchedule):
        texts = {"rate": schedule.expression, "anchor": format_instant(schedule.anchor)}
    elif isinstance(schedule, OneTimeSchedule):
        texts = {"at": format_instant(schedule.at)}
    elif isinstance(schedule, FixedDelaySchedule):
        texts = {"fixed_delay": schedule.expression}
    else:
        texts = {"after": schedule.upstream_task_id}
    catchup = task.catchup
    return TaskSpec(
        schedule=ScheduleSpec(
            timezone=task.timezone,
            start_at=_text(schedule.window.start_at),
            end_at=_text(schedule.window.end_at),
            **texts,
        ),
        handler_url=task.handler_url,
        handler_name=task.handler_name,
        payload=task.payload,
        name=task.name,
        retry=task.retry,
        catchup=catchup.policy,
        catchup_window_seconds=(
            catchup.window_seconds if catchup.policy is CatchUp.RUN_ALL else None
        ),
        jitter_seconds=task.jitter_seconds,
        overlap=task.overlap,
        limits=task.limits,
    )


def merged(stored: TaskSpec, changes: TaskChanges) -> TaskSpec:
    """``changes`` over ``stored``: a new schedule kind or handler replaces the old
    one, and the fields that only fit the old kind (``anchor``, ``dst``) go with it."""

    def given(value: Any, old: Any) -> Any:
        if value is UNSET:
            return None
        return old if value is None else value

    schedule = stored.schedule
    if changes.names_kind:
        schedule = ScheduleSpec(
            timezone=schedule.timezone, start_at=schedule.start_at, end_at=schedule.end_at
        )
    schedule = ScheduleSpec(
        **{kind: given(getattr(changes, kind), getattr(schedule, kind)) for kind in SCHEDULE_KINDS},
        timezone=given(changes.timezone, schedule.timezone),
        dst=given(changes.dst, schedule.dst),
        anchor=given(changes.anchor, schedule.anchor),
        start_at=given(changes.start_at, schedule.start_at),
        end_at=given(changes.end_at, schedule.end_at),
    )
    handler_url, handler_name = stored.handler_url, stored.handler_name
    if changes.handler_url is not None or changes.handler_name is not None:
        handler_url, handler_name = None, None
    window = stored.catchup_window_seconds
    if changes.catchup is not None and changes.catchup is not CatchUp.RUN_ALL:
        window = None
    return TaskSpec(
        schedule=schedule,
        handler_url=given(changes.handler_url, handler_url),
        handler_name=given(changes.handler_name, handler_name),
        payload=given(changes.payload, stored.payload),
        name=given(changes.name, stored.name),
        retry=given(changes.retry, stored.retry),
        catchup=given(changes.catchup, None) or stored.catchup,
        catchup_window_seconds=given(changes.catchup_window_seconds, window),
        jitter_seconds=given(changes.jitter_seconds, stored.jitter_seconds),
        overlap=given(changes.overlap, stored.overlap),
        limits=stored.limits,
    )


def build_schedule(spec: ScheduleSpec, now: datetime, seed: str) -> Schedule:
    """The schedule ``spec`` describes, checked; ``seed`` spreads a cron's ``H`` fields."""
    given = spec.kinds_given()
    if len(given) != 1:
        found = " and ".join(repr(f) for f in given) if given else "none"
        raise InvalidRequest(
            "schedule",
            f"give exactly one of 'cron', 'rate', 'at', 'fixed_delay' or 'after' (found {found})",
        )
    load_zone(spec.timezone)
    if spec.anchor is not None and spec.rate is None:
        raise InvalidRequest("anchor", "applies to 'rate' schedules only")
    if spec.dst is not None and spec.rate is not None:
        raise InvalidRequest(
            "dst", "applies to 'cron' and 'at'; a rate counts elapsed time, unmoved by DST"
        )
    window = _window_of(spec)
    if spec.after is not None:
        return AfterSchedule(upstream_task_id=spec.after, window=window)
    if spec.fixed_delay is not None:
        return parse_fixed_delay(spec.fixed_delay, window)
    if spec.cron is not None:
        return parse_cron(spec.cron, spec.timezone, dst=spec.dst, seed=seed, window=window)
    if spec.rate is not None:
        anchor = (
            parse_local_instant("anchor", spec.anchor, spec.timezone)
            if spec.anchor is not None
            else window.start_at or now.replace(microsecond=0)
        )
        return parse_rate(spec.rate, anchor=anchor, window=window)
    assert spec.at is not None
    schedule = parse_at(spec.at, spec.timezone, spec.dst, window)
    if schedule.at < now - AT_PAST_TOLERANCE:
        raise InvalidRequest(
            "at",
            f"{spec.at!r} is more than {int(AT_PAST_TOLERANCE.total_seconds() // 60)} "
            "minutes in the past",
        )
    return schedule


def catchup_policy(policy: CatchUp, window_seconds: int | None) -> CatchUpPolicy:
    if window_seconds is None:
        return CatchUpPolicy(policy)
    if policy is not CatchUp.RUN_ALL:
        raise InvalidRequest("catchup_window_seconds", "applies only with catchup 'run_all'")
    return CatchUpPolicy(policy, window_seconds)


def check_one_handler(spec: TaskSpec) -> None:
    """Exactly one of an HTTP handler or a Python handler."""
    if (spec.handler_url is None) == (spec.handler_name is None):
        raise InvalidRequest("handler", "give exactly one of 'handler_url' or 'handler'")


def payload_depth(value: Any) -> int:
    """How deeply ``value`` nests objects and arrays, without recursing (counted up
    to one past ``MAX_PAYLOAD_DEPTH``)."""
    deepest, pending = 0, [(value, 1)]
    while pending:
        current, level = pending.pop()
        deepest = max(deepest, level)
        if deepest > MAX_PAYLOAD_DEPTH:
            break
        children = current.values() if isinstance(current, dict) else current
        pending.extend((c, level + 1) for c in children if isinstance(c, dict | list))
    return deepest


def _check_stored_bounds(spec: TaskSpec) -> None:
    """A stored value that today's bounds refuse (written before they existed) is
    refused naming its field, as it would be if sent; the PATCH can replace it.
    The wire checked every value the PATCH gave, so only stored ones fail here."""
    refused = "the stored value is refused now: "
    if payload_depth(spec.payload) > MAX_PAYLOAD_DEPTH:
        raise InvalidRequest(
            "payload", f"{refused}Value error, is nested more than {MAX_PAYLOAD_DEPTH} levels deep"
        )
    if spec.jitter_seconds < 0:
        raise InvalidRequest(
            "jitter_seconds", f"{refused}Input should be greater than or equal to 0"
        )
    if spec.jitter_seconds > MAX_JITTER_SECONDS:
        raise InvalidRequest(
            "jitter_seconds",
            f"{refused}Input should be less than or equal to {MAX_JITTER_SECONDS}",
        )
    window = spec.catchup_window_seconds
    if window is not None and window < 1:
        raise InvalidRequest(
            "catchup_window_seconds", f"{refused}Input should be greater than or equal to 1"
        )
    if window is not None and window > MAX_CATCHUP_WINDOW_SECONDS:
        raise InvalidRequest(
            "catchup_window_seconds",
            f"{refused}Input should be less than or equal to {MAX_CATCHUP_WINDOW_SECONDS}",
        )


def _window_of(spec: ScheduleSpec) -> Window:
    def instant(name: str, text: str | None) -> datetime | None:
        return parse_local_instant(name, text, spec.timezone) if text is not None else None

    start_at = instant("start_at", spec.start_at)
    end_at = instant("end_at", spec.end_at)
    if start_at is not None and end_at is not None and end_at < start_at:
        raise InvalidRequest("end_at", "is before start_at")
    return Window(start_at=start_at, end_at=end_at)


def _first_run(schedule: Schedule, spec: ScheduleSpec, now: datetime) -> datetime | None:
    """The first occurrence; only a dependent task (``after``) may have none."""
    next_run_at = schedule.first_run(now)
    if next_run_at is None and not isinstance(schedule, AfterSchedule):
        raise InvalidRequest(
            "end_at" if spec.end_at else "start_at",
            "the schedule has no occurrence between start_at and end_at",
        )
    return next_run_at


def _rescheduled(task: Task, schedule: Schedule, spec: ScheduleSpec, now: datetime) -> Task:
    """``task`` on a new schedule, neither losing nor doubling an occurrence."""
    due_now = (
        task.status is TaskStatus.ACTIVE
        and task.next_run_at is not None
        and task.next_run_at <= now
        and not isinstance(schedule, AfterSchedule)
    )
    if due_now:
        # Due and not yet claimed: it runs, then the new schedule takes over.
        next_run_at = task.next_run_at
    else:
        next_run_at = _first_run(schedule, spec, now)
        last = task.last_scheduled_at
        if next_run_at is not None and last is not None and next_run_at <= last:
            next_run_at = schedule.next_after(last)
            if next_run_at is None:
                raise InvalidRequest(
                    schedule.kind,
                    f"has no occurrence after {format_instant(last)}, the last one dispatched",
                )
    status, reason = task.status, task.status_reason
    slot, buffered = task.running_execution, task.buffered_at
    if status is TaskStatus.COMPLETED and next_run_at is not None:
        status = TaskStatus.ACTIVE
    if status is TaskStatus.ERROR:
        # A new schedule revives a task set aside. Its run slot is let go: the
        # execution holding it may be the very one whose end could not be handled.
        status, reason, slot, buffered = TaskStatus.ACTIVE, None, None, None
    return dataclasses.replace(
        task,
        schedule=schedule,
        next_run_at=next_run_at,
        status=status,
        status_reason=reason,
        running_execution=slot,
        buffered_at=buffered,
    )


def _text(instant: datetime | None) -> str | None:
    return format_instant(instant) if instant is not None else None
