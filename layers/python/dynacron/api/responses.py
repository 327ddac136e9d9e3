"""Wire models of what the HTTP API returns: pydantic, one per body."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from dynacron.api.requests import DstPolicyModel, NotifyModel, RateLimitModel, TargetModel
from dynacron.domain.coordination.tenants import EffectiveQuota
from dynacron.domain.executions.execution import Execution
from dynacron.domain.instants import format_instant
from dynacron.domain.schedules.calendars import Calendar, calendar_to_map
from dynacron.domain.schedules.forecast import Forecast
from dynacron.domain.schedules.previews import OffsetChange, PassedOver, SchedulePreview
from dynacron.domain.tasks.history import TaskChange
from dynacron.domain.tasks.skips import Skip
from dynacron.domain.tasks.specs import spec_of
from dynacron.domain.tasks.task import UNREADABLE_SCHEDULE, Task
from dynacron.ports import Page

if TYPE_CHECKING:
    from dynacron.api.settings import TenantLimits


class BackfillView(BaseModel):
    task_id: str
    # Every occurrence in the range, in order, and which of them this call started.
    execution_ids: list[str]
    started: list[str]
    already_requested: list[str]

    @classmethod
    def of(cls, task_id: str, execution_ids: list[str], started: list[str]) -> BackfillView:
        already_requested = [i for i in execution_ids if i not in started]
        return cls(
            task_id=task_id,
            execution_ids=execution_ids,
            started=started,
            already_requested=already_requested,
        )


class RetryView(BaseModel):
    max_attempts: int
    base_delay_seconds: int
    max_delay_seconds: int


class ScheduleView(BaseModel):
    # "unreadable": the stored schedule cannot be read (the task is ERROR; PATCH a new one).
    kind: Literal["cron", "rate", "at", "fixed_delay", "after", "unreadable"]
    expression: str


class TaskView(BaseModel):
    task_id: str
    name: str
    schedule: ScheduleView
    timezone: str
    dst: DstPolicyModel | None
    anchor: str | None
    start_at: str | None
    end_at: str | None
    jitter_seconds: int
    catchup: str
    catchup_window_seconds: int | None
    overlap: str
    # One upstream's id, or the list of a fan-in (decision 0058), as registered.
    after: str | list[str] | None
    # after only: which ends count ("success", "failure", "always").
    when: str | None = None
    pause_note: str | None
    running_execution: str | None
    buffered_at: str | None
    handler_url: str | None
    handler: str | None
    target: TargetModel | None = None
    retry: RetryView
    max_concurrency: int | None = None
    rate_limit: RateLimitModel | None = None
    payload: dict[str, Any]
    tags: dict[str, str]
    notify: NotifyModel | None = None
    status: str
    # ERROR only: why the scheduler set the task aside.
    status_reason: str | None = None
    next_run_at: str | None
    last_scheduled_at: str | None
    version: int
    created_at: str
    updated_at: str
    # Occurrences its owner asked not to run, those still ahead (POST /tasks/{id}/skip).
    skips: list[SkipView] = Field(default_factory=list)
    # Calendars its occurrences are held to (decision 0056).
    exclude_calendars: list[str] = Field(default_factory=list)
    only_calendars: list[str] = Field(default_factory=list)
    on_excluded: str = "skip"

    @classmethod
    def of(cls, task: Task) -> TaskView:
        """The task as the API shows it: what would register it again, and its state."""
        spec = spec_of(task)
        when = spec.schedule
        schedule = task.schedule
        expression = format_instant(schedule.at) if schedule.kind == "at" else schedule.expression
        shown = (
            ScheduleView(kind="unreadable", expression="")
            if schedule is UNREADABLE_SCHEDULE
            else ScheduleView(kind=schedule.kind, expression=expression)
        )
        return cls(
            task_id=task.task_id,
            name=task.name,
            schedule=shown,
            timezone=when.timezone,
            dst=DstPolicyModel.of(when.dst) if when.dst is not None else None,
            anchor=when.anchor,
            start_at=when.start_at,
            end_at=when.end_at,
            jitter_seconds=spec.jitter_seconds,
            catchup=spec.catchup.value,
            catchup_window_seconds=spec.catchup_window_seconds,
            overlap=spec.overlap.value,
            after=(list(when.after) if isinstance(when.after, tuple) else when.after) or None,
            when=(getattr(schedule, "when", None) if when.after else None),
            pause_note=task.pause_note,
            running_execution=task.running_execution,
            buffered_at=_optional_instant(task.buffered_at),
            handler_url=spec.handler_url,
            handler=spec.handler_name,
            target=TargetModel.of(spec.target) if spec.target is not None else None,
            retry=RetryView(
                max_attempts=spec.retry.max_attempts,
                base_delay_seconds=spec.retry.base_delay_seconds,
                max_delay_seconds=spec.retry.max_delay_seconds,
            ),
            max_concurrency=spec.limits.max_concurrency,
            rate_limit=RateLimitModel.of(spec.limits),
            payload=spec.payload,
            tags=spec.tags,
            notify=NotifyModel.of(spec.notify),
            status=task.status.value,
            status_reason=task.status_reason,
            next_run_at=_optional_instant(task.next_run_at),
            last_scheduled_at=_optional_instant(task.last_scheduled_at),
            version=task.version,
            created_at=format_instant(task.created_at),
            updated_at=format_instant(task.updated_at),
            skips=[SkipView.of(skip) for skip in task.skips],
            exclude_calendars=[c.name for c in task.calendars.exclude],
            only_calendars=[c.name for c in task.calendars.only],
            on_excluded=task.calendars.on_excluded.value,
        )


class SkipView(BaseModel):
    """Occurrences not to run: the instants ``at``, or every one before ``until``;
    who asked (``by``), when, and why."""

    at: list[str] | None = None
    until: str | None = None
    by: str
    asked_at: str
    note: str | None = None

    @classmethod
    def of(cls, skip: Skip) -> SkipView:
        return cls(
            at=[format_instant(a) for a in skip.at] or None,
            until=_optional_instant(skip.until),
            by=skip.by,
            asked_at=format_instant(skip.asked_at),
            note=skip.note,
        )


class OffsetChangeView(BaseModel):
    """The time zone's UTC offset changed (daylight saving began or ended) at ``at``,
    from ``offset_before`` to ``offset_after`` (``+01:00``), before ``next_occurrence``."""

    at: str
    offset_before: str
    offset_after: str
    next_occurrence: str

    @classmethod
    def of(cls, change: OffsetChange) -> OffsetChangeView:
        return cls(
            at=format_instant(change.at),
            offset_before=_offset(change.offset_before),
            offset_after=_offset(change.offset_after),
            next_occurrence=format_instant(change.next_occurrence),
        )


class SchedulePreviewView(BaseModel):
    """Body of ``POST /schedules/preview``: the next occurrences (UTC) a schedule
    would have, what it means in words, and the daylight-saving changes of its time
    zone that fall between them."""

    timezone: str
    explanation: str = Field(description="The schedule in words, as `dynacron next --explain`")
    occurrences: list[str]
    dst_transitions: list[OffsetChangeView] = Field(
        default_factory=list,
        description="Where the time zone's UTC offset changes between two occurrences",
    )
    skipped: list[PassedOverView] = Field(
        default_factory=list,
        description="Occurrences listed that will not run (skipped), and why",
    )

    @classmethod
    def of(cls, preview: SchedulePreview) -> SchedulePreviewView:
        return cls(
            timezone=preview.timezone,
            explanation=preview.explanation,
            occurrences=[format_instant(o) for o in preview.occurrences],
            dst_transitions=[OffsetChangeView.of(c) for c in preview.offset_changes],
            skipped=[PassedOverView.of(p) for p in preview.passed_over],
        )


class PassedOverView(BaseModel):
    """An occurrence of a preview that will not run, and why."""

    occurrence: str
    reason: str

    @classmethod
    def of(cls, passed_over: PassedOver) -> PassedOverView:
        return cls(occurrence=format_instant(passed_over.occurrence), reason=passed_over.reason)


class OccurrencesView(SchedulePreviewView):
    """Body of ``GET /tasks/{task_id}/next``: upcoming occurrences, UTC, explained."""

    task_id: str
    # Older servers answered without these: a client reading one still parses.
    explanation: str = Field(
        default="", description="The schedule in words, as `dynacron next --explain`"
    )

    @classmethod
    def of_task(cls, task_id: str, preview: SchedulePreview) -> OccurrencesView:
        return cls(task_id=task_id, **SchedulePreviewView.of(preview).model_dump())


def _offset(offset: timedelta) -> str:
    """``+01:00``, ``-03:30``, ``+00:00``: as ISO 8601 writes a UTC offset."""
    minutes = int(offset.total_seconds()) // 60
    sign = "-" if minutes < 0 else "+"
    hours, minutes = divmod(abs(minutes), 60)
    return f"{sign}{hours:02d}:{minutes:02d}"


def _optional_instant(value: datetime | None) -> str | None:
    return format_instant(value) if value is not None else None


class ExecutionView(BaseModel):
    execution_id: str
    task_id: str
    scheduled_at: str
    status: str
    attempt: int
    started_at: str | None
    completed_at: str | None
    error: str | None
    next_attempt_at: str | None
    lease_until: str | None
    dead_lettered_at: str | None
    upstream_execution_id: str | None
    result_status_code: int | None
    result_excerpt: str | None
    # When it entered the state it is listed in across tasks (GET /executions);
    # null while it is not listed there.
    attention_at: str | None = None

    @classmethod
    def of(cls, execution: Execution) -> ExecutionView:
        def instant(value: Any) -> str | None:
            return format_instant(value) if value else None

        return cls(
            execution_id=execution.execution_id,
            task_id=execution.task_id,
            scheduled_at=format_instant(execution.scheduled_at),
            status=execution.status.value,
            attempt=execution.attempt,
            started_at=instant(execution.started_at),
            completed_at=instant(execution.completed_at),
            error=execution.error,
            next_attempt_at=instant(execution.next_attempt_at),
            lease_until=instant(execution.lease_until),
            dead_lettered_at=instant(execution.dead_lettered_at),
            upstream_execution_id=execution.upstream.execution_id if execution.upstream else None,
            result_status_code=execution.result.status_code if execution.result else None,
            result_excerpt=execution.result.excerpt if execution.result else None,
            attention_at=instant(execution.attention_at),
        )


class TaskPage(BaseModel):
    items: list[TaskView]
    next_token: str | None

    @classmethod
    def of(cls, page: Page[Task]) -> TaskPage:
        return cls(items=[TaskView.of(task) for task in page.items], next_token=page.next_token)


class ChangeView(BaseModel):
    """One change of a task (decision 0054): when, who, what, and each field it
    changed before and after (with the version)."""

    change_id: str
    task_id: str
    at: str
    who: str
    what: str
    note: str | None = None
    before: dict[str, Any]
    after: dict[str, Any]

    @classmethod
    def of(cls, change: TaskChange) -> ChangeView:
        return cls(
            change_id=change.change_id,
            task_id=change.task_id,
            at=format_instant(change.at),
            who=change.who,
            what=change.what.value,
            note=change.note,
            before=change.before,
            after=change.after,
        )


class ChangePage(BaseModel):
    items: list[ChangeView]
    next_token: str | None

    @classmethod
    def of(cls, page: Page[TaskChange]) -> ChangePage:
        return cls(items=[ChangeView.of(c) for c in page.items], next_token=page.next_token)


class ExecutionPage(BaseModel):
    items: list[ExecutionView]
    next_token: str | None

    @classmethod
    def of(cls, page: Page[Execution]) -> ExecutionPage:
        items = [ExecutionView.of(execution) for execution in page.items]
        return cls(items=items, next_token=page.next_token)


class MinuteCount(BaseModel):
    minute: str
    executions: int


class ForecastView(BaseModel):
    """Body of ``GET /forecast``: executions starting in each minute ahead (UTC;
    minutes with none are left out), the busiest minute, and whether every task
    was counted (false: the counts are a lower bound)."""

    start: str
    minutes: int
    tasks: int
    complete: bool
    # Of ``tasks``, how many a budget left out or counted only in part (decision 0046).
    not_counted: int = 0
    peak: MinuteCount | None
    per_minute: list[MinuteCount]

    @classmethod
    def of(cls, forecast: Forecast) -> ForecastView:
        peak = forecast.peak
        return cls(
            start=format_instant(forecast.start),
            minutes=forecast.minutes,
            tasks=forecast.tasks,
            complete=forecast.complete,
            not_counted=forecast.not_counted,
            peak=MinuteCount(minute=format_instant(peak[0]), executions=peak[1]) if peak else None,
            per_minute=[
                MinuteCount(minute=format_instant(minute), executions=count)
                for minute, count in sorted(forecast.per_minute.items())
            ],
        )


class Problem(BaseModel):
    """RFC 9457 problem details."""

    type: str = "about:blank"
    title: str
    status: int
    detail: str
    errors: list[dict[str, Any]] | None = None
    limit: str | None = Field(
        default=None, description="The limit that refused the request, e.g. 'max_tasks_per_tenant'"
    )


class TaskIdView(BaseModel):
    """A task as an answer asked with ``Prefer: return=minimal`` shows it."""

    task_id: str
    status: str

    @classmethod
    def of(cls, task: Task) -> TaskIdView:
        return cls(task_id=task.task_id, status=task.status.value)


class BatchItemView(BaseModel):
    """How one item of ``POST /tasks/batch`` ended, by its index in the request."""

    index: int
    outcome: Literal["created", "replayed", "refused"]
    status: int = Field(
        description="What POST /tasks would have answered: 201, or the problem's status"
    )
    task: TaskView | TaskIdView | None = Field(
        default=None,
        description="The task, created or replayed: the whole task, or only its task_id "
        "and status when the request said Prefer: return=minimal",
    )
    problem: Problem | None = Field(default=None, description="Why the item was refused")


class BatchView(BaseModel):
    """Body of ``POST /tasks/batch``: one answer per item, in the request's order."""

    items: list[BatchItemView]
    created: int = Field(description="How many items made a new task")


class TenantView(BaseModel):
    """Body of ``GET /tenant``: who the caller is to dynacron, and its limits."""

    tenant_id: str
    signing_secrets: list[str] = Field(
        description="Verify deliveries with any of these (newest first; two during a rotation)"
    )
    task_count: int
    max_tasks: int = Field(description="The most tasks this tenant may hold")
    rate_per_second: float = Field(
        description="Requests a second this tenant may send to each API instance (0: no limit)"
    )
    own_limits: list[Literal["max_tasks", "rate_per_second"]] = Field(
        description="The limits an operator set for this tenant; the others are the defaults"
    )
    private_networks: list[str] = Field(
        default_factory=list,
        description="Private ranges (CIDRs) an operator lets this tenant's handler URLs "
        "reach, besides public addresses",
    )
    max_payload_bytes: int
    min_interval_seconds: int

    @classmethod
    def of(
        cls,
        tenant_id: str,
        signing_secrets: list[str],
        task_count: int,
        quota: EffectiveQuota,
        settings: TenantLimits,
    ) -> TenantView:
        own: list[Literal["max_tasks", "rate_per_second"]] = []
        if quota.own_max_tasks:
            own.append("max_tasks")
        if quota.own_rate:
            own.append("rate_per_second")
        return cls(
            tenant_id=tenant_id,
            signing_secrets=signing_secrets,
            task_count=task_count,
            max_tasks=quota.max_tasks,
            rate_per_second=quota.rate_per_second,
            own_limits=own,
            private_networks=list(quota.private_networks),
            max_payload_bytes=settings.max_payload_bytes,
            min_interval_seconds=settings.min_interval_seconds,
        )


class CalendarDateView(BaseModel):
    """Days of a calendar: ``from`` to ``to``, both included, with a note."""

    model_config = ConfigDict(populate_by_name=True)

    from_: str = Field(alias="from")
    to: str
    note: str | None = None


class CalendarView(BaseModel):
    """A calendar: its days, read in ``timezone``."""

    name: str
    timezone: str
    dates: list[CalendarDateView]

    @classmethod
    def of(cls, calendar: Calendar) -> CalendarView:
        return cls.model_validate(calendar_to_map(calendar))


class CalendarList(BaseModel):
    """Body of ``GET /calendars``: the tenant's calendars, by name."""

    calendars: list[CalendarView]
