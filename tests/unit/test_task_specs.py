"""The registration and PATCH rules on domain values: no wire, no store."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest

from dynacron.domain.errors import Conflict, InvalidRequest
from dynacron.domain.executions.retry import RetryPolicy
from dynacron.domain.schedules.expressions import CronSchedule, RateSchedule
from dynacron.domain.schedules.wallclock import Ambiguous, DstPolicy, Nonexistent
from dynacron.domain.tasks.changes import UNSET, TaskChanges, apply_changes
from dynacron.domain.tasks.specs import ScheduleSpec, TaskSpec, new_task, spec_of
from dynacron.domain.tasks.task import CatchUp, Overlap, TaskStatus

T0 = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
HOOK = "http://127.0.0.1:9/"


def hourly(**fields: object) -> TaskSpec:
    return TaskSpec(schedule=ScheduleSpec(rate="1 hour"), handler_url=HOOK, **fields)  # type: ignore[arg-type]


def test_new_task_is_active_on_its_first_occurrence_after_now_named_after_its_id() -> None:
    task = new_task(hourly(), T0, task_id="t1", tenant_id="alice")
    assert task.status is TaskStatus.ACTIVE
    assert task.name == "t1"
    assert task.tenant_id == "alice"
    assert task.next_run_at == T0 + timedelta(hours=1)
    assert task.version == 1


def test_new_task_refuses_two_schedule_kinds_before_anything_else() -> None:
    spec = TaskSpec(schedule=ScheduleSpec(rate="1 hour", cron="* * * * *"))
    with pytest.raises(InvalidRequest) as refused:
        new_task(spec, T0, task_id="t1", tenant_id="alice")
    assert refused.value.field == "schedule"
    assert "found 'cron' and 'rate'" in refused.value.message


def test_new_task_refuses_both_handlers() -> None:
    spec = dataclasses.replace(hourly(), handler_name="py")
    with pytest.raises(InvalidRequest) as refused:
        new_task(spec, T0, task_id="t1", tenant_id="alice")
    assert refused.value.field == "handler"


def test_a_window_without_run_all_is_refused() -> None:
    with pytest.raises(InvalidRequest) as refused:
        new_task(hourly(catchup_window_seconds=60), T0, task_id="t1", tenant_id="alice")
    assert refused.value.field == "catchup_window_seconds"


def test_spec_of_a_task_registers_the_same_task_again() -> None:
    spec = TaskSpec(
        schedule=ScheduleSpec(
            cron="30 2 * * *",
            timezone="Europe/Berlin",
            dst=DstPolicy(Nonexistent.SKIP, Ambiguous.BOTH),
            end_at="2027-01-01T00:00:00Z",
        ),
        handler_name="py",
        payload={"a": 1},
        name="nightly",
        retry=RetryPolicy(3, 2, 60),
        catchup=CatchUp.RUN_ALL,
        catchup_window_seconds=3600,
        jitter_seconds=7,
        overlap=Overlap.SKIP,
    )
    task = new_task(spec, T0, task_id="t1", tenant_id="alice")
    again = new_task(spec_of(task), T0, task_id="t1", tenant_id="alice")
    assert again == task


def test_changes_without_a_schedule_field_keep_the_schedule_and_bump_the_version() -> None:
    task = new_task(hourly(), T0, task_id="t1", tenant_id="alice")
    later = T0 + timedelta(minutes=1)
    changed = apply_changes(task, TaskChanges(name="renamed", payload={"b": 2}), later)
    assert changed.name == "renamed"
    assert changed.payload == {"b": 2}
    assert changed.schedule == task.schedule
    assert changed.next_run_at == task.next_run_at
    assert changed.version == 2
    assert changed.updated_at == later


def test_a_stale_version_is_a_conflict() -> None:
    task = new_task(hourly(), T0, task_id="t1", tenant_id="alice")
    with pytest.raises(Conflict):
        apply_changes(task, TaskChanges(version=7, name="x"), T0)


def test_a_new_kind_replaces_the_old_one_and_drops_its_anchor() -> None:
    task = new_task(hourly(), T0, task_id="t1", tenant_id="alice")
    assert isinstance(task.schedule, RateSchedule)
    changed = apply_changes(task, TaskChanges(cron="0 * * * *", rate=UNSET), T0)
    assert isinstance(changed.schedule, CronSchedule)
    assert changed.schedule.expression == "0 * * * *"


def test_an_unset_kind_with_no_other_leaves_no_schedule() -> None:
    task = new_task(hourly(), T0, task_id="t1", tenant_id="alice")
    with pytest.raises(InvalidRequest) as refused:
        apply_changes(task, TaskChanges(rate=UNSET), T0)
    assert "found none" in refused.value.message


def test_a_named_handler_replaces_the_url() -> None:
    task = new_task(hourly(), T0, task_id="t1", tenant_id="alice")
    changed = apply_changes(task, TaskChanges(handler_name="py"), T0)
    assert (changed.handler_url, changed.handler_name) == (None, "py")


def test_a_catchup_other_than_run_all_drops_the_stored_window() -> None:
    spec = hourly(catchup=CatchUp.RUN_ALL, catchup_window_seconds=60)
    task = new_task(spec, T0, task_id="t1", tenant_id="alice")
    changed = apply_changes(task, TaskChanges(catchup=CatchUp.SKIP), T0)
    assert changed.catchup.policy is CatchUp.SKIP
    # Unset: the stored policy stays, with its default window.
    reset = apply_changes(task, TaskChanges(catchup=UNSET), T0)
    assert reset.catchup.policy is CatchUp.RUN_ALL
    assert reset.catchup.window_seconds == 24 * 3600


def test_a_stored_value_over_todays_bounds_is_refused_naming_it() -> None:
    task = dataclasses.replace(
        new_task(hourly(), T0, task_id="t1", tenant_id="alice"), jitter_seconds=5000
    )
    with pytest.raises(InvalidRequest) as refused:
        apply_changes(task, TaskChanges(name="x"), T0)
    assert refused.value.field == "jitter_seconds"
    assert apply_changes(task, TaskChanges(jitter_seconds=3), T0).jitter_seconds == 3


def test_a_new_schedule_revives_a_task_set_aside_and_frees_its_slot() -> None:
    task = dataclasses.replace(
        new_task(hourly(), T0, task_id="t1", tenant_id="alice"),
        status=TaskStatus.ERROR,
        status_reason="boom",
        running_execution="t1_x",
        next_run_at=T0 + timedelta(hours=1),
    )
    changed = apply_changes(task, TaskChanges(rate="2 hours"), T0 + timedelta(minutes=1))
    assert changed.status is TaskStatus.ACTIVE
    assert changed.status_reason is None
    assert changed.running_execution is None
