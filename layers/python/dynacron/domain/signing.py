"""Signed deliveries: HMAC-SHA256 over ``<unix timestamp>.<body>`` with the tenant's secret.

The header follows the common webhook scheme, ``Dynacron-Signature: t=<unix>,v1=<hex>``,
with one ``v1`` per active secret so that a handler keeps verifying while a
secret is rotated. Pure functions: the caller passes the time.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence

SIGNATURE_HEADER = "Dynacron-Signature"
SCHEME = "v1"
# A handler should refuse a signature older than this: it bounds replays.
DEFAULT_TOLERANCE_SECONDS = 300


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
    fields = [part.partition("=") for part in header.split(",")]
    timestamps = [value for key, _, value in fields if key == "t"]
    if len(timestamps) != 1 or not timestamps[0].isdigit():
        return False
    timestamp = int(timestamps[0])
    if abs(now - timestamp) > tolerance_seconds:
        return False
    expected = signature(secret, timestamp, body)
    return any(hmac.compare_digest(value, expected) for key, _, value in fields if key == SCHEME)
