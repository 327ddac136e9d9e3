"""What the services need of the records that coordinate the scheduler itself: shard
leases and cursors, tenants' counts and secrets, create (idempotency) keys, and the
workers' shared limits.

The rules of each conditional change are stated once in
``dynacron.domain.coordination.transitions``; a store carries one out atomically.
A refused change writes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from dynacron.domain.coordination.create_keys import CreateKey, KeyReservation
from dynacron.domain.coordination.limits import HostState, RateLimit
from dynacron.domain.coordination.uptime import ShardHistory


@dataclass(frozen=True)
class ShardCursor:
    """What one shard's tick reads first: where to start, and when it last ran."""

    bucket: datetime | None
    history: ShardHistory


@dataclass(frozen=True)
class ShardLease:
    """Which tick works a shard, until when, and who waits to take it over."""

    owner: str
    lease_until: datetime
    successor: str | None = None

    def is_free_for(self, owner: str, now: datetime) -> bool:
        """True if ``owner`` may take this lease without asking anyone."""
        return self.owner == owner or self.lease_until <= now


class CursorStore(Protocol):
    """Per-shard tick cursors (the oldest due bucket that may hold work) and heartbeats."""

    def get(self, shard: int) -> datetime | None:
        """The shard's cursor bucket; None if it has none yet."""
        ...

    def read(self, shard: int, heartbeat: timedelta = ...) -> ShardCursor:
        """The shard's cursor and tick history, in one consistent read (an empty
        history for a shard never ticked)."""
        ...

    def record_tick(self, shard: int, history: ShardHistory, seen: ShardHistory) -> bool:
        """Store ``history`` (``seen`` with one more tick recorded).

        Expects the stored last tick still ``seen``'s (none, if ``seen`` has none):
        of two ticks of one shard, one records an outage, once. Refused: False.
        """
        ...

    def advance(self, shard: int, bucket: datetime) -> bool:
        """Move the cursor to ``bucket``. Expects no cursor, or one before ``bucket``:
        never backwards. Refused: False."""
        ...


class TenantStore(Protocol):
    """Each tenant's task count and signing secrets (newest first)."""

    def signing_secrets(self, tenant_id: str) -> list[str]:
        """Active secrets, newest first; empty for a tenant that never stored a task."""
        ...

    def task_count(self, tenant_id: str) -> int:
        """How many tasks the tenant has (0 for one never seen)."""
        ...

    def ensure_secret(self, tenant_id: str, fresh_secret: str) -> list[str]:
        """The tenant's secrets, storing ``fresh_secret`` as its first if it has none
        (never refused)."""
        ...

    def rotate_secret(self, tenant_id: str, fresh_secret: str) -> list[str] | None:
        """Make ``fresh_secret`` current, keeping the one it replaces (an older one is
        dropped). Expects the secrets as read; None if another rotation came between
        (a store that rotates in one transaction never refuses)."""
        ...


class CreateKeys(Protocol):
    """Each tenant's idempotency keys of task creations (``domain.coordination.create_keys``)."""

    def reserve(
        self, tenant_id: str, key: CreateKey, task_id: str, now: datetime
    ) -> KeyReservation:
        """Hold ``key`` for ``task_id`` until ``now`` plus ``KEY_LIFETIME``.

        Expects no reservation of the key, or one expired at ``now``. Refused: the
        reservation that holds it (of two at once, one holds it and the other is
        told what holds it).
        """
        ...

    def mark_created(self, tenant_id: str, key: str, task_id: str) -> None:
        """Note that the task ``key`` holds was stored. Expects the key still held for
        ``task_id`` (one expired and taken since names another); else nothing changes."""
        ...


class ShardLeases(Protocol):
    """Which tick works a shard, and until when; a handover is one change, so a shard
    is never worked by two ticks at once nor left while its successor waits."""

    def get(self, shard: int) -> ShardLease | None:
        """The shard's lease, or None if nobody holds or waits for it."""
        ...

    def acquire(self, shard: int, owner: str, now: datetime, until: datetime) -> bool:
        """Hold the lease until ``until`` (a waiting successor is forgotten).
        Expects it free, expired at ``now`` or ``owner``'s already. Refused: False."""
        ...

    def request_handover(self, shard: int, owner: str) -> bool:
        """Ask the holder to pass the lease to ``owner`` at its next renewal.
        Expects someone else to hold it. Refused: False."""
        ...

    def renew(self, shard: int, owner: str, until: datetime) -> bool:
        """Hold the lease until ``until``. Expects ``owner`` to hold it and nobody to
        wait for it. Refused: False (then ``hand_over`` or stop)."""
        ...

    def hand_over(self, shard: int, owner: str, until: datetime) -> bool:
        """Make the waiting successor the holder, until ``until``. Expects ``owner`` to
        hold it and a successor to wait. Refused: False."""
        ...

    def release(self, shard: int, owner: str) -> bool:
        """Give the lease up (expects ``owner`` to hold it: the record goes), or else
        withdraw ``owner``'s request for it. True only if ``owner`` held it."""
        ...


class LimitStore(Protocol):
    """Per-host breakers and rates, and per-task or per-host concurrency slots."""

    def host(self, host: str) -> HostState:
        """The host's breaker and pause (the initial state for a host never seen)."""
        ...

    def replace_host(self, state: HostState, now: datetime) -> bool:
        """Store ``state``. Expects the stored one at the version before ``state``'s
        (or none). Refused: False."""
        ...

    def take_token(self, host: str, limit: RateLimit, now: datetime) -> float:
        """Take one token of the host's bucket (GCRA); 0, or the seconds to wait
        before asking again."""
        ...

    def acquire_slot(
        self, scope: str, limit: int, holder: str, now: datetime, until: datetime
    ) -> str | None:
        """Hold one of ``scope``'s ``limit`` slots until ``until``; its key.
        Each slot tried expects to be free, expired at ``now`` or ``holder``'s.
        Refused: None (every slot tried was held)."""
        ...

    def extend_slot(self, slot: str, holder: str, until: datetime) -> bool:
        """Hold ``slot`` until ``until``. Expects ``holder`` to hold it. Refused: False."""
        ...

    def release_slot(self, slot: str, holder: str) -> bool:
        """Free ``slot``. Expects ``holder`` to hold it. Refused: False (its lease ran
        out and someone else took it)."""
        ...
