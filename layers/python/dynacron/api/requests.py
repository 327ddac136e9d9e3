"""Wire models of what the HTTP API accepts: pydantic, one per body. A task's body
becomes a domain value here, once (``to_spec``, ``to_changes``); what the API
returns is ``responses``."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from dynacron.api.request_rules import (
    schedule_rules,
    tags_schema,
    task_create_rules,
    task_patch_rules,
)
from dynacron.domain.coordination.create_keys import BATCH_KEY_FIELD
from dynacron.domain.coordination.limits import (
    MAX_CONCURRENCY,
    MAX_RATE_PER_SECOND,
    RateLimit,
    TaskLimits,
)
from dynacron.domain.executions.notifications import (
    MAX_FAILURES_AFTER,
    MAX_LATE_SECONDS,
    MIN_LATE_SECONDS,
    NO_NOTIFY,
    NotifySettings,
    notify_from_map,
    notify_to_map,
)
from dynacron.domain.executions.retry import (
    MAX_ATTEMPTS_LIMIT,
    MAX_DELAY_LIMIT_SECONDS,
    RetryPolicy,
)
from dynacron.domain.schedules.calendars import (
    MAX_CALENDARS_PER_TASK,
    NAME_PATTERN,
    NO_CALENDARS,
    CalendarChanges,
    CalendarRule,
    OnExcluded,
)
from dynacron.domain.schedules.calendars import MAX_ENTRIES as MAX_CALENDAR_ENTRIES
from dynacron.domain.schedules.calendars import MAX_NOTE_LENGTH as MAX_CALENDAR_NOTE
from dynacron.domain.schedules.calendars import named as named_calendars
from dynacron.domain.schedules.expressions import MAX_UPSTREAMS
from dynacron.domain.schedules.wallclock import Ambiguous, DstPolicy, Nonexistent
from dynacron.domain.tasks.changes import UNSET, TaskChanges
from dynacron.domain.tasks.skips import MAX_NOTE_LENGTH, MAX_SKIPPED_OCCURRENCES, SkipRequest
from dynacron.domain.tasks.specs import (
    MAX_PAYLOAD_DEPTH,
    SCHEDULE_KINDS,
    ScheduleSpec,
    TaskSpec,
    payload_depth,
)
from dynacron.domain.tasks.tags import (
    KEY_RULE,
    MAX_TAGS,
    VALUE_RULE,
)
from dynacron.domain.tasks.targets import (
    MAX_ARN_CHARS,
    MAX_DETAIL_TYPE_CHARS,
    MAX_INPUT_CHARS,
    MAX_SOURCE_CHARS,
    PLACEHOLDERS,
    Target,
    target_from_map,
    target_to_map,
)
from dynacron.domain.tasks.task import (
    MAX_CATCHUP_WINDOW_SECONDS,
    MAX_JITTER_SECONDS,
    CatchUp,
    Overlap,
)
from dynacron.domain.tasks.urls import MAX_URL_LENGTH

CalendarName = Annotated[str, Field(pattern=NAME_PATTERN, max_length=64)]


class DstPolicyModel(BaseModel):
    """What a cron schedule does when daylight saving skips or repeats a wall-clock time."""

    model_config = ConfigDict(extra="forbid", strict=True)

    nonexistent: Literal["shift", "skip"] = Field(
        default="shift",
        description="A time the clocks skip: 'shift' to the first instant after the gap, "
        "or 'skip' it",
    )
    ambiguous: Literal["first", "last", "both"] = Field(
        default="first",
        description="A time the clocks repeat: run at the 'first', 'last' or 'both'",
    )

    @classmethod
    def of(cls, policy: DstPolicy) -> DstPolicyModel:
        return cls(nonexistent=policy.nonexistent.value, ambiguous=policy.ambiguous.value)

    def to_domain(self) -> DstPolicy:
        return DstPolicy(Nonexistent(self.nonexistent), Ambiguous(self.ambiguous))


def _bounds(minimum: int, maximum: int) -> dict[str, Any]:
    return {"minimum": minimum, "maximum": maximum}


class RetryCreate(BaseModel):
    """A task's retry policy; every field has a default."""

    model_config = ConfigDict(extra="forbid", strict=True)

    # The bounds are stated in the schema and checked by ``RetryPolicy``, whose
    # messages say the whole range ("must be between 1 and 100").
    max_attempts: int = Field(
        default=5,
        description="Attempts in all, the first included",
        json_schema_extra=_bounds(1, MAX_ATTEMPTS_LIMIT),
    )
    base_delay_seconds: int = Field(
        default=5,
        description="Ceiling of the first backoff",
        json_schema_extra=_bounds(1, MAX_DELAY_LIMIT_SECONDS),
    )
    max_delay_seconds: int = Field(
        default=600,
        description="Ceiling of any backoff (at least base_delay_seconds)",
        json_schema_extra=_bounds(1, MAX_DELAY_LIMIT_SECONDS),
    )

    def to_domain(self) -> RetryPolicy:
        return RetryPolicy(self.max_attempts, self.base_delay_seconds, self.max_delay_seconds)


class RateLimitModel(BaseModel):
    """Limits on the task's handler host, shared with every task that calls it."""

    model_config = ConfigDict(extra="forbid", strict=True)

    # The maxima are stated in the schema and checked by the domain (``RateLimit``,
    # ``TaskLimits``), whose messages say the whole range.
    per_second: float | None = Field(
        default=None,
        gt=0,
        description="Executions per second to the host (token bucket)",
        json_schema_extra={"maximum": MAX_RATE_PER_SECOND},
    )
    burst: int = Field(
        default=1,
        ge=1,
        description="How many may start at once",
        json_schema_extra={"maximum": MAX_CONCURRENCY},
    )
    max_in_flight: int | None = Field(
        default=None,
        ge=1,
        description="Deliveries to the host at once",
        json_schema_extra={"maximum": MAX_CONCURRENCY},
    )

    @classmethod
    def of(cls, limits: TaskLimits) -> RateLimitModel | None:
        rate = limits.rate_limit
        if rate is None and limits.host_max_concurrency is None:
            return None
        return cls(
            per_second=rate.per_second if rate else None,
            burst=rate.burst if rate else 1,
            max_in_flight=limits.host_max_concurrency,
        )

    def to_domain(self, max_concurrency: int | None) -> TaskLimits:
        rate = RateLimit(self.per_second, self.burst) if self.per_second is not None else None
        return TaskLimits(max_concurrency, rate, self.max_in_flight)


class _TargetPart(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class SqsParameters(_TargetPart):
    message_group_id: str | None = Field(
        default=None, min_length=1, max_length=128, description="FIFO queues: the message group"
    )


class EventBridgeParameters(_TargetPart):
    detail_type: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_DETAIL_TYPE_CHARS,
        description="The event's detail-type (default 'Scheduled Execution')",
    )
    source: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_SOURCE_CHARS,
        description="The event's source (default 'dynacron')",
    )


class LambdaParameters(_TargetPart):
    invocation_type: Literal["Event", "RequestResponse"] = Field(
        default="Event",
        description="'Event' queues the call; 'RequestResponse' waits for the function, and "
        "its error (FunctionError) fails the attempt",
    )


class AwsVpcConfigurationModel(_TargetPart):
    subnets: list[str] = Field(min_length=1, max_length=16)
    security_groups: list[str] = Field(default_factory=list, max_length=5)
    assign_public_ip: Literal["ENABLED", "DISABLED"] = "DISABLED"


class NetworkConfigurationModel(_TargetPart):
    awsvpc_configuration: AwsVpcConfigurationModel


class EcsParametersModel(_TargetPart):
    task_definition_arn: str = Field(max_length=MAX_ARN_CHARS)
    launch_type: Literal["EC2", "FARGATE", "EXTERNAL"] | None = None
    network_configuration: NetworkConfigurationModel | None = None
    platform_version: str | None = Field(default=None, min_length=1, max_length=32)
    group: str | None = Field(default=None, min_length=1, max_length=255)
    task_count: Literal[1] = Field(default=1, description="One task per execution")


class TargetModel(_TargetPart):
    """An AWS API to call per execution, with the caller's role: EventBridge
    Scheduler's Target in snake_case. The ARN's service decides the call."""

    arn: str = Field(
        max_length=MAX_ARN_CHARS,
        description="A Lambda function, SQS queue, SNS topic, EventBridge bus, Step Functions "
        "state machine or ECS cluster, in this stack's partition and region",
    )
    role_arn: str = Field(
        max_length=MAX_ARN_CHARS,
        description="The role dynacron's worker assumes for each call, with the external id "
        "'dynacron:' + your tenant id; one of those the stack's operator allows "
        "(target_roles: by default under the path /dynacron-target/ of its account)",
    )
    input: str | None = Field(
        default=None,
        max_length=MAX_INPUT_CHARS,
        description="What the call carries (default: the JSON envelope an HTTP handler "
        f"receives); these placeholders are replaced: {', '.join(PLACEHOLDERS)}",
    )
    sqs_parameters: SqsParameters | None = None
    eventbridge_parameters: EventBridgeParameters | None = None
    lambda_parameters: LambdaParameters | None = None
    ecs_parameters: EcsParametersModel | None = None
    track: Literal["completion"] | None = Field(
        default=None,
        description="Step Functions and ECS: 'completion' keeps the execution RUNNING until "
        "the state machine execution or the ECS task ends, and ends it as that did "
        "(docs/targets.md, Completion tracking)",
    )

    @classmethod
    def of(cls, target: Target) -> TargetModel:
        return cls.model_validate(target_to_map(target), strict=False)

    def to_domain(self) -> Target:
        # The API's shape is the stored one (EventBridge Scheduler's names).
        return target_from_map(self.model_dump(exclude_none=True))


class NotifyUrl(BaseModel):
    """Where one kind of notification goes: a signed POST, as deliveries are."""

    model_config = ConfigDict(extra="forbid", strict=True)

    url: str = Field(
        max_length=MAX_URL_LENGTH,
        description="http(s) URL that receives the notification (checked as handler_url is)",
    )


class NotifyOnFailure(NotifyUrl):
    after: int = Field(
        default=1,
        ge=1,
        le=MAX_FAILURES_AFTER,
        description="Notify once this many executions in a row failed for good",
    )


class NotifyOnLate(NotifyUrl):
    within_seconds: int = Field(
        ge=MIN_LATE_SECONDS,
        le=MAX_LATE_SECONDS,
        description="Notify when an occurrence has not succeeded this long after it was due",
    )


class NotifyModel(BaseModel):
    """Whom to tell about the task's executions (docs/notifications.md, decision 0057)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    on_failure: NotifyOnFailure | None = None
    on_recovery: NotifyUrl | None = Field(
        default=None, description="The first success after a notified failure"
    )
    on_dead_letter: NotifyUrl | None = Field(
        default=None, description="An execution put in the dead-letter queue"
    )
    on_late: NotifyOnLate | None = None

    @classmethod
    def of(cls, settings: NotifySettings) -> NotifyModel | None:
        values = notify_to_map(settings)
        return cls.model_validate(values) if values else None

    def to_domain(self) -> NotifySettings:
        return notify_from_map(self.model_dump(exclude_none=True))


TAGS_DESCRIPTION = (
    f"Labels to find the task by (GET /tasks?tag=key:value): at most {MAX_TAGS}, "
    f"each key {KEY_RULE}, each value {VALUE_RULE}; never interpreted"
)


def _upstreams(after: Any) -> Any:
    """``after`` as the domain takes it: one id, or a tuple of them (fan-in)."""
    return tuple(after) if isinstance(after, list) else after


class ScheduleFields(BaseModel):
    """When a task runs, as ``POST /tasks`` takes it: exactly one of ``cron``, ``rate``,
    ``at``, ``fixed_delay`` or ``after``, and what qualifies it."""

    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra=schedule_rules)

    cron: str | None = Field(
        default=None,
        description="5 fields, or 6 with seconds first; names, L, W, #, ?, H and macros",
        max_length=200,
    )
    rate: str | None = Field(
        default=None, description="e.g. '30 seconds', '5 minutes', '1 day'", max_length=50
    )
    at: str | None = Field(
        default=None, description="ISO 8601 instant for a one-time task", max_length=64
    )
    fixed_delay: str | None = Field(
        default=None,
        description="e.g. '5 minutes': due that long after the previous execution finished",
        max_length=50,
    )
    after: str | list[str] | None = Field(
        default=None,
        description="A task id: run once per successful execution of that task; or a "
        f"list of up to {MAX_UPSTREAMS} (fan-in): run once each time every one of them "
        "has ended since the last run (docs/schedules.md)",
        json_schema_extra={
            "anyOf": [
                {"type": "string", "minLength": 1, "maxLength": 64},
                {
                    "type": "array",
                    "items": {"type": "string", "minLength": 1, "maxLength": 64},
                    "minItems": 1,
                    "maxItems": MAX_UPSTREAMS,
                },
                {"type": "null"},
            ]
        },
    )
    when: Literal["success", "failure", "always"] | None = Field(
        default=None,
        description="after only: which ends of the upstreams count (default success; "
        "failure: a dead letter; always: either)",
    )
    timezone: str = Field(default="UTC", description="IANA time zone", max_length=64)
    dst: DstPolicyModel | None = Field(
        default=None, description="cron and at only; default shift and first"
    )
    anchor: str | None = Field(
        default=None,
        description="rate only: the first occurrence, and the grid every later one is on "
        "(default: start_at, else the registration time)",
        max_length=64,
    )
    start_at: str | None = Field(
        default=None, description="ISO 8601: no occurrence before it", max_length=64
    )
    end_at: str | None = Field(
        default=None,
        description="ISO 8601: no occurrence after it; then the task is COMPLETED",
        max_length=64,
    )

    @field_validator("after", mode="wrap")
    @classmethod
    def _one_or_more_task_ids(cls, value: Any, handler: Any) -> Any:
        """One message for every way ``after`` can be wrong (not pydantic's per
        union member), naming the field alone."""
        ids = value if isinstance(value, list) else [value]
        if value is None:
            return None
        if not (
            (isinstance(value, str) or 1 <= len(ids) <= MAX_UPSTREAMS)
            and all(isinstance(i, str) and 1 <= len(i) <= 64 for i in ids)
        ):
            raise ValueError(
                f"give a task id, or a list of 1 to {MAX_UPSTREAMS} task ids "
                "(each 1 to 64 characters)"
            )
        return value

    def schedule_spec(self) -> ScheduleSpec:
        return ScheduleSpec(
            cron=self.cron,
            rate=self.rate,
            at=self.at,
            fixed_delay=self.fixed_delay,
            after=_upstreams(self.after),
            when=self.when,
            timezone=self.timezone,
            dst=self.dst.to_domain() if self.dst is not None else None,
            anchor=self.anchor,
            start_at=self.start_at,
            end_at=self.end_at,
        )


class CalendarFields(BaseModel):
    """The calendars a task's occurrences are held to (decision 0056)."""

    exclude_calendars: list[CalendarName] | None = Field(
        default=None,
        max_length=MAX_CALENDARS_PER_TASK,
        description="Calendars (PUT /calendars/{name}) whose days this task does not run on",
    )
    only_calendars: list[CalendarName] | None = Field(
        default=None,
        max_length=MAX_CALENDARS_PER_TASK,
        description="Calendars whose days are the only ones this task runs on (business days)",
    )
    on_excluded: Literal["skip", "next"] | None = Field(
        default=None,
        description="An occurrence on an excluded day: skip it (recorded SKIPPED, the "
        "default) or run it at the same time on the next included day",
    )

    def calendar_rule(self) -> CalendarRule | None:
        """The calendars asked for; None when the body names none of their fields."""
        named = self.model_fields_set & {"exclude_calendars", "only_calendars", "on_excluded"}
        if not named:
            return None
        return named_calendars(
            tuple(self.exclude_calendars or ()),
            tuple(self.only_calendars or ()),
            OnExcluded(self.on_excluded or "skip"),
        )


class SchedulePreviewRequest(ScheduleFields, CalendarFields):
    """Body of ``POST /schedules/preview``: a schedule as ``POST /tasks`` takes it."""

    count: int = Field(default=10, ge=1, le=100, description="How many occurrences")
    task_id: str | None = Field(
        default=None,
        max_length=200,
        description="A task of yours: its skips (and calendars, unless given here) are "
        "marked in the preview",
    )


class TaskCreate(ScheduleFields, CalendarFields):
    """Body of ``POST /tasks``: exactly one of ``cron``, ``rate``, ``at``,
    ``fixed_delay`` or ``after``, and exactly one of ``handler_url``, ``handler`` or
    ``target``."""

    model_config = ConfigDict(json_schema_extra=task_create_rules)

    name: str | None = Field(default=None, min_length=1, max_length=200)
    jitter_seconds: int = Field(
        default=0,
        ge=0,
        le=MAX_JITTER_SECONDS,
        description="Delay each execution's start by a fixed 0..N seconds drawn from its id",
    )
    catchup: Literal["skip", "run_once", "run_all"] = Field(
        default="run_once", description="What happens to occurrences missed during an outage"
    )
    catchup_window_seconds: int | None = Field(
        default=None,
        ge=1,
        le=MAX_CATCHUP_WINDOW_SECONDS,
        description="run_all only: missed occurrences older than this never run (default 1 day)",
    )
    overlap: Literal["allow", "skip", "buffer_one"] = Field(
        default="allow",
        description="A scheduled occurrence due while the previous one runs: run it anyway, "
        "skip it (recorded as SKIPPED), or run it when the previous one ends (at most one waits)",
    )
    handler_url: str | None = Field(
        default=None,
        max_length=MAX_URL_LENGTH,
        description="http(s) URL that receives a POST per execution",
    )
    handler: str | None = Field(
        default=None, max_length=128, description="Name of a registered Python handler"
    )
    target: TargetModel | None = Field(
        default=None, description="An AWS API to call with your role (see docs/targets.md)"
    )
    payload: dict[str, Any] = Field(
        default_factory=dict,
        description=f"JSON object sent to the handler; nested at most {MAX_PAYLOAD_DEPTH} levels",
    )
    retry: RetryCreate | None = None
    max_concurrency: int | None = Field(
        default=None,
        ge=1,
        description="Executions of this task delivering at once",
        json_schema_extra={"maximum": MAX_CONCURRENCY},
    )
    rate_limit: RateLimitModel | None = None
    tags: dict[str, str] = Field(
        default_factory=dict, description=TAGS_DESCRIPTION, json_schema_extra=tags_schema
    )
    notify: NotifyModel | None = None

    @field_validator("payload", check_fields=False)
    @classmethod
    def _payload_not_too_deep(cls, payload: dict[str, Any] | None) -> dict[str, Any] | None:
        if payload is not None and payload_depth(payload) > MAX_PAYLOAD_DEPTH:
            raise ValueError(f"is nested more than {MAX_PAYLOAD_DEPTH} levels deep")
        return payload

    def limits(self) -> TaskLimits:
        if self.rate_limit is None:
            return TaskLimits(max_concurrency=self.max_concurrency)
        return self.rate_limit.to_domain(self.max_concurrency)

    def to_spec(self) -> TaskSpec:
        """The registration this body asks for, as the domain takes it."""
        return TaskSpec(
            schedule=self.schedule_spec(),
            handler_url=self.handler_url,
            handler_name=self.handler,
            target=self.target.to_domain() if self.target is not None else None,
            payload=self.payload,
            name=self.name,
            retry=self.retry.to_domain() if self.retry is not None else RetryPolicy(),
            catchup=CatchUp(self.catchup),
            catchup_window_seconds=self.catchup_window_seconds,
            jitter_seconds=self.jitter_seconds,
            overlap=Overlap(self.overlap),
            limits=self.limits(),
            tags=self.tags,
            calendars=self.calendar_rule() or NO_CALENDARS,
            notify=self.notify.to_domain() if self.notify is not None else NO_NOTIFY,
        )


# The fields of ``TaskCreate`` that say when a task runs; a PATCH naming any of
# them (even as null) recomputes the schedule.
SCHEDULE_FIELDS = (*SCHEDULE_KINDS, "timezone", "dst", "anchor", "start_at", "end_at")


class TaskPatch(TaskCreate):
    """Body of ``PATCH /tasks/{task_id}``: any fields of ``TaskCreate``; the rest stay.

    ``version``, when given, must be the task's current version (else 409).
    """

    model_config = ConfigDict(json_schema_extra=task_patch_rules)

    version: int | None = Field(default=None, ge=1)
    # Every field is optional here: a default must not overwrite a stored value.
    timezone: str | None = Field(default=None, max_length=64)  # type: ignore[assignment]
    jitter_seconds: int | None = Field(  # type: ignore[assignment]
        default=None, ge=0, le=MAX_JITTER_SECONDS
    )
    catchup: Literal["skip", "run_once", "run_all"] | None = None  # type: ignore[assignment]
    overlap: Literal["allow", "skip", "buffer_one"] | None = None  # type: ignore[assignment]
    payload: dict[str, Any] | None = None  # type: ignore[assignment]
    tags: dict[str, str] | None = Field(  # type: ignore[assignment]
        default=None,
        description=TAGS_DESCRIPTION + "; replaces the whole map ({} clears it)",
        json_schema_extra=tags_schema,
    )

    def to_changes(self) -> TaskChanges:
        """The changes this body asks for. A schedule kind or a handler sent as null
        is ``UNSET`` (another one replaces it), and so is ``catchup`` (the stored
        policy stays, its window goes); other nulls leave the stored value."""
        named = self.model_fields_set

        def cleared(name: str) -> Any:
            value = getattr(self, name)
            return UNSET if value is None and name in named else value

        return TaskChanges(
            version=self.version,
            name=self.name,
            cron=cleared("cron"),
            rate=cleared("rate"),
            at=cleared("at"),
            fixed_delay=cleared("fixed_delay"),
            after=_upstreams(cleared("after")),
            when=cleared("when"),
            timezone=self.timezone,
            dst=self.dst.to_domain() if self.dst is not None else None,
            anchor=self.anchor,
            start_at=self.start_at,
            end_at=self.end_at,
            handler_url=cleared("handler_url"),
            handler_name=cleared("handler"),
            target=(self.target.to_domain() if self.target is not None else cleared("target")),
            payload=self.payload,
            retry=self.retry.to_domain() if self.retry is not None else None,
            catchup=CatchUp(self.catchup) if self.catchup is not None else cleared("catchup"),
            catchup_window_seconds=self.catchup_window_seconds,
            jitter_seconds=self.jitter_seconds,
            overlap=Overlap(self.overlap) if self.overlap is not None else None,
            tags=self.tags,
            notify=self.notify.to_domain() if self.notify is not None else None,
            reschedule=any(name in named for name in SCHEDULE_FIELDS),
            calendars=self.calendar_changes(),
        )

    def calendar_changes(self) -> CalendarChanges | None:
        """The calendar fields given (null or [] for none); None when none is."""
        named = self.model_fields_set
        if not named & {"exclude_calendars", "only_calendars", "on_excluded"}:
            return None

        def names(field: str) -> tuple[str, ...] | None:
            return tuple(getattr(self, field) or ()) if field in named else None

        return CalendarChanges(
            exclude=names("exclude_calendars"),
            only=names("only_calendars"),
            on_excluded=OnExcluded(self.on_excluded) if self.on_excluded else None,
        )


class PauseRequest(BaseModel):
    """Body of ``POST /tasks/{task_id}/pause`` (optional)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    note: str | None = Field(default=None, max_length=500)


class RevertRequest(BaseModel):
    """Body of ``POST /tasks/{task_id}/revert``: restore a change's "before" fields
    through PATCH, if the task is still at ``version`` (else 409)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    change_id: str = Field(
        min_length=1, max_length=64, description="A change id of GET /tasks/{id}/changes"
    )
    version: int = Field(ge=1, description="The task's current version, as read")


class BackfillRequest(BaseModel):
    """Body of ``POST /tasks/{task_id}/backfill``: both ends inclusive, ISO 8601."""

    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)

    from_: str = Field(alias="from", max_length=64)
    to: str = Field(max_length=64)


class SkipBody(BaseModel):
    """Body of ``POST /tasks/{task_id}/skip``: exactly one of ``occurrences`` (the next
    N), ``until`` (every occurrence before it) or ``at`` (these occurrences), and why."""

    model_config = ConfigDict(extra="forbid", strict=True)

    occurrences: int | None = Field(default=None, ge=1, le=MAX_SKIPPED_OCCURRENCES)
    until: str | None = Field(default=None, max_length=64)
    at: list[Annotated[str, Field(max_length=64)]] | None = Field(
        default=None, min_length=1, max_length=MAX_SKIPPED_OCCURRENCES
    )
    note: str | None = Field(default=None, max_length=MAX_NOTE_LENGTH)

    def to_request(self) -> SkipRequest:
        return SkipRequest(
            occurrences=self.occurrences,
            until=self.until,
            at=tuple(self.at) if self.at is not None else None,
            note=self.note,
        )


class CompleteRequest(BaseModel):
    """Body of ``POST /executions/{execution_id}/complete``."""

    model_config = ConfigDict(extra="forbid", strict=True)

    status: Literal["SUCCEEDED", "FAILED"]
    error: str | None = Field(default=None, max_length=2000)


# A batch create holds at most this many tasks; send more in several.
MAX_BATCH = 100


class TaskBatch(BaseModel):
    """Body of ``POST /tasks/batch``: 1 to 100 tasks, each checked on its own."""

    model_config = ConfigDict(extra="forbid")

    tasks: list[Any] = Field(
        min_length=1,
        max_length=MAX_BATCH,
        description=f"Each a body of POST /tasks, with an optional '{BATCH_KEY_FIELD}' (as the "
        "Idempotency-Key header of POST /tasks: the same key and task within 24 hours "
        "return the task the first made); an item that is invalid (or no JSON object) is "
        "answered with its problem by its index, and the others are created",
    )


class CalendarBody(BaseModel):
    """Body of ``PUT /calendars/{name}``: days in ``timezone``, each a date
    (``"2026-12-25"``) or a range ``{"from": ..., "to": ..., "note": ...}``."""

    model_config = ConfigDict(extra="forbid", strict=True)

    timezone: str = Field(default="UTC", max_length=64)
    dates: list[str | CalendarRange] = Field(max_length=MAX_CALENDAR_ENTRIES)

    def entries(self) -> list[Any]:
        return [
            d if isinstance(d, str) else d.model_dump(by_alias=True, exclude_none=True)
            for d in self.dates
        ]


class CalendarRange(BaseModel):
    """Days ``from`` to ``to`` (both included; ``to`` defaults to ``from``)."""

    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)

    from_: str = Field(alias="from", max_length=10)
    to: str | None = Field(default=None, max_length=10)
    note: str | None = Field(default=None, max_length=MAX_CALENDAR_NOTE)
