"""Signed deliveries: HMAC-SHA256 over ``<unix timestamp>.<body>`` with the tenant's secret.

The header follows the common webhook scheme, ``Dynacron-Signature: t=<unix>,v1=<hex>``,
with one ``v1`` per active secret so that a handler keeps verifying while a
secret is rotated. Pure functions: the caller passes the time. A header that is
malformed in any way (non-ASCII digits, no timestamp) does not verify; it never raises.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence

SIGNATURE_HEADER = "Dynacron-Signature"
SCHEME = "v1"
# A handler should refuse a signature older than this: it bounds replays.
DEFAULT_TOLERANCE_SECONDS = 300
# A Unix time in seconds has 10 digits until 2286; more is refused before int().
_MAX_TIMESTAMP_DIGITS = 12


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """Hex HMAC-SHA256 of ``b"<timestamp>." + body`` under ``secret``."""
    message = str(timestamp).encode() + b"." + body
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def signature_header(secrets: Sequence[str], timestamp: int, body: bytes) -> str:
    """The header value: the timestamp, then one signature per active secret."""
    parts = [f"t={timestamp}"] + [f"{SCHEME}={signature(s, timestamp, body)}" for s in secrets]
    return ",".join(parts)


def verify(
    header: str,
    secret: str,
    body: bytes,
    now: int,
    tolerance_seconds: int = DEFAULT_TOLERANCE_SECONDS,
) -> bool:
    """True if ``header`` carries a fresh signature of ``body`` under ``secret``."""
    timestamp = parse_timestamp(header)
    if timestamp is None or abs(now - timestamp) > tolerance_seconds:
        return False
    expected = signature(secret, timestamp, body)
    return any(hmac.compare_digest(value, expected) for value in _signatures(header))


def parse_timestamp(header: str) -> int | None:
    """The header's one ``t=`` value, or None when it has none, several, or one that
    is not ASCII digits (``t=²`` is no timestamp, not a crash)."""
    timestamps = [value for key, _, value in _fields(header) if key == "t"]
    if len(timestamps) != 1:
        return None
    text = timestamps[0]
    if not (text.isascii() and text.isdigit()) or len(text) > _MAX_TIMESTAMP_DIGITS:
        return None
    return int(text)


def _signatures(header: str) -> list[str]:
    # compare_digest refuses non-ASCII text with a TypeError; such a value is no hex digest.
    return [value for key, _, value in _fields(header) if key == SCHEME and value.isascii()]


def _fields(header: str) -> list[tuple[str, str, str]]:
    return [part.partition("=") for part in header.split(",")]
