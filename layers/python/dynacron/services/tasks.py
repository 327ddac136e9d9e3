"""Registering, reading, changing, controlling and deleting tasks: every method acts
for one tenant, and another tenant's task looks exactly like a missing one."""

from __future__ import annotations

import dataclasses
import json
import secrets
import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from dynacron.domain.clock import Clock
from dynacron.domain.coordination import transitions as coordination
from dynacron.domain.coordination.create_keys import (
    BATCH_KEY_FIELD,
    HEADER,
    CreateKey,
    KeyReservation,
)
from dynacron.domain.coordination.quotas import check_min_interval
from dynacron.domain.coordination.tenants import EffectiveQuota, TenantQuota
from dynacron.domain.errors import (
    Conflict,
    InvalidRequest,
    LimitExceeded,
    TaskNotFound,
    UnknownHandler,
)
from dynacron.domain.executions.execution import Dispatch, Execution
from dynacron.domain.instants import format_instant, to_utc_ms
from dynacron.domain.schedules.calendars import NO_CALENDARS, CalendarRule, TenantCalendars
from dynacron.domain.schedules.expressions import (
    GRID_KINDS,
    AfterSchedule,
    Schedule,
    parse_local_instant,
    upcoming,
)
from dynacron.domain.schedules.previews import (
    SchedulePreview,
    marking_passed_over,
    preview,
    preview_registration,
)
from dynacron.domain.tasks import transitions
from dynacron.domain.tasks.changes import TaskChanges, apply_changes
from dynacron.domain.tasks.claiming import passed_over_reason
from dynacron.domain.tasks.history import (
    HISTORY_RETENTION,
    ChangeKind,
    ChangeStamp,
    TaskChange,
)
from dynacron.domain.tasks.listing import ALL_TASKS, TaskListing
from dynacron.domain.tasks.skips import (
    Skip,
    SkipRequest,
    added,
    removed,
    requested_skip,
    skips_ahead,
    skips_to_list,
)
from dynacron.domain.tasks.specs import (
    ScheduleSpec,
    TaskSpec,
    build_schedule,
    checked_first_run,
    new_task,
)
from dynacron.domain.tasks.tags import TagFilter
from dynacron.domain.tasks.targets import TargetPolicy
from dynacron.domain.tasks.task import (
    UNREADABLE_SCHEDULE,
    Sharding,
    Task,
    TaskStatus,
    backfill_execution_id,
    triggered_execution_id,
)
from dynacron.ports import CreateKeys, ExecutionStore, Page, TaskStore, TenantStore
from dynacron.ports.delivery import HandlerNames, HandlerUrls
from dynacron.ports.tasks import MAX_STARTED_WITH_CHANGE
from dynacron.services.calendars import CalendarService
from dynacron.services.follow_ups import RunStarter

# One backfill request starts at most this many executions; ask again for more.
MAX_BACKFILL = 100
# Tries of one backfill transaction refused for executions another backfill started.
MAX_BACKFILL_TRIES = 3
# A dependency chain (``after``) at most this long; a longer one is refused.
MAX_CHAIN_LENGTH = 10
# The tasks upstream of one dependent, over every path (fan-in): each is checked in
# the write's transaction, which DynamoDB bounds at 100 items.
MAX_CHAIN_TASKS = 50
# The fan-in dependents one upstream may name (those that follow it after another
# first upstream): each is an attribute of its record, which DynamoDB bounds at 400 KB.
MAX_FAN_IN_DEPENDENTS = 100
# Tries of a fan-in mark refused for the upstream's version (its claims bump it).
MAX_MARK_ATTEMPTS = 5


@dataclasses.dataclass(frozen=True)
class Backfill:
    """A backfill's executions, one per occurrence, in time order; ``started``: those
    recorded now (the others existed already)."""

    execution_ids: list[str]
    started: list[str]


class PayloadTooLarge(LimitExceeded):
    """The payload, as compact JSON, is over ``max_payload_bytes`` (HTTP 413)."""


def new_signing_secret() -> str:
    """A fresh random secret for signing deliveries, 256 bits in hex."""
    return "whsec_" + secrets.token_hex(32)


_KEY_REUSED = {
    HEADER: "was sent with another request in the last 24 hours: send the same body "
    "to retry that request, or a new key for a new one",
    BATCH_KEY_FIELD: "was sent with another task in the last 24 hours: send the same task "
    "to retry it, or a new key for a new one",
}


@dataclasses.dataclass(frozen=True)
class BatchItem:
    """One task of a batch create, and its idempotency key if it has one."""

    spec: TaskSpec
    key: CreateKey | None = None


@dataclasses.dataclass(frozen=True)
class BatchOutcome:
    """How one item of a batch create ended: its task (new, or ``replayed`` from an
    earlier request with its key), or why it was refused."""

    task: Task | None
    replayed: bool = False
    error: Exception | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class TaskSettings:
    """What registering and changing a task are held to (``Settings.task_settings``)."""

    sharding: Sharding
    # The default of a tenant with no limit of its own (``TenantQuota``).
    max_tasks_per_tenant: int
    # Likewise, requests a second per API instance (0: no limit).
    tenant_rate_per_second: float = 0.0
    # A schedule may not fire more often than this.
    min_interval_seconds: int
    max_payload_bytes: int
    # The private ranges tenants may be granted (decision 0050).
    private_networks: tuple[str, ...] = ()
    # How long a task's change records are kept (decision 0054).
    history_retention: timedelta = HISTORY_RETENTION


NO_TARGETS = "this deployment calls no AWS targets"


@dataclasses.dataclass(frozen=True, kw_only=True)
class TaskService:
    """Registers, reads, changes, controls and deletes one tenant's tasks at a time."""

    tasks: TaskStore
    # Named apart from the ``executions`` method, which lists a task's executions.
    execution_store: ExecutionStore
    tenants: TenantStore
    create_keys: CreateKeys
    starter: RunStarter
    settings: TaskSettings
    clock: Clock
    handlers: HandlerNames
    urls: HandlerUrls
    # Where AWS targets may point; by default, nowhere.
    targets: TargetPolicy = dataclasses.field(
        default_factory=lambda: TargetPolicy(refusal=NO_TARGETS)
    )
    # Calendars (decision 0056): None where the store keeps none.
    calendar_service: CalendarService | None = None

    def register(self, tenant_id: str, spec: TaskSpec, *, who: str | None = None) -> Task:
        """Check ``spec`` completely, then store the task within the tenant's quota
        (recorded as made by ``who``, by default the tenant)."""
        # The id comes first: it is the seed that spreads a cron schedule's H fields.
        return self._register(tenant_id, spec, uuid.uuid4().hex, who)

    def register_once(
        self, tenant_id: str, spec: TaskSpec, key: CreateKey, *, who: str | None = None
    ) -> tuple[Task, bool]:
        """``register``, once per idempotency key: the task and whether an earlier
        request with this key made it (then it is returned as it now is).

        The key is reserved first, naming the id the task will have; a retry after a
        crash between the reservation and the task creates that same id, and two
        requests at once create it once (the second is told the id is taken). A
        request refused as invalid takes no key: its corrected retry may use it.
        """
        self._checked(tenant_id, spec, uuid.uuid4().hex, to_utc_ms(self.clock.now()))
        task_id, made = self._held_by_key(
            tenant_id, key, uuid.uuid4().hex, self.clock.now(), HEADER
        )
        if made is not None:
            return made, True
        try:
            task = self._register(tenant_id, spec, task_id, who)
        except InvalidRequest:
            made = self.tasks.get_owned(tenant_id, task_id)
            if made is None:
                raise
            return made, True  # a request with the same key, at the same time
        # Only the reservation of this task: one expired and taken since names another.
        self.create_keys.apply(tenant_id, key.key, coordination.mark_key_created(task_id))
        return task, False

    def _held_by_key(
        self, tenant_id: str, key: CreateKey, task_id: str, now: datetime, field: str
    ) -> tuple[str, Task | None]:
        """Reserve ``key`` for ``task_id``, or find it reserved: the id the key names,
        and the task an earlier request made with it, if any. Refused, naming the key's
        ``field`` (``HEADER`` or a batch item's ``BATCH_KEY_FIELD``), if the key came with
        something else, or its task was deleted."""
        held = reserve_key(self.create_keys, tenant_id, key, task_id, now)
        return self._by_reservation(tenant_id, key, task_id, held, field)

    def _by_reservation(
        self, tenant_id: str, key: CreateKey, task_id: str, held: KeyReservation, field: str
    ) -> tuple[str, Task | None]:
        """``_held_by_key`` once the reservation that holds ``key`` is known."""
        if held.task_id == task_id and not held.created:
            return task_id, None  # reserved now, for an id no task has yet
        if held.fingerprint != key.fingerprint:
            raise InvalidRequest(field, _KEY_REUSED[field])
        made = self.tasks.get_owned(tenant_id, held.task_id)
        if made is None and held.created:
            name = HEADER if field == HEADER else "key"
            raise Conflict(f"the task created with this {name} ({held.task_id}) was deleted")
        return held.task_id, made

    def register_many(
        self, tenant_id: str, items: Sequence[BatchItem], *, who: str | None = None
    ) -> list[BatchOutcome]:
        """``register`` (or ``register_once``, for an item with a key) for each item, in
        order; each answered on its own, an item refused never stopping the others.

        Every item is checked as a single create is, and one refused stores nothing
        and takes no key. The items to store are stored together
        (``create_many_within_quota``): the tenant's quota holds for the whole batch
        against any concurrent create, and the batch fills at most the places left.
        """
        outcomes: list[BatchOutcome | None] = [None] * len(items)
        checked: list[tuple[int, Task, BatchItem]] = []
        now = to_utc_ms(self.clock.now())
        first_with_key: dict[str, int] = {}
        # The tenant's record read once for the batch: its quota and its private
        # ranges (not once per item); each distinct URL checked once.
        quota = self.quota(tenant_id)
        urls = _UrlsCheckedOnce(self.urls.with_private_networks(quota.private_networks))
        # The tenant's calendars too, if an item names one (up to 300 KB each read).
        calendars = None
        if self.calendar_service is not None and any(item.spec.calendars for item in items):
            calendars = self.calendar_service.stored(tenant_id)
        for index, item in enumerate(items):
            try:
                if item.key is not None and item.key.key in first_with_key:
                    raise InvalidRequest(
                        BATCH_KEY_FIELD,
                        f"repeats item {first_with_key[item.key.key]}'s; "
                        "each item of a batch needs its own",
                    )
                if item.key is not None:
                    first_with_key[item.key.key] = index
                task = self._checked(tenant_id, item.spec, uuid.uuid4().hex, now, urls, calendars)
                checked.append((index, task, item))
            except (InvalidRequest, Conflict) as refused:
                outcomes[index] = BatchOutcome(None, error=refused)
        # The keys of the items checked are reserved together (one transaction on SQLite).
        held_by = self._reserve_keys(tenant_id, checked, now)
        pending: list[tuple[int, Task, BatchItem]] = []
        for index, task, item in checked:
            try:
                if item.key is not None:
                    task, made = self._keyed(
                        tenant_id, item, task, now, held_by[index], urls, calendars
                    )
                    if made is not None:
                        outcomes[index] = BatchOutcome(made, replayed=True)
                        continue
            except (InvalidRequest, Conflict) as refused:
                outcomes[index] = BatchOutcome(None, error=refused)
                continue
            pending.append((index, task, item))
        stored: list[Exception | None] = []
        if pending:
            stored = self.tasks.create_many_within_quota(
                [
                    (task, self.settings.sharding.place(task.task_id, task.next_run_at, now))
                    for _, task, _ in pending
                ],
                quota.max_tasks,
                new_signing_secret(),
                [
                    self._stamp(tenant_id, who, now).record(
                        ChangeKind.CREATE, task.task_id, tenant_id, None, task
                    )
                    for _, task, _ in pending
                ],
                # Each stored task's key marked created with it (SQLite: in the same
                # transaction); only its own reservation, as ``register_once`` marks one.
                [item.key.key if item.key is not None else None for _, _, item in pending],
            )
        for (index, task, item), why_not in zip(pending, stored, strict=True):
            outcomes[index] = self._stored(tenant_id, task, item, why_not)
        return [outcome for outcome in outcomes if outcome is not None]

    def _reserve_keys(
        self, tenant_id: str, checked: Sequence[tuple[int, Task, BatchItem]], now: datetime
    ) -> dict[int, KeyReservation]:
        """Reserve the key of each keyed item for its task's id: by index, the
        reservation that holds each key (``reserve_key``, for many)."""
        keyed = [(index, task, item.key) for index, task, item in checked if item.key is not None]
        reservations = [
            (key.key, coordination.reserve_create_key(key, task.task_id, now))
            for _, task, key in keyed
        ]
        answers = self.create_keys.apply_returning_each(tenant_id, reservations)
        return {
            index: held or KeyReservation(task.task_id, key.fingerprint, created=False)
            for (index, task, key), held in zip(keyed, answers, strict=True)
        }

    def _keyed(
        self,
        tenant_id: str,
        item: BatchItem,
        task: Task,
        now: datetime,
        held: KeyReservation,
        urls: HandlerUrls,
        calendars: TenantCalendars | None,
    ) -> tuple[Task, Task | None]:
        """The item's key ``held`` (as ``register_once``): the task to store (with the
        id the key names), and the task an earlier request made with it, if any."""
        assert item.key is not None
        task_id, made = self._by_reservation(
            tenant_id, item.key, task.task_id, held, BATCH_KEY_FIELD
        )
        if made is not None:
            return task, made
        if task_id != task.task_id:
            # A reservation an earlier request left: the task gets the id it names.
            task = self._checked(tenant_id, item.spec, task_id, now, urls, calendars)
        return task, None

    def _stored(
        self, tenant_id: str, task: Task, item: BatchItem, refused: Exception | None
    ) -> BatchOutcome:
        """How storing an item's ``task`` ended: created, replayed (a request with the
        same key stored it at the same time) or refused. Its key was marked with it."""
        if refused is None:
            return BatchOutcome(task)
        if item.key is not None:
            made = self.tasks.get_owned(tenant_id, task.task_id)
            if made is not None:
                return BatchOutcome(made, replayed=True)
        return BatchOutcome(None, error=refused)

    def _register(self, tenant_id: str, spec: TaskSpec, task_id: str, who: str | None) -> Task:
        now = to_utc_ms(self.clock.now())
        task = self._checked(tenant_id, spec, task_id, now)
        self.tasks.create_within_quota(
            task,
            self.settings.sharding.place(task_id, task.next_run_at, now),
            self.quota(tenant_id).max_tasks,
            new_signing_secret(),
            change=self._stamp(tenant_id, who, now).record(
                ChangeKind.CREATE, task_id, tenant_id, None, task
            ),
        )
        return task

    def _stamp(self, tenant_id: str, who: str | None, now: datetime) -> ChangeStamp:
        """Who makes a change (``who``, else the tenant) and when (decision 0054)."""
        return ChangeStamp(who or tenant_id, now, self.settings.history_retention)

    def _checked(
        self,
        tenant_id: str,
        spec: TaskSpec,
        task_id: str,
        now: datetime,
        urls: HandlerUrls | None = None,
        calendars: TenantCalendars | None = None,
    ) -> Task:
        """The task ``spec`` makes, checked completely; raises what is wrong with it.
        ``urls`` and ``calendars``: a batch's, each read once for all its items."""
        task = new_task(spec, now, task_id=task_id, tenant_id=tenant_id)
        if task.calendars:
            resolved = self._resolved(tenant_id, task.calendars, calendars)
            task = dataclasses.replace(task, calendars=resolved)
        # Every check that writes nothing first: a refused request leaves no mark.
        check_min_interval(task.schedule, now, self.settings.min_interval_seconds)
        self._check_handler(task, urls or self.urls)
        self._check_notify(task, urls or self.urls)
        self._check_payload_size(task.payload)
        self._check_chain(tenant_id, task_id, task.schedule)
        return task

    def patch(
        self,
        tenant_id: str,
        task_id: str,
        changes: TaskChanges,
        *,
        who: str | None = None,
        reverting: str | None = None,
    ) -> Task:
        """Change a task in place (``apply_changes``), conditional on the version read
        and, when it now follows another task, on the versions of its chain. Recorded
        as by ``who``; with ``reverting`` (a change id), as the revert of that change."""
        task = self.get(tenant_id, task_id)
        now = to_utc_ms(self.clock.now())
        changed = apply_changes(task, changes, now)
        if changes.calendars is not None:
            changed = dataclasses.replace(
                changed, calendars=self._resolved(tenant_id, changed.calendars)
            )
        if changes.touches_schedule:
            check_min_interval(changed.schedule, now, self.settings.min_interval_seconds)
        self._check_handler(changed, self.urls)
        self._check_notify(changed, self.urls)
        self._check_payload_size(changed.payload)
        chain: dict[str, int] = {}
        if changes.touches_schedule:
            chain = self._check_chain(tenant_id, task_id, changed.schedule)
        what = ChangeKind.PATCH if reverting is None else ChangeKind.REVERT
        change = self._stamp(tenant_id, who, now).record(
            what, task_id, tenant_id, task, changed, note=reverting
        )
        return self._replace(task, changed, now, chain, change)

    def change(self, tenant_id: str, task_id: str, change_id: str) -> TaskChange:
        """One change record of the tenant's task (``get`` it first: ``TaskNotFound``
        if it has none such); ``InvalidRequest`` naming ``change_id`` if it has no such
        change (the id is the request's, the task exists)."""
        found = self.tasks.get_change(tenant_id, task_id, change_id)
        if found is None:
            raise InvalidRequest(
                "change_id", f"task {task_id!r} has no change {change_id!r} (GET its changes)"
            )
        return found

    def changes(
        self, tenant_id: str, task_id: str, limit: int, token: str | None
    ) -> Page[TaskChange]:
        """One page of the task's change records, newest first, kept after the task
        is deleted (until the history retention); ``TaskNotFound`` if the tenant has
        no such task and no record of one."""
        page = self.tasks.changes_page(tenant_id, task_id, limit, token)
        if not page.items and token is None and self.tasks.get_owned(tenant_id, task_id) is None:
            raise TaskNotFound(task_id)
        return page

    def pause(
        self, tenant_id: str, task_id: str, note: str | None, *, who: str | None = None
    ) -> Task:
        """The task leaves the due index; ``next_run_at`` stays, for resume."""
        task = self.get(tenant_id, task_id)
        if task.status in (TaskStatus.COMPLETED, TaskStatus.ERROR):
            raise Conflict(f"task {task_id!r} is {task.status}; there is nothing to pause")
        return self._set_status(task, TaskStatus.PAUSED, note, who=who)

    def resume(self, tenant_id: str, task_id: str, *, who: str | None = None) -> Task:
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
        return self._set_status(task, TaskStatus.ACTIVE, None, resumed=True, who=who)

    def _set_status(
        self,
        task: Task,
        status: TaskStatus,
        note: str | None,
        *,
        resumed: bool = False,
        who: str | None = None,
    ) -> Task:
        now = to_utc_ms(self.clock.now())
        changed = dataclasses.replace(
            task,
            status=status,
            pause_note=note,
            status_reason=None,
            version=task.version + 1,
            updated_at=now,
            resumed_at=now if resumed else task.resumed_at,
        )
        what = ChangeKind.RESUME if resumed else ChangeKind.PAUSE
        change = self._stamp(task.tenant_id, who, now).record(
            what, task.task_id, task.tenant_id, task, changed, note=note
        )
        return self._replace(task, changed, now, None, change)

    def trigger(self, tenant_id: str, task_id: str, *, who: str | None = None) -> Execution:
        """Run the task now, with its own execution id; its schedule is not touched.
        The execution and its change record are one transaction (a refused trigger
        records neither)."""
        task = self._runnable(tenant_id, task_id)
        now = to_utc_ms(self.clock.now())
        dispatch = Dispatch(
            execution_id=triggered_execution_id(task_id, now), task_id=task_id, scheduled_at=now
        )
        change = self._stamp(tenant_id, who, now).recorded(
            ChangeKind.TRIGGER,
            task_id,
            tenant_id,
            {"version": task.version},
            {"version": task.version, "execution_id": dispatch.execution_id},
        )
        starting = [(dispatch.execution_id, self.starter.queued(task, dispatch))]
        if not self.tasks.record_change(change, starting):
            raise Conflict(f"task {task_id!r} was already triggered at {format_instant(now)}")
        self.starter.send(dispatch)
        return self._started(dispatch.execution_id)

    def backfill(
        self, tenant_id: str, task_id: str, start: str, end: str, *, who: str | None = None
    ) -> Backfill:
        """Start each occurrence of the task's schedule in ``[start, end]``, once ever.

        Each gets a backfill id derived from its scheduled time, recorded with a
        conditional put: asking again for an overlapping range starts only the
        occurrences not asked for before. The executions started and their change
        record are one transaction (``_backfill_chunk``).
        """
        task = self._runnable(tenant_id, task_id)
        if task.schedule.kind not in GRID_KINDS:
            raise InvalidRequest(
                "task_id", f"a {task.schedule.kind} task has no grid of occurrences to backfill"
            )
        now = self.clock.now()
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
        dispatches = [
            Dispatch(
                execution_id=backfill_execution_id(task_id, occurrence),
                task_id=task_id,
                scheduled_at=occurrence,
            )
            for occurrence in occurrences
        ]
        started: list[str] = []
        for at in range(0, len(dispatches), MAX_STARTED_WITH_CHANGE):
            chunk = dispatches[at : at + MAX_STARTED_WITH_CHANGE]
            started += self._backfill_chunk(task, chunk, f"{start} to {end}", who)
        return Backfill(execution_ids=[d.execution_id for d in dispatches], started=started)

    def _backfill_chunk(
        self, task: Task, dispatches: list[Dispatch], note: str, who: str | None
    ) -> list[str]:
        """Start those of ``dispatches`` not started before, recorded as one backfill
        change in the same transaction; their ids. A transaction refused for an
        execution that exists (an overlapping backfill) is tried again without the
        ones that do."""
        pending = dispatches
        for _ in range(MAX_BACKFILL_TRIES):
            if not pending:
                return []
            change = self._stamp(task.tenant_id, who, to_utc_ms(self.clock.now())).recorded(
                ChangeKind.BACKFILL,
                task.task_id,
                task.tenant_id,
                {"version": task.version},
                {"version": task.version, "executions": [d.execution_id for d in pending]},
                note=note,
            )
            starting = [(d.execution_id, self.starter.queued(task, d)) for d in pending]
            if self.tasks.record_change(change, starting):
                for dispatch in pending:
                    self.starter.send(dispatch)
                return [d.execution_id for d in pending]
            pending = [d for d in pending if self.execution_store.get(d.execution_id) is None]
        raise Conflict(f"task {task.task_id!r} is being backfilled meanwhile; ask again")

    def _runnable(self, tenant_id: str, task_id: str) -> Task:
        task = self.get(tenant_id, task_id)
        if task.status in (TaskStatus.PAUSED, TaskStatus.ERROR):
            raise Conflict(f"task {task_id!r} is {task.status}; resume it first")
        return task

    def _started(self, execution_id: str) -> Execution:
        execution = self.execution_store.get(execution_id)
        assert execution is not None, "recorded a moment ago"
        return execution

    def _replace(
        self,
        task: Task,
        changed: Task,
        now: datetime,
        unchanged: dict[str, int] | None = None,
        change: TaskChange | None = None,
    ) -> Task:
        placement = self.settings.sharding.place_task(changed, now)
        expected = transitions.replace(task.version, unchanged)
        if not self.tasks.replace(changed, placement, expected, change):
            raise Conflict(f"task {task.task_id!r} changed meanwhile; read it and try again")
        return changed

    def _check_chain(self, tenant_id: str, task_id: str, schedule: Schedule) -> dict[str, int]:
        if isinstance(schedule, AfterSchedule):
            # Marked first: a dependent never exists while an upstream is unmarked.
            # The mark is conditional on the owner: another tenant's task is "missing".
            # The first upstream finds it by the dependents index; the others (fan-in,
            # decision 0058) by the attribute the mark adds.
            for upstream_id in schedule.upstream_task_ids:
                if upstream_id == schedule.upstream_task_id:
                    mark = transitions.mark_has_dependents(tenant_id)
                    if not self.tasks.apply(upstream_id, mark):
                        raise InvalidRequest("after", f"no task {upstream_id!r} exists")
                else:
                    self._mark_fan_in(tenant_id, upstream_id, task_id)
        return self._chain_versions(tenant_id, task_id, schedule)

    def _mark_fan_in(self, tenant_id: str, upstream_id: str, follower: str) -> None:
        """Name ``follower`` on ``upstream_id`` as a fan-in dependent, if it may name
        one more: its record stays small (a name each), whatever requests a tenant
        makes. The mark expects the version whose names were counted, so two creates
        racing for the last place cannot both take it: the loser reads again and
        finds the bound reached."""
        for _ in range(MAX_MARK_ATTEMPTS):
            upstream = self.tasks.get_owned(tenant_id, upstream_id)
            if upstream is None:
                raise InvalidRequest("after", f"no task {upstream_id!r} exists")
            named = upstream.fan_in_dependents
            if follower not in named and len(named) >= MAX_FAN_IN_DEPENDENTS:
                raise InvalidRequest(
                    "after",
                    f"task {upstream_id!r} already has {MAX_FAN_IN_DEPENDENTS} tasks that "
                    "wait for it after another first; make it the first in 'after', or "
                    "chain through fewer tasks",
                )
            mark = transitions.mark_has_dependents(
                tenant_id,
                fan_in_dependent=follower,
                marked_at=self.clock.now(),
                seen_version=upstream.version,
            )
            if self.tasks.apply(upstream_id, mark):
                return
        raise Conflict(f"task {upstream_id!r} kept changing meanwhile; try again")

    def _chain_versions(self, tenant_id: str, task_id: str, schedule: Schedule) -> dict[str, int]:
        """``after`` names existing tasks, and following them never comes back here.

        Walks every path upstream (fan-in: several, decision 0058), each at most
        ``MAX_CHAIN_LENGTH`` long and ``MAX_CHAIN_TASKS`` tasks in all. Returns the
        version of each task on them as read: the write that sets ``after`` is
        conditional on them, so two changes racing to close a cycle cannot both succeed.
        """
        if not isinstance(schedule, AfterSchedule):
            return {}
        versions: dict[str, int] = {}
        # Depth first, each entry the path from the task to an upstream still to read.
        paths = [[task_id, upstream_id] for upstream_id in reversed(schedule.upstream_task_ids)]
        while paths:
            chain = paths.pop()
            upstream_id = chain[-1]
            if upstream_id == task_id:
                raise InvalidRequest("after", f"would make a cycle: {' -> '.join(chain)}")
            if len(chain) > MAX_CHAIN_LENGTH:
                raise InvalidRequest(
                    "after", f"a dependency chain may be at most {MAX_CHAIN_LENGTH} tasks long"
                )
            if upstream_id in versions:
                continue  # reached by another path: its own upstreams are walked already
            if len(versions) >= MAX_CHAIN_TASKS:
                raise InvalidRequest(
                    "after", f"the tasks upstream may be at most {MAX_CHAIN_TASKS} in all"
                )
            upstream = self.tasks.get_owned(tenant_id, upstream_id)
            if upstream is None:
                raise InvalidRequest("after", f"no task {upstream_id!r} exists")
            versions[upstream_id] = upstream.version
            if isinstance(upstream.schedule, AfterSchedule) and upstream.upstream_task_id:
                paths += [[*chain, u] for u in reversed(upstream.schedule.upstream_task_ids)]
        return versions

    def _check_payload_size(self, payload: dict[str, Any]) -> None:
        size = len(json.dumps(payload, separators=(",", ":")).encode())
        if size > self.settings.max_payload_bytes:
            raise PayloadTooLarge(
                "max_payload_bytes",
                "payload",
                f"is {size} bytes as JSON; the limit is {self.settings.max_payload_bytes} bytes",
            )

    def upcoming(
        self, tenant_id: str, task_id: str, count: int, after: str | None
    ) -> tuple[Task, SchedulePreview]:
        """The task and its next ``count`` occurrences after ``after`` (default: now),
        explained, with the daylight-saving changes between them.

        ``after`` without an offset is read in the task's time zone.
        """
        task = self.get(tenant_id, task_id)
        start = (
            parse_local_instant("after", after, task.timezone)
            if after is not None
            else self.clock.now()
        )
        return task, marked_skips(task, preview(task.schedule, task.timezone, start, count))

    def preview_schedule(
        self,
        tenant_id: str,
        spec: ScheduleSpec,
        count: int,
        *,
        task_id: str | None = None,
        calendars: CalendarRule | None = None,
    ) -> SchedulePreview:
        """What a task registered now with the schedule ``spec`` would run: its next
        ``count`` occurrences, checked as ``register`` checks a schedule, nothing stored.

        A cron's ``H`` fields are spread by the task id, which only registering
        gives: the preview spreads them by a fresh one, as one example.
        """
        now = to_utc_ms(self.clock.now())
        seed = uuid.uuid4().hex
        schedule = build_schedule(spec, now, seed=seed)
        checked_first_run(schedule, spec, now)
        self._chain_versions(tenant_id, seed, schedule)
        check_min_interval(schedule, now, self.settings.min_interval_seconds)
        shown = preview_registration(schedule, spec.timezone, now, count)
        # Marked as that task's claims (or one registered with these calendars) would pass them.
        named = self.get(tenant_id, task_id) if task_id is not None else None
        rule = self._resolved(tenant_id, calendars) if calendars is not None else None
        if named is None and not rule:
            return shown
        marking = dataclasses.replace(
            named or new_task_like(schedule, tenant_id, now),
            schedule=schedule,
            calendars=rule if rule is not None else named.calendars if named else NO_CALENDARS,
        )
        return marked_skips(marking, shown)

    def get(self, tenant_id: str, task_id: str) -> Task:
        """The tenant's task; ``TaskNotFound`` whether it is missing or another tenant's."""
        task = self.tasks.get_owned(tenant_id, task_id)
        if task is None:
            raise TaskNotFound(task_id)
        return task

    def page(
        self,
        tenant_id: str,
        limit: int,
        token: str | None,
        tags: tuple[TagFilter, ...] = (),
        listing: TaskListing = ALL_TASKS,
    ) -> Page[Task]:
        """One page of the tenant's tasks, oldest first (or in ``listing``'s order);
        with ``tags`` or ``listing``'s filters, only those that match every one (a page
        may then hold fewer than ``limit``: follow ``next_token`` until it is None)."""
        return self.tasks.page_owned(tenant_id, limit, token, tags, listing)

    def delete(self, tenant_id: str, task_id: str, *, who: str | None = None) -> None:
        """Delete the tenant's task; ``TaskNotFound`` if it has none of that id. Its
        change records stay, until the history retention."""
        task = self.get(tenant_id, task_id)
        change = self._stamp(tenant_id, who, to_utc_ms(self.clock.now())).record(
            ChangeKind.DELETE, task_id, tenant_id, task, None
        )
        if not self.tasks.delete_owned(tenant_id, task_id, change):
            raise TaskNotFound(task_id)

    def executions(
        self, tenant_id: str, task_id: str, limit: int, token: str | None
    ) -> Page[Execution]:
        """One page of the task's executions, newest scheduled time first."""
        # Executions live in their task's partition: owning the task is owning them.
        self.get(tenant_id, task_id)
        return self.execution_store.list_for_task(task_id, limit, token)

    def signing_secrets(self, tenant_id: str) -> list[str]:
        """The tenant's signing secrets, newest first, created on first ask."""
        return self.tenants.ensure_secret(tenant_id, new_signing_secret())

    def rotate_signing_secret(self, tenant_id: str) -> list[str]:
        """Make a fresh secret current, keeping the one before it; newest first.
        ``Conflict`` if another rotation came between."""
        rotated = rotate_secret(self.tenants, tenant_id, new_signing_secret())
        if rotated is None:
            raise Conflict("the signing secret was rotated concurrently; read it again")
        return rotated

    def task_count(self, tenant_id: str) -> int:
        """How many tasks the tenant has."""
        return self.tenants.task_count(tenant_id)

    def quota(self, tenant_id: str) -> EffectiveQuota:
        """The limits the tenant is held to: those an operator set for it, else the
        deployment's defaults (one consistent read of its record)."""
        return self.tenants.quota(tenant_id).effective(
            self.settings.max_tasks_per_tenant,
            self.settings.tenant_rate_per_second,
            self.settings.private_networks,
        )

    def set_quota(self, tenant_id: str, quota: TenantQuota) -> EffectiveQuota:
        """An operator's limits for the tenant (None: back to the default); the limits
        it is held to now. Tasks over a lowered quota stay; new ones are refused."""
        self.tenants.set_quota(tenant_id, quota)
        return self.quota(tenant_id)

    def skip(self, tenant_id: str, task_id: str, request: SkipRequest, by: str) -> Task:
        """Have occurrences of the task not run, as ``request`` asks (decision 0055):
        the tick records each SKIPPED, with ``by`` and the note, and moves on."""
        task = self.get(tenant_id, task_id)
        now = to_utc_ms(self.clock.now())
        skip = requested_skip(
            request, task.schedule, task.timezone, task.next_run_at, by=by, now=now
        )
        skips = added(skips_ahead(task.skips, task.next_run_at), skip)
        changed = self._with_skips(task, skips, now)
        return self._replace(task, changed, now, None, self._skip_record(task, changed, by, now))

    def unskip(
        self, tenant_id: str, task_id: str, occurrence: str | None, *, who: str | None = None
    ) -> Task:
        """Remove the task's skips, or only ``occurrence`` from them; one already
        reached stays as it was recorded. Recorded as by ``who`` (else the tenant)."""
        task = self.get(tenant_id, task_id)
        now = to_utc_ms(self.clock.now())
        instant = (
            parse_local_instant("at", occurrence, task.timezone) if occurrence is not None else None
        )
        skips = skips_ahead(removed(task.skips, instant), task.next_run_at)
        if skips == task.skips:
            return task
        changed = self._with_skips(task, skips, now)
        return self._replace(task, changed, now, None, self._skip_record(task, changed, who, now))

    def _skip_record(self, task: Task, changed: Task, who: str | None, now: datetime) -> TaskChange:
        """A skip's or an unskip's change record: the skips ahead, before and after
        (not revertible: a skip is taken back with ``unskip``)."""
        return self._stamp(task.tenant_id, who, now).recorded(
            ChangeKind.SKIP,
            task.task_id,
            task.tenant_id,
            {"skips": skips_to_list(task.skips) or [], "version": task.version},
            {"skips": skips_to_list(changed.skips) or [], "version": changed.version},
        )

    @staticmethod
    def _with_skips(task: Task, skips: tuple[Skip, ...], now: datetime) -> Task:
        return dataclasses.replace(task, skips=skips, version=task.version + 1, updated_at=now)

    def _resolved(
        self, tenant_id: str, rule: CalendarRule, stored: TenantCalendars | None = None
    ) -> CalendarRule:
        """``rule`` with the days of the tenant's calendars it names copied in."""
        if not rule:
            return rule
        if self.calendar_service is None:
            raise InvalidRequest("exclude_calendars", "this deployment keeps no calendars")
        return self.calendar_service.resolved(tenant_id, rule, stored)

    def _check_handler(self, task: Task, urls: HandlerUrls) -> None:
        """An HTTP handler the URL policy allows, or a Python handler registered in
        this process (that there is exactly one is the domain's rule)."""
        if task.handler_url is not None:
            # Checked again at delivery: DNS may change between now and then.
            urls.check(task.handler_url, task.tenant_id)
        elif task.target is not None:
            self.targets.check(task.target)
        elif task.handler_name not in self.handlers:
            raise UnknownHandler(
                "handler", f"no Python handler is registered as {task.handler_name!r}"
            )

    def _check_notify(self, task: Task, urls: HandlerUrls) -> None:
        """Each notification URL as a handler URL is checked (again when it is sent),
        its problem naming the notification's field."""
        for kind, target in task.notify.given:
            try:
                urls.check(target.url, task.tenant_id)
            except InvalidRequest as refused:
                raise InvalidRequest(f"notify.{kind.value}.url", refused.message) from None


class _UrlsCheckedOnce:
    """``HandlerUrls`` of one tenant for one request: each distinct URL checked (and
    resolved) once, its refusal raised again for every item that names it."""

    def __init__(self, inner: HandlerUrls) -> None:
        self._inner = inner
        self._checked: dict[str, InvalidRequest | None] = {}

    def check(self, url: str, tenant_id: str) -> None:
        if url not in self._checked:
            try:
                self._inner.check(url, tenant_id)
            except InvalidRequest as why:
                self._checked[url] = why
            else:
                self._checked[url] = None
        refusal = self._checked[url]
        if refusal is not None:
            raise refusal

    def with_private_networks(self, networks: tuple[str, ...]) -> HandlerUrls:
        return _UrlsCheckedOnce(self._inner.with_private_networks(networks))


def new_task_like(schedule: Schedule, tenant_id: str, now: datetime) -> Task:
    """A task that is only a schedule: what a preview marks occurrences of."""
    return Task(
        task_id="preview",
        name="preview",
        schedule=schedule,
        handler_url=None,
        payload={},
        status=TaskStatus.ACTIVE,
        next_run_at=None,
        created_at=now,
        updated_at=now,
        tenant_id=tenant_id,
    )


def marked_skips(task: Task, shown: SchedulePreview) -> SchedulePreview:
    """``shown`` with the occurrences ``task``'s skips and calendars pass over
    marked, and why, by the claim's own rules (``claiming.passed_over_reason``)."""
    if not task.skips and not task.calendars:
        return shown

    def reason_of(occurrence: datetime) -> str | None:
        return passed_over_reason(task, occurrence)

    return marking_passed_over(shown, reason_of)


def reserve_key(
    create_keys: CreateKeys, tenant_id: str, key: CreateKey, task_id: str, now: datetime
) -> KeyReservation:
    """Hold ``key`` for ``task_id`` until ``now`` plus ``KEY_LIFETIME``, unless another
    reservation holds it: the reservation that holds the key now, either way."""
    reserve = coordination.reserve_create_key(key, task_id, now)
    held = create_keys.apply_returning(tenant_id, key.key, reserve)
    return held or KeyReservation(task_id, key.fingerprint, created=False)


def rotate_secret(tenants: TenantStore, tenant_id: str, fresh_secret: str) -> list[str] | None:
    """Make ``fresh_secret`` current, keeping the one it replaces (an older one goes);
    the secrets, newest first. A tenant with none gets ``fresh_secret`` as its first.
    None if another rotation came between the read and the write."""
    current = tenants.ensure_secret(tenant_id, fresh_secret)
    if current[0] == fresh_secret:
        return current  # it had none: the fresh one is its first
    if not tenants.apply(tenant_id, coordination.rotate_secret(current, fresh_secret)):
        return None
    return [fresh_secret, current[0]]
