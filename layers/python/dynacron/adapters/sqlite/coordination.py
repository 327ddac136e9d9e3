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
from collections.abc import Sequence
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
from dynacron.domain.coordination.tenants import TenantQuota
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

    def apply(self, shard: int, transition: Transition) -> bool:
        """``transition`` on the shard's cursor row, in one write transaction."""
        with self._database.write() as connection:
            return carry_out(connection, _CURSORS, {"shard": shard}, transition)


_QUOTA_COLUMNS = (
    ("max_tasks", "INTEGER"),
    ("rate_per_second", "REAL"),
    ("private_networks", "TEXT"),  # a JSON list of CIDRs (decision 0050)
)


class SqliteTenantStore:
    """Each tenant's task count and signing secrets (newest first; during a rotation
    the previous one stays valid until the next rotation drops it)."""

    def __init__(self, database: Database) -> None:
        self._database = database
        database.ensure_schema(COORDINATION)
        # An operator's limits for one tenant: columns a file of an earlier version lacks.
        database.ensure_columns("tenants", _QUOTA_COLUMNS)

    def quota(self, tenant_id: str) -> TenantQuota:
        """The ``max_tasks``, ``rate_per_second`` and ``private_networks`` an operator
        set on the row."""
        return _quota_of(self._row(tenant_id))

    def private_grants(self) -> dict[str, tuple[str, ...]]:
        """Every tenant's ``private_networks``."""
        rows = (
            self._database.connection()
            .execute("SELECT * FROM tenants WHERE private_networks IS NOT NULL")
            .fetchall()
        )
        return {row["tenant_id"]: _quota_of(dict(row)).private_networks for row in rows}

    def set_quota(self, tenant_id: str, quota: TenantQuota) -> None:
        """The row's limits replaced (a tenant never seen gets a row), in one write."""
        with self._database.write() as connection:
            connection.execute(
                """INSERT INTO tenants (tenant_id, max_tasks, rate_per_second, private_networks)
                   VALUES (?, ?, ?, ?)
                   ON CONFLICT (tenant_id) DO UPDATE SET max_tasks = excluded.max_tasks,
                   rate_per_second = excluded.rate_per_second,
                   private_networks = excluded.private_networks""",
                (
                    tenant_id,
                    quota.max_tasks,
                    quota.rate_per_second,
                    json.dumps(list(quota.private_networks)) if quota.private_networks else None,
                ),
            )

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

    def apply(self, tenant_id: str, transition: Transition) -> bool:
        """``transition`` on the tenant's row, in one write transaction."""
        with self._database.write() as connection:
            return carry_out(connection, _TENANTS, {"tenant_id": tenant_id}, transition)

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
    """Which tick works a shard, and until when (each change a transition the tick
    loop builds; an acquire writes the row whole, forgetting a waiting successor as
    a whole-item put does)."""

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

    def apply(self, shard: int, transition: Transition) -> bool:
        """``transition`` on the shard's lease row, in one write transaction."""
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

    def hosts(self, hosts: Sequence[str]) -> list[HostState]:
        """Each row read on this thread's connection: local reads cost no round trip."""
        connection = self._database.connection()
        return [
            transitions.host_from_record(host, _HOSTS.read(connection, {"host": host}))
            for host in hosts
        ]

    def apply_host(self, host: str, transition: Transition, now: datetime) -> bool:
        """``transition`` on the host's row (kept for good: no TTL here)."""
        return self._apply(_HOSTS, {"host": host}, transition)

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

    def slots(self, scope: str, limit: int) -> list[str]:
        """The slots' keys a taker tries, from a random one so that waiters spread out."""
        first = self._rng.randrange(limit)
        return [SLOT_KEY_PREFIX + s for s in transitions.slots_to_try(scope, limit, first)]

    def apply_slot(self, slot: str, transition: Transition) -> bool:
        """``transition`` on the slot's row, in one write transaction."""
        return self._apply(_SLOTS, {"slot": slot}, transition)

    def _apply(self, table: RowTable, key: dict[str, Any], transition: Transition) -> bool:
        with self._database.write() as connection:
            return carry_out(connection, table, key, transition)


def _quota_of(row: dict[str, Any]) -> TenantQuota:
    max_tasks, rate = row.get("max_tasks"), row.get("rate_per_second")
    networks = row.get("private_networks")
    return TenantQuota(
        max_tasks=None if max_tasks is None else int(max_tasks),
        rate_per_second=None if rate is None else float(rate),
        private_networks=tuple(json.loads(networks)) if networks else (),
    )
