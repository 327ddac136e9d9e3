"""The cost meter's index writes: every change to a projected attribute is billed.

AWS writes a global secondary index entry whenever an item write adds, removes or
changes any attribute projected into it; a moved key is a delete plus a put. The
meter (``bench.meter.index_write_units``) must count each, by the projections the
tables declare in ``dynacron.definitions.resources``, or the cost benchmark is optimistic.
"""

from __future__ import annotations

from typing import Any

import pytest

from bench.meter import index_write_units, item_size
from dynacron.definitions.resources import TASKS, IndexDefinition, Key, TableDefinition

BY_OWNER_ALL = IndexDefinition("by-owner", Key("owner"), Key("created"), "ALL")
BY_DUE_KEYS = IndexDefinition("by-due", Key("bucket"), Key("due"), "KEYS_ONLY")
TABLE = TableDefinition(
    logical_id="Things",
    suffix="things",
    env_var="THINGS_TABLE",
    partition_key=Key("id"),
    indexes=(BY_OWNER_ALL, BY_DUE_KEYS),
)


def item(**values: Any) -> dict[str, Any]:
    """A DynamoDB item from plain values (strings and whole numbers)."""
    return {k: {"N": str(v)} if isinstance(v, int) else {"S": v} for k, v in values.items()}


def writes(before: dict[str, Any] | None, after: dict[str, Any] | None) -> float:
    return index_write_units(TABLE, before, after)


def test_a_changed_non_key_attribute_rewrites_an_all_projected_entry_once() -> None:
    # Given an item in the ALL index (no due key, so not in the KEYS_ONLY one)
    before = item(id="t1", owner="alice", created="2026", version=1)
    # When only a non-key attribute changes
    after = item(id="t1", owner="alice", created="2026", version=2)
    # Then the ALL index entry is written once (its key did not move)
    assert writes(before, after) == 1


def test_a_changed_non_key_attribute_leaves_a_keys_only_entry_alone() -> None:
    before = item(id="t1", bucket="b1", due="12:00", version=1)
    after = item(id="t1", bucket="b1", due="12:00", version=2)
    assert writes(before, after) == 0


def test_a_moved_key_is_a_delete_plus_a_put() -> None:
    before = item(id="t1", bucket="b1", due="12:00")
    after = item(id="t1", bucket="b1", due="12:01")
    assert writes(before, after) == 2


def test_an_entry_that_appears_or_disappears_is_one_write_and_an_absent_one_none() -> None:
    bare = item(id="t1", version=1)
    listed = item(id="t1", owner="alice", created="2026", version=1)
    assert writes(None, listed) == 1
    assert writes(listed, None) == 1
    assert writes(bare, listed) == 1
    assert writes(listed, bare) == 1
    assert writes(bare, item(id="t1", version=2)) == 0  # in neither sparse index


def test_an_unchanged_item_writes_no_index() -> None:
    both = item(id="t1", owner="alice", created="2026", bucket="b1", due="12:00", version=1)
    assert writes(both, dict(both)) == 0


def test_an_entry_costs_one_unit_per_started_kilobyte_with_its_overhead() -> None:
    # Given an ALL entry of 1,000 bytes: with the 100-byte overhead, two units
    small = item(id="t1", owner="alice", created="2026", version=1)
    padding = 1000 - item_size(small) - len("blob")
    before = {**small, "blob": {"S": "x" * padding}}
    assert item_size(before) == 1000
    after = {**before, "version": {"N": "2"}}
    # When a non-key attribute changes, and when the key moves
    moved = {**after, "created": {"S": "2027"}}
    # Then the rewrite costs two units, the move two each for its delete and put
    assert writes(before, after) == 2
    assert writes(before, moved) == 4


def test_an_include_entry_is_rewritten_when_an_included_attribute_changes_only() -> None:
    include = IndexDefinition("by-x", Key("x"), Key("y"), "INCLUDE", non_key_attributes=("tags",))
    table = TableDefinition("T", "t", "T_TABLE", Key("id"), indexes=(include,))
    before = {**item(id="1", x="a", y="b", version=1), "tags": {"M": {"env": {"S": "prod"}}}}
    # Another attribute changes: the entry is as it was
    assert index_write_units(table, before, {**before, "version": {"N": "2"}}) == 0
    # An included one changes (or goes): one write
    retagged = {**before, "tags": {"M": {"env": {"S": "dev"}}}}
    assert index_write_units(table, before, retagged) == 1
    untagged = {k: v for k, v in before.items() if k != "tags"}
    assert index_write_units(table, before, untagged) == 1


def test_an_undeclared_projection_is_refused_rather_than_guessed() -> None:
    odd = IndexDefinition("by-x", Key("x"), Key("y"), "SOME")  # type: ignore[arg-type]
    table = TableDefinition("T", "t", "T_TABLE", Key("id"), indexes=(odd,))
    with pytest.raises(ValueError, match="SOME"):
        index_write_units(table, None, item(id="1", x="a", y="b"))


def claimed(task: dict[str, Any]) -> dict[str, Any]:
    """The task item after a claim: what ``TaskStore.claim`` changes."""
    return {
        **task,
        "next_run_at": {"S": "2026-11-30T12:02:00Z"},
        "due_bucket": {"S": "0#2026-11-30T12:02:00Z"},
        "version": {"N": "3"},
        "last_scheduled_at": {"S": "2026-11-30T12:01:00Z"},
        "updated_at": {"S": "2026-11-30T12:01:00Z"},
    }


def test_a_claim_of_a_recurring_task_writes_the_due_index_only() -> None:
    # Given a recurring task's item as the store writes it
    task = {
        **item(
            task_id="a" * 32,
            name="nightly report",
            tenant_id="default",
            created_at="2026-11-30T11:00:00Z",
            updated_at="2026-11-30T12:00:00Z",
            next_run_at="2026-11-30T12:01:00Z",
            due_bucket="0#2026-11-30T12:01:00Z",
            status="ACTIVE",
            version=2,
        ),
        "schedule": {"M": {"kind": {"S": "rate"}, "seconds": {"N": "60"}}},
        "tags": {"M": {"env": {"S": "prod"}, "team": {"S": "billing"}}},
    }
    # When a claim moves it to its next occurrence
    # Then the due index entry moves (a delete plus a put) and no other index is
    # written: the tenant index projects nothing a claim changes (keys and tags)
    assert index_write_units(TASKS, task, claimed(task)) == 2
