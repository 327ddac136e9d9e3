"""Idempotency keys of task creations: a client that retries a create it never got
an answer to sends the same key again, and gets the task its first try made
instead of a second one.

As the IETF's ``Idempotency-Key`` header (draft-ietf-httpapi-idempotency-key-header)
and Stripe's API have it: a key names one request, per tenant, for a day; the same
key with another body is refused, never answered with the first request's task.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from dynacron.domain.errors import InvalidRequest

HEADER = "Idempotency-Key"
# A batch create's item carries its own key in this field instead.
BATCH_KEY_FIELD = "idempotency_key"
# How long a key names its request: a retry within it gets the first task.
KEY_LIFETIME = timedelta(hours=24)
MAX_KEY_LENGTH = 255
# Printable ASCII without space; the API's document states it too.
KEY_PATTERN = rf"^[\x21-\x7e]{{1,{MAX_KEY_LENGTH}}}$"
_KEY = re.compile(KEY_PATTERN)
KEY_RULE = f"must be 1 to {MAX_KEY_LENGTH} printable ASCII characters without spaces (a UUID, say)"


@dataclass(frozen=True)
class CreateKey:
    """A create's idempotency key and what it asked for (a digest of its body)."""

    key: str
    fingerprint: str

    @classmethod
    def of(cls, key: str, body: Any) -> CreateKey:
        """The key sent with ``body`` (the request's JSON, parsed): the same body
        in another key order or spacing is the same request."""
        if not _KEY.fullmatch(key):
            raise InvalidRequest(HEADER, KEY_RULE)
        canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return cls(key, hashlib.sha256(canonical.encode()).hexdigest())


@dataclass(frozen=True)
class KeyReservation:
    """What a key holds: the task it names, the request it came with, and whether
    that task was stored (a reservation whose create never finished is not)."""

    task_id: str
    fingerprint: str
    created: bool
