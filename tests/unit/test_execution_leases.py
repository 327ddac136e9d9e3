from __future__ import annotations

from datetime import UTC, datetime, timedelta

from dynacron.domain.executions.execution import (
    Execution,
    ExecutionStatus,
    LeaseTerms,
    new_token,
    token_digest,
    token_matches,
)

NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
TERMS = LeaseTerms(
    running=timedelta(seconds=30),
    awaiting_callback=timedelta(minutes=10),
    pickup_grace=timedelta(minutes=5),
    clock_skew=timedelta(seconds=5),
)


def test_a_lease_is_abandoned_only_a_skew_margin_after_it_ends() -> None:
    lease_until = NOW
    assert not lease_until < TERMS.abandoned_before(NOW + timedelta(seconds=5))
    assert lease_until < TERMS.abandoned_before(NOW + timedelta(seconds=5, milliseconds=1))


def test_heartbeats_come_often_enough_to_survive_lost_beats_within_the_margin() -> None:
    # Three beats fit in the part of the lease the holder trusts by its own clock.
    assert TERMS.heartbeat_interval * 3 <= TERMS.running - TERMS.clock_skew
    tiny = LeaseTerms(
        timedelta(seconds=1), TERMS.awaiting_callback, TERMS.pickup_grace, TERMS.running
    )
    assert tiny.heartbeat_interval >= timedelta(milliseconds=50)


def test_a_queued_attempt_must_start_within_the_pickup_grace() -> None:
    assert TERMS.pickup_deadline(NOW) == NOW + timedelta(minutes=5)


def test_callback_tokens_are_stored_as_digests_and_compared_exactly() -> None:
    token = new_token()
    digest = token_digest(token)
    assert token not in digest
    assert token_matches(token, digest)
    assert not token_matches(token + "x", digest)
    assert not token_matches(new_token(), digest)
    assert not token_matches(token, None)
    assert new_token() != new_token()


def test_attempts_used_count_from_the_last_redrive() -> None:
    execution = Execution(
        execution_id="t_1",
        task_id="t",
        scheduled_at=NOW,
        status=ExecutionStatus.RUNNING,
        attempt=7,
        first_attempt=6,
    )
    assert execution.attempts_used == 2
    assert ExecutionStatus.QUEUED.is_final is False
    assert ExecutionStatus.FAILED.is_final is True
