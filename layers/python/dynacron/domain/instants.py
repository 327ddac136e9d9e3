"""UTC instants on the wire and in storage.

Every stored instant is UTC with millisecond precision in one fixed-width form
(``2026-11-30T03:04:05.000Z``), so that string order is time order: DynamoDB sort
keys and execution ids rely on it.
"""

from __future__ import annotations

from datetime import UTC, datetime


def to_utc_ms(instant: datetime) -> datetime:
    """Truncate an aware instant to whole milliseconds, in UTC."""
    if instant.tzinfo is None:
        raise ValueError("naive datetimes are ambiguous; pass an aware one")
    instant = instant.astimezone(UTC)
    return instant.replace(microsecond=instant.microsecond // 1000 * 1000)


def format_instant(instant: datetime) -> str:
    """``2026-11-30T03:04:05.000Z``: ISO 8601, UTC, fixed width."""
    instant = to_utc_ms(instant)
    return instant.strftime("%Y-%m-%dT%H:%M:%S.") + f"{instant.microsecond // 1000:03d}Z"


def compact_instant(instant: datetime) -> str:
    """``20261130T030405.000Z``: the same instant without separators, for ids."""
    instant = to_utc_ms(instant)
    return instant.strftime("%Y%m%dT%H%M%S.") + f"{instant.microsecond // 1000:03d}Z"


def parse_instant(text: str) -> datetime:
    """Parse a stored instant (any ISO 8601 form with an offset) back to UTC."""
    parsed = datetime.fromisoformat(text)
    if parsed.tzinfo is None:
        raise ValueError(f"instant {text!r} has no UTC offset")
    return parsed.astimezone(UTC)
