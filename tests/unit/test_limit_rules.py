"""The pure limit rules: GCRA token bucket, breaker transitions, host pauses."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from dynacron.domain.coordination.limits import (
    BreakerPolicy,
    BreakerState,
    HostState,
    RateLimit,
    TaskLimits,
    Verdict,
    admit,
    after_failure,
    after_probe_taken,
    after_retry_after,
    after_success,
    host_of,
    spread,
    take_token,
)
from dynacron.domain.errors import InvalidRequest

NOW = datetime(2026, 11, 30, 0, 0, tzinfo=UTC)
POLICY = BreakerPolicy(failure_threshold=3, cool_down=timedelta(seconds=10))


def test_a_bucket_allows_its_burst_at_once_then_one_token_per_interval() -> None:
    limit = RateLimit(per_second=2, burst=3)
    tat, allowed = None, 0
    for _ in range(10):
        decision = take_token(limit, tat, 100.0)
        if decision.allowed:
            allowed += 1
            tat = decision.tat
    assert allowed == 3
    refused = take_token(limit, tat, 100.0)
    assert not refused.allowed
    assert refused.wait_seconds == pytest.approx(0.5)
    assert take_token(limit, tat, 100.5).allowed


def test_a_bucket_left_idle_refills_but_never_beyond_its_burst() -> None:
    limit = RateLimit(per_second=10, burst=2)
    idle_since = take_token(limit, None, 0.0).tat
    starts = 0
    tat: float | None = idle_since
    for _ in range(5):
        decision = take_token(limit, tat, 3600.0)
        starts += decision.allowed
        tat = decision.tat if decision.allowed else tat
    assert starts == 2


@pytest.mark.parametrize("per_second", [0, -1, 20_000])
def test_a_rate_outside_its_range_is_refused(per_second: float) -> None:
    with pytest.raises(InvalidRequest):
        RateLimit(per_second=per_second)


def test_concurrency_limits_must_be_positive() -> None:
    with pytest.raises(InvalidRequest):
        TaskLimits(max_concurrency=0)
    with pytest.raises(InvalidRequest):
        TaskLimits(host_max_concurrency=0)


def test_the_breaker_opens_after_consecutive_failures_and_a_success_resets_the_count() -> None:
    state = HostState("h")
    state = after_failure(after_failure(state, NOW, POLICY), NOW, POLICY)
    assert state.breaker is BreakerState.CLOSED
    reset = after_success(state)
    assert reset is not None
    assert reset.consecutive_failures == 0
    for _ in range(3):
        reset = after_failure(reset, NOW, POLICY)
    assert reset.breaker is BreakerState.OPEN
    assert reset.breaker_until == NOW + POLICY.cool_down
    assert admit(reset, NOW + timedelta(seconds=9)).verdict is Verdict.WAIT


def test_after_the_cool_down_one_probe_goes_and_its_outcome_decides() -> None:
    opened = HostState("h", BreakerState.OPEN, 3, NOW, version=4)
    assert admit(opened, NOW).verdict is Verdict.PROBE
    probing = after_probe_taken(opened, NOW, POLICY)
    assert probing.breaker is BreakerState.HALF_OPEN
    assert probing.version == 5
    # Everyone else waits while the probe runs...
    assert admit(probing, NOW + timedelta(seconds=1)).verdict is Verdict.WAIT
    # ...the probe failing opens it again, succeeding closes it.
    assert after_failure(probing, NOW, POLICY).breaker is BreakerState.OPEN
    closed = after_success(probing)
    assert closed is not None
    assert closed.breaker is BreakerState.CLOSED
    # A probe that never reported is replaced once its turn runs out.
    assert admit(probing, NOW + POLICY.probe_lease).verdict is Verdict.PROBE


def test_a_healthy_host_changes_nothing() -> None:
    assert after_success(HostState("h")) is None


def test_retry_after_pauses_the_host_and_only_ever_extends_the_pause() -> None:
    paused = after_retry_after(HostState("h"), NOW + timedelta(seconds=30))
    assert paused is not None
    admission = admit(paused, NOW)
    assert admission.verdict is Verdict.WAIT
    assert admission.reason == "paused"
    assert after_retry_after(paused, NOW + timedelta(seconds=5)) is None
    assert admit(paused, NOW + timedelta(seconds=30)).verdict is Verdict.GO


@pytest.mark.parametrize(
    ("url", "host"),
    [
        ("http://127.0.0.1:9000/hook", "127.0.0.1:9000"),
        ("https://user:pw@API.Example.test/x", "api.example.test"),
        ("http://[::1]:8080/", "[::1]:8080"),
    ],
)
def test_limits_are_per_host_and_port(url: str, host: str) -> None:
    assert host_of(url) == host


def test_spread_is_fixed_by_its_seed_and_within_its_range() -> None:
    values = [spread(f"e{i}", 2.0) for i in range(200)]
    assert all(0 <= v < 2.0 for v in values)
    assert len(set(values)) > 190
    assert spread("e1", 2.0) == spread("e1", 2.0)
