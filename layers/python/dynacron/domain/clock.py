"""Clocks. Domain code takes a clock so tests can move time instead of sleeping."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    """Tells the time; the one source of "now" in the domain and the services."""

    def now(self) -> datetime:
        """The current instant, timezone-aware, in UTC."""
        ...


class SystemClock:
    """The machine's clock."""

    def now(self) -> datetime:
        """The machine's time, in UTC."""
        return datetime.now(UTC)

    def monotonic(self) -> float:
        """Seconds on a clock that never steps (``time.monotonic``): against it, a
        step of the wall clock shows (decision 0037)."""
        return time.monotonic()


class SettableClock:
    """A clock that only moves when told to; safe to share between threads."""

    def __init__(self, start: datetime) -> None:
        if start.tzinfo is None:
            raise ValueError("SettableClock needs an aware datetime")
        self._now = start.astimezone(UTC)
        # Time that passed, as a monotonic clock counts it: ``set`` and ``advance``
        # move it with the wall clock, ``step`` does not.
        self._elapsed = 0.0
        self._lock = threading.Lock()

    def now(self) -> datetime:
        """The instant last set or advanced to."""
        with self._lock:
            return self._now

    def set(self, instant: datetime) -> None:
        """Move to ``instant`` (kept in UTC), forward or back."""
        with self._lock:
            instant = instant.astimezone(UTC)
            self._elapsed += (instant - self._now).total_seconds()
            self._now = instant

    def advance(self, delta: timedelta) -> datetime:
        """Move on by ``delta``; returns the new instant."""
        with self._lock:
            self._now += delta
            self._elapsed += delta.total_seconds()
            return self._now

    def step(self, delta: timedelta) -> datetime:
        """Step the wall clock alone by ``delta`` (NTP, a resume, a snapshot restore):
        the monotonic clock does not move. Returns the new instant."""
        with self._lock:
            self._now += delta
            return self._now

    def monotonic(self) -> float:
        """Seconds passed since the start, by ``set`` and ``advance`` only."""
        with self._lock:
            return self._elapsed
