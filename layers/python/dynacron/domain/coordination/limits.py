"""Limits on how hard dynacron presses a handler: pure rules, no I/O, time passed in.

- **Rate limit** per handler host, a token bucket written as GCRA (the "generic
  cell rate algorithm"): one number, the *theoretical arrival time* ``tat``, says
  when the bucket is full again. Taking a token moves it on by ``1/rate``; a take
  is allowed while ``tat`` stays within ``burst/rate`` of now. One number means one
  conditional write in DynamoDB, shared by every worker.
- **Concurrency**: a limit of N is N slots, each a small lease (see ``transitions.acquire_slot``).
- **Circuit breaker** per host: CLOSED; OPEN after ``failure_threshold``
  consecutive failures, for ``cool_down``; then HALF_OPEN, where one probe runs and
  everyone else waits; the probe's success closes it, its failure opens it again.
- **Host pause**: a 429 or 503 with ``Retry-After`` pauses the host for the tenant
  whose call got it (decision 0020), for at most the task's ``max_delay_seconds``
  and a global cap.

Host state (breaker, pause, rate, host concurrency) is kept per tenant and host:
``host_scope``. One tenant's calls cannot pause, trip or use up a host for another.

Work over a limit waits (is sent again later); it never fails an attempt.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from enum import StrEnum
from typing import Any
from urllib.parse import urlsplit

from dynacron.domain.errors import InvalidRequest

MAX_RATE_PER_SECOND = 10_000.0
MAX_CONCURRENCY = 1000
# Retry-After as delay-seconds with more digits than this is past any cap (and
# int() of thousands of digits is refused by Python itself).
_MAX_DELAY_DIGITS = 12
_ASCII_BLANKS = " \t"


@dataclass(frozen=True)
class RateLimit:
    """Executions per second to one handler host, with bursts of up to ``burst``."""

    per_second: float
    burst: int = 1

    def __post_init__(self) -> None:
        if not 0 < self.per_second <= MAX_RATE_PER_SECOND:
            raise InvalidRequest(
                "rate_limit.per_second", f"must be above 0 and at most {MAX_RATE_PER_SECOND:g}"
            )
        if not 1 <= self.burst <= MAX_CONCURRENCY:
            raise InvalidRequest("rate_limit.burst", f"must be between 1 and {MAX_CONCURRENCY}")

    @property
    def interval(self) -> float:
        """Seconds one token stands for."""
        return 1.0 / self.per_second

    @property
    def tolerance(self) -> float:
        """How far ahead of now ``tat`` may run: a full bucket's worth, less one token."""
        return (self.burst - 1) * self.interval


@dataclass(frozen=True)
class RateDecision:
    """``allowed`` with the new ``tat``, or the seconds to wait before trying again."""

    allowed: bool
    tat: float
    wait_seconds: float = 0.0


def take_token(limit: RateLimit, tat: float | None, now: float) -> RateDecision:
    """GCRA on epoch seconds: whether one execution may start now, given the bucket's
    ``tat`` (its theoretical arrival time; None for a bucket never used)."""
    start = now if tat is None else max(tat, now)
    if start - now > limit.tolerance:
        return RateDecision(False, start, start - now - limit.tolerance)
    return RateDecision(True, start + limit.interval)


def check_concurrency(value: int | None, field: str) -> int | None:
    """``value`` if None or within 1 and ``MAX_CONCURRENCY``; else ``InvalidRequest``."""
    if value is not None and not 1 <= value <= MAX_CONCURRENCY:
        raise InvalidRequest(field, f"must be between 1 and {MAX_CONCURRENCY}")
    return value


@dataclass(frozen=True)
class TaskLimits:
    """A task's limits. ``max_concurrency``: its executions delivering at once.
    ``rate_limit`` and ``host_max_concurrency``: for its handler host, shared with
    every task of the same tenant calling that host (each execution is held to its
    own task's numbers); other tenants' calls to the host do not count."""

    max_concurrency: int | None = None
    rate_limit: RateLimit | None = None
    host_max_concurrency: int | None = None

    def __post_init__(self) -> None:
        check_concurrency(self.max_concurrency, "max_concurrency")
        check_concurrency(self.host_max_concurrency, "rate_limit.max_in_flight")


class BreakerState(StrEnum):
    """A host's breaker: CLOSED calls, OPEN waits out its cool-down, HALF_OPEN lets one
    probe through."""

    CLOSED = "CLOSED"
    OPEN = "OPEN"
    HALF_OPEN = "HALF_OPEN"


@dataclass(frozen=True)
class BreakerPolicy:
    """When a breaker opens (failures in a row) and how long it stays open."""

    failure_threshold: int = 5
    cool_down: timedelta = timedelta(seconds=10)
    # How long one probe may take before another execution may probe instead.
    probe_lease: timedelta = timedelta(seconds=30)


@dataclass(frozen=True)
class HostState:
    """What every worker knows about one handler host (one item in the store)."""

    host: str
    breaker: BreakerState = BreakerState.CLOSED
    consecutive_failures: int = 0
    # OPEN: when a probe may go. HALF_OPEN: when the probe's turn runs out.
    breaker_until: datetime | None = None
    # Retry-After: nobody calls the host before this.
    paused_until: datetime | None = None
    version: int = 0


class Verdict(StrEnum):
    """What ``admit`` says of one call to a host."""

    GO = "GO"
    PROBE = "PROBE"  # go, as the half-open breaker's single probe
    WAIT = "WAIT"


@dataclass(frozen=True)
class HostAdmission:
    """``admit``'s answer: the verdict, and for WAIT until when and why."""

    verdict: Verdict
    wait_until: datetime | None = None
    reason: str = ""


def admit(state: HostState, now: datetime) -> HostAdmission:
    """May an execution call ``state.host`` now? Pauses first, then the breaker."""
    if state.paused_until is not None and state.paused_until > now:
        return HostAdmission(Verdict.WAIT, state.paused_until, "paused")
    until = state.breaker_until
    if state.breaker is BreakerState.CLOSED:
        return HostAdmission(Verdict.GO)
    if until is not None and until > now:
        return HostAdmission(Verdict.WAIT, until, "breaker")
    # OPEN and cooled down, or HALF_OPEN with a probe that never reported: probe.
    return HostAdmission(Verdict.PROBE)


def after_probe_taken(state: HostState, now: datetime, policy: BreakerPolicy) -> HostState:
    """The host once one execution took the probe: HALF_OPEN, no other probe until
    ``probe_lease`` has passed."""
    return _next(state, breaker=BreakerState.HALF_OPEN, breaker_until=now + policy.probe_lease)


def after_success(state: HostState) -> HostState | None:
    """The host answered: the breaker closes. None when nothing changes."""
    if state.breaker is BreakerState.CLOSED and state.consecutive_failures == 0:
        return None
    return _next(state, breaker=BreakerState.CLOSED, consecutive_failures=0, breaker_until=None)


def after_failure(state: HostState, now: datetime, policy: BreakerPolicy) -> HostState:
    """The host failed (unreachable, timed out, 502/503/504): count it; open at the threshold.

    A failed probe opens the breaker again at once; failures reported while it is
    already open (calls that started before it opened) change nothing but the count.
    """
    failures = state.consecutive_failures + 1
    opens = state.breaker is BreakerState.HALF_OPEN or (
        state.breaker is BreakerState.CLOSED and failures >= policy.failure_threshold
    )
    if opens:
        return _next(
            state,
            breaker=BreakerState.OPEN,
            consecutive_failures=failures,
            breaker_until=now + policy.cool_down,
        )
    return _next(state, consecutive_failures=failures)


def after_retry_after(state: HostState, until: datetime) -> HostState | None:
    """The host asked everyone to come back at ``until``; None if already paused as long."""
    if state.paused_until is not None and state.paused_until >= until:
        return None
    return _next(state, paused_until=until)


def _next(state: HostState, **changes: Any) -> HostState:
    return dataclasses.replace(state, **changes, version=state.version + 1)


def host_of(handler_url: str) -> str:
    """The host (and port, if any) a handler URL calls: the unit of host limits."""
    parts = urlsplit(handler_url)
    return (parts.netloc.rpartition("@")[2] or parts.path).lower()


def host_scope(tenant_id: str, handler_url: str) -> str:
    """The unit of host state: one tenant's view of one handler host (decision 0020).

    ``/`` never occurs in a host, so the host is what follows the last one.
    """
    return f"{tenant_id}/{host_of(handler_url)}"


def target_scope(tenant_id: str, arn: str) -> str:
    """The unit of host state for an AWS target: one tenant's view of one resource
    (its ARN, with no ``/``, as a host has none)."""
    return f"{tenant_id}/{arn.replace('/', ':')}"


def parse_retry_after(value: str, now: datetime, cap_seconds: int) -> int | None:
    """``Retry-After`` as whole seconds from ``now``, at most ``cap_seconds``; None when
    the value is neither form. Never raises, whatever the handler sent.

    Delay-seconds is ASCII digits only (a superscript or an Arabic-Indic digit is
    not a number here); an HTTP-date is GMT (RFC 9110), so a date without a zone
    (asctime) is read as UTC.
    A date in the past means now: 0.
    """
    cap = max(0, cap_seconds)
    text = value.strip(_ASCII_BLANKS)
    if text.isascii() and text.isdigit():
        return cap if len(text) > _MAX_DELAY_DIGITS else min(int(text), cap)
    if not text.isascii() or not text:
        return None
    try:
        when = parsedate_to_datetime(text)
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = math.ceil((when - now).total_seconds())
    except (TypeError, ValueError, IndexError, OverflowError, AttributeError):
        return None
    return min(max(0, seconds), cap)


def spread(seed: str, seconds: float) -> float:
    """A fraction of ``seconds`` fixed by ``seed``: waiters seeded apart return apart,
    not as a herd, and a test can tell when each one will."""
    digest = hashlib.sha256(seed.encode()).digest()
    return seconds * int.from_bytes(digest[:8], "big") / float(1 << 64)
