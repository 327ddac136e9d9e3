"""The ExecutionStore contract: every transition carried out (``apply``), with the states
it refuses, and the queries; ``tests.contract.changes`` makes each change as the services do."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from dynacron.domain.coordination.tenants import DEFAULT_TENANT
from dynacron.domain.errors import InvalidRequest
from dynacron.domain.executions import transitions
from dynacron.domain.executions.execution import (
    Dispatch,
    Execution,
    ExecutionStatus,
    HandlerCallRecord,
    ResultSummary,
)
from dynacron.domain.tasks.task import shard_for
from dynacron.ports import AdapterSet, Applied, BeginResult, ExecutionStore
from tests.contract import changes
from tests.contract.builders import (
    RETRY,
    START,
    a_dispatch,
    a_task,
    call_completed,
    call_in_progress,
    epoch_ms,
)

SECOND = timedelta(seconds=1)
LEASE = 30 * SECOND
DIGEST = "callback-digest"
# Far enough ahead that every lease in these tests has ended by then.
LATER = START + timedelta(days=1)


def begin(
    store: ExecutionStore,
    dispatch: Dispatch,
    token: str,
    *,
    now: datetime = START,
    call: HandlerCallRecord | None = None,
    call_now: datetime | None = None,
) -> BeginResult:
    return changes.begin(
        store,
        dispatch,
        now=now,
        lease_until=now + LEASE,
        lease_token=token,
        callback_digest=DIGEST,
        retry=RETRY,
        tenant_id=dispatch.tenant_id or DEFAULT_TENANT,
        call=call,
        call_now_ms=epoch_ms(call_now or now),
    )


def enqueue(store: ExecutionStore, dispatch: Dispatch, token: str, lease_until: datetime) -> bool:
    return changes.enqueue(
        store,
        dispatch,
        retry=RETRY,
        lease_until=lease_until,
        lease_token=token,
        tenant_id=dispatch.tenant_id or DEFAULT_TENANT,
    )


def requeue(store: ExecutionStore, execution_id: str, token: str, attempt: int, new: str) -> bool:
    return changes.requeue(
        store,
        execution_id,
        token,
        expected=ExecutionStatus.RUNNING,
        attempt=attempt,
        not_before=START + 10 * SECOND,
        lease_until=START + 70 * SECOND,
        new_token=new,
        error="attempt failed",
    )


def watched(store: ExecutionStore, execution_id: str, cutoff: datetime = LATER) -> bool:
    """Whether the reaper would find the execution's lease ended before ``cutoff``."""
    shard = shard_for(execution_id, store.lease_shards)
    return execution_id in store.expired_leases(shard, cutoff, 1000)


def test_apply_returning_answers_with_the_record_as_it_is_or_was(adapters: AdapterSet) -> None:
    store = adapters.executions
    dispatch = a_dispatch()
    execution_id = dispatch.execution_id
    release = transitions.release("lease-a")
    # No record: refused, with nothing to say why
    assert store.apply_returning(execution_id, release) == Applied(False)
    call = call_in_progress(START)
    assert begin(store, dispatch, "lease-a", call=call).began

    # Refused: the execution as it is, with its handler-call record, unchanged
    running = store.get(execution_id)
    refused = store.apply_returning(execution_id, transitions.release("lease-x"))
    assert refused == Applied(False, running, call)
    assert store.get(execution_id) == running

    # Held: the execution as it now is
    held = store.apply_returning(execution_id, release)
    assert held.held
    assert held.execution is not None
    assert held.execution == store.get(execution_id)
    assert held.execution.lease_token is None
    assert held.call == call


def test_begin_starts_a_new_execution_once(adapters: AdapterSet) -> None:
    store = adapters.executions
    dispatch = a_dispatch("job", tenant_id="acme")
    assert store.get(dispatch.execution_id) is None

    # When a message begins an execution never seen before
    first = begin(store, dispatch, "lease-a")

    # Then it runs under that lease, as stored
    assert first.began
    assert first.held_call is None
    assert first.current is not None
    assert first.current.status is ExecutionStatus.RUNNING
    assert first.current.attempt == 1
    assert first.current.lease_token == "lease-a"
    assert first.current.lease_until == START + LEASE
    assert first.current.started_at == START
    assert first.current.tenant_id == "acme"
    assert first.current.callback_digest == DIGEST
    assert store.get(dispatch.execution_id) == first.current
    # A running attempt begun from a message is not watched: its message comes back.
    assert not watched(store, dispatch.execution_id)

    # When the same message is delivered again
    again = begin(store, dispatch, "lease-b", now=START + SECOND)

    # Then it is refused, and told what holds the execution
    assert not again.began
    assert again.current is not None
    assert again.current.lease_token == "lease-a"
    assert store.get(dispatch.execution_id) == first.current


def test_begin_refuses_a_finished_execution(adapters: AdapterSet) -> None:
    store = adapters.executions
    dispatch = a_dispatch()
    begin(store, dispatch, "lease-a")
    assert changes.finish(store, dispatch.execution_id, "lease-a", ExecutionStatus.SUCCEEDED, START)

    refused = begin(store, dispatch, "lease-b", now=START + SECOND)

    assert not refused.began
    assert refused.current is not None
    assert refused.current.status is ExecutionStatus.SUCCEEDED


def test_begin_takes_a_queued_execution_for_its_attempt_only(adapters: AdapterSet) -> None:
    store = adapters.executions
    dispatch = a_dispatch()

    # Given an execution queued for its first attempt (recorded before its message)
    assert enqueue(store, dispatch, "queued", START + LEASE)
    assert not enqueue(store, dispatch, "queued-again", START + LEASE)
    queued = store.get(dispatch.execution_id)
    assert queued is not None
    assert (queued.status, queued.attempt, queued.lease_token) == (
        ExecutionStatus.QUEUED,
        1,
        "queued",
    )
    assert queued.next_attempt_at == START
    assert watched(store, dispatch.execution_id)

    # When a message for another attempt arrives, it is refused
    stale = begin(store, a_dispatch(attempt=2), "lease-x")
    assert not stale.began
    assert stale.current is not None
    assert stale.current.status is ExecutionStatus.QUEUED

    # When the message for its attempt arrives, that attempt runs
    began = begin(store, dispatch, "lease-a", now=START + SECOND)
    assert began.began
    assert began.current is not None
    assert began.current.status is ExecutionStatus.RUNNING
    assert began.current.lease_token == "lease-a"
    assert began.current.next_attempt_at is None
    assert not watched(store, dispatch.execution_id)


def test_begin_with_a_call_record_saves_it(adapters: AdapterSet) -> None:
    store = adapters.executions
    dispatch = a_dispatch()
    call = call_in_progress(START)

    began = begin(store, dispatch, "lease-a", call=call)

    assert began.began
    assert began.held_call is None
    assert store.held_call(dispatch.execution_id) == call


def test_begin_with_a_call_record_keeps_one_that_still_counts(adapters: AdapterSet) -> None:
    store = adapters.executions
    dispatch = a_dispatch()
    execution_id = dispatch.execution_id
    first_call = call_in_progress(START, runs_for=30 * SECOND)

    # Given attempt 1 began with a call in progress until START+30s, then was requeued
    assert begin(store, dispatch, "lease-1", call=first_call).began
    assert requeue(store, execution_id, "lease-1", 2, "queued-2")

    # When attempt 2 begins while that call is still in progress
    second = begin(
        store,
        a_dispatch(attempt=2),
        "lease-2",
        now=START + 10 * SECOND,
        call=call_in_progress(START + 10 * SECOND),
    )

    # Then it begins, but the record held is the first call's, which still counts
    assert second.began
    assert second.current is not None
    assert second.current.attempt == 2
    assert second.current.lease_token == "lease-2"
    assert second.held_call == first_call
    assert store.held_call(execution_id) == first_call

    # When attempt 3 begins after the first call's time ran out
    assert requeue(store, execution_id, "lease-2", 3, "queued-3")
    third_call = call_in_progress(START + 40 * SECOND)
    third = begin(store, a_dispatch(attempt=3), "lease-3", now=START + 40 * SECOND, call=third_call)

    # Then its own record replaces the expired one
    assert third.began
    assert third.held_call is None
    assert store.held_call(execution_id) == third_call


def test_holder_writes_refuse_another_token(adapters: AdapterSet) -> None:
    store = adapters.executions
    dispatch = a_dispatch()
    execution_id = dispatch.execution_id
    running = begin(store, dispatch, "lease-a").current

    # When anyone but the holder renews, finishes, requeues or dead-letters it
    assert not changes.renew(store, execution_id, "lease-x", START + 5 * LEASE)
    assert not changes.finish(store, execution_id, "lease-x", ExecutionStatus.SUCCEEDED, START)
    assert not requeue(store, execution_id, "lease-x", 2, "queued-2")
    assert not changes.dead_letter(
        store,
        execution_id,
        "lease-x",
        now=START,
        error="boom",
        lease_until=START + LEASE,
        new_token="dead",
        tenant_id=DEFAULT_TENANT,
    )
    # or the holder requeues expecting a state it is not in
    assert not changes.requeue(
        store,
        execution_id,
        "lease-a",
        expected=ExecutionStatus.QUEUED,
        attempt=2,
        not_before=START,
        lease_until=START + LEASE,
        new_token="queued-2",
    )

    # Then nothing changed
    assert store.get(execution_id) == running


def test_renew_extends_the_lease_and_a_202_is_watched(adapters: AdapterSet) -> None:
    store = adapters.executions
    dispatch = a_dispatch()
    execution_id = dispatch.execution_id
    begin(store, dispatch, "lease-a")

    assert changes.renew(store, execution_id, "lease-a", START + 2 * LEASE)
    renewed = store.get(execution_id)
    assert renewed is not None
    assert renewed.lease_until == START + 2 * LEASE
    assert renewed.accepted_at is None
    assert not watched(store, execution_id)

    # When the handler answers 202, the lease outlives the message: the reaper watches it
    assert changes.renew(
        store, execution_id, "lease-a", START + 3 * LEASE, accepted_at=START + SECOND
    )
    accepted = store.get(execution_id)
    assert accepted is not None
    assert accepted.accepted_at == START + SECOND
    assert watched(store, execution_id)
    assert not watched(store, execution_id, cutoff=START + 3 * LEASE)


def test_finish_with_a_follow_up_lease_then_release(adapters: AdapterSet) -> None:
    store = adapters.executions
    dispatch = a_dispatch()
    execution_id = dispatch.execution_id
    begin(store, dispatch, "lease-a")
    done = START + 5 * SECOND
    assert changes.renew(store, execution_id, "lease-a", START + 2 * LEASE, accepted_at=START)

    # When the holder finishes it, keeping a short lease for what its end owes
    assert changes.finish(
        store,
        execution_id,
        "lease-a",
        ExecutionStatus.SUCCEEDED,
        done,
        follow_up_token="follow-up",
        follow_up_until=done + LEASE,
        result=ResultSummary(status_code=200, excerpt="ok"),
    )

    # Then it is final under the follow-up lease, which the reaper watches
    finished = store.get(execution_id)
    assert finished is not None
    assert finished.status is ExecutionStatus.SUCCEEDED
    assert finished.completed_at == done
    assert finished.result == ResultSummary(status_code=200, excerpt="ok")
    assert finished.accepted_at is None
    assert (finished.lease_token, finished.lease_until) == ("follow-up", done + LEASE)
    assert watched(store, execution_id)
    assert not changes.finish(store, execution_id, "lease-a", ExecutionStatus.SUCCEEDED, done)
    assert not changes.renew(store, execution_id, "follow-up", done + 2 * LEASE)

    # When the follow-up is done, the lease goes (only for its token)
    assert not changes.release(store, execution_id, "lease-a")
    assert changes.release(store, execution_id, "follow-up")
    released = store.get(execution_id)
    assert released is not None
    assert released.status is ExecutionStatus.SUCCEEDED
    assert (released.lease_token, released.lease_until) == (None, None)
    assert not watched(store, execution_id)
    assert not changes.release(store, execution_id, "follow-up")


def test_finish_without_a_follow_up_drops_the_lease(adapters: AdapterSet) -> None:
    store = adapters.executions
    dispatch = a_dispatch()
    begin(store, dispatch, "lease-a")

    assert changes.finish(
        store, dispatch.execution_id, "lease-a", ExecutionStatus.SKIPPED, START, error="task paused"
    )

    skipped = store.get(dispatch.execution_id)
    assert skipped is not None
    assert (skipped.status, skipped.error) == (ExecutionStatus.SKIPPED, "task paused")
    assert (skipped.lease_token, skipped.lease_until) == (None, None)
    assert not watched(store, dispatch.execution_id)


def test_requeue_queues_the_next_attempt_under_a_new_lease(adapters: AdapterSet) -> None:
    store = adapters.executions
    dispatch = a_dispatch()
    execution_id = dispatch.execution_id
    begin(store, dispatch, "lease-a")

    assert requeue(store, execution_id, "lease-a", 2, "queued-2")

    queued = store.get(execution_id)
    assert queued is not None
    assert (queued.status, queued.attempt) == (ExecutionStatus.QUEUED, 2)
    assert queued.next_attempt_at == START + 10 * SECOND
    assert (queued.lease_token, queued.lease_until) == ("queued-2", START + 70 * SECOND)
    assert queued.error == "attempt failed"
    assert watched(store, execution_id)
    assert not changes.renew(store, execution_id, "lease-a", LATER)
    # The next attempt begins from it; a stale message of attempt 1 does not
    assert not begin(store, dispatch, "lease-b").began
    assert begin(store, a_dispatch(attempt=2), "lease-b").began


def test_dead_letter_lists_it_for_its_tenant_until_released(adapters: AdapterSet) -> None:
    store = adapters.executions
    dispatch = a_dispatch(tenant_id="acme")
    execution_id = dispatch.execution_id
    begin(store, dispatch, "lease-a")
    failed_at = START + 5 * SECOND

    # When the holder dead-letters it
    assert changes.dead_letter(
        store,
        execution_id,
        "lease-a",
        now=failed_at,
        error="no attempts left",
        lease_until=failed_at + LEASE,
        new_token="dead-copy",
        tenant_id="acme",
    )

    # Then it is FAILED, listed for its tenant only, and watched until its copy is sent
    failed = store.get(execution_id)
    assert failed is not None
    assert (failed.status, failed.error) == (ExecutionStatus.FAILED, "no attempts left")
    assert failed.completed_at == failed_at
    assert failed.dead_lettered_at == failed_at
    assert failed.lease_token == "dead-copy"
    assert [e.execution_id for e in store.dead_letters("acme", 10, None).items] == [execution_id]
    assert store.dead_letters("other", 10, None).items == []
    assert watched(store, execution_id)
    assert changes.release(store, execution_id, "dead-copy")
    assert not watched(store, execution_id)
    assert [e.execution_id for e in store.dead_letters("acme", 10, None).items] == [execution_id]


def test_take_over_only_after_the_cutoff_and_only_with_the_seen_token(
    adapters: AdapterSet,
) -> None:
    store = adapters.executions
    dispatch = a_dispatch()
    execution_id = dispatch.execution_id
    begin(store, dispatch, "lease-a")  # until START + 30 s

    def take_over(seen: str, cutoff: datetime, new: str) -> bool:
        return changes.take_over(
            store, execution_id, seen, cutoff=cutoff, new_token=new, lease_until=cutoff + LEASE
        )

    # When the reaper tries before the lease ended (by its cutoff), or with another token
    assert not take_over("lease-a", START + LEASE, "reaper-1")
    assert not take_over("lease-a", START + 10 * SECOND, "reaper-1")
    assert not take_over("lease-x", START + 2 * LEASE, "reaper-1")
    assert store.get(execution_id) is not None
    assert changes.renew(store, execution_id, "lease-a", START + LEASE)  # still the holder's

    # When it tries after the cutoff with the token it saw
    assert take_over("lease-a", START + 2 * LEASE, "reaper-1")

    # Then it holds the lease, watched, and the old holder holds nothing
    taken = store.get(execution_id)
    assert taken is not None
    assert (taken.lease_token, taken.lease_until) == ("reaper-1", START + 3 * LEASE)
    assert watched(store, execution_id)
    assert not changes.renew(store, execution_id, "lease-a", LATER)
    assert not changes.finish(store, execution_id, "lease-a", ExecutionStatus.SUCCEEDED, START)
    assert not take_over("lease-a", START + 5 * LEASE, "reaper-2")


def test_hand_to_reaper_puts_a_live_lease_in_its_view(adapters: AdapterSet) -> None:
    store = adapters.executions
    dispatch = a_dispatch()
    execution_id = dispatch.execution_id
    begin(store, dispatch, "lease-a")
    assert not watched(store, execution_id)

    assert not changes.hand_to_reaper(store, execution_id, "lease-x")
    assert not watched(store, execution_id)
    assert changes.hand_to_reaper(store, execution_id, "lease-a")

    watching = store.get(execution_id)
    assert watching is not None
    assert watching.lease_token == "lease-a"
    assert watched(store, execution_id)
    # A final execution is never watched again for its old holder.
    assert changes.finish(store, execution_id, "lease-a", ExecutionStatus.SUCCEEDED, START)
    assert not changes.hand_to_reaper(store, execution_id, "lease-a")


def dead_letter_of(store: ExecutionStore, dispatch: Dispatch, failed_at: datetime) -> None:
    """Begin ``dispatch`` and dead-letter it at ``failed_at``, its copy already sent."""
    tenant = dispatch.tenant_id or DEFAULT_TENANT
    assert begin(store, dispatch, "lease-a", now=failed_at - SECOND).began
    assert changes.dead_letter(
        store,
        dispatch.execution_id,
        "lease-a",
        now=failed_at,
        error="no attempts left",
        lease_until=failed_at + LEASE,
        new_token="dead-copy",
        tenant_id=tenant,
    )
    assert changes.release(store, dispatch.execution_id, "dead-copy")


def test_redrive_only_a_dead_letter_of_its_tenant(adapters: AdapterSet) -> None:
    store = adapters.executions
    dispatch = a_dispatch(tenant_id="acme", attempt=3)
    execution_id = dispatch.execution_id
    dead_letter_of(store, dispatch, START)
    redriven_at = START + timedelta(hours=1)

    def redrive(tenant_id: str) -> Execution | None:
        return changes.redrive(
            store,
            tenant_id,
            execution_id,
            now=redriven_at,
            lease_until=redriven_at + LEASE,
            new_token="redriven",
        )

    # When another tenant asks for it, nothing happens
    assert redrive("other") is None
    unchanged = store.get(execution_id)
    assert unchanged is not None
    assert unchanged.status is ExecutionStatus.FAILED

    # When its tenant asks, it is queued again: next attempt, a fresh retry budget
    redriven = redrive("acme")
    assert redriven is not None
    assert redriven == store.get(execution_id)
    assert redriven.status is ExecutionStatus.QUEUED
    assert (redriven.attempt, redriven.first_attempt) == (4, 4)
    assert redriven.next_attempt_at == redriven_at
    assert (redriven.lease_token, redriven.lease_until) == ("redriven", redriven_at + LEASE)
    assert (redriven.dead_lettered_at, redriven.completed_at) == (None, None)
    assert watched(store, execution_id)
    assert store.dead_letters("acme", 10, None).items == []

    # And it is no dead letter any more
    assert redrive("acme") is None
    assert (
        changes.redrive(
            store, "acme", "never_19700101T000000000Z", now=START, lease_until=LATER, new_token="x"
        )
        is None
    )


def test_record_undelivered_records_a_dead_letter_once(adapters: AdapterSet) -> None:
    store = adapters.executions
    dispatch = a_dispatch(tenant_id="acme")

    def record(error: str, token: str) -> bool:
        return changes.record_undelivered(
            store,
            dispatch,
            now=START,
            error=error,
            retry=RETRY,
            tenant_id="acme",
            lease_until=START + LEASE,
            lease_token=token,
        )

    assert record("undeliverable", "dead-copy")
    assert not record("read twice", "dead-copy-2")

    failed = store.get(dispatch.execution_id)
    assert failed is not None
    assert (failed.status, failed.error) == (ExecutionStatus.FAILED, "undeliverable")
    assert (failed.tenant_id, failed.lease_token) == ("acme", "dead-copy")
    assert [e.execution_id for e in store.dead_letters("acme", 10, None).items] == [
        dispatch.execution_id
    ]
    assert watched(store, dispatch.execution_id)
    # An execution that began first is not recorded undelivered.
    other = a_dispatch("other-job")
    begin(store, other, "lease-a")
    assert not changes.record_undelivered(
        store,
        other,
        now=START,
        error="late",
        retry=RETRY,
        tenant_id=DEFAULT_TENANT,
        lease_until=START + LEASE,
        lease_token="dead-copy",
    )


def test_dead_letter_undelivered_only_while_queued_for_that_attempt_and_token(
    adapters: AdapterSet,
) -> None:
    store = adapters.executions
    dispatch = a_dispatch(tenant_id="acme")
    execution_id = dispatch.execution_id
    assert enqueue(store, dispatch, "queued", START + LEASE)

    def dead_letter_undelivered(seen: str, attempt: int) -> bool:
        return changes.dead_letter_undelivered(
            store,
            execution_id,
            seen,
            attempt=attempt,
            now=START + SECOND,
            error="the queue gave up on it",
            lease_until=START + 2 * LEASE,
            new_token="dead-copy",
            tenant_id="acme",
        )

    assert not dead_letter_undelivered("resent", 1)
    assert not dead_letter_undelivered("queued", 2)
    assert dead_letter_undelivered("queued", 1)

    failed = store.get(execution_id)
    assert failed is not None
    assert failed.status is ExecutionStatus.FAILED
    assert failed.lease_token == "dead-copy"
    assert failed.next_attempt_at is None
    assert [e.execution_id for e in store.dead_letters("acme", 10, None).items] == [execution_id]
    assert not dead_letter_undelivered("queued", 1)

    # A queued attempt that began meanwhile is not dead-lettered.
    running = a_dispatch("running-job")
    assert enqueue(store, running, "queued", START + LEASE)
    begin(store, running, "lease-a")
    assert not changes.dead_letter_undelivered(
        store,
        running.execution_id,
        "queued",
        attempt=1,
        now=START,
        error="late",
        lease_until=START + LEASE,
        new_token="dead-copy",
        tenant_id=DEFAULT_TENANT,
    )


def test_call_records_save_keep_and_clear(adapters: AdapterSet) -> None:
    store = adapters.executions
    dispatch = a_dispatch()
    execution_id = dispatch.execution_id
    begin(store, dispatch, "lease-a")
    first = call_in_progress(START, runs_for=30 * SECOND)

    # save_call: only for the attempt the token began
    assert not changes.save_call(store, execution_id, "lease-x", first, epoch_ms(START)).began
    saved = changes.save_call(store, execution_id, "lease-a", first, epoch_ms(START))
    assert saved.began
    assert saved.held_call is None
    assert store.held_call(execution_id) == first

    # A second call while the first is in progress: the first still counts
    second = call_in_progress(START + 10 * SECOND)
    held = changes.save_call(store, execution_id, "lease-a", second, epoch_ms(START + 10 * SECOND))
    assert held.began
    assert held.held_call == first
    assert store.held_call(execution_id) == first

    # clear_call: only the record saved with that in-progress deadline
    assert not changes.clear_call(store, execution_id, epoch_ms(START + 99 * SECOND))
    assert not changes.clear_call(store, execution_id, None)
    assert changes.clear_call(store, execution_id, first.in_progress_until_ms)
    assert store.held_call(execution_id) is None
    assert not changes.clear_call(store, execution_id, first.in_progress_until_ms)

    # keep_call: a success is kept whoever holds the lease, until the execution succeeded
    completed = call_completed(START + 20 * SECOND)
    assert changes.keep_call(store, execution_id, completed)
    assert store.held_call(execution_id) == completed
    assert not changes.clear_call(store, execution_id, None)  # a completed record is never cleared
    assert changes.finish(store, execution_id, "lease-a", ExecutionStatus.SUCCEEDED, START)
    assert not changes.keep_call(store, execution_id, call_completed(START + 30 * SECOND))
    assert store.held_call(execution_id) == completed
    assert not changes.keep_call(store, "missing_20261130T120000000Z", completed)


def test_set_aside_takes_it_out_of_the_reapers_view(adapters: AdapterSet) -> None:
    store = adapters.executions
    dispatch = a_dispatch()
    assert enqueue(store, dispatch, "queued", START + LEASE)
    assert watched(store, dispatch.execution_id)

    assert changes.set_aside(store, dispatch.execution_id, "handling it raised", START)

    assert not watched(store, dispatch.execution_id)
    kept = store.get(dispatch.execution_id)
    assert kept is not None
    assert kept.status is ExecutionStatus.QUEUED
    assert not changes.set_aside(store, "missing_20261130T120000000Z", "nothing there", START)


def test_expired_leases_by_shard_before_the_cutoff(adapters: AdapterSet) -> None:
    store = adapters.executions
    # Given 24 queued executions whose leases end a second apart
    ends: dict[str, datetime] = {}
    for n in range(24):
        dispatch = a_dispatch(f"job-{n}")
        ends[dispatch.execution_id] = START + (n + 1) * SECOND
        assert enqueue(store, dispatch, f"queued-{n}", ends[dispatch.execution_id])
    cutoff = START + 12 * SECOND + SECOND / 2

    # When the reaper asks each shard for leases ended before the cutoff
    found: dict[int, list[str]] = {
        shard: store.expired_leases(shard, cutoff, 100) for shard in range(store.lease_shards)
    }

    # Then each shard answers exactly its own expired ones
    for shard, ids in found.items():
        expected = {
            execution_id
            for execution_id, end in ends.items()
            if end < cutoff and shard_for(execution_id, store.lease_shards) == shard
        }
        assert sorted(ids) == sorted(expected)
        assert ids == sorted(ids, key=ends.__getitem__)  # the earliest end first
    assert sum(len(ids) for ids in found.values()) == 12
    # and no more than asked for
    busiest = max(found, key=lambda shard: len(found[shard]))
    assert len(found[busiest]) >= 2
    assert len(store.expired_leases(busiest, cutoff, 1)) == 1


def test_record_skipped_once(adapters: AdapterSet) -> None:
    store = adapters.executions
    task = a_task("job", tenant_id="acme")
    execution_id = a_dispatch("job").execution_id

    assert changes.record_skipped(store, task, execution_id, START, "overlap", START + SECOND)
    assert not changes.record_skipped(store, task, execution_id, START, "again", START + SECOND)

    skipped = store.get(execution_id)
    assert skipped is not None
    assert (skipped.status, skipped.error, skipped.tenant_id) == (
        ExecutionStatus.SKIPPED,
        "overlap",
        "acme",
    )
    assert skipped.completed_at == START + SECOND
    assert not watched(store, execution_id)


def test_dead_letters_are_paged_newest_first(adapters: AdapterSet) -> None:
    store = adapters.executions
    # Given five dead letters of one tenant, a minute apart, and one of another
    ids = []
    for n in range(5):
        dispatch = a_dispatch(f"job-{n}", tenant_id="acme")
        dead_letter_of(store, dispatch, START + timedelta(minutes=n))
        ids.append(dispatch.execution_id)
    dead_letter_of(store, a_dispatch("theirs", tenant_id="other"), START)

    # When they are listed two at a time
    pages = []
    token: str | None = None
    while True:
        page = store.dead_letters("acme", 2, token)
        pages.append([e.execution_id for e in page.items])
        token = page.next_token
        if token is None:
            break

    # Then every one comes once, newest first
    assert [i for page in pages for i in page] == list(reversed(ids))
    assert all(len(page) <= 2 for page in pages)
    assert len(pages[0]) == 2
    # A token of one tenant's listing is no use in another's
    first_token = store.dead_letters("acme", 2, None).next_token
    assert first_token is not None
    with pytest.raises(InvalidRequest):
        store.dead_letters("other", 2, first_token)
    # nor in a task's history
    with pytest.raises(InvalidRequest):
        store.list_for_task("job-1", 2, first_token)


def test_list_for_task_is_paged_newest_first(adapters: AdapterSet) -> None:
    store = adapters.executions
    # Given five executions of one task, an hour apart, and one of another task
    occurrences = [START + timedelta(hours=n) for n in range(5)]
    for at in occurrences:
        assert enqueue(store, a_dispatch("job", at=at), f"queued-{at:%H}", at + LEASE)
    assert enqueue(store, a_dispatch("other-job"), "queued", START + LEASE)

    listed: list[datetime] = []
    token: str | None = None
    pages = 0
    while True:
        page = store.list_for_task("job", 2, token)
        listed += [e.scheduled_at for e in page.items]
        assert all(e.task_id == "job" for e in page.items)
        pages += 1
        token = page.next_token
        if token is None:
            break

    assert listed == sorted(occurrences, reverse=True)
    assert pages >= 3
    first_token = store.list_for_task("job", 2, None).next_token
    assert first_token is not None
    with pytest.raises(InvalidRequest):
        store.list_for_task("other-job", 2, first_token)


def test_tenant_of_a_dispatch(adapters: AdapterSet) -> None:
    store = adapters.executions
    assert changes.tenant_of(store, a_dispatch("job", tenant_id="acme")) == "acme"
    # A message sent before messages named their tenant: as another execution recorded it
    old_message = Dispatch(
        execution_id=a_dispatch("job").execution_id, task_id="job", scheduled_at=START
    )
    assert changes.tenant_of(store, old_message) == DEFAULT_TENANT
    begin(store, a_dispatch("job", at=START - timedelta(hours=1), tenant_id="acme"), "lease-a")
    assert changes.tenant_of(store, old_message) == "acme"
