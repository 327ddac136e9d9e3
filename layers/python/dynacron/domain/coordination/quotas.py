"""Operator limits on what a tenant may register and how fast it may call the API."""

from __future__ import annotations

import itertools
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from dynacron.domain.clock import Clock
from dynacron.domain.errors import LimitExceeded, RateLimited
from dynacron.domain.schedules.expressions import Schedule, upcoming

# How long an API instance keeps a tenant's rate before reading it again.
RATE_REFRESH = timedelta(seconds=30)
# Enough consecutive occurrences to see the shortest gap of any cron expression
# (its fields repeat within a day, so the densest stretch shows up early).
_GAP_SAMPLE = 64


def check_min_interval(schedule: Schedule, now: datetime, min_interval_seconds: int) -> None:
    """Refuse a schedule whose occurrences come closer together than the minimum."""
    if min_interval_seconds <= 1:
        return  # nothing the tick's one-second resolution does not already bound
    occurrences = upcoming(schedule, now, _GAP_SAMPLE)
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(occurrences)]
    if gaps and min(gaps) < min_interval_seconds:
        raise LimitExceeded(
            "min_interval_seconds",
            "schedule",
            f"fires every {min(gaps):g} s at its densest; this deployment allows at most "
            f"one fire every {min_interval_seconds} s",
        )


@dataclass
class _Bucket:
    tokens: float
    updated: datetime


class TenantRateLimiter:
    """A token bucket per tenant, in this process's memory.

    Deployed, each warm API function has its own buckets, so a tenant's real
    ceiling is this rate times the concurrent instances; the API Gateway stage
    throttle caps the total. That trade keeps a DynamoDB write off every call.

    ``rate_of`` gives a tenant's own rate (an operator's, else the default); it is
    asked at most once per ``refresh`` per tenant, so a changed rate holds within
    that long and the store is not read on every call.
    """

    def __init__(
        self,
        clock: Clock,
        rate_per_second: float,
        burst: int,
        rate_of: Callable[[str], float] | None = None,
        refresh: timedelta = RATE_REFRESH,
    ) -> None:
        self._clock = clock
        self._rate = rate_per_second
        self._burst = burst
        self._rate_of = rate_of
        self._refresh = refresh
        self._rates: dict[str, tuple[float, datetime]] = {}
        self._buckets: dict[str, _Bucket] = {}
        self._lock = threading.Lock()

    def rate(self, tenant: str) -> float:
        """``tenant``'s rate a second (0: not limited), as last read."""
        if self._rate_of is None:
            return self._rate
        now = self._clock.now()
        known = self._rates.get(tenant)
        if known is not None and now - known[1] < self._refresh:
            return known[0]
        rate = self._rate_of(tenant)
        self._rates[tenant] = (rate, now)
        return rate

    def take(self, tenant: str) -> None:
        """Spend one token of ``tenant``'s bucket, or raise ``RateLimited``."""
        rate = self.rate(tenant)
        if rate <= 0:
            return  # switched off
        now = self._clock.now()
        with self._lock:
            bucket = self._buckets.setdefault(tenant, _Bucket(float(self._burst), now))
            elapsed = max(0.0, (now - bucket.updated).total_seconds())
            bucket.tokens = min(float(self._burst), bucket.tokens + elapsed * rate)
            bucket.updated = now
            if bucket.tokens < 1:
                raise RateLimited(max(1, math.ceil((1 - bucket.tokens) / rate)))
            bucket.tokens -= 1
