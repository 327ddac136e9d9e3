"""The TaskStore contract: quotas, tenant isolation, versions, the due index, dependents."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta

import pytest

from dynacron.domain.coordination.create_keys import CreateKey
from dynacron.domain.errors import InvalidRequest, LimitExceeded
from dynacron.domain.schedules.expressions import RateSchedule
from dynacron.domain.tasks.claiming import claim_occurrence
from dynacron.domain.tasks.tags import TagFilter, parse_tag_filter
from dynacron.domain.tasks.task import DuePlacement, Task, TaskStatus
from dynacron.ports import REASON_LIMIT, AdapterSet, TaskStore
from tests.contract import task_changes
from tests.contract.builders import ROOMY, SHARDING, START, a_follower, a_task
from tests.contract.coordination_changes import reserve_key

MINUTE = timedelta(minutes=1)
# One due-index partition every due task of these tests is filed under.
HERE = DuePlacement(bucket=SHARDING.bucket(START), shard=0)


def create(tasks: TaskStore, task: Task, placement: DuePlacement | None = HERE) -> Task:
    tasks.create_within_quota(task, placement, ROOMY, f"secret-{task.task_id}")
    return task


def all_due(tasks: TaskStore, key: str, now: datetime, limit: int) -> list[list[str]]:
    """Every page of ``due_task_ids`` in one bucket, following ``start_key``."""
    pages: list[list[str]] = []
    ids, start_key = tasks.due_task_ids(key, now, limit, None)
    pages.append(ids)
    while start_key is not None:
        ids, start_key = tasks.due_task_ids(key, now, limit, start_key)
        pages.append(ids)
    return pages


def due_ids(tasks: TaskStore, now: datetime = START + timedelta(days=1)) -> list[str]:
    return [i for page in all_due(tasks, HERE.key, now, 100) for i in page]


def test_create_within_quota_counts_and_stops_at_the_quota(adapters: AdapterSet) -> None:
    tasks, tenants = adapters.tasks, adapters.tenants

    # Given a tenant with two tasks, its quota
    tasks.create_within_quota(a_task("one", tenant_id="acme"), HERE, 2, "first-secret")
    tasks.create_within_quota(a_task("two", tenant_id="acme"), HERE, 2, "second-secret")
    assert tenants.task_count("acme") == 2
    # Its first task gave it its signing secret; later ones keep it
    assert tenants.signing_secrets("acme") == ["first-secret"]

    # When it registers a third, it is refused and nothing is stored
    with pytest.raises(LimitExceeded):
        tasks.create_within_quota(a_task("three", tenant_id="acme"), HERE, 2, "x")
    assert tasks.get("three") is None
    assert tenants.task_count("acme") == 2

    # Another tenant has its own quota
    tasks.create_within_quota(a_task("theirs", tenant_id="other"), HERE, 2, "theirs")
    assert tenants.task_count("other") == 1

    # Once one is deleted, there is room again
    assert tasks.delete_owned("acme", "one")
    assert tenants.task_count("acme") == 1
    tasks.create_within_quota(a_task("three", tenant_id="acme"), HERE, 2, "x")
    assert tenants.task_count("acme") == 2


def test_create_many_fills_the_quota_in_order_and_answers_each(adapters: AdapterSet) -> None:
    tasks, tenants = adapters.tasks, adapters.tenants
    create(tasks, a_task("taken", tenant_id="acme"))

    # Given a tenant with one task and a quota of 4, a batch of 5, one with a taken id
    batch = [a_task(f"new-{n}", tenant_id="acme") for n in range(5)]
    batch[1] = a_task("taken", tenant_id="acme")
    outcomes = tasks.create_many_within_quota([(t, HERE) for t in batch], 4, "batch-secret")

    # Then the taken id is refused, and the rest fill the quota in order
    assert [outcomes[n] for n in (0, 2, 3)] == [None, None, None]
    assert isinstance(outcomes[1], InvalidRequest)
    assert not isinstance(outcomes[1], LimitExceeded)
    assert isinstance(outcomes[4], LimitExceeded)
    assert tenants.task_count("acme") == 4
    assert [tasks.get(f"new-{n}") is not None for n in range(5)] == [True, False, True, True, False]
    assert tasks.get("taken") is not None


def test_create_many_stores_a_whole_batch_counted_once_each(adapters: AdapterSet) -> None:
    tasks, tenants = adapters.tasks, adapters.tenants
    batch = [a_task(f"many-{n:03d}", tenant_id="bulk") for n in range(120)]

    outcomes = tasks.create_many_within_quota([(t, HERE) for t in batch], 120, "bulk-secret")

    assert outcomes == [None] * 120
    assert tenants.task_count("bulk") == 120
    assert tenants.signing_secrets("bulk") == ["bulk-secret"]
    assert len(due_ids(tasks)) == 120
    # And the tenant is full: one more is refused
    late = tasks.create_many_within_quota([(a_task("late", tenant_id="bulk"), HERE)], 120, "x")
    assert isinstance(late[0], LimitExceeded)


def test_create_many_marks_the_keys_of_the_tasks_it_stores(adapters: AdapterSet) -> None:
    tasks, keys = adapters.tasks, adapters.create_keys
    create(tasks, a_task("taken", tenant_id="acme"))
    # Given a key reserved for each task of a batch but one (a key expired and taken
    # by another request since holds "key-2" for another task)
    names = ["new-0", "taken", "new-2", "new-3", "new-4"]
    for number, name in enumerate(names):
        key = CreateKey.of(f"key-{number}", {"name": name})
        holder = "another-task" if number == 2 else name
        assert reserve_key(keys, "acme", key, holder, START).task_id == holder
    batch = [a_task(name, tenant_id="acme") for name in names]
    # When the batch is stored with its keys, one id taken and the last over the quota
    outcomes = tasks.create_many_within_quota(
        [(t, HERE) for t in batch], 4, "secret", keys=[f"key-{n}" for n in range(5)]
    )
    # Then the tasks are answered as without keys
    assert [outcome is None for outcome in outcomes] == [True, False, True, True, False]
    # And the key of each task stored is marked created, the others as they were
    held = [
        reserve_key(keys, "acme", CreateKey.of(f"key-{n}", {}), "probe", START) for n in range(5)
    ]
    assert [reservation.task_id for reservation in held] == [
        "new-0",
        "taken",
        "another-task",
        "new-3",
        "new-4",
    ]
    assert [reservation.created for reservation in held] == [True, False, False, True, False]


def test_create_refuses_a_taken_id(adapters: AdapterSet) -> None:
    tasks = adapters.tasks
    original = create(tasks, a_task("taken", tenant_id="acme"))

    with pytest.raises(InvalidRequest) as refused:
        create(tasks, a_task("taken", tenant_id="other"))

    assert not isinstance(refused.value, LimitExceeded)
    assert tasks.get("taken") == original
    assert adapters.tenants.task_count("other") == 0
    assert adapters.tenants.task_count("acme") == 1


def test_a_task_is_read_back_as_stored(adapters: AdapterSet) -> None:
    tasks = adapters.tasks
    stored = create(tasks, a_task("job", tenant_id="acme", jitter_seconds=5))

    assert tasks.get("job") == stored
    assert tasks.get_owned("acme", "job") == stored
    assert tasks.get("missing") is None
    # get_many and read_many leave out what is missing
    other = create(tasks, a_task("other-job"))
    assert sorted(t.task_id for t in tasks.get_many(["job", "missing", "other-job"])) == [
        "job",
        "other-job",
    ]
    readable, unreadable = tasks.read_many(["other-job", "missing"])
    assert readable == [other]
    assert unreadable == []
    # A recurring schedule and a payload with a fraction and non-ASCII text come back whole
    every_minute = a_task("every-minute", schedule=RateSchedule(every_seconds=60, anchor=START))
    rate = create(tasks, dataclasses.replace(every_minute, payload={"n": 1.5, "text": "é"}))
    assert tasks.get("every-minute") == rate


def test_get_owned_and_delete_owned_see_only_the_tenants_own(adapters: AdapterSet) -> None:
    tasks = adapters.tasks
    create(tasks, a_task("job", tenant_id="acme"))

    # To another tenant, the task is exactly a missing one
    assert tasks.get_owned("other", "job") is None
    assert not tasks.delete_owned("other", "job")
    assert tasks.get("job") is not None
    assert tasks.page_owned("other", 10, None).items == []

    # Its owner deletes it, once
    assert tasks.delete_owned("acme", "job")
    assert tasks.get("job") is None
    assert tasks.get_owned("acme", "job") is None
    assert not tasks.delete_owned("acme", "job")
    assert adapters.tenants.task_count("acme") == 0


def test_page_owned_pages_a_tenants_tasks_oldest_first(adapters: AdapterSet) -> None:
    tasks = adapters.tasks
    # Given five tasks of one tenant, registered a minute apart (not in id order), and
    # two of another
    order = ["e", "b", "d", "a", "c"]
    for n, task_id in enumerate(order):
        create(tasks, a_task(task_id, tenant_id="acme", created_at=START + n * MINUTE))
    for task_id in ("x", "y"):
        create(tasks, a_task(task_id, tenant_id="other"))

    # When its tasks are listed two at a time
    listed: list[str] = []
    token: str | None = None
    pages = 0
    while True:
        page = tasks.page_owned("acme", 2, token)
        assert len(page.items) <= 2
        assert all(t.tenant_id == "acme" for t in page.items)
        listed += [t.task_id for t in page.items]
        pages += 1
        token = page.next_token
        if token is None:
            break

    # Then each comes once, oldest first
    assert listed == order
    assert pages >= 3
    # and a token of its listing is refused to another tenant
    first_token = tasks.page_owned("acme", 2, None).next_token
    assert first_token is not None
    with pytest.raises(InvalidRequest):
        tasks.page_owned("other", 2, first_token)
    # and a token no listing gave is refused
    for bad in ("not-a-token", "eyJ9"):
        with pytest.raises(InvalidRequest):
            tasks.page_owned("acme", 2, bad)


def every_tagged(
    tasks: TaskStore, tenant_id: str, tags: tuple[TagFilter, ...], limit: int = 2
) -> list[str]:
    """The ids of every page of a filtered listing, following its tokens."""
    listed: list[str] = []
    token: str | None = None
    while True:
        page = tasks.page_owned(tenant_id, limit, token, tags)
        assert len(page.items) <= limit
        assert all(t.tenant_id == tenant_id for t in page.items)
        listed += [t.task_id for t in page.items]
        token = page.next_token
        if token is None:
            return listed


def test_tags_are_stored_replaced_whole_and_kept_by_a_claim(adapters: AdapterSet) -> None:
    tasks = adapters.tasks
    tags = {"env": "prod", "k8s.io/app-name_v2": "", "note": "größe: 10 €"}
    task = create(tasks, a_task("job", tenant_id="acme", tags=tags))
    assert tasks.get_owned("acme", "job") == task
    assert tasks.page_owned("acme", 10, None).items == [task]

    # A replace stores the new map whole: a key left out is gone
    retagged = dataclasses.replace(task, tags={"env": "dev"}, version=2)
    assert task_changes.replace(tasks, retagged, HERE, expected_version=1)
    assert tasks.get("job") == retagged

    # A claim (the tick's write) leaves them as they are
    claim = claim_occurrence(retagged, START + timedelta(seconds=1))
    assert claim is not None
    assert task_changes.claim(tasks, claim, None, START + timedelta(seconds=1))
    claimed = tasks.get("job")
    assert claimed is not None
    assert claimed.version == 3
    assert claimed.tags == {"env": "dev"}

    # An empty map clears them
    cleared = dataclasses.replace(claimed, tags={}, version=4)
    assert task_changes.replace(tasks, cleared, None, expected_version=3)
    assert tasks.get("job") == cleared
    assert every_tagged(tasks, "acme", (TagFilter("env"),)) == []


def test_page_owned_keeps_the_tasks_matching_every_tag_filter(adapters: AdapterSet) -> None:
    tasks = adapters.tasks
    # Given a tenant's tasks, registered a minute apart, with tags that differ a little
    tagged = {
        "a": {"env": "prod", "team": "billing"},
        "b": {"env": "prod"},
        "c": {"env": "Prod", "team": "billing"},
        "d": {"env": "prod", "team": "search"},
        "e": {},
        "f": {"env": "prod", "team": "billing", "empty": ""},
        "g": {"env": "prod ", "team": "billing"},
        "h": {"url": "http://x:80/y", "quote": "' OR 1=1 --", "k8s.io/app": "web"},
    }
    for n, (task_id, tags) in enumerate(tagged.items()):
        create(tasks, a_task(task_id, tenant_id="acme", created_at=START + n * MINUTE, tags=tags))
    # and another tenant's tasks with the very same tags
    for task_id, tags in tagged.items():
        create(tasks, a_task(f"other-{task_id}", tenant_id="other", tags=tags))

    def listed(*filters: str) -> list[str]:
        return every_tagged(tasks, "acme", tuple(parse_tag_filter(f) for f in filters))

    # Then key:value compares whole values (case and spaces count), oldest first
    assert listed("env:prod") == ["a", "b", "d", "f"]
    # several filters must all match
    assert listed("env:prod", "team:billing") == ["a", "f"]
    # a key alone keeps the tasks that have it, whatever its value (even empty)
    assert listed("team") == ["a", "c", "d", "f", "g"]
    assert listed("empty") == ["f"]
    assert listed("empty:") == ["f"]
    # values are never interpreted: colons, quotes, SQL and paths are plain text
    assert listed("url:http://x:80/y") == ["h"]
    assert listed("quote:' OR 1=1 --") == ["h"]
    assert listed("k8s.io/app:web") == ["h"]
    assert listed("quote:'") == []
    # no task matches: an empty listing, not an error
    assert listed("env:prod", "team:nobody") == []
    assert listed("missing") == []
    # the store filters before it pages: three matches fill a page of three,
    # whatever lies between them
    first = tasks.page_owned("acme", 3, None, (parse_tag_filter("env:prod"),))
    assert [t.task_id for t in first.items] == ["a", "b", "d"]
    assert first.items[0].tags == tagged["a"]
    # page by page (one at a time), the same tasks, each once
    assert every_tagged(tasks, "acme", (parse_tag_filter("env:prod"),), limit=1) == [
        "a",
        "b",
        "d",
        "f",
    ]
    # and the other tenant sees its own, never acme's
    assert every_tagged(tasks, "other", (parse_tag_filter("env:prod"),)) == [
        "other-a",
        "other-b",
        "other-d",
        "other-f",
    ]


def test_a_filtered_listings_token_is_refused_to_another_tenant(adapters: AdapterSet) -> None:
    tasks = adapters.tasks
    for n in range(3):
        create(
            tasks, a_task(f"t{n}", tenant_id="acme", created_at=START + n * MINUTE, tags={"x": "1"})
        )
    create(tasks, a_task("theirs", tenant_id="other", tags={"x": "1"}))
    filters = (TagFilter("x", "1"),)
    token = tasks.page_owned("acme", 1, None, filters).next_token
    assert token is not None
    with pytest.raises(InvalidRequest):
        tasks.page_owned("other", 1, token, filters)


def test_replace_only_from_the_expected_version(adapters: AdapterSet) -> None:
    tasks = adapters.tasks
    task = create(tasks, a_task("job"))
    upstream = create(tasks, a_task("upstream"))

    # A change from the version read is stored, with its new version
    renamed = dataclasses.replace(task, name="renamed", version=2)
    assert task_changes.replace(tasks, renamed, HERE, expected_version=1)
    assert tasks.get("job") == renamed

    # A second change from the same (now stale) version is refused
    assert not task_changes.replace(
        tasks, dataclasses.replace(task, name="lost", version=2), HERE, 1
    )
    assert tasks.get("job") == renamed

    # With ``unchanged``, the other tasks must still be at their versions too
    paused = dataclasses.replace(renamed, status=TaskStatus.PAUSED, version=3)
    assert task_changes.replace(tasks, paused, None, expected_version=2, unchanged={"upstream": 1})
    assert tasks.get("job") == paused
    # A paused task has left the due index
    assert due_ids(tasks) == ["upstream"]
    assert not task_changes.replace(
        tasks,
        dataclasses.replace(paused, name="stale check", version=4),
        None,
        expected_version=3,
        unchanged={"upstream": 2},
    )
    # and a task named in ``unchanged`` that does not exist refuses the change too
    assert not task_changes.replace(
        tasks,
        dataclasses.replace(paused, name="checked against nothing", version=4),
        None,
        expected_version=3,
        unchanged={"missing": 1},
    )
    assert tasks.get("job") == paused
    assert tasks.get("upstream") == upstream


def test_claim_advances_a_task_once(adapters: AdapterSet) -> None:
    tasks = adapters.tasks
    create(tasks, a_task("job"))
    now = START + timedelta(seconds=1)
    stored = tasks.get("job")
    assert stored is not None
    claim = claim_occurrence(stored, now)
    assert claim is not None

    # When the tick claims the due occurrence of a one-time task
    assert task_changes.claim(tasks, claim, SHARDING.place("job", claim.next_run_at, now), now)

    # Then the task moved past it and left the due index; the same claim again fails
    claimed = tasks.get("job")
    assert claimed is not None
    assert claimed.status is TaskStatus.COMPLETED
    assert claimed.version == 2
    assert claimed.last_scheduled_at == START
    assert claimed.next_run_at is None
    assert due_ids(tasks) == []
    assert not task_changes.claim(tasks, claim, None, now)


def test_claim_moves_a_recurring_task_on_and_refuses_a_stale_version(
    adapters: AdapterSet,
) -> None:
    tasks = adapters.tasks
    # Given a recurring task: only its version (not its status) tells a stale claim apart
    task = create(tasks, a_task("every-minute", schedule=RateSchedule(60, anchor=START)))
    now = START + timedelta(seconds=1)
    claim = claim_occurrence(task, now)
    assert claim is not None
    assert claim.next_run_at == START + MINUTE
    placement = SHARDING.place(task.task_id, claim.next_run_at, now)
    assert placement is not None

    # When it is claimed twice from the same read, the second is refused
    assert task_changes.claim(tasks, claim, placement, now)
    assert not task_changes.claim(tasks, claim, placement, now)

    # Then it is due again at its next occurrence, in that occurrence's bucket
    stored = tasks.get("every-minute")
    assert stored is not None
    assert (stored.status, stored.version, stored.next_run_at, stored.last_scheduled_at) == (
        TaskStatus.ACTIVE,
        2,
        START + MINUTE,
        START,
    )
    assert tasks.due_task_ids(placement.key, START + MINUTE, 10, None)[0] == ["every-minute"]


def test_due_task_ids_in_order_with_limit_and_start_key(adapters: AdapterSet) -> None:
    tasks = adapters.tasks
    # Given six tasks of one bucket and shard, due a minute apart, registered out of order
    for n in (3, 0, 5, 1, 4, 2):
        create(tasks, a_task(f"due-{n}", due=START + n * MINUTE))
    # one due after ``now``, and one in another shard
    create(tasks, a_task("not-yet", due=START + 30 * MINUTE))
    create(tasks, a_task("elsewhere"), DuePlacement(bucket=HERE.bucket, shard=1))
    now = START + 10 * MINUTE

    # When the due ids are read four at a time
    pages = all_due(tasks, HERE.key, now, 4)

    # Then those due by now come once each, oldest first, at most four per page
    assert [i for page in pages for i in page] == [f"due-{n}" for n in range(6)]
    assert pages[0] == [f"due-{n}" for n in range(4)]
    assert all(len(page) <= 4 for page in pages)
    # ``due_from`` keeps only those due from then on
    late, _ = tasks.due_task_ids(HERE.key, now, 10, None, due_from=START + 3 * MINUTE)
    assert late == ["due-3", "due-4", "due-5"]
    elsewhere, _ = tasks.due_task_ids(DuePlacement(bucket=HERE.bucket, shard=1).key, now, 10, None)
    assert elsewhere == ["elsewhere"]


def test_dependents_and_the_mark_on_their_upstream(adapters: AdapterSet) -> None:
    tasks = adapters.tasks
    create(tasks, a_task("upstream", tenant_id="acme"))
    create(tasks, a_follower("second", "upstream", tenant_id="acme"), None)
    create(tasks, a_follower("first", "upstream", tenant_id="acme"), None)
    create(tasks, a_follower("unrelated", "someone-else", tenant_id="acme"), None)

    assert sorted(tasks.dependents("upstream")) == ["first", "second"]
    assert tasks.dependents("first") == []

    # Only its tenant marks it; the mark is a new version
    assert not task_changes.mark_has_dependents(tasks, "other", "upstream")
    assert not task_changes.mark_has_dependents(tasks, "acme", "missing")
    assert task_changes.mark_has_dependents(tasks, "acme", "upstream")
    marked = tasks.get("upstream")
    assert marked is not None
    assert marked.has_dependents
    assert marked.version == 2


def test_set_aside_a_task_at_the_version_read(adapters: AdapterSet) -> None:
    tasks = adapters.tasks
    task = create(tasks, a_task("job"))
    create(tasks, a_task("neighbour"))
    now = START + MINUTE

    # When the tick sets aside a task it read, with a long reason
    assert task_changes.set_aside(tasks, task, "x" * (REASON_LIMIT + 100), now)

    # Then it is ERROR, with the reason cut short, and out of the due index
    aside = tasks.get("job")
    assert aside is not None
    assert aside.status is TaskStatus.ERROR
    assert aside.status_reason == "x" * REASON_LIMIT
    assert aside.version > task.version
    assert aside.updated_at == now
    assert due_ids(tasks) == ["neighbour"]
    # A second set-aside from the stale read is refused
    assert not task_changes.set_aside(tasks, task, "again", now)


def test_set_aside_by_id_frees_the_slot_only_of_its_holder(adapters: AdapterSet) -> None:
    tasks = adapters.tasks
    create(tasks, a_task("holds", running_execution="holds_20261130T120000000Z"))
    create(tasks, a_task("kept", running_execution="kept_20261130T120000000Z"))

    # Freeing the slot the execution holds
    assert task_changes.set_aside_by_id(
        tasks, "holds", "its end raised", START, release_slot_of="holds_20261130T120000000Z"
    )
    freed = tasks.get("holds")
    assert freed is not None
    assert (freed.status, freed.running_execution) == (TaskStatus.ERROR, None)

    # Another execution's slot is left as it is, the task set aside all the same
    assert task_changes.set_aside_by_id(
        tasks, "kept", "its end raised", START, release_slot_of="other_20261130T120000000Z"
    )
    kept = tasks.get("kept")
    assert kept is not None
    assert kept.status is TaskStatus.ERROR
    assert kept.running_execution == "kept_20261130T120000000Z"
    assert not task_changes.set_aside_by_id(tasks, "missing", "nothing there", START)
