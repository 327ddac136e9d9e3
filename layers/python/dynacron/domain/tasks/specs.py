"""What a registration asks for (``TaskSpec``) and the pure rules that make it a
stored ``Task``: the schedule built from its texts, the catch-up policy, one handler.
What a PATCH changes, and how, is ``task_changes``.

The API turns a request body into one of these once; services and the domain
never see the wire. The checks that need a store or the deployment's settings
(the dependency chain, the handler's URL policy, sizes and intervals) are the
service's, after these.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from dynacron.domain.choices import exactly_one_of
from dynacron.domain.coordination.limits import TaskLimits
from dynacron.domain.errors import InvalidRequest
from dynacron.domain.executions.notifications import NO_NOTIFY, NotifySettings, check_notify
from dynacron.domain.executions.retry import RetryPolicy
from dynacron.domain.instants import format_instant
from dynacron.domain.schedules.calendars import NO_CALENDARS, CalendarRule
from dynacron.domain.schedules.expressions import (
    AFTER_WHEN,
    GRID_KINDS,
    MAX_UPSTREAMS,
    AfterSchedule,
    CronSchedule,
    FixedDelaySchedule,
    OneTimeSchedule,
    RateSchedule,
    Schedule,
    Window,
    check_computable_from,
    load_zone,
    parse_at,
    parse_cron,
    parse_fixed_delay,
    parse_local_instant,
    parse_rate,
)
from dynacron.domain.schedules.wallclock import DstPolicy
from dynacron.domain.tasks.tags import checked_tags
from dynacron.domain.tasks.targets import Target, check_target
from dynacron.domain.tasks.task import CatchUp, CatchUpPolicy, Overlap, Task, TaskStatus

# A one-time task may be registered a little late (clock skew, slow clients)
# and still fire at once; further in the past is almost surely a mistake.
AT_PAST_TOLERANCE = timedelta(minutes=5)
# Objects and arrays within objects and arrays (DynamoDB's own limit for a
# document is 32); deeper ones fail to serialise, far deeper ones to parse.
MAX_PAYLOAD_DEPTH = 32
# The fields that say which kind of schedule a task has; exactly one is given.
SCHEDULE_KINDS = ("cron", "rate", "at", "fixed_delay", "after")


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
    # One upstream task's id, or a list of them (fan-in, decision 0058).
    after: str | tuple[str, ...] | None = None
    # Which of the upstreams' ends count: "success" (None), "failure" or "always".
    when: str | None = None
    timezone: str = "UTC"
    dst: DstPolicy | None = None
    anchor: str | None = None
    start_at: str | None = None
    end_at: str | None = None


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
    tags: dict[str, str] = field(default_factory=dict)
    target: Target | None = None
    # Calendars: those named (their days are the service's to copy in).
    calendars: CalendarRule = NO_CALENDARS
    notify: NotifySettings = NO_NOTIFY


def new_task(spec: TaskSpec, now: datetime, *, task_id: str, tenant_id: str) -> Task:
    """The ACTIVE task ``spec`` registers at ``now``; every rule checked that needs
    neither a store nor the deployment's settings."""
    schedule = build_schedule(spec.schedule, now, seed=task_id)
    catchup = catchup_policy(spec.catchup, spec.catchup_window_seconds)
    check_one_handler(spec)
    next_run_at = checked_first_run(schedule, spec.schedule, now)
    check_notify(spec.notify)
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
        tags=checked_tags(spec.tags),
        target=spec.target,
        calendars=_checked_calendars(spec.calendars, schedule),
        notify=spec.notify,
    )


def _checked_calendars(rule: CalendarRule, schedule: Schedule) -> CalendarRule:
    """Calendars hold a grid of occurrences (cron, rate, at) only."""
    if rule and schedule.kind not in GRID_KINDS:
        raise InvalidRequest(
            "exclude_calendars" if rule.exclude else "only_calendars",
            f"a {schedule.kind} task has no grid of occurrences for a calendar to hold",
        )
    return rule


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
        texts = {
            "after": schedule.upstream_task_ids if schedule.fans_in else schedule.upstream_task_id,
            "when": None if schedule.when == "success" else schedule.when,
        }
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
        tags=task.tags,
        target=task.target,
        calendars=task.calendars,
        notify=task.notify,
    )


def _after_schedule(after: str | tuple[str, ...], when: str | None, window: Window) -> Schedule:
    """One upstream or several (fan-in, decision 0058), each named once, and ``when``."""
    given = (after,) if isinstance(after, str) else tuple(after)
    upstreams = tuple(dict.fromkeys(given))
    if not upstreams or not all(isinstance(u, str) and u for u in upstreams):
        raise InvalidRequest("after", "give a task id, or a list of 1 to 10 task ids")
    if len(upstreams) != len(given):
        raise InvalidRequest("after", "names a task more than once")
    if len(upstreams) > MAX_UPSTREAMS:
        raise InvalidRequest("after", f"names more than {MAX_UPSTREAMS} tasks")
    if when is not None and when not in AFTER_WHEN:
        raise InvalidRequest("when", f"give one of {', '.join(map(repr, AFTER_WHEN))}")
    return AfterSchedule(
        upstream_task_id=upstreams[0],
        also_after=upstreams[1:],
        when=when or "success",
        window=window,
    )


def build_schedule(spec: ScheduleSpec, now: datetime, seed: str) -> Schedule:
    """The schedule ``spec`` describes, checked; ``seed`` spreads a cron's ``H`` fields."""
    exactly_one_of("schedule", [(kind, getattr(spec, kind)) for kind in SCHEDULE_KINDS])
    load_zone(spec.timezone)
    if spec.anchor is not None and spec.rate is None:
        raise InvalidRequest("anchor", "applies to 'rate' schedules only")
    if spec.dst is not None and spec.rate is not None:
        raise InvalidRequest(
            "dst", "applies to 'cron' and 'at'; a rate counts elapsed time, unmoved by DST"
        )
    if spec.when is not None and spec.after is None:
        raise InvalidRequest("when", "applies to 'after' schedules only")
    window = _window_of(spec)
    if spec.after is not None:
        return _after_schedule(spec.after, spec.when, window)
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
    """The catch-up policy asked for; a window is refused but with ``run_all``."""
    if window_seconds is None:
        return CatchUpPolicy(policy)
    if policy is not CatchUp.RUN_ALL:
        raise InvalidRequest("catchup_window_seconds", "applies only with catchup 'run_all'")
    return CatchUpPolicy(policy, window_seconds)


def check_one_handler(spec: TaskSpec) -> None:
    """Exactly one of an HTTP handler, a Python handler or an AWS target; a target
    well formed (what only the deployment knows is the service's check)."""
    handlers = (
        ("handler_url", spec.handler_url),
        ("handler", spec.handler_name),
        ("target", spec.target),
    )
    exactly_one_of("handler", handlers)
    if spec.target is not None:
        check_target(spec.target)


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


def _window_of(spec: ScheduleSpec) -> Window:
    def instant(name: str, text: str | None) -> datetime | None:
        return parse_local_instant(name, text, spec.timezone) if text is not None else None

    start_at = instant("start_at", spec.start_at)
    end_at = instant("end_at", spec.end_at)
    if start_at is not None and end_at is not None and end_at < start_at:
        raise InvalidRequest("end_at", "is before start_at")
    return Window(start_at=start_at, end_at=end_at)


def first_run(schedule: Schedule, spec: ScheduleSpec, now: datetime) -> datetime | None:
    """The first occurrence; only a dependent task (``after``) may have none."""
    next_run_at = schedule.first_run(now)
    if next_run_at is None and not isinstance(schedule, AfterSchedule):
        raise InvalidRequest(
            "end_at" if spec.end_at else "start_at",
            "the schedule has no occurrence between start_at and end_at",
        )
    return next_run_at


def checked_first_run(schedule: Schedule, spec: ScheduleSpec, now: datetime) -> datetime | None:
    """The first occurrence of a task registered at ``now``, and the next few computed
    as the tick will compute them."""
    next_run_at = first_run(schedule, spec, now)
    # The tick computes each next occurrence with this same code: a schedule it
    # could not follow is refused here, not discovered when it falls due.
    check_computable_from(schedule, next_run_at)
    return next_run_at


def _text(instant: datetime | None) -> str | None:
    return format_instant(instant) if instant is not None else None
