"""UTC instants on the wire and in storage.

Every stored instant is UTC with millisecond precision in one fixed-width form
(``2026-11-30T03:04:05.000Z``), so that string order is time order: DynamoDB sort
keys and execution ids rely on it. The year is always four digits (``0999``, not
``999``), which is what ``strftime("%Y")`` does not promise.

An instant a caller sends (``at``, ``start_at``, ``end_at``, ``anchor``, backfill
``from`` and ``to``, a preview's ``after``) must lie in ``[EARLIEST, LATEST]``:
far enough from the ends of ``datetime`` that a schedule step, a jitter or a
record's time to live added to it never overflows.
"""

from __future__ import annotations

from datetime import UTC, datetime

from dynacron.domain.errors import InvalidRequest

# The instants a caller may send; see docs/schedules.md ("Bounds").
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(2999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC)


def to_utc_ms(instant: datetime) -> datetime:
    """Truncate an aware instant to whole milliseconds, in UTC."""
    if instant.tzinfo is None:
        raise ValueError("naive datetimes are ambiguous; pass an aware one")
    instant = instant.astimezone(UTC)
    return instant.replace(microsecond=instant.microsecond // 1000 * 1000)


def format_instant(instant: datetime) -> str:
    """``2026-11-30T03:04:05.000Z``: ISO 8601, UTC, fixed width (the year in four digits)."""
    i = to_utc_ms(instant)
    return (
        f"{i.year:04d}-{i.month:02d}-{i.day:02d}T{i.hour:02d}:{i.minute:02d}:{i.second:02d}"
        f".{i.microsecond // 1000:03d}Z"
    )


def compact_instant(instant: datetime) -> str:
    """``20261130T030405.000Z``: the same instant without separators, for ids."""
    i = to_utc_ms(instant)
    return (
        f"{i.year:04d}{i.month:02d}{i.day:02d}T{i.hour:02d}{i.minute:02d}{i.second:02d}"
        f".{i.microsecond // 1000:03d}Z"
    )


def parse_instant(text: str) -> datetime:
    """Parse a stored instant (ISO 8601 with an offset, ASCII) back to UTC.

    Anything else, including a year not written in four digits, is an
    ``InvalidRequest`` on ``instant``: never a bare ``ValueError``.
    """
    if not isinstance(text, str) or not text.isascii():
        raise InvalidRequest("instant", f"{text!r} is not an ISO 8601 instant in ASCII")
    try:
        parsed = datetime.fromisoformat(text)
        if parsed.tzinfo is None:
            raise ValueError("no offset")
        return parsed.astimezone(UTC)
    except (ValueError, OverflowError):
        raise InvalidRequest(
            "instant", f"{text!r} is not an ISO 8601 instant with a UTC offset"
        ) from None
