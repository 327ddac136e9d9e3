"""Retry policy: how many attempts, how long between them, and what is worth retrying.

Delays are exponential with *full jitter*: after attempt ``n`` the wait is a whole
number of seconds drawn uniformly from ``[0, min(max_delay, base * 2**(n-1))]``,
so a thousand tasks failing together spread their retries over the whole window
instead of retrying together. The draw is seeded by ``(execution_id, attempt)``:
the same attempt of the same execution always waits the same time, on any machine,
which makes retries reproducible in tests and explainable in production.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime

from dynacron.domain.coordination.limits import parse_retry_after
from dynacron.domain.errors import InvalidRequest

MAX_ATTEMPTS_LIMIT = 100
MAX_DELAY_LIMIT_SECONDS = 24 * 3600
# Client errors that may succeed later: timeout, too early, too many requests.
RETRYABLE_CLIENT_ERRORS = frozenset({408, 425, 429})
# Answers whose Retry-After header says when to come back.
RETRY_AFTER_STATUSES = frozenset({429, 503})


@dataclass(frozen=True)
class RetryPolicy:
    """Per task: at most ``max_attempts`` attempts in all (the first one included)."""

    max_attempts: int = 5
    base_delay_seconds: int = 5
    max_delay_seconds: int = 600

    def __post_init__(self) -> None:
        if not 1 <= self.max_attempts <= MAX_ATTEMPTS_LIMIT:
            raise InvalidRequest(
                "retry.max_attempts", f"must be between 1 and {MAX_ATTEMPTS_LIMIT}"
            )
        if not 1 <= self.base_delay_seconds <= MAX_DELAY_LIMIT_SECONDS:
            raise InvalidRequest(
                "retry.base_delay_seconds", f"must be between 1 and {MAX_DELAY_LIMIT_SECONDS}"
            )
        if not self.base_delay_seconds <= self.max_delay_seconds <= MAX_DELAY_LIMIT_SECONDS:
            raise InvalidRequest(
                "retry.max_delay_seconds",
                f"must be between base_delay_seconds ({self.base_delay_seconds}) "
                f"and {MAX_DELAY_LIMIT_SECONDS}",
            )

    def ceiling(self, attempt: int) -> int:
        """The longest wait after attempt ``attempt`` failed: the exponential envelope."""
        if attempt >= 32:  # 2**31 seconds is far past any cap; avoid huge integers
            return self.max_delay_seconds
        return min(self.max_delay_seconds, self.base_delay_seconds * (1 << (attempt - 1)))

    def backoff(self, execution_id: str, attempt: int) -> int:
        """The wait after attempt ``attempt`` failed: full jitter under the ceiling."""
        draw = random.Random(f"{execution_id}#{attempt}")
        return int(draw.randint(0, self.ceiling(attempt)))


@dataclass(frozen=True)
class AttemptFailure:
    """Why an attempt failed, and whether trying again could help."""

    error: str
    retryable: bool = True
    retry_after_seconds: int | None = None


@dataclass(frozen=True)
class RetryDecision:
    """``retry_in_seconds`` None means stop: the execution is dead-lettered."""

    retry_in_seconds: int | None
    reason: str


def decide(
    policy: RetryPolicy,
    failure: AttemptFailure,
    *,
    execution_id: str,
    attempt: int,
    attempts_used: int,
) -> RetryDecision:
    """What follows a failed attempt: a retry after some delay, or a dead letter.

    ``attempts_used`` counts attempts since the execution was (re)driven, so that
    a redriven execution gets a fresh budget while its attempt numbers keep rising.
    """
    if not failure.retryable:
        return RetryDecision(None, "the failure cannot succeed on a retry")
    if attempts_used >= policy.max_attempts:
        return RetryDecision(None, f"all {policy.max_attempts} attempts failed")
    delay = policy.backoff(execution_id, attempt)
    if failure.retry_after_seconds is not None:
        # Never earlier than the handler asked, never later than the policy allows.
        delay = min(max(delay, failure.retry_after_seconds), policy.max_delay_seconds)
    return RetryDecision(delay, f"retry {attempts_used + 1} of {policy.max_attempts}")


def failure_for_status(
    status_code: int,
    error: str,
    retry_after: str | None,
    now: datetime,
    max_retry_after_seconds: int,
) -> AttemptFailure:
    """Classify a non-success HTTP answer.

    5xx and 408/425/429 may succeed later; every other answer (other 4xx, and 3xx,
    since redirects are not followed) will not, so it fails at once. A
    ``Retry-After`` on a 429 or 503 is honoured up to ``max_retry_after_seconds``.
    """
    retryable = status_code >= 500 or status_code in RETRYABLE_CLIENT_ERRORS
    wait = None
    if retry_after is not None and status_code in RETRY_AFTER_STATUSES:
        wait = parse_retry_after(retry_after, now, max_retry_after_seconds)
    return AttemptFailure(error=error, retryable=retryable, retry_after_seconds=wait)
