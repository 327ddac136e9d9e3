"""What coordinates the scheduler itself, on SQLite: per-shard tick cursors, tenants'
counts and secrets, tick leases, and the workers' shared limits (the ``CursorStore``,
``TenantStore``, ``ShardLeases`` and ``LimitStore`` ports).

Each change states what it expects, as the DynamoDB adapters' conditions do: one
``UPDATE ... WHERE`` where a single statement says it, else a ``database.write()``
transaction that reads, checks and writes under the write lock. Instants are
stored in their fixed-width text form, so text order is time order.
"""

from __future__ import annotations

import json
import random
from datetime import datetime, timedelta
from typing import Any

from dynacron.adapters.sqlite.database import Database
from dynacron.adapters.sqlite.records import dump, instant_or_none, load, optional_instant
from dynacron.adapters.sqlite.schema import COORDINATION
from dynacron.definitions.resources import SLOT_KEY_PREFIX
from dynacron.domain.coordination.limits import BreakerState, HostState, RateLimit, take_token
from dynacron.domain.coordination.uptime import Outage, ShardHistory
from dynacron.domain.instants import format_instant, parse_instant
from dynacron.ports import ShardCursor, ShardLease

# A concurrency limit tries this many of its slots before the execution waits
# (as on DynamoDB: bounded work per attempt, whatever the limit).
SLOT_PROBES = 4


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
                    _outage_from_text(o) for o in json.loads(values.get("outages") or "[]")
                ),
                heartbeat=heartbeat,
            ),
        )

    def record_tick(self, shard: int, history: ShardHistory, seen: ShardHistory) -> bool:
        """Store ``history`` if the stored one is still ``seen``: of two ticks of one
        shard, one records an outage, once."""
        assert history.last_tick is not None
        assert history.ticking_since is not None
        with self._database.write() as connection:
            row = connection.execute(
                "SELECT last_tick_at FROM shard_cursors WHERE shard = ?", (shard,)
            ).fetchone()
            stored = row["last_tick_at"] if row is not None else None
            if stored != optional_instant(seen.last_tick):
                return False
            connection.execute(
                """INSERT INTO shard_cursors (shard, last_tick_at, ticking_since, outages)
                   VALUES (?, ?, ?, ?) ON CONFLICT (shard) DO UPDATE SET
                   last_tick_at = excluded.last_tick_at, ticking_since = excluded.ticking_since,
                   outages = excluded.outages""",
                (
                    shard,
                    format_instant(history.last_tick),
                    format_instant(history.ticking_since),
                    json.dumps([_outage_to_text(o) for o in history.outages]),
                ),
            )
        return True

    def advance(self, shard: int, bucket: datetime) -> bool:
        """Move the cursor forward to ``bucket``; never backwards."""
        changed = (
            self._database.connection()
            .execute(
                """INSERT INTO shard_cursors (shard, bucket) VALUES (?, ?)
                   ON CONFLICT (shard) DO UPDATE SET bucket = excluded.bucket
                   WHERE bucket IS NULL OR bucket < excluded.bucket""",
                (shard, format_instant(bucket)),
            )
            .rowcount
        )
        return bool(changed)


def _outage_to_text(outage: Outage) -> str:
    return f"{format_instant(outage.last_tick)}/{format_instant(outage.next_tick)}"


def _outage_from_text(text: str) -> Outage:
    last_tick, _, next_tick = text.partition("/")
    return Outage(last_tick=parse_instant(last_tick), next_tick=parse_instant(next_tick))


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
            rotated = [fresh_secret, current[0]]
            connection.execute(
                "UPDATE tenants SET signing_secrets = ? WHERE tenant_id = ?",
                (json.dumps(rotated), tenant_id),
            )
            return rotated

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
        changed = (
            self._database.connection()
            .execute(
                """INSERT INTO shard_leases (shard, owner, lease_until) VALUES (?, ?, ?)
                   ON CONFLICT (shard) DO UPDATE SET owner = excluded.owner,
                   lease_until = excluded.lease_until, successor = NULL
                   WHERE lease_until <= ? OR owner = excluded.owner""",
                (shard, owner, format_instant(until), format_instant(now)),
            )
            .rowcount
        )
        return bool(changed)

    def request_handover(self, shard: int, owner: str) -> bool:
        """Ask the current holder to pass the lease to ``owner`` at its next renewal."""
        return self._change(
            "UPDATE shard_leases SET successor = ? WHERE shard = ? AND owner <> ?",
            (owner, shard, owner),
        )

    def renew(self, shard: int, owner: str, until: datetime) -> bool:
        """Extend our lease; False if it is no longer ours or a successor is waiting."""
        return self._change(
            """UPDATE shard_leases SET lease_until = ?
               WHERE shard = ? AND owner = ? AND successor IS NULL""",
            (format_instant(until), shard, owner),
        )

    def hand_over(self, shard: int, owner: str, until: datetime) -> bool:
        """Make the waiting successor the holder, until ``until``; False if we hold nothing."""
        return self._change(
            """UPDATE shard_leases SET owner = successor, lease_until = ?, successor = NULL
               WHERE shard = ? AND owner = ? AND successor IS NOT NULL""",
            (format_instant(until), shard, owner),
        )

    def release(self, shard: int, owner: str) -> bool:
        """Give the lease up, or withdraw our request for it; True if we held it."""
        if self._change("DELETE FROM shard_leases WHERE shard = ? AND owner = ?", (shard, owner)):
            return True
        self._change(
            "UPDATE shard_leases SET successor = NULL WHERE shard = ? AND successor = ?",
            (shard, owner),
        )
        return False

    def _change(self, statement: str, parameters: tuple[Any, ...]) -> bool:
        return bool(self._database.connection().execute(statement, parameters).rowcount)


class SqliteLimitStore:
    """Per-host breakers (guarded by ``version``), per-host token buckets (GCRA's
    ``tat``) and concurrency slots (each a lease held until released or expired)."""

    def __init__(self, database: Database, rng: random.Random | None = None) -> None:
        self._database = database
        self._rng = rng or random.Random()
        database.ensure_schema(COORDINATION)

    def host(self, host: str) -> HostState:
        row = (
            self._database.connection()
            .execute("SELECT record FROM limit_hosts WHERE host = ?", (host,))
            .fetchone()
        )
        if row is None:
            return HostState(host=host)
        values = load(row["record"])
        return HostState(
            host=host,
            breaker=BreakerState(values.get("breaker", BreakerState.CLOSED)),
            consecutive_failures=int(values.get("consecutive_failures", 0)),
            breaker_until=instant_or_none(values.get("breaker_until")),
            paused_until=instant_or_none(values.get("paused_until")),
            version=int(values.get("version", 0)),
        )

    def replace_host(self, state: HostState, now: datetime) -> bool:
        """Write ``state`` if the stored one is still the version before it."""
        record = {
            "breaker": state.breaker.value,
            "consecutive_failures": state.consecutive_failures,
            "breaker_until": optional_instant(state.breaker_until),
            "paused_until": optional_instant(state.paused_until),
            "version": state.version,
        }
        changed = (
            self._database.connection()
            .execute(
                """INSERT INTO limit_hosts (host, version, record) VALUES (?, ?, ?)
                   ON CONFLICT (host) DO UPDATE SET version = excluded.version,
                   record = excluded.record WHERE version = ?""",
                (state.host, state.version, dump(record), state.version - 1),
            )
            .rowcount
        )
        return bool(changed)

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
        first = self._rng.randrange(limit)
        connection = self._database.connection()
        for offset in range(min(limit, SLOT_PROBES)):
            slot = f"{SLOT_KEY_PREFIX}{scope}#{(first + offset) % limit}"
            taken = connection.execute(
                """INSERT INTO limit_slots (slot, holder, lease_until) VALUES (?, ?, ?)
                   ON CONFLICT (slot) DO UPDATE SET holder = excluded.holder,
                   lease_until = excluded.lease_until
                   WHERE lease_until < ? OR holder = excluded.holder""",
                (slot, holder, format_instant(until), format_instant(now)),
            ).rowcount
            if taken:
                return slot
        return None

    def extend_slot(self, slot: str, holder: str, until: datetime) -> bool:
        """Hold a slot we hold until ``until``; False if someone else holds it now."""
        changed = (
            self._database.connection()
            .execute(
                "UPDATE limit_slots SET lease_until = ? WHERE slot = ? AND holder = ?",
                (format_instant(until), slot, holder),
            )
            .rowcount
        )
        return bool(changed)

    def release_slot(self, slot: str, holder: str) -> bool:
        """Free a slot we hold; False if its lease ran out and someone else took it."""
        changed = (
            self._database.connection()
            .execute("DELETE FROM limit_slots WHERE slot = ? AND holder = ?", (slot, holder))
            .rowcount
        )
        return bool(changed)
