"""The change-history contract (decision 0054): each change of a task and its record
are one write; a refused change records nothing; records outlive the task, newest
first, one tenant's only; a claim records nothing."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from dynacron.domain.conditions import Transition
from dynacron.domain.executions import transitions as execution_transitions
from dynacron.domain.executions.execution import Dispatch, new_token
from dynacron.domain.tasks import transitions
from dynacron.domain.tasks.claiming import claim_occurrence
from dynacron.domain.tasks.history import SYSTEM, ChangeKind, ChangeStamp, TaskChange
from dynacron.domain.tasks.task import DuePlacement, Task, TaskStatus
from dynacron.ports import AdapterSet, TaskStore
from tests.contract import task_changes
from tests.contract.builders import ROOMY, SHARDING, START, a_task

HERE = DuePlacement(bucket=SHARDING.bucket(START), shard=0)
STAMP = ChangeStamp("arn:aws:iam::123456789012:user/alice", START)


def history(tasks: TaskStore, task_id: str, tenant_id: str = "acme") -> list[TaskChange]:
    """Every record of the task, following the pages (two a page)."""
    found: list[TaskChange] = []
    page = tasks.changes_page(tenant_id, task_id, 2, None)
    found += page.items
    while page.next_token is not None:
        page = tasks.changes_page(tenant_id, task_id, 2, page.next_token)
        found += page.items
    return found


def created(tasks: TaskStore, task_id: str = "t1") -> Task:
    task = a_task(task_id, tenant_id="acme")
    change = STAMP.record(ChangeKind.CREATE, task_id, "acme", None, task)
    tasks.create_within_quota(task, HERE, ROOMY, "secret", change)
    return task


def renamed(task: Task, name: str) -> Task:
    return dataclasses.replace(task, name=name, version=task.version + 1)


def test_each_change_is_recorded_with_its_diff_newest_first(adapters: AdapterSet) -> None:
    tasks = adapters.tasks
    # Given a task created and renamed twice, then deleted, each with its record
    task = created(tasks)
    first = renamed(task, "first")
    assert tasks.replace(
        first,
        HERE,
        transitions.replace(task.version),
        STAMP.record(ChangeKind.PATCH, "t1", "acme", task, first),
    )
    second = renamed(first, "second")
    assert tasks.replace(
        second,
        HERE,
        transitions.replace(first.version),
        STAMP.record(ChangeKind.PATCH, "t1", "acme", first, second),
    )
    assert tasks.delete_owned(
        "acme", "t1", STAMP.record(ChangeKind.DELETE, "t1", "acme", second, None)
    )

    # Then the history outlives the task, newest first, over pages
    records = history(tasks, "t1")
    assert [r.what for r in records] == [
        ChangeKind.DELETE,
        ChangeKind.PATCH,
        ChangeKind.PATCH,
        ChangeKind.CREATE,
    ]
    latest_patch = records[1]
    # Only the changed fields, and the version, each side
    assert latest_patch.before == {"name": "first", "version": 2}
    assert latest_patch.after == {"name": "second", "version": 3}
    assert latest_patch.who == STAMP.who
    assert latest_patch.tenant_id == "acme"
    assert records[0].after == {}
    assert records[0].before["name"] == "second"
    assert tasks.get_change("acme", "t1", latest_patch.change_id) == latest_patch


def test_a_refused_change_records_nothing(adapters: AdapterSet) -> None:
    tasks = adapters.tasks
    task = created(tasks)
    stale = renamed(task, "late")
    # Given the task moved on (a claim bumped its version)
    claim = claim_occurrence(task, START + timedelta(seconds=1))
    assert claim is not None
    assert task_changes.claim(tasks, claim, None, START)

    # When a change based on the older read comes, it is refused, unrecorded
    record = STAMP.record(ChangeKind.PATCH, "t1", "acme", task, stale)
    assert not tasks.replace(stale, HERE, transitions.replace(task.version), record)
    # A delete by another tenant, a set-aside at a stale version: likewise
    foreign = STAMP.record(ChangeKind.DELETE, "t1", "other", task, None)
    assert not tasks.delete_owned("other", "t1", foreign)
    set_aside = STAMP.recorded(ChangeKind.SET_ASIDE, "t1", None, {}, {})
    assert not tasks.apply("t1", transitions.set_aside(task.version, "bad", START), set_aside)

    # Then only the create is recorded, and the claim wrote no record either
    assert [r.what for r in history(tasks, "t1")] == [ChangeKind.CREATE]
    assert tasks.get_change("acme", "t1", record.change_id) is None


def test_a_set_aside_is_recorded_as_the_scheduler_for_the_tasks_tenant(
    adapters: AdapterSet,
) -> None:
    tasks = adapters.tasks
    created(tasks)
    # When the scheduler sets aside a task it did not read (no tenant known)
    assert task_changes.set_aside_by_id(tasks, "t1", "poison", START + timedelta(minutes=1))

    # Then the record names the scheduler, under the task's tenant
    latest = history(tasks, "t1")[0]
    assert latest.what is ChangeKind.SET_ASIDE
    assert latest.who == SYSTEM
    assert latest.tenant_id == "acme"
    assert latest.after["status"] == TaskStatus.ERROR.value
    assert latest.before == {"version": 1}


def test_another_tenants_history_is_none(adapters: AdapterSet) -> None:
    tasks = adapters.tasks
    record = created(tasks)
    assert history(tasks, record.task_id, "other") == []
    change_id = history(tasks, record.task_id)[0].change_id
    assert tasks.get_change("other", record.task_id, change_id) is None


def test_a_change_that_writes_no_task_is_recorded_alone(adapters: AdapterSet) -> None:
    tasks = adapters.tasks
    created(tasks)
    later = ChangeStamp(STAMP.who, START + timedelta(seconds=1))
    trigger = later.recorded(
        ChangeKind.TRIGGER, "t1", "acme", {"version": 1}, {"execution_id": "t1_x"}
    )
    tasks.record_change(trigger)
    assert history(tasks, "t1")[0] == trigger


def _queued(adapters: AdapterSet, task: Task, execution_id: str) -> tuple[str, Transition]:
    dispatch = Dispatch(execution_id=execution_id, task_id=task.task_id, scheduled_at=START)
    created = execution_transitions.enqueue(
        dispatch,
        retry=task.retry,
        lease_until=START + timedelta(minutes=5),
        lease_token=new_token(),
        tenant_id=task.tenant_id,
        keeping=adapters.executions.keeping(execution_id),
    )
    return execution_id, created


def test_the_executions_a_change_starts_and_its_record_are_one_write(
    adapters: AdapterSet,
) -> None:
    tasks = adapters.tasks
    task = created(tasks)
    # When a trigger's execution and its record are written together: both are
    later = ChangeStamp(STAMP.who, START + timedelta(seconds=1))
    trigger = later.recorded(
        ChangeKind.TRIGGER, "t1", "acme", {"version": 1}, {"execution_id": "t1_a"}
    )
    assert tasks.record_change(trigger, [_queued(adapters, task, "t1_a")])
    assert history(tasks, "t1")[0] == trigger
    assert adapters.executions.get("t1_a") is not None
    # When a backfill names one that exists: refused, neither its new one nor its record
    backfill = later.recorded(
        ChangeKind.BACKFILL, "t1", "acme", {"version": 1}, {"executions": ["t1_b", "t1_a"]}
    )
    starting = [_queued(adapters, task, "t1_b"), _queued(adapters, task, "t1_a")]
    assert not tasks.record_change(backfill, starting)
    assert adapters.executions.get("t1_b") is None
    assert [c.what for c in history(tasks, "t1")] == [ChangeKind.TRIGGER, ChangeKind.CREATE]


def test_a_batch_create_records_each_task_stored_and_none_refused(adapters: AdapterSet) -> None:
    tasks = adapters.tasks
    # Given a batch larger than one transaction holds with its records (60 tasks,
    # 120 puts), then one over the tenant's quota
    batch = [a_task(f"b{i:02}", tenant_id="acme") for i in range(60)]
    records = [STAMP.record(ChangeKind.CREATE, t.task_id, "acme", None, t) for t in batch]
    assert (
        tasks.create_many_within_quota([(t, HERE) for t in batch], 60, "s", records) == [None] * 60
    )
    late = a_task("late", tenant_id="acme")
    late_record = STAMP.record(ChangeKind.CREATE, "late", "acme", None, late)
    (refused,) = tasks.create_many_within_quota([(late, HERE)], 60, "s", [late_record])
    assert refused is not None

    # Then each task stored has its record, and the refused one none
    assert all([r.what for r in history(tasks, t.task_id)] == [ChangeKind.CREATE] for t in batch)
    assert history(tasks, "late") == []
