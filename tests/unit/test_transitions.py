"""The execution transitions as pure data: what each expects, what it changes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from dynacron.domain.conditions import (
    AllOf,
    AnyOf,
    Below,
    Equals,
    Exists,
    Missing,
    NotEquals,
    Plus,
    Transition,
)
from dynacron.domain.executions import call_records, dead_letters
from dynacron.domain.executions import transitions as t
from dynacron.domain.executions.execution import (
    Dispatch,
    ExecutionStatus,
    HandlerCallRecord,
    ResultSummary,
    Upstream,
)
from dynacron.domain.executions.record import ERROR_LIMIT, Keeping, expiry
from dynacron.domain.executions.retry import RetryPolicy
from dynacron.domain.schedules.expressions import RateSchedule
from dynacron.domain.tasks.task import Task, TaskStatus

NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
RETENTION = timedelta(days=7)
DISPATCH = Dispatch(execution_id="task-1#20261130T120000.000Z", task_id="task-1", scheduled_at=NOW)
SHARD = "3"
KEEPING = Keeping(SHARD, RETENTION)


def iso(instant: datetime) -> str:
    return instant.strftime("%Y-%m-%dT%H:%M:%S.") + f"{instant.microsecond // 1000:03d}Z"


def epoch(instant: datetime) -> int:
    return int(instant.timestamp())


def running(**changes: Any) -> dict[str, Any]:
    """A record as begin leaves it: RUNNING attempt 1 under lease ``held``."""
    return {
        "task_id": "task-1",
        "execution_id": DISPATCH.execution_id,
        "scheduled_at": iso(NOW),
        "status": "RUNNING",
        "attempt": 1,
        "first_attempt": 1,
        "lease_token": "held",
        "lease_until": iso(NOW + timedelta(seconds=30)),
        "callback_digest": "digest",
        "tenant_id": "acme",
        "expires_at": epoch(NOW + RETENTION),
    } | changes


def queued(**changes: Any) -> dict[str, Any]:
    record = running(status="QUEUED", attempt=2, next_attempt_at=iso(NOW), lease_shard=SHARD)
    return record | changes


# --- the condition language ----------------------------------------------------------


def test_comparisons_on_a_missing_attribute_are_false_except_not_equals() -> None:
    record = {"present": "x"}
    assert not Equals("absent", "x").holds(record)
    assert not Below("absent", "z").holds(record)
    assert NotEquals("absent", "x").holds(record)
    assert Missing("absent").holds(record)
    assert not Exists("absent").holds(record)
    # No record at all is a record without any attribute.
    assert Missing("execution_id").holds(None)
    assert not Exists("execution_id").holds(None)
    assert not Equals("status", "RUNNING").holds(None)
    assert NotEquals("status", "SUCCEEDED").holds(None)


def test_values_of_different_kinds_never_compare() -> None:
    record = {"count": 5, "text": "5", "flag": True, "decimal": Decimal(5)}
    assert not Equals("count", "5").holds(record)
    assert not Equals("text", 5).holds(record)
    assert not Equals("flag", 1).holds(record)
    assert NotEquals("flag", 1).holds(record)
    assert not Below("text", 9).holds(record)
    # A number read back from DynamoDB (Decimal) is still the number.
    assert Equals("decimal", 5).holds(record)
    assert Below("decimal", 6).holds(record)
    assert not Below("decimal", 5).holds(record)


def test_below_orders_stored_instants_by_time() -> None:
    record = {"lease_until": iso(NOW)}
    assert Below("lease_until", iso(NOW + timedelta(milliseconds=1))).holds(record)
    assert not Below("lease_until", iso(NOW)).holds(record)
    assert not Below("lease_until", iso(NOW - timedelta(days=400))).holds(record)


def test_all_of_and_any_of() -> None:
    record = {"a": 1, "b": 2}
    assert AllOf(Equals("a", 1), Equals("b", 2)).holds(record)
    assert not AllOf(Equals("a", 1), Equals("b", 3)).holds(record)
    assert AnyOf(Equals("a", 9), Equals("b", 2)).holds(record)
    assert not AnyOf(Equals("a", 9), Missing("b")).holds(record)
    assert AllOf(Equals("a", 1), Equals("a", 1)) == AllOf(Equals("a", 1), Equals("a", 1))
    with pytest.raises(ValueError, match="at least one"):
        AllOf()


# --- Transition itself -----------------------------------------------------------------


def test_applied_to_removes_sets_and_computes_from_the_record_as_it_was() -> None:
    change = Transition(
        Exists("attempt"),
        {"status": "QUEUED"},
        frozenset({"gone", "never_there"}),
        {"attempt": Plus("attempt", 1), "first_attempt": Plus("attempt", 1)},
    )
    before = {"attempt": 4, "first_attempt": 1, "gone": "x", "kept": "y", "status": "FAILED"}
    after = change.applied_to(before)
    assert after == {"attempt": 5, "first_attempt": 5, "kept": "y", "status": "QUEUED"}
    assert before["attempt"] == 4  # pure: the input is left as it was
    with pytest.raises(ValueError, match="missing"):
        change.applied_to({"status": "FAILED"})


def test_a_transition_changes_each_attribute_once_and_never_to_none() -> None:
    with pytest.raises(ValueError, match="once"):
        Transition(Exists("a"), {"a": 1}, frozenset({"a"}))
    with pytest.raises(ValueError, match="once"):
        Transition(Exists("a"), {"a": 1}, computes={"a": Plus("a", 1)})
    with pytest.raises(ValueError, match="None"):
        Transition(Exists("a"), {"a": None})
    with pytest.raises(ValueError, match="whole"):
        Transition(Missing("a"), {"a": 1}, frozenset({"b"}), creates=True)


# --- begin and the new records ---------------------------------------------------------


def test_begin_new_creates_a_running_record_only_where_there_is_none() -> None:
    upstream = Upstream("up-1", ResultSummary(200, None))
    dispatch = Dispatch(DISPATCH.execution_id, "task-1", NOW, attempt=1, upstream=upstream)
    lease_until = NOW + timedelta(seconds=30)
    change = t.begin_new(
        dispatch,
        now=NOW,
        lease_until=lease_until,
        lease_token="tok",
        callback_digest="dig",
        retry=RetryPolicy(max_attempts=4, base_delay_seconds=30, max_delay_seconds=3600),
        tenant_id="acme",
        keeping=KEEPING,
    )
    assert change.creates
    assert change.holds(None)
    assert change.holds({})
    assert not change.holds(running())
    record = change.applied_to(None)
    assert record["status"] == "RUNNING"
    assert record["lease_token"] == "tok"
    assert record["lease_until"] == iso(lease_until)
    assert record["started_at"] == iso(NOW)
    assert record["first_attempt"] == record["attempt"] == 1
    assert record["retry"] == {
        "max_attempts": 4,
        "base_delay_seconds": 30,
        "max_delay_seconds": 3600,
    }
    # Stored without nulls, nested ones too, as items have always been.
    assert record["upstream"] == {"execution_id": "up-1", "status_code": 200}
    assert "lease_shard" not in record  # the undeleted message watches it, not the reaper
    assert record["expires_at"] == epoch(lease_until + RETENTION)
    assert "call_status" not in record


def test_begin_new_with_a_call_saves_the_call_record() -> None:
    call = HandlerCallRecord(HandlerCallRecord.IN_PROGRESS, 1_000, 999_000)
    change = t.begin_new(
        DISPATCH,
        now=NOW,
        lease_until=NOW,
        lease_token="tok",
        callback_digest="dig",
        retry=RetryPolicy(),
        tenant_id="acme",
        keeping=KEEPING,
        call=call,
    )
    record = change.applied_to(None)
    assert "upstream" not in record
    assert record["call_status"] == "INPROGRESS"
    assert record["call_expires_at"] == 1_000
    assert record["call_in_progress_until"] == 999_000


def test_begin_queued_only_for_exactly_the_queued_attempt() -> None:
    dispatch = Dispatch(DISPATCH.execution_id, "task-1", NOW, attempt=2)
    change = t.begin_queued(
        dispatch,
        now=NOW,
        lease_until=NOW + timedelta(seconds=30),
        lease_token="new",
        callback_digest="dig2",
        keeping=KEEPING,
    )
    assert change.holds(queued())
    assert not change.holds(queued(attempt=3))
    assert not change.holds(running(attempt=2))
    assert not change.holds(None)
    after = change.applied_to(queued())
    assert after["status"] == "RUNNING"
    assert after["lease_token"] == "new"
    assert after["callback_digest"] == "dig2"
    assert "next_attempt_at" not in after
    assert "lease_shard" not in after


def test_begin_queued_with_a_call_needs_a_replaceable_call_record() -> None:
    dispatch = Dispatch(DISPATCH.execution_id, "task-1", NOW, attempt=2)
    call = HandlerCallRecord(HandlerCallRecord.IN_PROGRESS, 2_000, 1_500_000)

    def begin(now_ms: int) -> Transition:
        return t.begin_queued(
            dispatch,
            now=NOW,
            lease_until=NOW,
            lease_token="new",
            callback_digest="dig",
            keeping=KEEPING,
            call=call,
            call_now_ms=now_ms,
        )

    in_progress = queued(
        call_status="INPROGRESS", call_expires_at=2_000, call_in_progress_until=1_200_000
    )
    completed = queued(call_status="COMPLETED", call_expires_at=2_000)
    assert begin(1_000_000).holds(queued())  # no record there
    assert not begin(1_000_000).holds(in_progress)  # a call still running
    assert begin(1_200_001).holds(in_progress)  # its call timed out
    assert not begin(1_999_999).holds(completed)  # a success not expired
    assert begin(2_001_000).holds(completed)  # expired (seconds)
    after = begin(1_200_001).applied_to(in_progress)
    assert after["call_in_progress_until"] == 1_500_000


def test_enqueue_creates_a_watched_queued_first_attempt() -> None:
    later = NOW + timedelta(days=2)
    dispatch = Dispatch(DISPATCH.execution_id, "task-1", NOW, not_before=later)
    change = t.enqueue(
        dispatch,
        retry=RetryPolicy(),
        lease_until=NOW + timedelta(minutes=5),
        lease_token="tok",
        tenant_id="acme",
        keeping=KEEPING,
    )
    assert change.holds(None)
    assert not change.holds(queued())
    record = change.applied_to(None)
    assert record["status"] == "QUEUED"
    assert (record["attempt"], record["first_attempt"]) == (1, 1)
    assert record["next_attempt_at"] == iso(later)
    assert record["lease_shard"] == SHARD
    # It matters until its next attempt, two days after the lease.
    assert record["expires_at"] == epoch(later + RETENTION)


def test_record_skipped_creates_a_final_record_with_its_reason_cut() -> None:
    task = Task(
        task_id="task-1",
        name="n",
        schedule=RateSchedule(60, NOW),
        handler_url="http://127.0.0.1:9/",
        payload={},
        status=TaskStatus.ACTIVE,
        next_run_at=NOW,
        created_at=NOW,
        updated_at=NOW,
        tenant_id="acme",
    )
    change = t.record_skipped(task, "e-1", NOW, "x" * 5000, NOW, keeping=KEEPING)
    assert not change.holds(running())
    record = change.applied_to(None)
    assert record["status"] == "SKIPPED"
    assert record["attempt"] == 0
    assert record["tenant_id"] == "acme"
    assert len(record["error"]) == ERROR_LIMIT
    assert record["expires_at"] == epoch(NOW + RETENTION)


def test_record_undelivered_creates_a_listed_dead_letter() -> None:
    change = dead_letters.record_undelivered(
        Dispatch(DISPATCH.execution_id, "task-1", NOW - timedelta(days=900), attempt=3),
        now=NOW,
        error="gone",
        retry=RetryPolicy(),
        tenant_id="acme",
        lease_until=NOW + timedelta(days=30),
        lease_token="tok",
        keeping=KEEPING,
    )
    assert not change.holds(queued())
    record = change.applied_to(None)
    assert record["status"] == "FAILED"
    assert record["dead_letter"] == "dead-letter#acme"
    assert record["dead_lettered_at"] == iso(NOW)
    assert (record["attempt"], record["first_attempt"]) == (3, 3)
    assert record["lease_shard"] == SHARD
    # From now, not from the lease nor the occurrence.
    assert record["expires_at"] == epoch(NOW + RETENTION)


# --- a holder's writes ------------------------------------------------------------------


def test_renew_extends_only_the_holders_running_lease() -> None:
    until = NOW + timedelta(minutes=1)
    change = t.renew("held", until, keeping=KEEPING)
    assert change.holds(running())
    assert not change.holds(running(lease_token="other"))
    assert not change.holds(queued(lease_token="held"))
    after = change.applied_to(running())
    assert after["lease_until"] == iso(until)
    assert after["expires_at"] == epoch(until + RETENTION)
    assert "lease_shard" not in after
    accepted = t.renew("held", until, NOW, keeping=KEEPING)
    after = accepted.applied_to(running())
    assert after["accepted_at"] == iso(NOW)
    assert after["lease_shard"] == SHARD


def test_finish_refuses_another_lease_token() -> None:
    change = t.finish("held", ExecutionStatus.SUCCEEDED, NOW, keeping=KEEPING)
    assert change.holds(running())
    assert not change.holds(running(lease_token="stolen"))
    assert not change.holds(running(status="SUCCEEDED"))
    assert not change.holds(None)


def test_finish_without_a_follow_up_drops_the_lease_and_any_old_error() -> None:
    before = running(accepted_at=iso(NOW), error="earlier", lease_shard=SHARD)
    change = t.finish(
        "held",
        ExecutionStatus.SUCCEEDED,
        NOW,
        result=ResultSummary(200, None),
        keeping=KEEPING,
    )
    after = change.applied_to(before)
    assert after["status"] == "SUCCEEDED"
    assert after["completed_at"] == iso(NOW)
    assert after["result"] == {"status_code": 200}
    for gone in ("lease_token", "lease_until", "lease_shard", "accepted_at", "error"):
        assert gone not in after
    assert after["callback_digest"] == "digest"  # a replayed callback is told it ended


def test_finish_with_a_follow_up_leaves_a_watched_short_lease_and_the_call() -> None:
    until = NOW + timedelta(minutes=2)
    call = HandlerCallRecord(HandlerCallRecord.COMPLETED, 5_000, None, ResultSummary(201, "ok"))
    before = running(call_status="INPROGRESS", call_in_progress_until=7, call_expires_at=1)
    change = t.finish(
        "held",
        ExecutionStatus.SUCCEEDED,
        NOW,
        follow_up_token="follow",
        follow_up_until=until,
        error="x" * 3000,
        call=call,
        keeping=KEEPING,
    )
    after = change.applied_to(before)
    assert (after["lease_token"], after["lease_until"]) == ("follow", iso(until))
    assert after["lease_shard"] == SHARD
    assert after["expires_at"] == epoch(until + RETENTION)
    assert len(after["error"]) == ERROR_LIMIT
    assert after["call_status"] == "COMPLETED"
    assert after["call_expires_at"] == 5_000
    assert "call_in_progress_until" not in after
    assert after["result"] == {"status_code": 201, "excerpt": "ok"}


def test_requeue_from_the_expected_status_under_a_new_watched_lease() -> None:
    change = t.requeue(
        "held",
        expected=ExecutionStatus.RUNNING,
        attempt=2,
        not_before=NOW + timedelta(hours=1),
        lease_until=NOW + timedelta(minutes=5),
        new_token="next",
        error="500",
        keeping=KEEPING,
    )
    assert change.holds(running())
    assert not change.holds(running(lease_token="other"))
    assert not change.holds(queued(lease_token="held"))
    after = change.applied_to(running(accepted_at=iso(NOW)))
    assert (after["status"], after["attempt"], after["lease_token"]) == ("QUEUED", 2, "next")
    assert after["next_attempt_at"] == iso(NOW + timedelta(hours=1))
    assert after["lease_shard"] == SHARD
    assert after["error"] == "500"
    assert "accepted_at" not in after
    assert after["expires_at"] == epoch(NOW + timedelta(hours=1) + RETENTION)
    from_queued = t.requeue(
        "held",
        expected=ExecutionStatus.QUEUED,
        attempt=2,
        not_before=NOW,
        lease_until=NOW,
        new_token="next",
        keeping=KEEPING,
    )
    assert from_queued.holds(queued(lease_token="held"))
    assert not from_queued.holds(running())
    assert "error" in from_queued.applied_to(queued(error="kept"))


def test_dead_letter_lists_a_running_attempt_in_its_tenants_partition() -> None:
    change = dead_letters.dead_letter(
        "held",
        now=NOW,
        error="boom",
        lease_until=NOW + timedelta(minutes=1),
        new_token="dlq",
        tenant_id="acme",
        keeping=KEEPING,
    )
    assert not change.holds(running(lease_token="other"))
    assert not change.holds(queued(lease_token="held"))
    after = change.applied_to(running(next_attempt_at=iso(NOW)))
    assert after["status"] == "FAILED"
    assert after["dead_letter"] == "dead-letter#acme"
    assert after["dead_lettered_at"] == iso(NOW)
    assert (after["lease_token"], after["lease_shard"]) == ("dlq", SHARD)
    assert "next_attempt_at" not in after


def test_dead_letter_undelivered_only_while_queued_for_that_attempt_and_token() -> None:
    change = dead_letters.dead_letter_undelivered(
        "held",
        attempt=2,
        now=NOW,
        error="lost",
        lease_until=NOW,
        new_token="dlq",
        tenant_id="acme",
        keeping=KEEPING,
    )
    assert change.holds(queued())
    assert not change.holds(queued(lease_token="resent"))
    assert not change.holds(queued(attempt=3))
    assert not change.holds(running(attempt=2))
    after = change.applied_to(queued())
    assert after["status"] == "FAILED"
    assert "next_attempt_at" not in after
    assert after["expires_at"] == queued()["expires_at"]  # left as the queued attempt set it


def test_set_aside_and_release_and_hand_to_reaper() -> None:
    aside = t.set_aside("raised", NOW)
    assert not aside.holds(None)
    after = aside.applied_to(queued())
    assert after["set_aside_reason"] == "raised"
    assert "lease_shard" not in after
    assert after["status"] == "QUEUED"

    release = t.release("held")
    assert release.holds(running(status="FAILED"))  # whatever the status
    assert not release.holds(running(lease_token="other"))
    after = release.applied_to(queued())
    assert not {"lease_token", "lease_until", "lease_shard"} & after.keys()

    watch = t.hand_to_reaper("held", keeping=KEEPING)
    assert watch.holds(running())
    assert not watch.holds(queued())
    assert not watch.holds(running(lease_token="moved-on"))
    assert watch.applied_to(running())["lease_shard"] == SHARD


def test_take_over_refuses_a_lease_not_yet_expired_or_held_by_another() -> None:
    lease_end = NOW + timedelta(seconds=30)
    change = t.take_over(
        "held",
        cutoff=lease_end,
        new_token="reaper",
        lease_until=NOW + timedelta(minutes=5),
        keeping=KEEPING,
    )
    assert not change.holds(running())  # ends exactly at the cutoff: not before it
    assert change.holds(running(lease_until=iso(lease_end - timedelta(milliseconds=1))))
    assert not change.holds(running(lease_token="renewed", lease_until=iso(NOW)))
    assert not change.holds({"lease_token": "held"})  # no lease end: not expired
    after = change.applied_to(running(lease_until=iso(NOW)))
    assert (after["lease_token"], after["lease_shard"]) == ("reaper", SHARD)
    assert after["status"] == "RUNNING"


# --- the handler-call record ------------------------------------------------------------


def test_save_call_only_on_my_running_attempt_with_a_replaceable_record() -> None:
    call = HandlerCallRecord(HandlerCallRecord.IN_PROGRESS, 2_000, 1_500_000)
    change = call_records.save_call("held", call, 1_000_000)
    assert change.holds(running())
    assert not change.holds(running(lease_token="other"))
    assert not change.holds(queued(lease_token="held"))
    assert not change.holds(
        running(call_status="INPROGRESS", call_expires_at=2_000, call_in_progress_until=1_100_000)
    )
    # An in-progress record without a deadline is replaced only once it expires.
    assert not change.holds(running(call_status="INPROGRESS", call_expires_at=2_000))
    assert change.holds(running(call_status="INPROGRESS", call_expires_at=999))
    assert change.applied_to(running())["call_in_progress_until"] == 1_500_000


def test_keep_call_unless_already_succeeded() -> None:
    call = HandlerCallRecord(HandlerCallRecord.COMPLETED, 5_000, None, ResultSummary(200, "hi"))
    change = call_records.keep_call(call)
    assert change.holds(running(lease_token="anyone"))
    assert change.holds(queued())
    assert not change.holds(running(status="SUCCEEDED"))
    assert not change.holds(None)
    after = change.applied_to(running(call_status="INPROGRESS", call_in_progress_until=1))
    assert after["call_status"] == "COMPLETED"
    assert "call_in_progress_until" not in after
    assert after["result"] == {"status_code": 200, "excerpt": "hi"}


def test_clear_call_only_my_in_progress_record() -> None:
    mine = running(call_status="INPROGRESS", call_expires_at=9, call_in_progress_until=100)
    assert call_records.clear_call(100).holds(mine)
    assert not call_records.clear_call(101).holds(mine)  # saved since by another call
    assert not call_records.clear_call(None).holds(mine)
    assert not call_records.clear_call(100).holds(mine | {"call_status": "COMPLETED"})
    without_deadline = running(call_status="INPROGRESS", call_expires_at=9)
    assert call_records.clear_call(None).holds(without_deadline)
    assert not call_records.clear_call(100).holds(without_deadline)
    after = call_records.clear_call(100).applied_to(mine)
    assert not {"call_status", "call_expires_at", "call_in_progress_until"} & after.keys()
    assert after["status"] == "RUNNING"


# --- redrive -----------------------------------------------------------------------------


def dead(**changes: Any) -> dict[str, Any]:
    return (
        running(
            status="FAILED",
            attempt=4,
            first_attempt=2,
            completed_at=iso(NOW),
            dead_letter="dead-letter#acme",
            dead_lettered_at=iso(NOW),
        )
        | changes
    )


def test_redrive_only_from_failed_dead_letters_of_that_tenant_and_bumps_attempt() -> None:
    later = NOW + timedelta(hours=1)
    change = dead_letters.redrive(
        "acme",
        now=later,
        lease_until=later + timedelta(minutes=5),
        new_token="again",
        keeping=KEEPING,
    )
    assert change.holds(dead())
    assert not change.holds(dead(dead_letter="dead-letter#other"))
    assert not change.holds(dead(status="QUEUED"))
    failed_not_listed = dead()
    del failed_not_listed["dead_letter"]
    assert not change.holds(failed_not_listed)
    after = change.applied_to(dead())
    assert (after["attempt"], after["first_attempt"]) == (5, 5)
    assert (after["status"], after["lease_token"]) == ("QUEUED", "again")
    assert after["next_attempt_at"] == iso(later)
    assert after["lease_shard"] == SHARD
    assert not {"dead_letter", "dead_lettered_at", "completed_at"} & after.keys()
    assert after["expires_at"] == epoch(later + timedelta(minutes=5) + RETENTION)
    # Once redriven it is no dead letter: a second redrive is refused.
    assert not change.holds(after)


def test_expiry_is_retention_after_the_latest_end() -> None:
    assert expiry(RETENTION, NOW, None, NOW + timedelta(hours=1)) == epoch(
        NOW + timedelta(hours=1) + RETENTION
    )
