"""The embedded adapter set: every port on one SQLite file (WAL), shared by processes."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import timedelta

from dynacron.adapters.sqlite.calendars import SqliteCalendarStore
from dynacron.adapters.sqlite.coordination import (
    SqliteCursorStore,
    SqliteLimitStore,
    SqliteShardLeases,
    SqliteTenantStore,
)
from dynacron.adapters.sqlite.create_keys import SqliteCreateKeys
from dynacron.adapters.sqlite.database import Database
from dynacron.adapters.sqlite.executions import SqliteExecutionStore
from dynacron.adapters.sqlite.queue import SqliteQueues
from dynacron.adapters.sqlite.queue_ports import SqliteDeadLetterQueue, SqliteDispatchQueue
from dynacron.adapters.sqlite.tasks import SqliteTaskStore
from dynacron.definitions.resources import LEASE_SHARDS
from dynacron.domain.clock import Clock
from dynacron.ports import AdapterSet, DeadLetterQueue, DispatchQueue


@dataclass(frozen=True)
class SqliteStores:
    """The eight stores on one database; the queues (``adapters/sqlite/queue_ports.py``)
    complete them into an ``AdapterSet``."""

    tasks: SqliteTaskStore
    executions: SqliteExecutionStore
    cursors: SqliteCursorStore
    tenants: SqliteTenantStore
    create_keys: SqliteCreateKeys
    calendars: SqliteCalendarStore
    leases: SqliteShardLeases
    limits: SqliteLimitStore

    def with_queues(self, queue: DispatchQueue, dead_letter_queue: DeadLetterQueue) -> AdapterSet:
        """Every port: these stores and the given queues."""
        return AdapterSet(
            tasks=self.tasks,
            executions=self.executions,
            cursors=self.cursors,
            tenants=self.tenants,
            create_keys=self.create_keys,
            leases=self.leases,
            limits=self.limits,
            queue=queue,
            dead_letter_queue=dead_letter_queue,
            calendars=self.calendars,
        )


def sqlite_stores(
    database: Database,
    *,
    execution_retention: timedelta,
    lease_shards: int = LEASE_SHARDS,
    rng: random.Random | None = None,
) -> SqliteStores:
    """Every store on ``database`` (its tables are created if missing)."""
    return SqliteStores(
        tasks=SqliteTaskStore(database),
        executions=SqliteExecutionStore(database, execution_retention, lease_shards),
        cursors=SqliteCursorStore(database),
        tenants=SqliteTenantStore(database),
        create_keys=SqliteCreateKeys(database),
        calendars=SqliteCalendarStore(database),
        leases=SqliteShardLeases(database),
        limits=SqliteLimitStore(database, rng),
    )


def sqlite_adapters(
    database: Database,
    clock: Clock,
    *,
    execution_retention: timedelta,
    lease_shards: int = LEASE_SHARDS,
) -> AdapterSet:
    """Every port on ``database``: the stores and the dispatch and dead-letter queues."""
    queues = SqliteQueues(database, clock)
    return sqlite_stores(
        database, execution_retention=execution_retention, lease_shards=lease_shards
    ).with_queues(SqliteDispatchQueue(queues), SqliteDeadLetterQueue(queues))
