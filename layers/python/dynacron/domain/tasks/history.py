"""A task's change history: one record per change, written with the change itself.

Each change of a task (create, PATCH, pause, resume, trigger, backfill, delete, a
revert, a set-aside by the scheduler) is recorded with when, who, what, and the
task's fields before and after, only those that changed (and the version). The
store writes the record in the same transaction as the change (decision 0054): a
change never lands without its record, a refused one writes none. A fire (the claim
of an occurrence) is not a change and writes nothing here.

The fields are the API's words (those of a PATCH), so that a revert can send a
change's "before" back through the PATCH path.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from dynacron.domain.errors import InvalidRequest
from dynacron.domain.executions.notifications import notify_to_map
from dynacron.domain.instants import compact_instant, format_instant, parse_instant
from dynacron.domain.tasks.record import retry_to_map
from dynacron.domain.tasks.specs import spec_of
from dynacron.domain.tasks.targets import target_to_map
from dynacron.domain.tasks.task import UNREADABLE_SCHEDULE, Task

# Who the scheduler itself is, in a change it makes (a set-aside).
SYSTEM = "dynacron"
# How long a change record is kept, deployed (DynamoDB's TTL) and locally (the sweep).
HISTORY_RETENTION = timedelta(days=90)
SCHEDULE_KINDS = ("cron", "rate", "at", "fixed_delay", "after")
# The fields a revert may send back through PATCH (status and version are not).
REVERTIBLE = frozenset(
    {
        *SCHEDULE_KINDS,
        "name",
        "timezone",
        "dst",
        "anchor",
        "start_at",
        "end_at",
        "handler_url",
        "handler",
        "target",
        "payload",
        "retry",
        "catchup",
        "catchup_window_seconds",
        "jitter_seconds",
        "overlap",
        "max_concurrency",
        "tags",
        "notify",
        "exclude_calendars",
        "only_calendars",
        "on_excluded",
        "when",
    }
)


class ChangeKind(StrEnum):
    """What a change did to a task."""

    CREATE = "create"
    PATCH = "patch"
    PAUSE = "pause"
    RESUME = "resume"
    TRIGGER = "trigger"
    BACKFILL = "backfill"
    DELETE = "delete"
    REVERT = "revert"
    SET_ASIDE = "set_aside"
    SKIP = "skip"


@dataclass(frozen=True)
class TaskChange:
    """One change of one task, as recorded. ``tenant_id`` None: the store fills it in
    from the task it changes (a set-aside of a task not read first)."""

    task_id: str
    tenant_id: str | None
    change_id: str
    at: datetime
    who: str
    what: ChangeKind
    before: dict[str, Any] = field(default_factory=dict)
    after: dict[str, Any] = field(default_factory=dict)
    note: str | None = None
    expires_at: datetime | None = None

    def owned_by(self, tenant_id: str) -> TaskChange:
        """This record, of ``tenant_id``."""
        return TaskChange(**{**self.__dict__, "tenant_id": tenant_id})

    def revertible(self) -> dict[str, Any]:
        """The "before" fields a PATCH can restore: those it names, and of the
        schedule kinds only the one the task had (giving one replaces the other)."""
        return {
            name: value
            for name, value in self.before.items()
            if name in REVERTIBLE and not (name in SCHEDULE_KINDS and value is None)
        }


def new_change_id(now: datetime, version: int = 0, *, writes_task: bool = True) -> str:
    """An id that sorts by time, then (two changes in one millisecond) by the task's
    version after the change, a change that writes no task (a trigger) after the one
    that made that version; newest last (listed in reverse); unique per change."""
    sequence = f"{min(max(version, 0), 10**10 - 1):010d}{0 if writes_task else 1}"
    return f"{compact_instant(now)}-{sequence}-{secrets.token_hex(4)}"


def _version_after(before: dict[str, Any], after: dict[str, Any]) -> int:
    """The task's version once a change is made: the one after it, else (a delete)
    one more than before, as a whole number (0 if it is none)."""
    for version, step in ((after.get("version"), 0), (before.get("version"), 1)):
        if isinstance(version, int) and not isinstance(version, bool):
            return version + step
    return 0


def task_fields(task: Task | None) -> dict[str, Any]:
    """The task as a PATCH names it, with its status and version: what a change
    record compares. None (no task: before a create, after a delete) is no fields."""
    if task is None:
        return {}
    spec = spec_of(task)
    when = spec.schedule
    fields: dict[str, Any] = {kind: None for kind in SCHEDULE_KINDS}
    if task.schedule is not UNREADABLE_SCHEDULE:
        kind = task.schedule.kind
        fields[kind] = getattr(when, kind)
    fields.update(
        name=task.name,
        timezone=when.timezone,
        dst=(
            {"nonexistent": when.dst.nonexistent.value, "ambiguous": when.dst.ambiguous.value}
            if when.dst is not None
            else None
        ),
        anchor=when.anchor,
        start_at=when.start_at,
        end_at=when.end_at,
        handler_url=spec.handler_url,
        handler=spec.handler_name,
        target=target_to_map(spec.target) if spec.target is not None else None,
        payload=spec.payload,
        retry=retry_to_map(spec.retry),
        catchup=spec.catchup.value,
        catchup_window_seconds=spec.catchup_window_seconds,
        jitter_seconds=spec.jitter_seconds,
        overlap=spec.overlap.value,
        max_concurrency=spec.limits.max_concurrency,
        tags=dict(spec.tags),
        # An empty map and empty lists, not null: a PATCH with them clears the field.
        notify=notify_to_map(task.notify) or {},
        exclude_calendars=[c.name for c in task.calendars.exclude],
        only_calendars=[c.name for c in task.calendars.only],
        on_excluded=task.calendars.on_excluded.value,
        when=getattr(task.schedule, "when", None),
        status=task.status.value,
        pause_note=task.pause_note,
        status_reason=task.status_reason,
        version=task.version,
    )
    return fields


def diff(before: dict[str, Any], after: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Only the fields that differ, each side with its value (None where the other
    side has none), and the version on both sides."""
    names = [
        n
        for n in dict.fromkeys([*before, *after])
        if n == "version" or before.get(n) != after.get(n)
    ]
    kept_before = {n: before.get(n) for n in names} if before else {}
    kept_after = {n: after.get(n) for n in names} if after else {}
    return kept_before, kept_after


@dataclass(frozen=True)
class ChangeStamp:
    """Who makes a change and when: what every record of it shares."""

    who: str
    now: datetime
    retention: timedelta = HISTORY_RETENTION

    def record(
        self,
        what: ChangeKind,
        task_id: str,
        tenant_id: str | None,
        before: Task | None,
        after: Task | None,
        *,
        note: str | None = None,
    ) -> TaskChange:
        """The record of changing ``before`` into ``after`` (either None: a create or
        a delete)."""
        old, new = diff(task_fields(before), task_fields(after))
        return self.recorded(what, task_id, tenant_id, old, new, note=note)

    def recorded(
        self,
        what: ChangeKind,
        task_id: str,
        tenant_id: str | None,
        before: dict[str, Any],
        after: dict[str, Any],
        *,
        note: str | None = None,
    ) -> TaskChange:
        """A record of fields given as they are."""
        return TaskChange(
            task_id=task_id,
            tenant_id=tenant_id,
            change_id=new_change_id(
                self.now,
                _version_after(before, after),
                writes_task=what not in (ChangeKind.TRIGGER, ChangeKind.BACKFILL),
            ),
            at=self.now,
            who=self.who,
            what=what,
            before=before,
            after=after,
            note=note,
            expires_at=self.now + self.retention,
        )


def change_to_map(change: TaskChange) -> dict[str, Any]:
    """A record as both stores keep it: plain values, the fields as JSON text (so that
    a payload's floats stay exact and its size can be measured)."""
    values: dict[str, Any] = {
        "task_id": change.task_id,
        "tenant_id": change.tenant_id,
        "change_id": change.change_id,
        "at": format_instant(change.at),
        "who": change.who,
        "what": change.what.value,
        "before": json.dumps(change.before, separators=(",", ":"), sort_keys=True),
        "after": json.dumps(change.after, separators=(",", ":"), sort_keys=True),
    }
    if change.note is not None:
        values["note"] = change.note
    if change.expires_at is not None:
        values["expires_at"] = int(change.expires_at.timestamp())
    return values


def change_from_map(values: dict[str, Any]) -> TaskChange:
    """A record as ``change_to_map`` stored it."""
    expires = values.get("expires_at")
    return TaskChange(
        task_id=str(values["task_id"]),
        tenant_id=values.get("tenant_id"),
        change_id=str(values["change_id"]),
        at=parse_instant(str(values["at"])),
        who=str(values["who"]),
        what=ChangeKind(values["what"]),
        before=json.loads(values["before"]),
        after=json.loads(values["after"]),
        note=values.get("note"),
        expires_at=datetime.fromtimestamp(int(expires), UTC) if expires is not None else None,
    )


def revert_body(change: TaskChange, version: int) -> dict[str, Any]:
    """The PATCH that restores ``change``'s "before", conditional on ``version``;
    ``InvalidRequest`` if it changed nothing a PATCH can restore."""
    restored = change.revertible()
    if not restored:
        raise InvalidRequest(
            "change_id",
            f"change {change.change_id} ({change.what.value}) changed nothing a PATCH "
            "can restore; pause or resume the task instead",
        )
    return {**restored, "version": version}
