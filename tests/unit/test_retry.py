from __future__ import annotations

import statistics
from datetime import UTC, datetime

import pytest

from dynacron.domain.errors import InvalidRequest
from dynacron.domain.executions.retry import (
    AttemptFailure,
    RetryPolicy,
    decide,
    failure_for_status,
)

NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)


def test_the_ceiling_doubles_from_the_base_up_to_the_cap() -> None:
    policy = RetryPolicy(max_attempts=10, base_delay_seconds=5, max_delay_seconds=600)
    assert [policy.ceiling(n) for n in range(1, 10)] == [5, 10, 20, 40, 80, 160, 320, 600, 600]
    assert policy.ceiling(500) == 600


def test_backoff_is_full_jitter_under_the_ceiling_and_reproducible() -> None:
    policy = RetryPolicy(max_attempts=10, base_delay_seconds=4, max_delay_seconds=600)
    for attempt in range(1, 8):
        draws = [policy.backoff(f"task_{i}", attempt) for i in range(400)]
        ceiling = policy.ceiling(attempt)
        assert all(0 <= d <= ceiling for d in draws)
        # Spread over the whole window, not bunched: a thousand tasks failing
        # together do not retry together.
        assert min(draws) <= ceiling * 0.1
        assert max(draws) >= ceiling * 0.9
        assert statistics.mean(draws) == pytest.approx(ceiling / 2, rel=0.15)
    assert policy.backoff("task_1", 3) == policy.backoff("task_1", 3)


def test_mean_delay_grows_with_the_attempt() -> None:
    policy = RetryPolicy()
    means = [
        statistics.mean(policy.backoff(f"e{i}", attempt) for i in range(300))
        for attempt in range(1, 6)
    ]
    assert means == sorted(means)
    assert means[-1] > 8 * means[0]


def test_a_retryable_failure_is_retried_until_the_attempts_run_out() -> None:
    policy = RetryPolicy(max_attempts=3)
    failure = AttemptFailure("boom")
    first = decide(policy, failure, execution_id="e", attempt=1, attempts_used=1)
    assert first.retry_in_seconds == policy.backoff("e", 1)
    assert decide(policy, failure, execution_id="e", attempt=2, attempts_used=2).retry_in_seconds
    last = decide(policy, failure, execution_id="e", attempt=3, attempts_used=3)
    assert last.retry_in_seconds is None
    assert "all 3 attempts failed" in last.reason


def test_a_failure_that_cannot_succeed_is_not_retried() -> None:
    decision = decide(
        RetryPolicy(),
        AttemptFailure("bad request", retryable=False),
        execution_id="e",
        attempt=1,
        attempts_used=1,
    )
    assert decision.retry_in_seconds is None


def test_retry_after_is_honoured_and_capped() -> None:
    policy = RetryPolicy(base_delay_seconds=1, max_delay_seconds=60)
    wait = AttemptFailure("slow down", retry_after_seconds=42)
    assert decide(policy, wait, execution_id="e", attempt=1, attempts_used=1).retry_in_seconds == 42
    too_long = AttemptFailure("slow down", retry_after_seconds=3600)
    decision = decide(policy, too_long, execution_id="e", attempt=1, attempts_used=1)
    assert decision.retry_in_seconds == 60


@pytest.mark.parametrize(
    ("status", "retryable"),
    [
        (400, False),
        (401, False),
        (403, False),
        (404, False),
        (409, False),
        (422, False),
        (301, False),
        (408, True),
        (425, True),
        (429, True),
        (500, True),
        (502, True),
        (503, True),
    ],
)
def test_which_answers_are_worth_retrying(status: int, retryable: bool) -> None:
    assert failure_for_status(status, "x", None, NOW, 3600).retryable is retryable


def test_retry_after_is_read_only_from_429_and_503() -> None:
    assert failure_for_status(429, "x", "30", NOW, 3600).retry_after_seconds == 30
    assert (
        failure_for_status(503, "x", "Mon, 30 Nov 2026 12:02:00 GMT", NOW, 3600).retry_after_seconds
        == 120
    )
    assert failure_for_status(500, "x", "30", NOW, 3600).retry_after_seconds is None


def test_retry_after_is_capped_and_a_non_ascii_number_is_ignored() -> None:
    assert failure_for_status(429, "x", "999999999", NOW, 60).retry_after_seconds == 60
    assert failure_for_status(429, "x", "\u00b2", NOW, 60).retry_after_seconds is None


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"max_attempts": 0}, "retry.max_attempts"),
        ({"max_attempts": 101}, "retry.max_attempts"),
        ({"base_delay_seconds": 0}, "retry.base_delay_seconds"),
        ({"base_delay_seconds": 10, "max_delay_seconds": 5}, "retry.max_delay_seconds"),
        ({"max_delay_seconds": 86401}, "retry.max_delay_seconds"),
    ],
)
def test_a_policy_that_makes_no_sense_is_refused(fields: dict[str, int], field: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        RetryPolicy(**fields)
    assert refused.value.field == field
