"""What the services need of the records that coordinate the scheduler itself: shard
leases and cursors, tenants' counts and secrets, create (idempotency) keys, and the
workers' shared limits.

Every conditional change of these records (a lease acquired, renewed, handed over;
a slot taken or freed; a host's breaker state replaced; a cursor advanced; a tick
recorded; a create key reserved; a secret rotated) is the domain's
(``dynacron.domain.coordination.transitions``): the state it expects and what it
changes. A service builds one and hands it to its store's ``apply``; the store
carries it out atomically (DynamoDB: one conditional write, the record's key and
TTL added; SQLite: one write transaction) and says whether it held. A refused
change writes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from dynacron.domain.conditions import Transition
from dynacron.domain.coordination.create_keys import KeyReservation
from dynacron.domain.coordination.limits import HostState, RateLimit
from dynacron.domain.coordination.tenants import TenantQuota
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

    def apply(self, shard: int, transition: Transition) -> bool:
        """Carry out ``transition`` (``transitions.advance_cursor``,
        ``transitions.record_tick``) on the shard's cursor record, atomically.

        Expects the record to meet ``transition.expects`` (advance: no cursor, or one
        before the bucket; record a tick: the last tick still the one read). Then it
        writes the change and answers True. Refused: nothing written, False.
        """
        ...


class TenantStore(Protocol):
    """Each tenant's task count, signing secrets (newest first) and own limits."""

    def signing_secrets(self, tenant_id: str) -> list[str]:
        """Active secrets, newest first; empty for a tenant that never stored a task."""
        ...

    def task_count(self, tenant_id: str) -> int:
        """How many tasks the tenant has (0 for one never seen)."""
        ...

    def quota(self, tenant_id: str) -> TenantQuota:
        """The limits an operator set for the tenant (none set: all None)."""
        ...

    def private_grants(self) -> dict[str, tuple[str, ...]]:
        """Every tenant that holds ``private_networks``, and its ranges (an operator's
        check that grants do not overlap; not on a delivery's path)."""
        ...

    def set_quota(self, tenant_id: str, quota: TenantQuota) -> None:
        """Replace the tenant's own limits with ``quota`` (a None limit removed: the
        default applies again), keeping its count and secrets; never refused."""
        ...

    def ensure_secret(self, tenant_id: str, fresh_secret: str) -> list[str]:
        """The tenant's secrets, storing ``fresh_secret`` as its first if it has none
        (never refused).

        Not a transition: it answers with the secrets as they end up, whichever
        writer stored the first (one write that returns the record, no condition
        to refuse it)."""
        ...

    def apply(self, tenant_id: str, transition: Transition) -> bool:
        """Carry out ``transition`` (``transitions.rotate_secret``) on the tenant's
        record, atomically.

        Expects the record to meet ``transition.expects`` (rotate: the secrets still
        as read). Then it writes the change and answers True. Refused (another
        rotation came between): nothing written, False.
        """
        ...


class CreateKeys(Protocol):
    """Each tenant's idempotency keys of task creations (``domain.coordination.create_keys``)."""

    def apply(self, tenant_id: str, key: str, transition: Transition) -> bool:
        """Carry out ``transition`` (``transitions.mark_key_created``) on the record of
        the tenant's ``key``, atomically.

        Expects the record to meet ``transition.expects`` (mark created: the key
        still held for the task; one expired and taken since names another). Then
        it writes the change and answers True. Refused: nothing written, False.
        """
        ...

    def apply_returning(
        self, tenant_id: str, key: str, transition: Transition
    ) -> KeyReservation | None:
        """As ``apply``, for a reservation (``transitions.reserve_create_key``): None if
        it held; refused, the reservation that holds the key (of two at once, one
        holds it and the other is told what holds it)."""
        ...

    def apply_each(self, tenant_id: str, changes: Sequence[tuple[str, Transition]]) -> list[bool]:
        """``apply`` of each ``(key, transition)``, in order: what each answered. A
        batch create's marks; a store may make them in one transaction."""
        ...

    def apply_returning_each(
        self, tenant_id: str, changes: Sequence[tuple[str, Transition]]
    ) -> list[KeyReservation | None]:
        """``apply_returning`` of each ``(key, transition)``, in order: what each
        answered. A batch create's reservations; a store may make them in one
        transaction."""
        ...


class ShardLeases(Protocol):
    """Which tick works a shard, and until when; a handover is one change, so a shard
    is never worked by two ticks at once nor left while its successor waits."""

    def get(self, shard: int) -> ShardLease | None:
        """The shard's lease, or None if nobody holds or waits for it."""
        ...

    def apply(self, shard: int, transition: Transition) -> bool:
        """Carry out ``transition`` on the shard's lease record, atomically:
        ``transitions.acquire_lease`` (expects it free, expired or the owner's
        already; a waiting successor is forgotten), ``request_handover`` (someone
        else holds it, nobody else waits), ``renew_lease`` (the owner holds it),
        ``hand_over_lease`` (the owner holds it, a successor waits),
        ``release_lease`` (the owner holds it: the record goes) or
        ``withdraw_handover`` (the owner waits for it).

        Expects the record to meet ``transition.expects``; then writes the change and
        answers True. Refused: nothing written, False.
        """
        ...


class LimitStore(Protocol):
    """Per-host breakers and rates, and per-task or per-host concurrency slots."""

    def host(self, host: str) -> HostState:
        """The host's breaker and pause (the initial state for a host never seen)."""
        ...

    def hosts(self, hosts: Sequence[str]) -> list[HostState]:
        """``host`` for each of ``hosts``, in their order, read in one call where the
        store allows (a worker's wave of records meets many hosts at once)."""
        ...

    def apply_host(self, host: str, transition: Transition, now: datetime) -> bool:
        """Carry out ``transition`` (``transitions.replace_host``) on the host's breaker
        record, atomically; ``now`` bounds how long the store keeps it.

        Expects the stored state at the version before the new one (or none). Then
        it writes the change and answers True. Refused: nothing written, False.
        """
        ...

    def take_token(self, host: str, limit: RateLimit, now: datetime) -> float:
        """Take one token of the host's bucket (GCRA); 0, or the seconds to wait
        before asking again.

        Not a transition: the bucket is read, computed and written (DynamoDB: two
        guarded writes and a read, some rounds; SQLite: one transaction), which no
        single conditional write states."""
        ...

    def slots(self, scope: str, limit: int) -> list[str]:
        """The keys of ``scope``'s ``limit`` slots a taker tries, in turn
        (``transitions.slots_to_try`` from a random first one, so that waiters
        spread out)."""
        ...

    def apply_slot(self, slot: str, transition: Transition) -> bool:
        """Carry out ``transition`` on the slot's record, atomically:
        ``transitions.acquire_slot`` (expects it free, expired or the holder's),
        ``extend_slot`` (the holder holds it) or ``release_slot`` (the holder holds
        it: the record goes).

        Expects the record to meet ``transition.expects``; then writes the change and
        answers True. Refused (someone else holds the slot): nothing written, False.
        """
        ...


class CalendarStore(Protocol):
    """Each tenant's calendars, one record per tenant (decision 0056): read and
    written by the API only, never by the tick or the workers."""

    def read(self, tenant_id: str) -> dict[str, Any] | None:
        """The tenant's calendars record as stored (``domain.schedules.calendars``);
        None if it has none."""
        ...

    def apply(self, tenant_id: str, transition: Transition) -> bool:
        """Carry out ``transition`` on the tenant's record atomically; False if its
        condition did not hold."""
        ...
