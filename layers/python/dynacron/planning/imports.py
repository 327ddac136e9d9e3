"""What a bulk import (``dynacron tasks import``, ``POST /tasks/batch``) needs of a
deployment to bring ``tasks`` in within ``hours``: the API's throttles, DynamoDB's
write capacity and the partitions that take the writes (issue 24).

How the writes fall, from the code:

- The importer sends batches of ``MAX_BATCH`` (100) tasks, one request each: the
  API stage's throttle (``api_rate_limit``, per second across the stage) and the
  tenant's rate (``DYNACRON_RATE_LIMIT``, per API instance) count a batch as one.
- ``DynamoTaskStore.create_many_within_quota`` stores a batch in transactions of
  at most ``TRANSACTION_PUTS`` (99) puts and one update of the tenant's count (a
  transaction holds at most 100 actions): a batch of 100 is two transactions.
- A transactional write costs twice a standard one: 2 write units per item of up
  to 1 KB (Amazon DynamoDB Developer Guide, "Amazon DynamoDB Transactions:
  capacity management"); each of the task's index entries is written once more,
  1 unit a KB, as the index's own write.
- Each index's busiest partition: the tasks table is keyed by task id (spread
  over as many partitions as its throughput needs); the due index by time bucket
  and shard (at worst every imported task's next occurrence falls in the current
  bucket: the import's rate over the shards, a partition each); the tenant and
  name indexes by tenant part (decision 0053: one tenant's import spread evenly
  over ``TENANT_INDEX_PARTS`` partitions by task id; within a part, ordered by
  ``created_at``, so that splitting it for heat does not help: every write goes to
  its end); the tenant's record in the coordination table takes every
  transaction's count update.
- A new on-demand table serves up to 4,000 write units a second at first and
  doubles its previous peak within 30 minutes ("DynamoDB on-demand capacity
  mode", "initial throughput"); beyond it, set the table's warm throughput (or
  provision it) before the import.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dynacron.api.requests import MAX_BATCH
from dynacron.definitions.resources import (
    DUE_INDEX,
    NAME_INDEX,
    TASKS,
    TENANT_INDEX,
    TENANT_INDEX_PARTS,
)
from dynacron.entry.settings import Settings
from dynacron.planning.capacity_model import MEASURED, Measured
from dynacron.planning.partitions import PARTITION_UTILISATION, PARTITION_WRITE_UNITS

# A transaction's most actions (DynamoDB), less the tenant's count update.
TRANSACTION_PUTS = 99
TRANSACTIONAL_WRITE_UNITS_PER_KB = 2
# The stack's default stage throttle (``infra/config.py``'s ``api_rate_limit``;
# tests/unit/test_plan_imports.py holds them together).
DEFAULT_API_RATE_LIMIT = 50.0
# What a new on-demand table serves at first, in write units a second.
ON_DEMAND_INITIAL_WRITE_UNITS = 4000
# The indexes an imported task is written to: every task has a tenant and a name
# key (decision 0045) and, while it has a next occurrence, a due-index entry; only a
# task run after another has a dependents-index entry (none is assumed in an import).
IMPORTED_INDEXES = (DUE_INDEX, TENANT_INDEX, NAME_INDEX)


class ImportRefused(ValueError):
    """An import the planner cannot size (no tasks, or no time)."""


@dataclass(frozen=True)
class ImportPlan:
    """What bringing ``tasks`` in within ``hours`` needs, per second."""

    tasks: int
    hours: float
    tenants: int
    shards: int
    tasks_per_second: float
    # POST /tasks/batch requests a second, all tenants, and the busiest tenant's.
    requests_per_second: float
    requests_per_second_per_tenant: float
    transactions_per_second: float
    # Write units a second: the tasks table's items, each index's entries, and the
    # tenants' records (their counts).
    table_write_units: float
    index_write_units: dict[str, float]
    coordination_write_units: float
    # The busiest partition's writes a second: the due index's (a bucket of a
    # shard), the tenant and name indexes' (a part of one tenant's) and the tenant's
    # record.
    due_index_partition_writes: float
    tenant_index_partition_writes: float
    tenant_record_writes: float

    @property
    def tenant_record_updates(self) -> float:
        """Transactions a second on one tenant's record (its count): one item."""
        return self.transactions_per_second / self.tenants

    @property
    def stage_rate_limit(self) -> int:
        """The stage throttle to set (``api_rate_limit``): the requests, doubled for
        room (retries of throttled batches, other calls)."""
        return max(int(DEFAULT_API_RATE_LIMIT), math.ceil(2 * self.requests_per_second))

    @property
    def tenant_rate_limit(self) -> int:
        """The importing tenant's rate to set (``dynacron tenants set-limits --rate``)."""
        default = Settings.tenant_rate_per_second
        return max(math.ceil(default), math.ceil(2 * self.requests_per_second_per_tenant))

    @property
    def table_partitions(self) -> int:
        """Partitions the tasks table needs for its writes, each kept within its headroom."""
        return math.ceil(self.table_write_units / (PARTITION_WRITE_UNITS * PARTITION_UTILISATION))

    @property
    def shards_needed(self) -> int:
        """Shards that keep a due-index partition within its headroom, at worst."""
        return math.ceil(self.tasks_per_second / (PARTITION_WRITE_UNITS * PARTITION_UTILISATION))

    @property
    def tenants_needed(self) -> int:
        """Tenants to spread the import over so that no tenant-index partition passes
        its headroom (one tenant's tasks share ``TENANT_INDEX_PARTS``)."""
        return math.ceil(self.tasks_per_second / (_HEADROOM * TENANT_INDEX_PARTS))

    @property
    def warm_write_units(self) -> int:
        """The tasks table's warm throughput to set before the import, when above
        what a new on-demand table serves (0: none needed)."""
        need = max(self.table_write_units, *self.index_write_units.values())
        return 0 if need <= ON_DEMAND_INITIAL_WRITE_UNITS else 1000 * math.ceil(need / 1000)

    def notes(self) -> list[str]:
        """What to set or change before the import, said as a person would."""
        notes = []
        if self.stage_rate_limit > DEFAULT_API_RATE_LIMIT:
            notes.append(
                f"API stage: {self.requests_per_second:,.1f} batch requests a second; set "
                f"-c api_rate_limit={self.stage_rate_limit} (default {DEFAULT_API_RATE_LIMIT:g})"
            )
        if self.tenant_rate_limit > Settings.tenant_rate_per_second:
            notes.append(
                f"tenant rate: {self.requests_per_second_per_tenant:,.1f} requests a second a "
                f"tenant; dynacron tenants set-limits TENANT --rate {self.tenant_rate_limit}"
            )
        if self.warm_write_units:
            notes.append(
                f"DynamoDB: the tasks table takes {self.table_write_units:,.0f} write units a "
                f"second (2 a task: transactional), beyond the {ON_DEMAND_INITIAL_WRITE_UNITS:,} "
                f"a new on-demand table serves; set its warm throughput to "
                f"{self.warm_write_units:,} write units a second (or provision it) first"
            )
        if self.due_index_partition_writes > _HEADROOM:
            notes.append(
                f"due index: {self.due_index_partition_writes:,.0f} writes a second a partition "
                f"if the tasks' next runs share an hour; {self.shards_needed} shards keep it "
                f"within {_HEADROOM:,.0f}"
            )
        if self.tenant_index_partition_writes > _HEADROOM:
            notes.append(
                f"tenant and name indexes: one tenant's import writes "
                f"{TENANT_INDEX_PARTS} partitions of each, "
                f"{self.tenant_index_partition_writes:,.0f} a second a partition, beyond the "
                f"{_HEADROOM:,.0f} the plan keeps (DynamoDB throttles at "
                f"{PARTITION_WRITE_UNITS:,}, and the table's writes with it): spread the "
                f"import over {self.tenants_needed} tenants or more, or give it "
                f"{self.tasks / (_HEADROOM * TENANT_INDEX_PARTS) / 3600:,.1f} hours"
            )
        return notes


_HEADROOM = PARTITION_WRITE_UNITS * PARTITION_UTILISATION


def plan_import(
    tasks: int,
    hours: float,
    *,
    tenants: int = 1,
    shards: int = Settings.shard_count,
    batch_size: int = MAX_BATCH,
    measured: Measured = MEASURED,
) -> ImportPlan:
    """What importing ``tasks`` over ``tenants`` (evenly) in ``hours`` needs of a
    deployment of ``shards`` shards, in batches of ``batch_size``."""
    if tasks <= 0 or hours <= 0 or tenants <= 0 or shards <= 0:
        raise ImportRefused("tasks, hours, tenants and shards must each be more than 0")
    if not 1 <= batch_size <= MAX_BATCH:
        raise ImportRefused(f"a batch holds 1 to {MAX_BATCH} tasks")
    rate = tasks / (hours * 3600)
    requests = rate / batch_size
    transactions = requests * math.ceil(batch_size / TRANSACTION_PUTS)
    item_kb = math.ceil(measured.task_item_bytes / 1024)
    # Each index entry: its share of the task's index bytes, a unit a KB.
    entry_kb = math.ceil(measured.task_index_bytes / len(IMPORTED_INDEXES) / 1024)
    return ImportPlan(
        tasks=tasks,
        hours=hours,
        tenants=tenants,
        shards=shards,
        tasks_per_second=rate,
        requests_per_second=requests,
        requests_per_second_per_tenant=requests / tenants,
        transactions_per_second=transactions,
        table_write_units=rate * TRANSACTIONAL_WRITE_UNITS_PER_KB * item_kb,
        index_write_units={
            f"{TASKS.suffix}/{index.name}": rate * entry_kb for index in IMPORTED_INDEXES
        },
        coordination_write_units=transactions * TRANSACTIONAL_WRITE_UNITS_PER_KB,
        due_index_partition_writes=rate * entry_kb / shards,
        tenant_index_partition_writes=rate * entry_kb / (tenants * TENANT_INDEX_PARTS),
        tenant_record_writes=transactions * TRANSACTIONAL_WRITE_UNITS_PER_KB / tenants,
    )
