"""Clocks. Domain code takes a clock so tests can move time instead of sleeping."""

from __future__ import annotations

import threading
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


class SettableClock:
    """A clock that only moves when told to; safe to share between threads."""

    def __init__(self, start: datetime) -> None:
        if start.tzinfo is None:
            raise ValueError("SettableClock needs an aware datetime")
        self._now = start.astimezone(UTC)
        self._lock = threading.Lock()

    def now(self) -> datetime:
        """The instant last set or advanced to."""
        with self._lock:
            return self._now

    def set(self, instant: datetime) -> None:
        """Move to ``instant`` (kept in UTC), forward or back."""
        with self._lock:
            self._now = instant.astimezone(UTC)

    def advance(self, delta: timedelta) -> datetime:
        """Move on by ``delta``; returns the new instant."""
        with self._lock:
            self._now += delta
            return self._now
