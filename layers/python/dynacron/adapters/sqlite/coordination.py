"""What coordinates the scheduler itself, on SQLite: per-shard tick cursors, tenants'
counts and secrets, tick leases, and the workers' shared limits (the ``CursorStore``,
``TenantStore``, ``ShardLeases`` and ``LimitStore`` ports).

Each conditional change is a ``domain.coordination.transitions`` transition, the one
the DynamoDB adapters write: carried out (``rows.carry_out``) in one
``database.write()`` transaction that reads, checks and writes under the write lock. Instants are
stored in their fixed-width text form, so text order is time order.
"""

from __future__ import annotations

import json
import random
from datetime import datetime, timedelta
from typing import Any

from dynacron.adapters.sqlite.database import Database
from dynacron.adapters.sqlite.records import instant_or_none
from dynacron.adapters.sqlite.rows import RowTable, carry_out
from dynacron.adapters.sqlite.schema import COORDINATION
from dynacron.definitions.resources import SLOT_KEY_PREFIX
from dynacron.domain.conditions import Transition
from dynacron.domain.coordination import transitions
from dynacron.domain.coordination.limits import HostState, RateLimit, take_token
from dynacron.domain.coordination.uptime import ShardHistory
from dynacron.domain.instants import parse_instant
from dynacron.ports import ShardCursor, ShardLease

_CURSORS = RowTable(
    "shard_cursors",
    ("shard",),
    (transitions.BUCKET, transitions.LAST_TICK_AT, transitions.TICKING_SINCE, transitions.OUTAGES),
    json_columns=frozenset({transitions.OUTAGES}),
)
_TENANTS = RowTable(
    "tenants",
    ("tenant_id",),
    ("task_count", transitions.SIGNING_SECRETS),
    json_columns=frozenset({transitions.SIGNING_SECRETS}),
)
_LEASES = RowTable(
    "shard_leases", ("shard",), (transitions.OWNER, transitions.LEASE_UNTIL, transitions.SUCCESSOR)
)
_HOSTS = RowTable("limit_hosts", ("host",), (transitions.VERSION,), has_record=True)
_SLOTS = RowTable("limit_slots", ("slot",), (transitions.HOLDER, transitions.LEASE_UNTIL))


class SqliteCursorStore:
    """Per-shard tick cursors (the oldest due bucket that may hold work) and the
    shard's heartbeat (``last_tick_at``, ``ticking_since``, ``outages``)."""

    def __init__(self, database: Database) -> None:
        self._database = database
        database.ensure_schema(COORDINATION)

    def get(self, shard: int) -> datetime | None:
        return self.read(shard).bucket

    def read(self, shard: int, heartbeat: timedelta = timedelta(0)) -> ShardCursor:
        """The shard's cursor and tick history, in one read."""
        row = (
            self._database.connection()
            .execute("SELECT * FROM shard_cursors WHERE shard = ?", (shard,))
            .fetchone()
        )
        values = dict(row) if row is not None else {}
        return ShardCursor(
            bucket=instant_or_none(values.get("bucket")),
            history=ShardHistory(
                ticking_since=instant_or_none(values.get("ticking_since")),
                last_tick=instant_or_none(values.get("last_tick_at")),
                outages=tuple(
                    transitions.outage_from_text(o)
                    for o in json.loads(values.get("outages") or "[]")
                ),
                heartbeat=heartbeat,
            ),
        )

    def record_tick(self, shard: int, history: ShardHistory, seen: ShardHistory) -> bool:
        """Store ``history`` if the stored one is still ``seen``: of two ticks of one
        shard, one records an outage, once."""
        return self._apply(shard, transitions.record_tick(history, seen))

    def advance(self, shard: int, bucket: datetime) -> bool:
        """Move the cursor forward to ``bucket``; never backwards."""
        return self._apply(shard, transitions.advance_cursor(bucket))

    def _apply(self, shard: int, transition: Transition) -> bool:
        with self._database.write() as connection:
            return carry_out(connection, _CURSORS, {"shard": shard}, transition)


class SqliteTenantStore:
    """Each tenant's task count and signing secrets (newest first; during a rotation
    the previous one stays valid until the next rotation drops it)."""

    def __init__(self, database: Database) -> None:
        self._database = database
        database.ensure_schema(COORDINATION)

    def _row(self, tenant_id: str) -> dict[str, Any]:
        row = (
            self._database.connection()
            .execute("SELECT * FROM tenants WHERE tenant_id = ?", (tenant_id,))
            .fetchone()
        )
        return dict(row) if row is not None else {}

    def signing_secrets(self, tenant_id: str) -> list[str]:
        """Active secrets, newest first; empty for a tenant that never registered a task."""
        return _secrets(self._row(tenant_id).get("signing_secrets"))

    def task_count(self, tenant_id: str) -> int:
        return int(self._row(tenant_id).get("task_count", 0))

    def ensure_secret(self, tenant_id: str, fresh_secret: str) -> list[str]:
        """The tenant's secrets, storing ``fresh_secret`` as its first if it has none."""
        with self._database.write() as connection:
            return self._ensure(connection, tenant_id, fresh_secret)

    def rotate_secret(self, tenant_id: str, fresh_secret: str) -> list[str] | None:
        """Make ``fresh_secret`` current and keep the one it replaces. One transaction,
        so it never loses a race (the DynamoDB adapter's None never comes here)."""
        with self._database.write() as connection:
            current = self._ensure(connection, tenant_id, fresh_secret)
            if current[0] == fresh_secret:
                return current  # it had none: the fresh one is its first
            rotation = transitions.rotate_secret(current, fresh_secret)
            if not carry_out(connection, _TENANTS, {"tenant_id": tenant_id}, rotation):
                return None
            return list(rotation.sets[transitions.SIGNING_SECRETS])

    @staticmethod
    def _ensure(connection: Any, tenant_id: str, fresh_secret: str) -> list[str]:
        connection.execute(
            """INSERT INTO tenants (tenant_id, signing_secrets) VALUES (?, ?)
               ON CONFLICT (tenant_id) DO UPDATE SET
               signing_secrets = COALESCE(signing_secrets, excluded.signing_secrets)""",
            (tenant_id, json.dumps([fresh_secret])),
        )
        row = connection.execute(
            "SELECT signing_secrets FROM tenants WHERE tenant_id = ?", (tenant_id,)
        ).fetchone()
        return _secrets(row["signing_secrets"])


def _secrets(text: str | None) -> list[str]:
    return [str(secret) for secret in json.loads(text)] if text else []


class SqliteShardLeases:
    """Which tick works a shard, and until when. ``acquire``: free, expired or ours;
    ``request_handover``: held by someone else; ``renew``: ours, nobody waiting;
    ``hand_over``: ours, someone waiting; ``release``: ours (or our request)."""

    def __init__(self, database: Database) -> None:
        self._database = database
        database.ensure_schema(COORDINATION)

    def get(self, shard: int) -> ShardLease | None:
        row = (
            self._database.connection()
            .execute("SELECT * FROM shard_leases WHERE shard = ?", (shard,))
            .fetchone()
        )
        if row is None:
            return None
        return ShardLease(
            owner=row["owner"],
            lease_until=parse_instant(row["lease_until"]),
            successor=row["successor"],
        )

    def acquire(self, shard: int, owner: str, now: datetime, until: datetime) -> bool:
        """Take the shard's lease if it is free, expired or already ours (a successor
        waiting for it is forgotten, as a whole-item put forgets it)."""
        return self._apply(shard, transitions.acquire_lease(owner, now, until))

    def request_handover(self, shard: int, owner: str) -> bool:
        """Ask the current holder to pass the lease to ``owner`` at its next renewal."""
        return self._apply(shard, transitions.request_handover(owner))

    def renew(self, shard: int, owner: str, until: datetime) -> bool:
        """Extend our lease; False if it is no longer ours or a successor is waiting."""
        return self._apply(shard, transitions.renew_lease(owner, until))

    def hand_over(self, shard: int, owner: str, until: datetime) -> bool:
        """Make the waiting successor the holder, until ``until``; False if we hold nothing."""
        return self._apply(shard, transitions.hand_over_lease(owner, until))

    def release(self, shard: int, owner: str) -> bool:
        """Give the lease up, or withdraw our request for it; True if we held it."""
        if self._apply(shard, transitions.release_lease(owner)):
            return True
        self._apply(shard, transitions.withdraw_handover(owner))
        return False

    def _apply(self, shard: int, transition: Transition) -> bool:
        with self._database.write() as connection:
            return carry_out(connection, _LEASES, {"shard": shard}, transition)


class SqliteLimitStore:
    """Per-host breakers (guarded by ``version``), per-host token buckets (GCRA's
    ``tat``) and concurrency slots (each a lease held until released or expired)."""

    def __init__(self, database: Database, rng: random.Random | None = None) -> None:
        self._database = database
        self._rng = rng or random.Random()
        database.ensure_schema(COORDINATION)

    def host(self, host: str) -> HostState:
        record = _HOSTS.read(self._database.connection(), {"host": host})
        return transitions.host_from_record(host, record)

    def replace_host(self, state: HostState, now: datetime) -> bool:
        """Write ``state`` if the stored one is still the version before it."""
        return self._apply(_HOSTS, {"host": state.host}, transitions.replace_host(state))

    def take_token(self, host: str, limit: RateLimit, now: datetime) -> float:
        """Take one token of ``host``'s bucket; returns 0, or the seconds to wait.

        One transaction reads the bucket and moves it on, so unlike on DynamoDB
        racing takers never both miss."""
        with self._database.write() as connection:
            row = connection.execute(
                "SELECT tat FROM limit_rates WHERE host = ?", (host,)
            ).fetchone()
            decision = take_token(limit, row["tat"] if row is not None else None, now.timestamp())
            if not decision.allowed:
                return decision.wait_seconds
            connection.execute(
                """INSERT INTO limit_rates (host, tat) VALUES (?, ?)
                   ON CONFLICT (host) DO UPDATE SET tat = excluded.tat""",
                (host, round(decision.tat, 6)),
            )
        return 0.0

    def acquire_slot(
        self, scope: str, limit: int, holder: str, now: datetime, until: datetime
    ) -> str | None:
        """Hold one of ``scope``'s ``limit`` slots until ``until``; its key, or None if
        the slots tried were all held. Starts at a random slot so waiters spread out."""
        take = transitions.acquire_slot(holder, now, until)
        for scoped in transitions.slots_to_try(scope, limit, self._rng.randrange(limit)):
            slot = SLOT_KEY_PREFIX + scoped
            if self._apply(_SLOTS, {"slot": slot}, take):
                return slot
        return None

    def extend_slot(self, slot: str, holder: str, until: datetime) -> bool:
        """Hold a slot we hold until ``until``; False if someone else holds it now."""
        return self._apply(_SLOTS, {"slot": slot}, transitions.extend_slot(holder, until))

    def release_slot(self, slot: str, holder: str) -> bool:
        """Free a slot we hold; False if its lease ran out and someone else took it."""
        return self._apply(_SLOTS, {"slot": slot}, transitions.release_slot(holder))

    def _apply(self, table: RowTable, key: dict[str, Any], transition: Transition) -> bool:
        with self._database.write() as connection:
            return carry_out(connection, table, key, transition)
