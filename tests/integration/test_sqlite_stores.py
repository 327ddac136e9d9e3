"""The SQLite stores on a real file: every change states what it expects, as the
DynamoDB adapters' conditions do, across threads and across ``Database`` objects
(two processes' worth of connections) on one file."""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import random
import signal
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from dynacron.adapters.sqlite import sqlite_stores
from dynacron.adapters.sqlite.coordination import (
    SqliteCursorStore,
    SqliteLimitStore,
    SqliteShardLeases,
    SqliteTenantStore,
)
from dynacron.adapters.sqlite.database import Database
from dynacron.adapters.sqlite.executions import SqliteExecutionStore
from dynacron.adapters.sqlite.tasks import SqliteTaskStore
from dynacron.domain.coordination.limits import BreakerState, HostState, RateLimit
from dynacron.domain.coordination.uptime import Outage, ShardHistory
from dynacron.domain.errors import InvalidRequest, LimitExceeded
from dynacron.domain.executions import transitions
from dynacron.domain.executions.attention import AttentionQuery
from dynacron.domain.executions.execution import (
    Dispatch,
    ExecutionStatus,
)
from dynacron.domain.executions.retry import RetryPolicy
from dynacron.domain.schedules.expressions import AfterSchedule, OneTimeSchedule, RateSchedule
from dynacron.domain.tasks.claiming import claim_occurrence
from dynacron.domain.tasks.tags import parse_tag_filter
from dynacron.domain.tasks.task import (
    DuePlacement,
    Sharding,
    Task,
    TaskStatus,
    execution_id_for,
    shard_for,
)
from dynacron.ports import UnreadableTask, UnreadableTaskError
from dynacron.services import attempts

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
SHARDING = Sharding(shard_count=4, bucket_seconds=60)


@pytest.fixture
def database(tmp_path: Path) -> Iterator[Database]:
    database = Database(tmp_path / "dynacron.sqlite3")
    yield database
    database.close()


@pytest.fixture
def tasks(database: Database) -> SqliteTaskStore:
    return SqliteTaskStore(database)


def a_task(
    task_id: str,
    *,
    tenant: str = "tenant-a",
    next_run_at: datetime | None = NOW,
    created_at: datetime = NOW,
    every_seconds: int | None = None,
    after: str | None = None,
) -> Task:
    if after is not None:
        schedule: OneTimeSchedule | RateSchedule | AfterSchedule = AfterSchedule(after)
    elif every_seconds is not None:
        schedule = RateSchedule(every_seconds=every_seconds, anchor=NOW)
    else:
        schedule = OneTimeSchedule(at=NOW)
    return Task(
        task_id=task_id,
        name=f"task {task_id}",
        schedule=schedule,
        handler_url="http://127.0.0.1:9/",
        payload={"n": 1.5, "text": "é"},
        status=TaskStatus.ACTIVE,
        next_run_at=next_run_at,
        created_at=created_at,
        updated_at=created_at,
        tenant_id=tenant,
    )


def place(task: Task) -> DuePlacement | None:
    return SHARDING.place_task(task, NOW)


def create(store: SqliteTaskStore, task: Task, max_tasks: int = 100) -> Task:
    store.create_within_quota(task, place(task), max_tasks, f"secret-{task.task_id}")
    return task


# Tasks ---------------------------------------------------------------------------


def test_a_created_task_reads_back_whole(tasks: SqliteTaskStore) -> None:
    task = create(tasks, a_task("t1", every_seconds=60))

    assert tasks.get("t1") == task
    assert tasks.get_owned("tenant-a", "t1") == task
    assert tasks.get("missing") is None


def test_quota_counts_a_tenants_tasks_and_refuses_beyond_it(
    tasks: SqliteTaskStore, database: Database
) -> None:
    tenants = SqliteTenantStore(database)
    create(tasks, a_task("t1"), max_tasks=2)
    create(tasks, a_task("t2"), max_tasks=2)

    with pytest.raises(LimitExceeded):
        create(tasks, a_task("t3"), max_tasks=2)

    assert tasks.get("t3") is None
    assert tenants.task_count("tenant-a") == 2
    # The first task's secret is the tenant's; later ones do not replace it.
    assert tenants.signing_secrets("tenant-a") == ["secret-t1"]
    # Another tenant has a quota of its own.
    create(tasks, a_task("t4", tenant="tenant-b"), max_tasks=2)
    assert tenants.task_count("tenant-b") == 1


def test_a_duplicate_id_is_refused_and_not_counted(
    tasks: SqliteTaskStore, database: Database
) -> None:
    create(tasks, a_task("t1"))

    with pytest.raises(InvalidRequest):
        create(tasks, a_task("t1", tenant="tenant-a"))

    assert SqliteTenantStore(database).task_count("tenant-a") == 1


def test_delete_owned_releases_quota_only_for_the_owner(
    tasks: SqliteTaskStore, database: Database
) -> None:
    create(tasks, a_task("t1"))

    assert tasks.delete_owned("tenant-b", "t1") is False
    assert tasks.get("t1") is not None
    assert tasks.delete_owned("tenant-a", "t1") is True
    assert tasks.get("t1") is None
    assert tasks.delete_owned("tenant-a", "t1") is False
    assert SqliteTenantStore(database).task_count("tenant-a") == 0


def test_pages_of_a_tenants_tasks_with_tokens_bound_to_the_tenant(
    tasks: SqliteTaskStore,
) -> None:
    for i in range(7):
        create(tasks, a_task(f"a{i}", created_at=NOW + timedelta(seconds=i)))
    create(tasks, a_task("b0", tenant="tenant-b"))

    seen: list[str] = []
    tokens: list[str] = []
    token: str | None = None
    pages = 0
    while True:
        page = tasks.page_owned("tenant-a", 3, token)
        seen += [t.task_id for t in page.items]
        pages += 1
        token = page.next_token
        if token is None:
            break
        tokens.append(token)

    assert seen == [f"a{i}" for i in range(7)]
    assert pages == 3
    assert [t.task_id for t in tasks.page_owned("tenant-b", 10, None).items] == ["b0"]
    assert tasks.get_owned("tenant-b", "a0") is None
    # Another tenant's listing does not accept this tenant's token
    with pytest.raises(InvalidRequest):
        tasks.page_owned("tenant-b", 3, tokens[0])
    for bad in ("not-a-token", "eyJ9"):
        with pytest.raises(InvalidRequest):
            tasks.page_owned("tenant-a", 3, bad)


def test_due_ids_of_one_bucket_in_order_with_limit_and_start_key(
    tasks: SqliteTaskStore,
) -> None:
    # Given tasks of one shard due at different times, and one not due yet
    ids = [f"d{i}" for i in range(40)]
    shard_ids = [i for i in ids if shard_for(i, SHARDING.shard_count) == 0][:6]
    assert len(shard_ids) >= 4
    for offset, task_id in enumerate(reversed(shard_ids)):
        create(tasks, a_task(task_id, next_run_at=NOW - timedelta(seconds=offset)))
    bucket = DuePlacement(SHARDING.bucket(NOW), 0).key

    # When the bucket is read two at a time
    found: list[str] = []
    start_key = None
    while True:
        page, start_key = tasks.due_task_ids(bucket, NOW, 2, start_key)
        assert len(page) <= 2
        found += page
        if start_key is None:
            break

    # Then every due task comes once, oldest first
    assert found == list(shard_ids)
    # Not due yet, or due before due_from: left out
    assert (
        tasks.due_task_ids(bucket, NOW - timedelta(seconds=2), 10, None)[0] == list(shard_ids)[:-2]
    )
    later = tasks.due_task_ids(bucket, NOW, 10, None, due_from=NOW - timedelta(seconds=1))
    assert later == (list(shard_ids)[-2:], None)


def test_claim_race_eight_threads_claim_each_due_task_exactly_once(tmp_path: Path) -> None:
    # Given 1,000 recurring tasks due now in one bucket (NORMAL sync: a quicker test);
    # recurring, so only the version (not the status) tells a stale claim apart
    database = Database(tmp_path / "race.sqlite3", durability="normal")
    store = SqliteTaskStore(database)
    sharding = Sharding(shard_count=1, bucket_seconds=60)
    for i in range(1000):
        task = a_task(f"race{i:04d}", every_seconds=60)
        store.create_within_quota(task, sharding.place_task(task, NOW), 1000, "secret")
    bucket = DuePlacement(sharding.bucket(NOW), 0).key
    claimed = [0] * 8
    barrier = threading.Barrier(8)

    # When eight claimers walk the bucket as the tick does, each in its own order
    def claimer(index: int) -> None:
        rng = random.Random(index)
        barrier.wait()
        start_key = None
        while True:
            ids, start_key = store.due_task_ids(bucket, NOW, 100, start_key)
            candidates = store.get_many(ids)
            rng.shuffle(candidates)
            for task in candidates:
                claim = claim_occurrence(task, NOW)
                if claim is None:
                    continue
                placement = sharding.place(task.task_id, claim.next_run_at, NOW)
                if store.claim(claim, placement, NOW):
                    claimed[index] += 1
            if start_key is None:
                return

    threads = [threading.Thread(target=claimer, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)

    # Then exactly 1,000 claims won, and nothing is due any more
    assert sum(claimed) == 1000
    assert store.due_task_ids(bucket, NOW, 10, None) == ([], None)
    done = store.get("race0999")
    assert done is not None
    assert done.version == 2
    assert done.next_run_at == NOW + timedelta(seconds=60)
    database.close()


def test_claim_moves_a_recurring_task_on_and_refuses_a_stale_version(
    tasks: SqliteTaskStore,
) -> None:
    task = create(tasks, a_task("r1", every_seconds=60))
    claim = claim_occurrence(task, NOW)
    assert claim is not None
    assert claim.next_run_at == NOW + timedelta(seconds=60)
    placement = SHARDING.place(task.task_id, claim.next_run_at, NOW)

    assert tasks.claim(claim, placement, NOW) is True
    assert tasks.claim(claim, placement, NOW) is False

    stored = tasks.get("r1")
    assert stored is not None
    assert (stored.version, stored.next_run_at, stored.last_scheduled_at) == (
        2,
        NOW + timedelta(seconds=60),
        NOW,
    )
    assert placement is not None
    assert tasks.due_task_ids(placement.key, NOW + timedelta(seconds=60), 10, None)[0] == ["r1"]


def test_replace_needs_the_expected_version_and_every_unchanged_one(
    tasks: SqliteTaskStore,
) -> None:
    task = create(tasks, a_task("t1", every_seconds=60))
    upstream = create(tasks, a_task("u1", every_seconds=60))
    paused = Task(**{**task.__dict__, "status": TaskStatus.PAUSED, "version": 2})

    # A stale expectation of the task, or of a task it depends on, changes nothing
    assert tasks.replace(paused, None, expected_version=5) is False
    assert tasks.replace(paused, None, 1, unchanged={"u1": 7}) is False
    assert tasks.replace(paused, None, 1, unchanged={"missing": 1}) is False
    assert tasks.get("t1") == task

    assert tasks.replace(paused, None, 1, unchanged={"u1": upstream.version}) is True
    assert tasks.get("t1") == paused
    # Paused: out of the due index
    bucket = place(task)
    assert bucket is not None
    assert "t1" not in tasks.due_task_ids(bucket.key, NOW, 10, None)[0]


def test_dependents_and_mark_has_dependents(tasks: SqliteTaskStore) -> None:
    create(tasks, a_task("up", every_seconds=60))
    create(tasks, a_task("down2", after="up", next_run_at=None))
    create(tasks, a_task("down1", after="up", next_run_at=None))
    create(tasks, a_task("other", after="elsewhere", next_run_at=None))

    assert tasks.dependents("up") == ["down1", "down2"]
    assert tasks.dependents("down1") == []
    assert tasks.mark_has_dependents("tenant-b", "up") is False
    assert tasks.mark_has_dependents("tenant-a", "up") is True
    marked = tasks.get("up")
    assert marked is not None
    assert marked.has_dependents
    assert marked.version == 2


def test_an_unreadable_task_is_told_apart_shown_and_set_aside(
    tasks: SqliteTaskStore, database: Database
) -> None:
    create(tasks, a_task("good"))
    placement = place(a_task("bad"))
    assert placement is not None
    # Given a row written around the API: a schedule of no known kind
    broken = {"task_id": "bad", "name": "broken", "schedule": {"kind": "lunar"}, "version": 3}
    with database.write() as connection:
        connection.execute(
            "INSERT INTO tasks (task_id, tenant_id, created_at, version, due_bucket, next_run_at,"
            " record) VALUES ('bad', 'tenant-a', ?, 3, ?, ?, ?)",
            (
                "2026-11-30T12:00:00.000Z",
                placement.key,
                "2026-11-30T12:00:00.000Z",
                json.dumps(broken),
            ),
        )

    good, unreadable = tasks.read_many(["good", "bad", "missing"])
    assert [t.task_id for t in good] == ["good"]
    assert len(unreadable) == 1
    assert unreadable[0].task_id == "bad"
    assert unreadable[0].seen_version == 3
    with pytest.raises(UnreadableTaskError):
        tasks.get_many(["good", "bad"])
    shown = tasks.get_owned("tenant-a", "bad")
    assert shown is not None
    assert shown.status is TaskStatus.ERROR
    assert shown.name == "broken"

    # A stale version read sets nothing aside; the one read does
    stale = UnreadableTask("bad", "x", seen_version=2)
    assert tasks.set_aside(stale, "nope", NOW) is False
    assert tasks.set_aside(unreadable[0], "cannot read it", NOW) is True
    assert tasks.due_task_ids(placement.key, NOW, 10, None)[0] == []
    shown = tasks.get_owned("tenant-a", "bad")
    assert shown is not None
    assert shown.status_reason == "cannot read it"
    assert shown.version == 4


def test_a_row_that_is_not_even_json_is_set_aside_by_id(
    tasks: SqliteTaskStore, database: Database
) -> None:
    with database.write() as connection:
        connection.execute(
            "INSERT INTO tasks (task_id, tenant_id, created_at, due_bucket, next_run_at, record)"
            " VALUES ('junk', 'tenant-a', '2026-11-30T12:00:00.000Z', 'b#0', ?, 'not json')",
            ("2026-11-30T12:00:00.000Z",),
        )

    _, unreadable = tasks.read_many(["junk"])
    assert [u.seen_version for u in unreadable] == [None]
    assert tasks.due_task_ids("b#0", NOW, 10, None)[0] == ["junk"]
    assert tasks.set_aside_by_id("junk", "not a task", NOW) is True

    assert tasks.due_task_ids("b#0", NOW, 10, None)[0] == []
    shown = tasks.get_owned("tenant-a", "junk")
    assert shown is not None
    assert (shown.status, shown.status_reason, shown.version) == (
        TaskStatus.ERROR,
        "not a task",
        1,
    )
    # Set aside at version 1 now: a second try from the old reading is refused
    assert tasks.set_aside(unreadable[0], "again", NOW) is False


def test_a_tag_filter_passes_over_rows_that_are_not_json_or_hold_odd_tags(
    tasks: SqliteTaskStore, database: Database
) -> None:
    # Given a tagged task, and rows written around the API: one not JSON at all, one
    # whose tags are not a map of strings (a number where the text should be)
    tagged = dataclasses.replace(a_task("tagged"), tags={"env": "1"})
    create(tasks, tagged)
    with database.write() as connection:
        for task_id, record in (
            ("junk", "not json"),
            ("odd", json.dumps({"tags": {"env": 1}})),
            ("listy", json.dumps({"tags": ["env", "1"]})),
        ):
            connection.execute(
                "INSERT INTO tasks (task_id, tenant_id, created_at, record)"
                " VALUES (?, 'tenant-a', '2026-11-30T12:00:00.000Z', ?)",
                (task_id, record),
            )

    # When the tenant lists by tag, Then the listing answers with the tagged task only
    for text in ("env:1", "env"):
        page = tasks.page_owned("tenant-a", 10, None, (parse_tag_filter(text),))
        assert [t.task_id for t in page.items] == ["tagged"]
    # and the unfiltered listing still shows every row (the unreadable as ERROR)
    assert len(tasks.page_owned("tenant-a", 10, None).items) == 4


def test_set_aside_by_id_frees_the_slot_only_of_its_holder(tasks: SqliteTaskStore) -> None:
    task = create(tasks, a_task("t1", every_seconds=60))
    holding = Task(**{**task.__dict__, "running_execution": "t1_x", "version": 2})
    assert tasks.replace(holding, place(holding), 1)

    assert tasks.set_aside_by_id("t1", "boom", NOW, release_slot_of="t1_other") is True
    kept = tasks.get("t1")
    assert kept is not None
    assert kept.status is TaskStatus.ERROR
    assert kept.running_execution == "t1_x"
    assert kept.version == 3

    assert tasks.set_aside_by_id("t1", "boom", NOW, release_slot_of="t1_x") is True
    freed = tasks.get("t1")
    assert freed is not None
    assert freed.running_execution is None
    assert tasks.set_aside_by_id("missing", "boom", NOW) is False


# Coordination ----------------------------------------------------------------------


def test_tenant_secrets_ensure_and_rotate(database: Database) -> None:
    tenants = SqliteTenantStore(database)
    assert tenants.signing_secrets("t") == []
    assert tenants.task_count("t") == 0

    assert tenants.ensure_secret("t", "s1") == ["s1"]
    assert tenants.ensure_secret("t", "s2") == ["s1"]
    assert tenants.rotate_secret("t", "s3") == ["s3", "s1"]
    assert tenants.rotate_secret("t", "s4") == ["s4", "s3"]
    assert tenants.signing_secrets("t") == ["s4", "s3"]
    # A tenant with no secret gets the fresh one as its first
    assert tenants.rotate_secret("u", "u1") == ["u1"]


def test_cursors_advance_forward_only_and_record_tick_once(database: Database) -> None:
    cursors = SqliteCursorStore(database)
    assert cursors.get(0) is None
    assert cursors.advance(0, NOW) is True
    assert cursors.advance(0, NOW - timedelta(minutes=1)) is False
    assert cursors.advance(0, NOW) is False
    assert cursors.advance(0, NOW + timedelta(minutes=1)) is True
    assert cursors.get(0) == NOW + timedelta(minutes=1)
    assert cursors.get(1) is None

    empty = cursors.read(0).history
    first = ShardHistory(ticking_since=NOW, last_tick=NOW, outages=())
    assert cursors.record_tick(0, first, empty) is True
    # A second tick that read the same (empty) history lost
    assert cursors.record_tick(0, first, empty) is False
    outage = Outage(last_tick=NOW, next_tick=NOW + timedelta(minutes=5))
    second = ShardHistory(
        ticking_since=NOW + timedelta(minutes=5),
        last_tick=NOW + timedelta(minutes=5),
        outages=(outage,),
    )
    assert cursors.record_tick(0, second, first) is True
    read = cursors.read(0, timedelta(seconds=30))
    assert read.bucket == NOW + timedelta(minutes=1)
    assert read.history.outages == (outage,)
    assert read.history.last_tick == NOW + timedelta(minutes=5)
    assert read.history.heartbeat == timedelta(seconds=30)


def test_shard_leases_acquire_handover_renew_release(database: Database) -> None:
    leases = SqliteShardLeases(database)
    until = NOW + timedelta(seconds=30)

    assert leases.acquire(0, "a", NOW, until) is True
    assert leases.acquire(0, "b", NOW, until) is False
    assert leases.acquire(0, "a", NOW, until + timedelta(seconds=1)) is True
    assert leases.request_handover(0, "a") is False
    assert leases.request_handover(1, "b") is False  # nobody holds shard 1
    assert leases.request_handover(0, "b") is True
    # A successor is waiting: no renewal, a handover instead
    assert leases.renew(0, "a", until) is False
    assert leases.hand_over(0, "b", until) is False
    assert leases.hand_over(0, "a", until + timedelta(seconds=5)) is True
    lease = leases.get(0)
    assert lease is not None
    assert (lease.owner, lease.successor) == ("b", None)
    assert lease.lease_until == until + timedelta(seconds=5)
    assert leases.renew(0, "b", until + timedelta(seconds=10)) is True

    # An expired lease is anyone's
    assert leases.acquire(0, "c", until + timedelta(seconds=10), until + timedelta(minutes=1))
    # Withdrawing a request is not a release; releasing a held lease is
    assert leases.request_handover(0, "d") is True
    assert leases.release(0, "d") is False
    lease = leases.get(0)
    assert lease is not None
    assert lease.successor is None
    assert leases.release(0, "c") is True
    assert leases.get(0) is None


def test_limit_slots_up_to_the_limit_and_expiry(database: Database) -> None:
    limits = SqliteLimitStore(database, rng=random.Random(1))
    until = NOW + timedelta(seconds=60)

    held = [limits.acquire_slot("task#x", 2, f"e{i}", NOW, until) for i in range(3)]
    assert held[0] is not None
    assert held[1] is not None
    assert held[0] != held[1]
    assert held[2] is None
    # Asking again as a holder gets its own slot back
    assert limits.acquire_slot("task#x", 2, "e0", NOW, until) == held[0]

    assert limits.extend_slot(held[0], "e9", until) is False
    assert limits.extend_slot(held[0], "e0", until + timedelta(seconds=60)) is True
    assert limits.release_slot(held[1], "e9") is False
    assert limits.release_slot(held[1], "e1") is True
    assert limits.acquire_slot("task#x", 2, "e2", NOW, until) == held[1]
    # Once e2's lease ran out, its slot is free for another; e0's extended one is not
    later = until + timedelta(seconds=1)
    assert limits.acquire_slot("task#x", 2, "e3", later, later + timedelta(seconds=60)) == held[1]
    assert limits.release_slot(held[1], "e2") is False


def test_token_bucket_allows_a_burst_then_says_how_long_to_wait(database: Database) -> None:
    limits = SqliteLimitStore(database)
    rate = RateLimit(per_second=2.0, burst=2)

    assert limits.take_token("h", rate, NOW) == 0.0
    assert limits.take_token("h", rate, NOW) == 0.0
    wait = limits.take_token("h", rate, NOW)
    assert wait == pytest.approx(0.5)
    # Another host's bucket is its own
    assert limits.take_token("g", rate, NOW) == 0.0
    assert limits.take_token("h", rate, NOW + timedelta(seconds=wait)) == 0.0


def test_host_state_replaced_only_from_the_version_before(database: Database) -> None:
    limits = SqliteLimitStore(database)
    assert limits.host("h") == HostState(host="h")
    opened = HostState(
        host="h",
        breaker=BreakerState.OPEN,
        consecutive_failures=5,
        breaker_until=NOW + timedelta(seconds=30),
        version=1,
    )
    assert limits.replace_host(opened, NOW) is True
    assert limits.replace_host(opened, NOW) is False  # a racer that read version 0
    assert limits.host("h") == opened
    closed = HostState(host="h", version=2)
    assert limits.replace_host(closed, NOW) is True
    assert limits.host("h") == closed


def test_two_databases_on_one_file_act_as_two_processes(tmp_path: Path) -> None:
    # Given two Database objects on one file (as two processes would hold)
    path = tmp_path / "shared.sqlite3"
    first, second = Database(path), Database(path)
    try:
        tasks_one, tasks_two = SqliteTaskStore(first), SqliteTaskStore(second)
        task = create(tasks_one, a_task("t1", every_seconds=60))
        claim = claim_occurrence(task, NOW)
        assert claim is not None
        placement = SHARDING.place("t1", claim.next_run_at, NOW)

        # When both claim the same occurrence, one wins
        assert tasks_two.claim(claim, placement, NOW) is True
        assert tasks_one.claim(claim, placement, NOW) is False
        # And each sees the other's writes
        stored = tasks_one.get("t1")
        assert stored is not None
        assert stored.version == 2
        leases_one, leases_two = SqliteShardLeases(first), SqliteShardLeases(second)
        assert leases_one.acquire(0, "a", NOW, NOW + timedelta(seconds=30))
        assert not leases_two.acquire(0, "b", NOW, NOW + timedelta(seconds=30))
    finally:
        first.close()
        second.close()


# Executions ----------------------------------------------------------------------

RETENTION = timedelta(days=7)
LEASE = NOW + timedelta(minutes=5)
# The execution cases every store shares are in the contract suite
# (tests/contract/test_executions.py); here, only what is SQLite's own.


def a_dispatch(task_id: str = "t1", at: datetime = NOW, attempt: int = 1) -> Dispatch:
    return Dispatch(
        execution_id=execution_id_for(task_id, at),
        task_id=task_id,
        scheduled_at=at,
        attempt=attempt,
        tenant_id="tenant-a",
    )


def begin(
    store: SqliteExecutionStore, dispatch: Dispatch, token: str = "tok1"
) -> tuple[bool, ExecutionStatus | None]:
    result = attempts.begin(
        store,
        dispatch,
        now=NOW,
        lease_until=LEASE,
        lease_token=token,
        callback_digest="digest",
        retry=RetryPolicy(),
        tenant_id="tenant-a",
    )
    return result.began, result.current.status if result.current else None


def test_the_factory_gives_every_store_on_one_file(database: Database) -> None:
    stores = sqlite_stores(database, execution_retention=RETENTION, lease_shards=2)
    assert stores.executions.lease_shards == 2
    create(stores.tasks, a_task("t1"))
    assert stores.tenants.task_count("tenant-a") == 1
    assert begin(stores.executions, a_dispatch()) == (True, ExecutionStatus.RUNNING)


def test_two_databases_race_to_begin_and_take_over(tmp_path: Path) -> None:
    # Given two Database objects on one file (two processes), eight threads each
    path = tmp_path / "shared.sqlite3"
    databases = [Database(path, durability="normal"), Database(path, durability="normal")]
    stores = [SqliteExecutionStore(d, RETENTION) for d in databases]
    dispatches = [a_dispatch(f"t{i}") for i in range(50)]
    began: list[str] = []
    taken: list[str] = []
    lock = threading.Lock()
    barrier = threading.Barrier(16)
    after = LEASE + timedelta(seconds=1)

    def racer(index: int) -> None:
        store = stores[index % 2]
        barrier.wait()
        for dispatch in dispatches:
            if attempts.begin(
                store,
                dispatch,
                now=NOW,
                lease_until=LEASE,
                lease_token=f"w{index}",
                callback_digest="d",
                retry=RetryPolicy(),
            ).began:
                with lock:
                    began.append(dispatch.execution_id)
        barrier.wait()
        for dispatch in dispatches:
            current = store.get(dispatch.execution_id)
            assert current is not None
            assert current.lease_token is not None
            take_over = transitions.take_over(
                current.lease_token,
                cutoff=after,
                new_token=f"r{index}",
                lease_until=after,
                keeping=store.keeping(dispatch.execution_id),
            )
            if store.apply(dispatch.execution_id, take_over):
                with lock:
                    taken.append(dispatch.execution_id)

    threads = [threading.Thread(target=racer, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)

    # Then each execution began once and was taken over once
    assert sorted(began) == sorted(d.execution_id for d in dispatches)
    assert sorted(taken) == sorted(d.execution_id for d in dispatches)
    for database in databases:
        database.close()


def _killed_mid_write(path: str, ready: Any) -> None:
    """A process that dies (SIGKILL) inside a write transaction, its lock held."""
    with Database(path).write() as connection:
        connection.execute("UPDATE tasks SET record = 'half-written' WHERE task_id = 't1'")
        ready.set()
        os.kill(os.getpid(), signal.SIGKILL)


def test_a_process_killed_mid_write_leaves_nothing_half_done(tmp_path: Path) -> None:
    # Given a task, and another process killed while its change to it was uncommitted
    path = tmp_path / "killed.sqlite3"
    database = Database(path)
    tasks = SqliteTaskStore(database)
    task = create(tasks, a_task("t1", every_seconds=60))
    context = multiprocessing.get_context("spawn")
    ready = context.Event()
    process = context.Process(target=_killed_mid_write, args=(str(path), ready))
    process.start()
    process.join(timeout=60)
    assert ready.is_set()
    assert process.exitcode == -signal.SIGKILL

    # Then the task is as it was, and the next change goes through (the lock died with it)
    assert tasks.get("t1") == task
    claim = claim_occurrence(task, NOW)
    assert claim is not None
    assert tasks.claim(claim, SHARDING.place("t1", claim.next_run_at, NOW), NOW) is True
    database.close()


def test_a_file_made_before_the_attention_index_gets_it_and_lists_new_failures(
    tmp_path: Path,
) -> None:
    # Given a data file whose executions table predates GET /executions, with a row
    path = tmp_path / "old.sqlite3"
    old = Database(path)
    with old.write() as connection:
        connection.execute(
            """CREATE TABLE executions (execution_id TEXT PRIMARY KEY, task_id TEXT NOT NULL,
               lease_shard TEXT, lease_until TEXT, dead_letter TEXT, dead_lettered_at TEXT,
               record TEXT NOT NULL)"""
        )
        record = {"execution_id": "old_1", "task_id": "old", "status": "FAILED"}
        connection.execute(
            "INSERT INTO executions (execution_id, task_id, record) VALUES (?, ?, ?)",
            ("old_1", "old", json.dumps(record | {"scheduled_at": "2026-11-30T12:00:00.000Z"})),
        )
    old.close()

    # When the store opens it, and an execution then fails for good
    database = Database(path)
    store = SqliteExecutionStore(database, timedelta(days=7))
    dispatch = Dispatch(execution_id="new_20261130T120000.000Z", task_id="new", scheduled_at=NOW)
    assert attempts.begin(
        store,
        dispatch,
        now=NOW,
        lease_until=NOW + timedelta(seconds=30),
        lease_token="t",
        callback_digest="d",
        retry=RetryPolicy(),
        tenant_id="tenant-a",
    ).began
    dead_letter = transitions.dead_letter(
        "t",
        now=NOW,
        error="refused",
        lease_until=NOW + timedelta(seconds=30),
        new_token="c",
        tenant_id="tenant-a",
        keeping=store.keeping(dispatch.execution_id),
    )
    assert store.apply(dispatch.execution_id, dead_letter)

    # Then the new failure is listed, the old row is kept as it was, unlisted
    page = store.needing_attention("tenant-a", AttentionQuery(), 10, None)
    assert [e.execution_id for e in page.items] == [dispatch.execution_id]
    assert store.get("old_1") is not None
    # And opening it again changes nothing
    assert (
        SqliteExecutionStore(database, timedelta(days=7))
        .needing_attention("tenant-a", AttentionQuery(), 10, None)
        .items
        == page.items
    )
    database.close()
