"""What a PATCH changes (``TaskChanges``) and the merge that applies it to a stored
task (``apply_changes``): which fields replace, which clear, when the schedule is
rebuilt, and how ``next_run_at`` moves so that no occurrence is lost or doubled."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Any, Final

from dynacron.domain.errors import Conflict, InvalidRequest
from dynacron.domain.executions.notifications import NotifySettings, check_notify
from dynacron.domain.executions.retry import RetryPolicy
from dynacron.domain.instants import format_instant
from dynacron.domain.schedules.calendars import CalendarChanges, CalendarRule
from dynacron.domain.schedules.expressions import (
    GRID_KINDS,
    AfterSchedule,
    Schedule,
    check_computable,
)
from dynacron.domain.schedules.wallclock import DstPolicy
from dynacron.domain.tasks.specs import (
    MAX_PAYLOAD_DEPTH,
    SCHEDULE_KINDS,
    ScheduleSpec,
    TaskSpec,
    build_schedule,
    catchup_policy,
    check_one_handler,
    first_run,
    payload_depth,
    spec_of,
)
from dynacron.domain.tasks.tags import checked_tags
from dynacron.domain.tasks.targets import Target
from dynacron.domain.tasks.task import (
    MAX_CATCHUP_WINDOW_SECONDS,
    MAX_JITTER_SECONDS,
    UNREADABLE_SCHEDULE,
    CatchUp,
    Overlap,
    Task,
    TaskStatus,
)


class Unset(Enum):
    """A PATCH field sent as null where null clears: a schedule kind or a handler
    (another one replaces it), or ``catchup`` (the stored policy stays, its window
    goes back to the default)."""

    UNSET = "unset"


UNSET: Final = Unset.UNSET


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
    after: str | tuple[str, ...] | Unset | None = None
    when: str | Unset | None = None
    timezone: str | None = None
    dst: DstPolicy | None = None
    anchor: str | None = None
    start_at: str | None = None
    end_at: str | None = None
    handler_url: str | Unset | None = None
    handler_name: str | Unset | None = None
    target: Target | Unset | None = None
    payload: dict[str, Any] | None = None
    retry: RetryPolicy | None = None
    catchup: CatchUp | Unset | None = None
    catchup_window_seconds: int | None = None
    jitter_seconds: int | None = None
    overlap: Overlap | None = None
    # The whole map: it replaces the stored one ({} clears it).
    tags: dict[str, str] | None = None
    # The whole ``notify``: it replaces the stored one (an empty one clears it).
    notify: NotifySettings | None = None
    reschedule: bool = False
    # Calendars: the fields given (the service copies the days in again).
    calendars: CalendarChanges | None = None

    @property
    def names_kind(self) -> bool:
        """Whether the change gives a schedule kind (``cron``, ``rate``, ...): a new schedule."""
        return any(getattr(self, kind) is not None for kind in SCHEDULE_KINDS)

    @property
    def touches_schedule(self) -> bool:
        """Whether the schedule is rebuilt and ``next_run_at`` recomputed."""
        qualifiers = (self.timezone, self.dst, self.anchor, self.start_at, self.end_at, self.when)
        return self.reschedule or self.names_kind or any(q is not None for q in qualifiers)


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
    check_notify(spec.notify)
    return dataclasses.replace(
        changed,
        name=spec.name or task.name,
        handler_url=spec.handler_url,
        handler_name=spec.handler_name,
        target=spec.target,
        payload=spec.payload,
        retry=spec.retry,
        catchup=catchup_policy(spec.catchup, spec.catchup_window_seconds),
        jitter_seconds=spec.jitter_seconds,
        overlap=spec.overlap,
        tags=checked_tags(changes.tags) if changes.tags is not None else task.tags,
        calendars=_calendars(
            changed, changes.calendars.over(task.calendars) if changes.calendars else None
        ),
        notify=spec.notify,
        version=task.version + 1,
        updated_at=now,
    )


def _calendars(task: Task, rule: CalendarRule | None) -> CalendarRule:
    """The task's calendars after a PATCH: those given, else those stored, held to
    a schedule with a grid of occurrences."""
    rule = task.calendars if rule is None else rule
    if rule and task.schedule.kind not in GRID_KINDS:
        raise InvalidRequest(
            "exclude_calendars" if rule.exclude else "only_calendars",
            f"a {task.schedule.kind} task has no grid of occurrences for a calendar to hold",
        )
    return rule


def merged(stored: TaskSpec, changes: TaskChanges) -> TaskSpec:
    """``changes`` over ``stored``: a new schedule kind or handler replaces the old
    one, and the fields that only fit the old kind (``anchor``, ``dst``) go with it."""

    def given(value: Any, old: Any) -> Any:
        if value is UNSET:
            return None
        return old if value is None else value

    schedule = stored.schedule
    if changes.names_kind:
        # A new list of upstreams keeps the stored ``when``; another kind drops it.
        when = schedule.when if changes.after not in (None, UNSET) else None
        schedule = ScheduleSpec(
            timezone=schedule.timezone,
            start_at=schedule.start_at,
            end_at=schedule.end_at,
            when=when,
        )
    schedule = ScheduleSpec(
        **{kind: given(getattr(changes, kind), getattr(schedule, kind)) for kind in SCHEDULE_KINDS},
        when=given(changes.when, schedule.when),
        timezone=given(changes.timezone, schedule.timezone),
        dst=given(changes.dst, schedule.dst),
        anchor=given(changes.anchor, schedule.anchor),
        start_at=given(changes.start_at, schedule.start_at),
        end_at=given(changes.end_at, schedule.end_at),
    )
    handler_url, handler_name = stored.handler_url, stored.handler_name
    target = stored.target
    handler_given = (changes.handler_url, changes.handler_name, changes.target)
    if any(value is not None for value in handler_given):
        handler_url, handler_name, target = None, None, None
    window = stored.catchup_window_seconds
    if changes.catchup is not None and changes.catchup is not CatchUp.RUN_ALL:
        window = None
    return TaskSpec(
        schedule=schedule,
        handler_url=given(changes.handler_url, handler_url),
        handler_name=given(changes.handler_name, handler_name),
        target=given(changes.target, target),
        payload=given(changes.payload, stored.payload),
        name=given(changes.name, stored.name),
        retry=given(changes.retry, stored.retry),
        catchup=given(changes.catchup, None) or stored.catchup,
        catchup_window_seconds=given(changes.catchup_window_seconds, window),
        jitter_seconds=given(changes.jitter_seconds, stored.jitter_seconds),
        overlap=given(changes.overlap, stored.overlap),
        limits=stored.limits,
        tags=given(changes.tags, stored.tags),
        notify=given(changes.notify, stored.notify),
    )


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
        next_run_at = first_run(schedule, spec, now)
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
