"""A warm worker's copy of each tenant's signing secrets.

Every signed delivery needs its tenant's secrets, and reading them is a strongly
consistent read of one item: one tenant firing 10,000 times a second would ask
one partition for 10,000 reads a second, above the 3,000 a DynamoDB partition
serves (``dynacron plan`` names it). Kept for ``SECRETS_KEPT``, a warm worker
reads a tenant's record at most once in that time, whatever the rate.

The price: a rotation reaches deliveries up to ``SECRETS_KEPT`` later. Rotating
keeps the secret it replaces (``rotate_secret``), and a delivery is signed with
every secret the tenant holds, so a receiver that checks against either secret
(as the signing guide asks during a rotation) sees no gap.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from dynacron.domain.clock import Clock

SECRETS_KEPT = timedelta(seconds=5)


class KeptSecrets:
    """``secrets_of`` read once per tenant every ``kept``; safe to call from threads.

    Only what was read is kept: a tenant with no secrets yet is asked again next
    time, and an error reading them is the caller's, as without the copy. Calls
    for one tenant that miss at once wait for one read (a batch's records start
    together), so a cold worker reads a tenant's record once, not once a record.
    """

    def __init__(
        self,
        secrets_of: Callable[[str], Sequence[str]],
        clock: Clock,
        kept: timedelta = SECRETS_KEPT,
    ) -> None:
        self._secrets_of = secrets_of
        self._clock = clock
        self._kept = kept
        self._read: dict[str, tuple[datetime, tuple[str, ...]]] = {}
        self._lock = threading.Lock()
        # One lock a tenant, held while its record is read.
        self._reading: dict[str, threading.Lock] = {}

    def __call__(self, tenant_id: str) -> Sequence[str]:
        kept = self._kept_now(tenant_id)
        if kept is not None:
            return kept
        with self._lock:
            reading = self._reading.setdefault(tenant_id, threading.Lock())
        with reading:
            kept = self._kept_now(tenant_id)  # read by a call that held the lock first
            if kept is not None:
                return kept
            now = self._clock.now()
            secrets = tuple(self._secrets_of(tenant_id))
            if secrets:
                with self._lock:
                    self._read[tenant_id] = (now, secrets)
            return secrets

    def _kept_now(self, tenant_id: str) -> tuple[str, ...] | None:
        with self._lock:
            held = self._read.get(tenant_id)
        if held is not None and self._clock.now() - held[0] < self._kept:
            return held[1]
        return None
