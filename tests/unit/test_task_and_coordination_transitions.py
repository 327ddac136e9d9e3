"""The tasks' and coordination records' transitions as pure data: what each expects,
what it changes; and the few words the condition language gained for them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from dynacron.adapters.aws.expressions import write_request
from dynacron.domain.conditions import AtMost, Copy, Equals, Transition
from dynacron.domain.coordination import transitions as coordination
from dynacron.domain.coordination.create_keys import KEY_LIFETIME, CreateKey
from dynacron.domain.coordination.limits import HostState
from dynacron.domain.coordination.uptime import Outage, ShardHistory
from dynacron.domain.schedules.expressions import OneTimeSchedule, RateSchedule
from dynacron.domain.tasks import transitions as tasks
from dynacron.domain.tasks.claiming import claim_occurrence
from dynacron.domain.tasks.task import Task, TaskStatus

NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
LATER = NOW + timedelta(seconds=30)


def iso(instant: datetime) -> str:
    return instant.strftime("%Y-%m-%dT%H:%M:%S.") + f"{instant.microsecond // 1000:03d}Z"


def a_task(*, every_seconds: int | None = None, version: int = 3) -> Task:
    return Task(
        task_id="job",
        name="job",
        schedule=(
            RateSchedule(every_seconds=every_seconds, anchor=NOW)
            if every_seconds
            else OneTimeSchedule(at=NOW)
        ),
        handler_url="http://127.0.0.1:9/",
        payload={},
        status=TaskStatus.ACTIVE,
        next_run_at=NOW,
        created_at=NOW,
        updated_at=NOW,
        version=version,
    )


# The language ----------------------------------------------------------------------


def test_at_most_holds_for_equal_and_lower_values_of_the_same_kind() -> None:
    assert AtMost("n", 3).holds({"n": 3})
    assert AtMost("n", 3).holds({"n": 2})
    assert not AtMost("n", 3).holds({"n": 4})
    assert not AtMost("n", 3).holds({"n": "3"})
    assert not AtMost("n", 3).holds({})
    assert AtMost("at", iso(NOW)).holds({"at": iso(NOW - timedelta(seconds=1))})


def test_copy_reads_the_record_as_it_was_and_a_delete_changes_nothing_else() -> None:
    swap = Transition(
        expects=Equals("a", 1),
        sets={"b": "new"},
        computes={"c": Copy("b")},
        removes=frozenset({"d"}),
    )
    assert swap.applied_to({"a": 1, "b": "old", "d": 0}) == {"a": 1, "b": "new", "c": "old"}
    with pytest.raises(ValueError, match="missing"):
        Transition(expects=Equals("a", 1), computes={"c": Copy("x")}).applied_to({"a": 1})

    gone = Transition(expects=Equals("a", 1), deletes=True)
    assert gone.holds({"a": 1})
    assert gone.applied_to({"a": 1}) == {}
    with pytest.raises(ValueError, match="nothing else"):
        Transition(expects=Equals("a", 1), sets={"b": 2}, deletes=True)


def test_dynamodb_writes_a_copy_as_a_plain_assignment_and_a_delete_as_delete_item() -> None:
    request = write_request(coordination.hand_over_lease("a", LATER), {"key": {"S": "k"}})
    assert "#owner = #successor" in request["UpdateExpression"]
    assert request["UpdateExpression"].endswith("REMOVE #successor")
    assert request["ConditionExpression"] == "#owner = :v1 AND attribute_exists(#successor)"

    delete = write_request(coordination.release_lease("a"), {"key": {"S": "k"}})
    assert set(delete) == {
        "Key",
        "ConditionExpression",
        "ExpressionAttributeNames",
        "ExpressionAttributeValues",
    }
    acquire = write_request(coordination.acquire_lease("a", NOW, LATER), {"key": {"S": "k"}})
    assert acquire["ConditionExpression"] == (
        "attribute_not_exists(#owner) OR #lease_until <= :v0 OR #owner = :v1"
    )


# Tasks -----------------------------------------------------------------------------


def test_a_claim_expects_the_active_task_at_the_version_read() -> None:
    task = a_task(every_seconds=60)
    claim = claim_occurrence(task, NOW)
    assert claim is not None
    move = tasks.claim(claim, "3#bucket", NOW)

    assert move.holds({"version": 3, "status": "ACTIVE"})
    assert not move.holds({"version": 4, "status": "ACTIVE"})
    assert not move.holds({"version": 3, "status": "PAUSED"})
    assert not move.holds(None)
    after = move.applied_to({"version": 3, "status": "ACTIVE", "due_bucket": "old"})
    assert after == {
        "version": 4,
        "status": "ACTIVE",
        "updated_at": iso(NOW),
        "last_scheduled_at": iso(NOW),
        "next_run_at": iso(NOW + timedelta(seconds=60)),
        "due_bucket": "3#bucket",
    }


def test_a_claim_without_a_next_occurrence_completes_the_task() -> None:
    claim = claim_occurrence(a_task(), NOW)
    assert claim is not None
    after = tasks.claim(claim, None, NOW).applied_to(
        {"version": 3, "status": "ACTIVE", "next_run_at": iso(NOW), "due_bucket": "b"}
    )
    assert after["status"] == "COMPLETED"
    assert "next_run_at" not in after
    assert "due_bucket" not in after


def test_set_aside_at_the_version_seen_cuts_the_reason_and_leaves_the_due_index() -> None:
    aside = tasks.set_aside(3, "x" * 600, NOW)
    assert aside.holds({"task_id": "job", "version": 3})
    assert not aside.holds({"task_id": "job", "version": 4})
    assert not aside.holds(None)
    after = aside.applied_to({"task_id": "job", "version": 3, "due_bucket": "b"})
    assert after["status"] == "ERROR"
    assert after["status_reason"] == "x" * tasks.REASON_LIMIT
    assert after["version"] == 4
    assert "due_bucket" not in after

    # A record without a version (written around the API) is set aside at none
    assert tasks.set_aside(None, "r", NOW).holds({"task_id": "job"})
    assert not tasks.set_aside(None, "r", NOW).holds({"task_id": "job", "version": 1})
    # Releasing a slot expects its holder
    freeing = tasks.set_aside(3, "r", NOW, release_slot_of="exec-1")
    assert freeing.holds({"task_id": "job", "version": 3, "running_execution": "exec-1"})
    assert not freeing.holds({"task_id": "job", "version": 3, "running_execution": "exec-2"})


def test_next_version_of_any_stored_form() -> None:
    assert [tasks.next_version(v) for v in (3, "5", None, "x", 2.5)] == [4, 6, 1, 1, 1]


def test_mark_has_dependents_and_replace() -> None:
    mark = tasks.mark_has_dependents("acme")
    assert not mark.holds({"tenant_id": "other", "version": 1})
    assert mark.applied_to({"tenant_id": "acme", "version": 1}) == {
        "tenant_id": "acme",
        "version": 2,
        "has_dependents": True,
    }
    replacement = tasks.replace(2, {"upstream": 7})
    assert replacement.expects.holds({"version": 2})
    assert not replacement.expects.holds({"version": 3})
    assert replacement.unchanged["upstream"].holds({"version": 7})


# Coordination ----------------------------------------------------------------------


def test_a_lease_is_taken_when_free_expired_or_ours_and_renewed_by_its_holder_only() -> None:
    take = coordination.acquire_lease("a", NOW, LATER)
    assert take.holds(None)
    assert take.holds({"owner": "b", "lease_until": iso(NOW)})
    assert take.holds({"owner": "a", "lease_until": iso(LATER)})
    assert not take.holds({"owner": "b", "lease_until": iso(LATER)})
    renew = coordination.renew_lease("a", LATER)
    assert renew.holds({"owner": "a"})
    # A waiting standby does not stop the holder renewing (decision 0036)
    assert renew.holds({"owner": "a", "successor": "b"})
    assert not renew.holds({"owner": "b", "successor": "a"})
    assert coordination.request_handover("b").holds({"owner": "a"})
    assert not coordination.request_handover("a").holds({"owner": "a"})
    assert not coordination.request_handover("b").holds(None)
    # ...and a second newcomer does not take the standby's place
    assert not coordination.request_handover("c").holds({"owner": "a", "successor": "b"})
    assert coordination.hand_over_lease("a", LATER).applied_to(
        {"owner": "a", "successor": "b", "lease_until": iso(NOW)}
    ) == {"owner": "b", "lease_until": iso(LATER)}


def test_a_slot_is_taken_only_after_its_lease_ran_out() -> None:
    take = coordination.acquire_slot("h2", NOW, LATER)
    # A slot whose lease ends exactly now is still held (``<``, not ``<=``)
    assert not take.holds({"holder": "h1", "lease_until": iso(NOW)})
    assert take.holds({"holder": "h1", "lease_until": iso(NOW - timedelta(seconds=1))})
    assert coordination.release_slot("h1").holds({"holder": "h1"})
    assert not coordination.extend_slot("h2", LATER).holds({"holder": "h1"})


def test_host_state_cursor_tick_and_create_key() -> None:
    state = HostState(host="h", consecutive_failures=1, version=2)
    replace = coordination.replace_host(state)
    assert replace.holds({"version": 1})
    assert replace.holds(None)
    assert not replace.holds({"version": 2})
    assert "breaker_until" not in replace.sets

    advance = coordination.advance_cursor(NOW)
    assert advance.holds(None)
    assert advance.holds({"bucket": iso(NOW - timedelta(hours=1))})
    assert not advance.holds({"bucket": iso(NOW)})

    rewind = coordination.rewind_cursor(NOW - timedelta(hours=2), NOW)
    assert rewind.holds({"bucket": iso(NOW)})
    assert not rewind.holds({"bucket": iso(NOW + timedelta(hours=1))})
    assert not rewind.holds(None)
    assert rewind.sets == {"bucket": iso(NOW - timedelta(hours=2))}

    seen = ShardHistory(ticking_since=NOW, last_tick=NOW)
    outage = Outage(last_tick=NOW, next_tick=LATER)
    history = ShardHistory(ticking_since=LATER, last_tick=LATER, outages=(outage,))
    tick = coordination.record_tick(history, seen)
    assert tick.holds({"last_tick_at": iso(NOW)})
    assert not tick.holds({})
    assert coordination.outage_from_text(tick.sets["outages"][0]) == outage

    key = CreateKey.of("k", {"a": 1})
    reserve = coordination.reserve_create_key(key, "t1", NOW)
    assert reserve.holds(None)
    assert reserve.holds({"task_id": "t0", "expires_at": int(NOW.timestamp())})
    assert not reserve.holds({"task_id": "t0", "expires_at": int(NOW.timestamp()) + 1})
    assert reserve.sets["expires_at"] == int((NOW + KEY_LIFETIME).timestamp())
    assert not coordination.mark_key_created("t1").holds({"task_id": "t2"})

    rotation = coordination.rotate_secret(["s2", "s1"], "s3")
    assert rotation.holds({"signing_secrets": ["s2", "s1"]})
    assert not rotation.holds({"signing_secrets": ["s9", "s1"]})
    assert rotation.sets["signing_secrets"] == ["s3", "s2"]
