"""The change record's rules (decision 0054): only the changed fields and the
version, ids that sort as the changes were made, and what a revert may send back."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest

from dynacron.domain.errors import InvalidRequest
from dynacron.domain.schedules.expressions import CronSchedule, RateSchedule
from dynacron.domain.tasks.history import (
    ChangeKind,
    ChangeStamp,
    change_from_map,
    change_to_map,
    revert_body,
    task_fields,
)
from dynacron.domain.tasks.task import Task, TaskStatus

NOW = datetime(2026, 12, 6, 9, 30, tzinfo=UTC)
STAMP = ChangeStamp("arn:aws:iam::123456789012:user/alice", NOW)


def a_task(**fields: object) -> Task:
    task = Task(
        task_id="t1",
        name="report",
        schedule=RateSchedule(every_seconds=3600, anchor=NOW),
        handler_url="http://127.0.0.1:9/hook",
        payload={"n": 1.5},
        status=TaskStatus.ACTIVE,
        next_run_at=NOW,
        created_at=NOW,
        updated_at=NOW,
        tenant_id="acme",
    )
    return dataclasses.replace(task, **fields)


def test_a_record_keeps_only_what_changed_and_the_version() -> None:
    before = a_task()
    after = a_task(name="daily report", payload={"n": 2.5}, version=2)
    change = STAMP.record(ChangeKind.PATCH, "t1", "acme", before, after)
    assert change.before == {"name": "report", "payload": {"n": 1.5}, "version": 1}
    assert change.after == {"name": "daily report", "payload": {"n": 2.5}, "version": 2}
    # Stored and read back exactly, floats of the payload included
    assert change_from_map(change_to_map(change)) == change
    assert change.expires_at == NOW + timedelta(days=90)


def test_a_new_schedule_kind_shows_the_old_one_going() -> None:
    cron = CronSchedule(expression="0 9 * * *")
    change = STAMP.record(
        ChangeKind.PATCH, "t1", "acme", a_task(), a_task(schedule=cron, version=2)
    )
    assert (change.before["rate"], change.after["rate"]) == ("1 hour", None)
    assert (change.before["cron"], change.after["cron"]) == (None, "0 9 * * *")
    # A revert sends the rate back, not a null cron (giving a kind replaces the other)
    body = revert_body(change, version=2)
    assert body["rate"] == "1 hour"
    assert "cron" not in body
    assert body["version"] == 2


def test_ids_sort_as_the_changes_were_made_even_within_one_millisecond() -> None:
    create = STAMP.record(ChangeKind.CREATE, "t1", "acme", None, a_task())
    patch = STAMP.record(ChangeKind.PATCH, "t1", "acme", a_task(), a_task(version=2))
    trigger = STAMP.recorded(ChangeKind.TRIGGER, "t1", "acme", {"version": 2}, {"version": 2})
    delete = STAMP.record(ChangeKind.DELETE, "t1", "acme", a_task(version=2), None)
    later = ChangeStamp(STAMP.who, NOW + timedelta(milliseconds=1))
    patch_later = later.record(ChangeKind.PATCH, "t1", "acme", a_task(), a_task(version=2))
    ids = [c.change_id for c in (create, patch, trigger, delete, patch_later)]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)


def test_a_change_of_status_alone_cannot_be_reverted_through_patch() -> None:
    paused = a_task(status=TaskStatus.PAUSED, pause_note="deploy", version=2)
    change = STAMP.record(ChangeKind.PAUSE, "t1", "acme", a_task(), paused, note="deploy")
    assert change.after == {"status": "PAUSED", "pause_note": "deploy", "version": 2}
    with pytest.raises(InvalidRequest, match="pause or resume"):
        revert_body(change, version=2)


def test_a_create_has_no_before_and_a_delete_no_after() -> None:
    create = STAMP.record(ChangeKind.CREATE, "t1", "acme", None, a_task())
    assert create.before == {}
    assert create.after == {k: v for k, v in task_fields(a_task()).items() if v is not None}
    delete = STAMP.record(ChangeKind.DELETE, "t1", "acme", a_task(), None)
    assert delete.after == {}
    assert delete.before["name"] == "report"
