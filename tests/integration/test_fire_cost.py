"""What a fire costs, metered as AWS bills it (``bench.meter``) on the real tick and worker.

The benchmark's own scenario, small: two recurring tasks fire once. Pins the
issue-15 goal (at most 5 write units per successful recurring fire, index writes
included), that a claim writes no index but the due index, and that the execution
of a successful fire writes no index at all (the attention index behind
GET /executions is sparse: decision 0028).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest

from bench.cost import drain_worker, fresh_bench, listing, scenario
from bench.meter import summarise
from dynacron.api.requests import TaskCreate
from dynacron.definitions.resources import TENANT_INDEX_PARTS
from dynacron.domain.coordination.tenants import DEFAULT_TENANT, TenantQuota
from dynacron.domain.errors import LimitExceeded
from dynacron.services.follow_ups import FAN_IN_MARK_GRACE
from tests.support import Sink

WRITE_UNIT_GOAL = 5


@pytest.fixture(scope="module")
def recurring() -> Iterator[dict[str, object]]:
    sink = Sink().start()
    try:
        with fresh_bench(sink) as bench:
            yield scenario(bench, "recurring", batch=2, rounds=2)
    finally:
        sink.stop()


def test_a_recurring_fire_costs_at_most_five_write_units(recurring: dict) -> None:
    # The tick's own writes (its shard's heartbeat and cursor) are shared by every
    # task a tick claims: with two tasks a tick they would weigh as with none.
    per_task = [r for r in recurring["breakdown"] if not r["caller"].startswith("CursorStore.")]
    units = {
        f"{r['caller']} {r['operation']}": r["wcu"] + r["index_wcu"]
        for r in per_task
        if r["wcu"] + r["index_wcu"]
    }
    assert sum(units.values()) <= WRITE_UNIT_GOAL, units


def test_a_claim_moves_its_due_index_entry_and_rewrites_no_other_index(
    recurring: dict,
) -> None:
    claims = [r for r in recurring["breakdown"] if r["caller"] == "TaskStore.claim"]
    # One claim per fire: the item (1 unit), the due index's delete plus put (2);
    # an all-attributes tenant index would add a third index write.
    assert [(r["operation"], r["requests"], r["wcu"], r["index_wcu"]) for r in claims] == [
        ("UpdateItem", 1.0, 1.0, 2.0)
    ]


def test_tagged_recurring_fires_cost_the_same_and_write_no_tenant_index_entry() -> None:
    # Given recurring tasks with tags (projected into the tenant index)
    sink = Sink().start()
    try:
        with fresh_bench(sink) as bench:
            tagged = scenario(
                bench, "recurring", batch=2, rounds=2, tags={"env": "prod", "team": "billing"}
            )
    finally:
        sink.stop()
    # Then a fire costs what an untagged one does, and a claim still moves the due
    # index entry only: a claim never changes the tags
    per_task = [r for r in tagged["breakdown"] if not r["caller"].startswith("CursorStore.")]
    assert sum(r["wcu"] + r["index_wcu"] for r in per_task) <= WRITE_UNIT_GOAL
    claims = [r for r in tagged["breakdown"] if r["caller"] == "TaskStore.claim"]
    assert [(r["operation"], r["wcu"], r["index_wcu"]) for r in claims] == [
        ("UpdateItem", 1.0, 2.0)
    ]


def test_a_successful_fire_of_a_task_with_notify_costs_what_one_without_does() -> None:
    # Given recurring tasks told of failures, recoveries and dead letters (decision 0057)
    sink = Sink().start()
    hook = f"{sink.url}/notify"
    notify = {
        "on_failure": {"url": hook},
        "on_recovery": {"url": hook},
        "on_dead_letter": {"url": hook},
    }
    try:
        with fresh_bench(sink) as bench:
            told = scenario(bench, "recurring", batch=2, rounds=2, notify=notify)
    finally:
        sink.stop()
    # Then a successful fire writes nothing more: no follow-up lease, no task write
    per_task = [r for r in told["breakdown"] if not r["caller"].startswith("CursorStore.")]
    assert sum(r["wcu"] + r["index_wcu"] for r in per_task) <= WRITE_UNIT_GOAL
    assert not [r for r in per_task if r["caller"] == "TaskStore.apply"]
    assert not [d for d in sink.deliveries if d.path == "/notify"]


def test_a_successful_fire_writes_its_execution_to_no_index(recurring: dict) -> None:
    # Begun (a put) and finished (an update): neither carries the lease, dead-letter
    # or attention index's keys.
    writes = [
        (r["caller"], r["operation"], r["requests"], r["wcu"], r["index_wcu"])
        for r in recurring["breakdown"]
        if r["caller"].startswith("ExecutionStore.")
    ]
    assert sorted(writes) == [
        ("ExecutionStore.begin", "PutItem", 1.0, 1.0, 0.0),
        ("ExecutionStore.finish", "UpdateItem", 1.0, 1.0, 0.0),
    ]


def test_a_listing_page_is_a_query_of_each_part_and_one_eventually_consistent_read() -> None:
    sink = Sink().start()
    try:
        with fresh_bench(sink) as bench:
            page = listing(bench, page_size=10)
    finally:
        sink.stop()
    # Ten small items: half a unit for the Query of each of the tenant index's 8
    # parts (decision 0053), half a unit each after it
    assert TENANT_INDEX_PARTS == 8
    assert (page["keys_only"]["dynamodb_requests"], page["keys_only"]["rcu"]) == (9, 9.0)


def test_a_refused_fan_in_create_leaves_its_upstream_at_five_units_a_fire() -> None:
    # Given two recurring tasks, and a tenant with room for them alone
    sink = Sink().start()
    try:
        with fresh_bench(sink) as bench:
            service = bench.app.task_service
            spec = {"rate": "1 minute", "handler_url": f"{sink.url}/hook"}
            a, b = (service.register(DEFAULT_TENANT, TaskCreate(**spec).to_spec()) for _ in "ab")
            service.set_quota(DEFAULT_TENANT, TenantQuota(max_tasks=2))
            # When a create after both is refused by the quota, after it marked b
            after = {"after": [a.task_id, b.task_id], "handler_url": f"{sink.url}/x"}
            with pytest.raises(LimitExceeded):
                service.register(DEFAULT_TENANT, TaskCreate(**after).to_spec())
            marked = bench.app.tasks.get(b.task_id)
            assert marked is not None
            assert len(marked.fan_in_dependents) == 1
            # And b fires once after the mark's grace: its follow-up forgets the name
            bench.clock.advance(FAN_IN_MARK_GRACE + timedelta(minutes=1))
            bench.app.ticker.tick_shard(0)
            drain_worker(bench)
            # Then the next fires cost what any recurring fire does: no follow-up
            # lease (its release), no write of b
            bench.meter.reset()
            bench.clock.advance(timedelta(minutes=1))
            claimed = bench.app.ticker.tick_shard(0).claimed
            drain_worker(bench)
            fires = summarise(bench.meter.reset(), fires=claimed)
            forgotten = bench.app.tasks.get(b.task_id)
    finally:
        sink.stop()
    per_task = [r for r in fires["breakdown"] if not r["caller"].startswith("CursorStore.")]
    units = {f"{r['caller']} {r['operation']}": r["wcu"] + r["index_wcu"] for r in per_task}
    # (The sum is not compared: the fires of other tests' tasks, alive in the same
    # store, are averaged in; the follow-up lease is what the stale name cost.)
    owed = ("ExecutionStore.release", "TaskStore.apply")
    assert not [name for name in units if name.startswith(owed)], units
    assert forgotten is not None
    assert forgotten.fan_in_dependents == ()
