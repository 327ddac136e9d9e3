"""Registering, reading, changing, controlling and deleting tasks: every method acts
for one tenant, and another tenant's task looks exactly like a missing one."""

from __future__ import annotations

import dataclasses
import json
import secrets
import uuid
from datetime import datetime, timedelta
from typing import Any

from pydantic import ValidationError

from dynacron.config import Settings
from dynacron.delivery import Resolver, check_handler_url
from dynacron.domain.clock import Clock
from dynacron.domain.errors import (
    Conflict,
    InvalidRequest,
    LimitExceeded,
    TaskNotFound,
    UnknownHandler,
)
from dynacron.domain.executions import Dispatch, Execution
from dynacron.domain.instants import format_instant, to_utc_ms
from dynacron.domain.quotas import check_min_interval
from dynacron.domain.retry import RetryPolicy
from dynacron.domain.schedules import (
    GRID_KINDS,
    AfterSchedule,
    Schedule,
    Window,
    check_computable,
    load_zone,
    parse_at,
    parse_cron,
    parse_fixed_delay,
    parse_local_instant,
    parse_rate,
    upcoming,
)
from dynacron.domain.tasks import (
    UNREADABLE_SCHEDULE,
    CatchUp,
    CatchUpPolicy,
    Overlap,
    Task,
    TaskStatus,
    backfill_execution_id,
    triggered_execution_id,
)
from dynacron.domain.urls import UrlPolicy
from dynacron.handlers import HandlerRegistry
from dynacron.models import SCHEDULE_FIELDS, SCHEDULE_KINDS, TaskCreate, TaskPatch
from dynacron.ports import ExecutionStore, Page, TaskStore, TenantStore
from dynacron.services.aftermath import RunStarter

# A one-time task may be registered a little late (clock skew, slow clients)
# and still fire at once; further in the past is almost surely a mistake.
AT_PAST_TOLERANCE = timedelta(minutes=5)
# One backfill request starts at most this many executions; ask again for more.
MAX_BACKFILL = 100
# A dependency chain (``after``) at most this long; a longer one is refused.
MAX_CHAIN_LENGTH = 10


@dataclasses.dataclass(frozen=True)
class Backfill:
    execution_ids: list[str]
    started: list[str]


class PayloadTooLarge(LimitExceeded):
    pass


def new_signing_secret() -> str:
    return "whsec_" + secrets.token_hex(32)


class TaskService:
    def __init__(
        self,
        *,
        tasks: TaskStore,
        executions: ExecutionStore,
        tenants: TenantStore,
        starter: RunStarter,
        settings: Settings,
        clock: Clock,
        handlers: HandlerRegistry,
        resolver: Resolver,
    ) -> None:
        self._starter = starter
        self._tenants = tenants
        self._resolver = resolver
        self._tasks = tasks
        self._executions = executions
        self._settings = settings
        self._clock = clock
        self._handlers = handlers
        self._url_policy = UrlPolicy(settings.delivery_allow_networks)

    def register(self, tenant_id: str, request: TaskCreate) -> Task:
        """Validate ``request`` completely, then store the task within the tenant's quota."""
        now = to_utc_ms(self._clock.now())
        # The id comes first: it is the seed that spreads a cron schedule's H fields.
        task_id = uuid.uuid4().hex
        schedule = self._schedule_of(request, now, seed=task_id)
        self._check_chain(tenant_id, task_id, schedule)
        catchup = self._catchup_of(request)
        check_min_interval(schedule, now, self._settings.min_interval_seconds)
        self._check_handler(request)
        retry = RetryPolicy(**request.retry.model_dump()) if request.retry else RetryPolicy()
        self._check_payload_size(request.payload)
        next_run_at = _first_run(schedule, request, now)
        # The tick computes each next occurrence with this same code: a schedule it
        # could not follow is refused here, not discovered when it falls due.
        check_computable(schedule, now)
        task = Task(
            task_id=task_id,
            name=request.name or task_id,
            schedule=schedule,
            handler_url=request.handler_url,
            handler_name=request.handler,
            retry=retry,
            payload=request.payload,
            status=TaskStatus.ACTIVE,
            next_run_at=next_run_at,
            created_at=now,
            updated_at=now,
            catchup=catchup,
            jitter_seconds=request.jitter_seconds,
            overlap=Overlap(request.overlap),
            limits=request.limits(),
            tenant_id=tenant_id,
        )
        self._tasks.create_within_quota(
            task,
            self._settings.sharding.place(task_id, next_run_at, now),
            self._settings.max_tasks_per_tenant,
            new_signing_secret(),
        )
        return task

    def patch(self, tenant_id: str, task_id: str, patch: TaskPatch) -> Task:
        """Change a task in place, conditional on the version read.

        Without a schedule field, the schedule and ``next_run_at`` stay. With one,
        the schedule is rebuilt from the stored fields overlaid with the patch and
        ``next_run_at`` recomputed so that no occurrence is lost or doubled: an
        occurrence already due keeps its place (it runs, under the new handler and
        payload), otherwise the new schedule's first occurrence from now on that is
        later than the last one dispatched. See docs/decisions/0011-patch-semantics.md.
        """
        task = self.get(tenant_id, task_id)
        if patch.version is not None and patch.version != task.version:
            raise Conflict(
                f"task {task_id!r} is at version {task.version}, not {patch.version}; read it again"
            )
        now = to_utc_ms(self._clock.now())
        given = patch.model_dump(exclude_unset=True, exclude={"version"})
        if task.schedule is UNREADABLE_SCHEDULE and not any(k in given for k in SCHEDULE_KINDS):
            raise InvalidRequest("schedule", "the stored schedule cannot be read; give a new one")
        request = _validated(_overlaid(_request_of(task), given))
        changed = task
        chain: dict[str, int] = {}
        if any(name in given for name in SCHEDULE_FIELDS):
            schedule = self._schedule_of(request, now, seed=task_id)
            chain = self._check_chain(tenant_id, task_id, schedule)
            check_min_interval(schedule, now, self._settings.min_interval_seconds)
            check_computable(schedule, now)
            changed = _rescheduled(task, schedule, request, now)
        self._check_handler(request)
        self._check_payload_size(request.payload)
        changed = dataclasses.replace(
            changed,
            name=request.name or task.name,
            handler_url=request.handler_url,
            handler_name=request.handler,
            payload=request.payload,
            retry=RetryPolicy(**request.retry.model_dump()) if request.retry else task.retry,
            catchup=self._catchup_of(request),
            jitter_seconds=request.jitter_seconds,
            overlap=Overlap(request.overlap),
            version=task.version + 1,
            updated_at=now,
        )
        return self._replace(task, changed, now, chain)

    def pause(self, tenant_id: str, task_id: str, note: str | None) -> Task:
        """The task leaves the due index; ``next_run_at`` stays, for resume."""
        task = self.get(tenant_id, task_id)
        if task.status in (TaskStatus.COMPLETED, TaskStatus.ERROR):
            raise Conflict(f"task {task_id!r} is {task.status}; there is nothing to pause")
        return self._set_status(task, TaskStatus.PAUSED, note)

    def resume(self, tenant_id: str, task_id: str) -> Task:
        """Back in the due index where it left off: occurrences that fell due before
        now were missed while paused, so the tick applies the task's catch-up policy
        to them (``resumed_at``).

        An ERROR task is tried again as it is (after a fix to the scheduler, say);
        if it still makes the tick raise, the tick sets it aside again.
        """
        task = self.get(tenant_id, task_id)
        if task.status is TaskStatus.ERROR and task.schedule is UNREADABLE_SCHEDULE:
            raise InvalidRequest("schedule", "the stored schedule cannot be read; PATCH a new one")
        if task.status not in (TaskStatus.PAUSED, TaskStatus.ERROR):
            return task
        return self._set_status(task, TaskStatus.ACTIVE, None, resumed=True)

    def _set_status(
        self, task: Task, status: TaskStatus, note: str | None, *, resumed: bool = False
    ) -> Task:
        now = to_utc_ms(self._clock.now())
        changed = dataclasses.replace(
            task,
            status=status,
            pause_note=note,
            status_reason=None,
            version=task.version + 1,
            updated_at=now,
            resumed_at=now if resumed else task.resumed_at,
        )
        return self._replace(task, changed, now)

    def trigger(self, tenant_id: str, task_id: str) -> Execution:
        """Run the task now, with its own execution id; its schedule is not touched."""
        task = self._runnable(tenant_id, task_id)
        now = to_utc_ms(self._clock.now())
        dispatch = Dispatch(
            execution_id=triggered_execution_id(task_id, now), task_id=task_id, scheduled_at=now
        )
        if not self._starter.start(task, dispatch):
            raise Conflict(f"task {task_id!r} was already triggered at {format_instant(now)}")
        return self._started(dispatch.execution_id)

    def backfill(self, tenant_id: str, task_id: str, start: str, end: str) -> Backfill:
        """Start each occurrence of the task's schedule in ``[start, end]``, once ever.

        Each gets a backfill id derived from its scheduled time, recorded with a
        conditional put: asking again for an overlapping range starts only the
        occurrences not asked for before.
        """
        task = self._runnable(tenant_id, task_id)
        if task.schedule.kind not in GRID_KINDS:
            raise InvalidRequest(
                "task_id", f"a {task.schedule.kind} task has no grid of occurrences to backfill"
            )
        now = self._clock.now()
        first = parse_local_instant("from", start, task.timezone)
        last = parse_local_instant("to", end, task.timezone)
        if last < first:
            raise InvalidRequest("to", "is before from")
        if last > now:
            raise InvalidRequest("to", "is in the future; the schedule runs those occurrences")
        occurrences = [
            o
            for o in upcoming(task.schedule, first - timedelta(microseconds=1), MAX_BACKFILL + 1)
            if o <= last
        ]
        if len(occurrences) > MAX_BACKFILL:
            raise InvalidRequest(
                "to",
                f"the range holds more than {MAX_BACKFILL} occurrences; "
                "backfill it in smaller ranges",
            )
        started, ids = [], []
        for occurrence in occurrences:
            dispatch = Dispatch(
                execution_id=backfill_execution_id(task_id, occurrence),
                task_id=task_id,
                scheduled_at=occurrence,
            )
            ids.append(dispatch.execution_id)
            if self._starter.start(task, dispatch):
                started.append(dispatch.execution_id)
        return Backfill(execution_ids=ids, started=started)

    def _runnable(self, tenant_id: str, task_id: str) -> Task:
        task = self.get(tenant_id, task_id)
        if task.status in (TaskStatus.PAUSED, TaskStatus.ERROR):
            raise Conflict(f"task {task_id!r} is {task.status}; resume it first")
        return task

    def _started(self, execution_id: str) -> Execution:
        execution = self._executions.get(execution_id)
        assert execution is not None, "recorded a moment ago"
        return execution

    def _replace(
        self, task: Task, changed: Task, now: datetime, unchanged: dict[str, int] | None = None
    ) -> Task:
        placement = self._settings.sharding.place_task(changed, now)
        if not self._tasks.replace(changed, placement, task.version, unchanged or {}):
            raise Conflict(f"task {task.task_id!r} changed meanwhile; read it and try again")
        return changed

    def _check_chain(self, tenant_id: str, task_id: str, schedule: Schedule) -> dict[str, int]:
        if isinstance(schedule, AfterSchedule):
            upstream_id = schedule.upstream_task_id
            # Marked first: a dependent never exists while its upstream is unmarked.
            # The mark is conditional on the owner: another tenant's task is "missing".
            if not self._tasks.mark_has_dependents(tenant_id, upstream_id):
                raise InvalidRequest("after", f"no task {upstream_id!r} exists")
        return self._chain_versions(tenant_id, task_id, schedule)

    def _chain_versions(self, tenant_id: str, task_id: str, schedule: Schedule) -> dict[str, int]:
        """``after`` names an existing task, and following it never comes back here.

        Returns the version of each task on the chain as read: the write that sets
        ``after`` is conditional on them, so two changes racing to close a cycle
        cannot both succeed.
        """
        if not isinstance(schedule, AfterSchedule):
            return {}
        versions: dict[str, int] = {}
        chain = [task_id]
        upstream_id: str | None = schedule.upstream_task_id
        while upstream_id is not None:
            chain.append(upstream_id)
            if upstream_id == task_id:
                raise InvalidRequest("after", f"would make a cycle: {' -> '.join(chain)}")
            if len(chain) > MAX_CHAIN_LENGTH:
                raise InvalidRequest(
                    "after", f"a dependency chain may be at most {MAX_CHAIN_LENGTH} tasks long"
                )
            upstream = self._tasks.get_owned(tenant_id, upstream_id)
            if upstream is None:
                raise InvalidRequest("after", f"no task {upstream_id!r} exists")
            versions[upstream_id] = upstream.version
            upstream_id = upstream.upstream_task_id
        return versions

    def _check_payload_size(self, payload: dict[str, Any]) -> None:
        size = len(json.dumps(payload, separators=(",", ":")).encode())
        if size > self._settings.max_payload_bytes:
            raise PayloadTooLarge(
                "max_payload_bytes",
                "payload",
                f"is {size} bytes as JSON; the limit is {self._settings.max_payload_bytes} bytes",
            )

    def upcoming(
        self, tenant_id: str, task_id: str, count: int, after: str | None
    ) -> tuple[Task, list[datetime]]:
        """The task and its next ``count`` occurrences after ``after`` (default: now).

        ``after`` without an offset is read in the task's time zone.
        """
        task = self.get(tenant_id, task_id)
        start = (
            parse_local_instant("after", after, task.timezone)
            if after is not None
            else self._clock.now()
        )
        return task, upcoming(task.schedule, start, count)

    def get(self, tenant_id: str, task_id: str) -> Task:
        """The tenant's task; ``TaskNotFound`` whether it is missing or another tenant's."""
        task = self._tasks.get_owned(tenant_id, task_id)
        if task is None:
            raise TaskNotFound(task_id)
        return task

    def page(self, tenant_id: str, limit: int, token: str | None) -> Page[Task]:
        return self._tasks.page_owned(tenant_id, limit, token)

    def delete(self, tenant_id: str, task_id: str) -> None:
        if not self._tasks.delete_owned(tenant_id, task_id):
            raise TaskNotFound(task_id)

    def executions(
        self, tenant_id: str, task_id: str, limit: int, token: str | None
    ) -> Page[Execution]:
        # Executions live in their task's partition: owning the task is owning them.
        self.get(tenant_id, task_id)
        return self._executions.list_for_task(task_id, limit, token)

    def signing_secrets(self, tenant_id: str) -> list[str]:
        """The tenant's signing secrets, newest first, created on first ask."""
        return self._tenants.ensure_secret(tenant_id, new_signing_secret())

    def rotate_signing_secret(self, tenant_id: str) -> list[str]:
        rotated = self._tenants.rotate_secret(tenant_id, new_signing_secret())
        if rotated is None:
            raise Conflict("the signing secret was rotated concurrently; read it again")
        return rotated

    def task_count(self, tenant_id: str) -> int:
        return self._tenants.task_count(tenant_id)

    def _check_handler(self, request: TaskCreate) -> None:
        """Exactly one of an HTTP handler (checked against the URL policy) or a
        Python handler registered in this process."""
        if (request.handler_url is None) == (request.handler is None):
            raise InvalidRequest("handler", "give exactly one of 'handler_url' or 'handler'")
        if request.handler_url is not None:
            # Checked again at delivery: DNS may change between now and then.
            check_handler_url(self._url_policy, self._resolver, request.handler_url)
        elif request.handler not in self._handlers:
            raise UnknownHandler(
                "handler", f"no Python handler is registered as {request.handler!r}"
            )

    @staticmethod
    def _schedule_of(request: TaskCreate, now: datetime, seed: str) -> Schedule:
        given = [f for f in SCHEDULE_KINDS if getattr(request, f) is not None]
        if len(given) != 1:
            found = " and ".join(repr(f) for f in given) if given else "none"
            raise InvalidRequest(
                "schedule",
                "give exactly one of 'cron', 'rate', 'at', 'fixed_delay' or 'after' "
                f"(found {found})",
            )
        load_zone(request.timezone)
        if request.anchor is not None and request.rate is None:
            raise InvalidRequest("anchor", "applies to 'rate' schedules only")
        if request.dst is not None and request.rate is not None:
            raise InvalidRequest(
                "dst", "applies to 'cron' and 'at'; a rate counts elapsed time, unmoved by DST"
            )
        window = _window_of(request)
        if request.after is not None:
            return AfterSchedule(upstream_task_id=request.after, window=window)
        if request.fixed_delay is not None:
            return parse_fixed_delay(request.fixed_delay, window)
        dst = request.dst.to_domain() if request.dst is not None else None
        if request.cron is not None:
            return parse_cron(request.cron, request.timezone, dst=dst, seed=seed, window=window)
        if request.rate is not None:
            anchor = (
                parse_local_instant("anchor", request.anchor, request.timezone)
                if request.anchor is not None
                else window.start_at or now.replace(microsecond=0)
            )
            return parse_rate(request.rate, anchor=anchor, window=window)
        assert request.at is not None
        schedule = parse_at(request.at, request.timezone, dst, window)
        if schedule.at < now - AT_PAST_TOLERANCE:
            raise InvalidRequest(
                "at",
                f"{request.at!r} is more than {int(AT_PAST_TOLERANCE.total_seconds() // 60)} "
                "minutes in the past",
            )
        return schedule

    @staticmethod
    def _catchup_of(request: TaskCreate) -> CatchUpPolicy:
        policy = CatchUp(request.catchup)
        if request.catchup_window_seconds is None:
            return CatchUpPolicy(policy)
        if policy is not CatchUp.RUN_ALL:
            raise InvalidRequest("catchup_window_seconds", "applies only with catchup 'run_all'")
        return CatchUpPolicy(policy, request.catchup_window_seconds)


def _window_of(request: TaskCreate) -> Window:
    def instant(name: str, text: str | None) -> datetime | None:
        return parse_local_instant(name, text, request.timezone) if text is not None else None

    start_at = instant("start_at", request.start_at)
    end_at = instant("end_at", request.end_at)
    if start_at is not None and end_at is not None and end_at < start_at:
        raise InvalidRequest("end_at", "is before start_at")
    return Window(start_at=start_at, end_at=end_at)


def _first_run(schedule: Schedule, request: TaskCreate, now: datetime) -> datetime | None:
    """The first occurrence; only a dependent task (``after``) may have none."""
    next_run_at = schedule.first_run(now)
    if next_run_at is None and not isinstance(schedule, AfterSchedule):
        raise InvalidRequest(
            "end_at" if request.end_at else "start_at",
            "the schedule has no occurrence between start_at and end_at",
        )
    return next_run_at


def _rescheduled(task: Task, schedule: Schedule, request: TaskCreate, now: datetime) -> Task:
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
        next_run_at = _first_run(schedule, request, now)
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


def _request_of(task: Task) -> dict[str, Any]:
    """The stored task as the fields of a ``TaskCreate`` that would make it again."""
    schedule = task.schedule
    fields: dict[str, Any] = {
        "name": task.name,
        "timezone": task.timezone,
        "start_at": _text(schedule.window.start_at),
        "end_at": _text(schedule.window.end_at),
        "jitter_seconds": task.jitter_seconds,
        "catchup": task.catchup.policy.value,
        "overlap": task.overlap.value,
        "handler_url": task.handler_url,
        "handler": task.handler_name,
        "payload": task.payload,
        "retry": {
            "max_attempts": task.retry.max_attempts,
            "base_delay_seconds": task.retry.base_delay_seconds,
            "max_delay_seconds": task.retry.max_delay_seconds,
        },
    }
    if task.catchup.policy is CatchUp.RUN_ALL:
        fields["catchup_window_seconds"] = task.catchup.window_seconds
    match schedule.kind:
        case "cron":
            fields["cron"] = schedule.expression
            fields["dst"] = {
                "nonexistent": schedule.dst.nonexistent.value,
                "ambiguous": schedule.dst.ambiguous.value,
            }
        case "rate":
            fields["rate"] = schedule.expression
            fields["anchor"] = format_instant(schedule.anchor)
        case "at":
            fields["at"] = format_instant(schedule.at)
        case "fixed_delay":
            fields["fixed_delay"] = schedule.expression
        case "after":
            fields["after"] = schedule.upstream_task_id
    return {name: value for name, value in fields.items() if value is not None}


def _validated(fields: dict[str, Any]) -> TaskCreate:
    """The stored task overlaid with a patch, validated as a new one would be.

    A stored value that today's bounds refuse (written before they existed) is a
    422 naming its field, as it would be if sent; the patch can replace it.
    """
    try:
        return TaskCreate.model_validate(fields)
    except ValidationError as error:
        first = error.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or "body"
        raise InvalidRequest(field, f"the stored value is refused now: {first['msg']}") from None


def _overlaid(stored: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    """``given`` over ``stored``, where a new schedule kind or handler replaces the old one
    and fields that only fit the old kind (``anchor``, ``dst``) go with it."""
    if any(kind in given for kind in SCHEDULE_KINDS):
        for name in (*SCHEDULE_KINDS, "anchor", "dst"):
            stored.pop(name, None)
    if "handler_url" in given or "handler" in given:
        stored.pop("handler_url", None)
        stored.pop("handler", None)
    if given.get("catchup", "run_all") != "run_all":
        stored.pop("catchup_window_seconds", None)
    return {**stored, **{k: v for k, v in given.items() if v is not None}}


def _text(instant: datetime | None) -> str | None:
    return format_instant(instant) if instant is not None else None
