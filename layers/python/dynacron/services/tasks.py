"""Registering, reading and deleting tasks."""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta

from dynacron.config import Settings
from dynacron.domain.clock import Clock
from dynacron.domain.errors import InvalidRequest, TaskNotFound, UnknownHandler
from dynacron.domain.executions import Execution
from dynacron.domain.instants import to_utc_ms
from dynacron.domain.retry import RetryPolicy
from dynacron.domain.schedules import (
    Schedule,
    Window,
    load_zone,
    parse_at,
    parse_cron,
    parse_local_instant,
    parse_rate,
    upcoming,
)
from dynacron.domain.tasks import CatchUp, CatchUpPolicy, Task, TaskStatus
from dynacron.domain.urls import UrlPolicy
from dynacron.handlers import HandlerRegistry
from dynacron.models import TaskCreate
from dynacron.store import ExecutionStore, Page, TaskStore

# A one-time task may be registered a little late (clock skew, slow clients)
# and still fire at once; further in the past is almost surely a mistake.
AT_PAST_TOLERANCE = timedelta(minutes=5)


class PayloadTooLarge(InvalidRequest):
    pass


class TaskService:
    def __init__(
        self,
        *,
        tasks: TaskStore,
        executions: ExecutionStore,
        settings: Settings,
        clock: Clock,
        handlers: HandlerRegistry,
    ) -> None:
        self._tasks = tasks
        self._executions = executions
        self._settings = settings
        self._clock = clock
        self._handlers = handlers
        self._url_policy = UrlPolicy(settings.delivery_allow_networks)

    def register(self, request: TaskCreate) -> Task:
        """Validate ``request`` completely, then store the task with one conditional put."""
        now = to_utc_ms(self._clock.now())
        # The id comes first: it is the seed that spreads a cron schedule's H fields.
        task_id = uuid.uuid4().hex
        schedule = self._schedule_of(request, now, seed=task_id)
        catchup = self._catchup_of(request)
        self._check_handler(request)
        retry = RetryPolicy(**request.retry.model_dump()) if request.retry else RetryPolicy()
        size = len(json.dumps(request.payload, separators=(",", ":")).encode())
        if size > self._settings.max_payload_bytes:
            raise PayloadTooLarge(
                "payload",
                f"is {size} bytes as JSON; the limit is {self._settings.max_payload_bytes} bytes",
            )
        next_run_at = schedule.first_run(now)
        if next_run_at is None:
            raise InvalidRequest(
                "end_at" if request.end_at else "start_at",
                "the schedule has no occurrence between start_at and end_at",
            )
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
            limits=request.limits(),
        )
        self._tasks.create(task, self._settings.sharding.place(task_id, next_run_at, now))
        return task

    def upcoming(self, task_id: str, count: int, after: str | None) -> tuple[Task, list[datetime]]:
        """The task and its next ``count`` occurrences after ``after`` (default: now).

        ``after`` without an offset is read in the task's time zone.
        """
        task = self.get(task_id)
        start = (
            parse_local_instant("after", after, task.timezone)
            if after is not None
            else self._clock.now()
        )
        return task, upcoming(task.schedule, start, count)

    def get(self, task_id: str) -> Task:
        task = self._tasks.get(task_id)
        if task is None:
            raise TaskNotFound(task_id)
        return task

    def page(self, limit: int, token: str | None) -> Page[Task]:
        return self._tasks.page(limit, token)

    def delete(self, task_id: str) -> None:
        if not self._tasks.delete(task_id):
            raise TaskNotFound(task_id)

    def executions(self, task_id: str, limit: int, token: str | None) -> Page[Execution]:
        self.get(task_id)
        return self._executions.list_for_task(task_id, limit, token)

    def _check_handler(self, request: TaskCreate) -> None:
        """Exactly one of an HTTP handler (checked against the URL policy) or a
        Python handler registered in this process."""
        if (request.handler_url is None) == (request.handler is None):
            raise InvalidRequest("handler", "give exactly one of 'handler_url' or 'handler'")
        if request.handler_url is not None:
            host, _ = self._url_policy.check_url(request.handler_url)
            self._url_policy.check_host(host)
        elif request.handler not in self._handlers:
            raise UnknownHandler(
                "handler", f"no Python handler is registered as {request.handler!r}"
            )

    @staticmethod
    def _schedule_of(request: TaskCreate, now: datetime, seed: str) -> Schedule:
        given = [f for f in ("cron", "rate", "at") if getattr(request, f) is not None]
        if len(given) != 1:
            found = " and ".join(repr(f) for f in given) if given else "none"
            raise InvalidRequest(
                "schedule", f"give exactly one of 'cron', 'rate' or 'at' (found {found})"
            )
        load_zone(request.timezone)
        if request.anchor is not None and request.rate is None:
            raise InvalidRequest("anchor", "applies to 'rate' schedules only")
        if request.dst is not None and request.rate is not None:
            raise InvalidRequest(
                "dst", "applies to 'cron' and 'at'; a rate counts elapsed time, unmoved by DST"
            )
        window = _window_of(request)
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
