"""The TaskStore contract for listings beyond tags: by name prefix, in name order,
filtered by status and kind, in either direction (decision 0045)."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from dynacron.domain.errors import InvalidRequest
from dynacron.domain.schedules.expressions import RateSchedule
from dynacron.domain.tasks.claiming import claim_occurrence
from dynacron.domain.tasks.listing import TaskListing, TaskOrder
from dynacron.domain.tasks.tags import TagFilter, parse_tag_filter
from dynacron.domain.tasks.task import DuePlacement, Task, TaskStatus
from dynacron.ports import AdapterSet, TaskStore
from tests.contract import task_changes
from tests.contract.builders import ROOMY, SHARDING, START, a_task

MINUTE = timedelta(minutes=1)
HERE = DuePlacement(bucket=SHARDING.bucket(START), shard=0)


def create(tasks: TaskStore, task: Task) -> Task:
    tasks.create_within_quota(task, HERE, ROOMY, f"secret-{task.task_id}")
    return task


def every(
    tasks: TaskStore,
    tenant_id: str,
    listing: TaskListing,
    tags: tuple[TagFilter, ...] = (),
    limit: int = 2,
) -> list[str]:
    """The ids of every page of a listing, following its tokens."""
    listed: list[str] = []
    token: str | None = None
    while True:
        page = tasks.page_owned(tenant_id, limit, token, tags, listing)
        assert len(page.items) <= limit
        assert all(t.tenant_id == tenant_id for t in page.items)
        listed += [t.task_id for t in page.items]
        token = page.next_token
        if token is None:
            return listed


NAMES = {
    "t1": "Nightly backup",
    "t2": "nightly report",
    "t3": "NIGHTLY",
    "t4": "Straße cleanup",
    "t5": "hourly sync",
    "t6": "Night owl",
    "t7": "nightly report",
}


def named(tasks: TaskStore, tenant_id: str = "acme", id_prefix: str = "") -> None:
    for n, (task_id, name) in enumerate(NAMES.items()):
        task = a_task(id_prefix + task_id, tenant_id=tenant_id, created_at=START + n * MINUTE)
        create(tasks, dataclasses.replace(task, name=name))


def test_a_name_prefix_finds_names_case_insensitively_in_name_order(
    adapters: AdapterSet,
) -> None:
    tasks = adapters.tasks
    # Given a tenant's tasks with names in every case, and another tenant's alike
    named(tasks)
    named(tasks, "other", "other-")

    def found(prefix: str, descending: bool = False) -> list[str]:
        return every(tasks, "acme", TaskListing(name_prefix=prefix, descending=descending))

    # When it searches by prefix, Then case does not count, and the tasks come in
    # name order (a name before the longer ones it begins), ties by task id
    assert found("nightly") == ["t3", "t1", "t2", "t7"]
    assert found("NIGHT") == ["t6", "t3", "t1", "t2", "t7"]
    assert found("nightly r") == ["t2", "t7"]
    # Unicode case folding: ß is ss
    assert found("STRASSE") == ["t4"]
    assert found("straße c") == ["t4"]
    # a prefix of nothing listed is an empty listing, not an error
    assert found("weekly") == []
    # descending is the reverse
    assert found("night", descending=True) == ["t7", "t2", "t1", "t3", "t6"]
    # one at a time, each once
    assert every(tasks, "acme", TaskListing(name_prefix="n"), limit=1) == [
        "t6",
        "t3",
        "t1",
        "t2",
        "t7",
    ]


def test_sort_by_name_lists_every_task_and_a_token_keeps_to_its_listing(
    adapters: AdapterSet,
) -> None:
    tasks = adapters.tasks
    named(tasks)
    by_name = TaskListing(order=TaskOrder.NAME)
    assert every(tasks, "acme", by_name) == ["t5", "t6", "t3", "t1", "t2", "t7", "t4"]
    # A token of one tenant's listing is refused to another
    token = tasks.page_owned("acme", 2, None, (), by_name).next_token
    assert token is not None
    with pytest.raises(InvalidRequest):
        tasks.page_owned("other", 2, token, (), by_name)


def test_a_rename_moves_a_task_in_the_name_listing_and_a_claim_keeps_it(
    adapters: AdapterSet,
) -> None:
    tasks = adapters.tasks
    # Given a recurring task named "alpha"
    task = create(
        tasks,
        dataclasses.replace(
            a_task("job", tenant_id="acme"),
            name="alpha",
            schedule=RateSchedule(every_seconds=60, anchor=START),
        ),
    )
    # When it is renamed
    renamed = dataclasses.replace(task, name="Omega", version=2)
    assert task_changes.replace(tasks, renamed, HERE, expected_version=1)
    # Then the old name finds nothing and the new one finds it
    assert every(tasks, "acme", TaskListing(name_prefix="alpha")) == []
    assert every(tasks, "acme", TaskListing(name_prefix="omega")) == ["job"]
    # And after a claim (the tick's write, which never changes the name) still does
    claim = claim_occurrence(renamed, START + timedelta(seconds=1))
    assert claim is not None
    assert task_changes.claim(tasks, claim, HERE, START + timedelta(seconds=1))
    assert every(tasks, "acme", TaskListing(name_prefix="omega")) == ["job"]


def test_status_and_kind_filter_any_order_and_combine_with_tags(adapters: AdapterSet) -> None:
    tasks = adapters.tasks
    # Given tasks of each status and two schedule kinds, some tagged
    for n, (task_id, status, recurring, tags) in enumerate(
        [
            ("a", TaskStatus.ACTIVE, True, {"env": "prod"}),
            ("b", TaskStatus.PAUSED, True, {"env": "prod"}),
            ("c", TaskStatus.ACTIVE, False, {}),
            ("d", TaskStatus.COMPLETED, False, {"env": "prod"}),
            ("e", TaskStatus.ACTIVE, True, {"env": "dev"}),
        ]
    ):
        task = a_task(task_id, tenant_id="acme", created_at=START + n * MINUTE, tags=tags)
        schedule = RateSchedule(every_seconds=60, anchor=START) if recurring else task.schedule
        create(
            tasks,
            dataclasses.replace(task, name=f"job {task_id}", status=status, schedule=schedule),
        )
    active = TaskListing(status=TaskStatus.ACTIVE)
    # Then each filter keeps what it names, oldest first
    assert every(tasks, "acme", active) == ["a", "c", "e"]
    assert every(tasks, "acme", TaskListing(kind="rate")) == ["a", "b", "e"]
    assert every(tasks, "acme", TaskListing(kind="at", status=TaskStatus.COMPLETED)) == ["d"]
    # with tags too, and newest first
    prod = (parse_tag_filter("env:prod"),)
    assert every(tasks, "acme", active, prod) == ["a"]
    assert every(tasks, "acme", TaskListing(descending=True), prod) == ["d", "b", "a"]
    # and with a name prefix, in name order
    assert every(tasks, "acme", TaskListing(name_prefix="JOB", status=TaskStatus.ACTIVE)) == [
        "a",
        "c",
        "e",
    ]
    assert every(
        tasks, "acme", TaskListing(name_prefix="job", descending=True), (TagFilter("env"),)
    ) == ["e", "d", "b", "a"]
