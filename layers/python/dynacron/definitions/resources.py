"""The one source of truth for dynacron's tables, keys, indexes and queues.

The CDK app (``infra/``) and local mode both build their resources from these
definitions, and the runtime reads names through the environment variables named
here, so a key or name cannot drift between infrastructure and code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

AttributeType = Literal["S", "N"]
Projection = Literal["KEYS_ONLY", "INCLUDE", "ALL"]


@dataclass(frozen=True)
class Key:
    name: str
    type: AttributeType = "S"


@dataclass(frozen=True)
class IndexDefinition:
    name: str
    partition_key: Key
    sort_key: Key
    projection: Projection
    # INCLUDE only: the attributes projected beside the keys.
    non_key_attributes: tuple[str, ...] = ()


@dataclass(frozen=True)
class TableDefinition:
    logical_id: str
    suffix: str
    env_var: str
    partition_key: Key
    sort_key: Key | None = None
    indexes: tuple[IndexDefinition, ...] = ()
    ttl_attribute: str | None = None

    def default_name(self, prefix: str) -> str:
        return f"{prefix}-{self.suffix}"


@dataclass(frozen=True)
class QueueDefinition:
    logical_id: str
    suffix: str
    env_var: str
    visibility_timeout_seconds: int
    retention_seconds: int
    dead_letter: QueueDefinition | None = None
    max_receive_count: int | None = None

    def default_name(self, prefix: str) -> str:
        return f"{prefix}-{self.suffix}"


# Sparse: only tasks with a pending occurrence carry ``due_bucket``, so paused and
# completed tasks cost nothing here. Keys only: the tick re-reads each candidate
# with a strongly consistent read anyway, and small index items are cheap writes.
DUE_INDEX = IndexDefinition(
    name="due-index",
    partition_key=Key("due_bucket"),
    sort_key=Key("next_run_at"),
    projection="KEYS_ONLY",
)

# A task's tags (a map of strings), the one attribute the tenant index carries
# beside its keys.
TAGS_ATTRIBUTE = "tags"

# A task's owner, on the item (every ownership check reads it).
TENANT_ATTRIBUTE = "tenant_id"

# The tenant and name indexes are write-sharded (decision 0053): a task carries
# ``tenant_part`` = ``<digest of the tenant>#<p>`` (``task_items.tenant_part_key``),
# p the CRC-32 of its task id modulo
# ``TENANT_INDEX_PARTS``, written at create and never changed, so one tenant's
# import spreads its index writes over that many partitions, and a listing merges
# them. 8: a one-hour import of ten million tasks is 2,778 writes a second, 347 a
# part, within the 500 the planner keeps of a partition's 1,000 (and 11,520 tasks
# an hour a part at that headroom, 4 M an hour a tenant); a page then costs 8
# small Queries. Fixed, not a setting: every listing must query every part a task
# may have been written to, and changing it is a backfill and new indexes.
TENANT_INDEX_PARTS = 8
TENANT_PART_ATTRIBUTE = "tenant_part"

# A tenant's tasks, oldest first: listing queries the tenant's parts only, so a
# tenant never reads (and pays for) another's items. Keys and tags only: an index
# entry is rewritten whenever a projected attribute changes, and every claim changes
# most of a task (``next_run_at``, ``version``, ...), so projecting all attributes
# cost one more index write per fire. Tags change only when the task's owner
# changes them (create, PATCH), never on a fire, and projecting them lets a
# filtered listing (``?tag=``) be filtered by DynamoDB on the index (decision
# 0027). Listing reads the page's items with one BatchGetItem: listings are rare,
# fires are not (BENCHMARKS.md, cost). A new name: CloudFormation cannot change an
# index's keys (the ``tenant-index`` it replaces was keyed by ``tenant_id``).
TENANT_INDEX = IndexDefinition(
    name="tenant-part-index",
    partition_key=Key(TENANT_PART_ATTRIBUTE),
    sort_key=Key("created_at"),
    projection="INCLUDE",
    non_key_attributes=(TAGS_ATTRIBUTE,),
)

# A tenant's tasks by name (``GET /tasks?name_prefix=``, ``sort=name``): the sort
# key is the normalised name and the task id (``domain.tasks.listing``), so a
# case-insensitive prefix is one key range of each part. Keys only, and the name
# key changes only when the name does (create, PATCH), never on a claim: a fire
# writes nothing here (decision 0045). A page's tasks are read with one
# BatchGetItem. Write-sharded like the tenant index, under a new name too.
NAME_INDEX = IndexDefinition(
    name="name-part-index",
    partition_key=Key(TENANT_PART_ATTRIBUTE),
    sort_key=Key("name_key"),
    projection="KEYS_ONLY",
)

# The indexes the two above replace (keyed by ``tenant_id``): an existing stack
# drops them one deploy at a time (``infra`` context ``task_index_upgrade``,
# docs/deploy.md), as CloudFormation adds or deletes one index per update.
UNSHARDED_TENANT_INDEX = IndexDefinition(
    name="tenant-index",
    partition_key=Key(TENANT_ATTRIBUTE),
    sort_key=Key("created_at"),
    projection="INCLUDE",
    non_key_attributes=(TAGS_ATTRIBUTE,),
)
UNSHARDED_NAME_INDEX = IndexDefinition(
    name="name-index",
    partition_key=Key(TENANT_ATTRIBUTE),
    sort_key=Key("name_key"),
    projection="KEYS_ONLY",
)

# Sparse: only tasks that run after another (``after``) carry ``after_task_id``;
# an upstream success asks it "who follows this task?" with one Query.
DEPENDENTS_INDEX = IndexDefinition(
    name="dependents-index",
    partition_key=Key("after_task_id"),
    sort_key=Key("task_id"),
    projection="KEYS_ONLY",
)

TASKS = TableDefinition(
    logical_id="Tasks",
    suffix="tasks",
    env_var="DYNACRON_TASKS_TABLE",
    partition_key=Key("task_id"),
    indexes=(DUE_INDEX, TENANT_INDEX, DEPENDENTS_INDEX, NAME_INDEX),
)

# Sparse: only executions with a pending obligation that no SQS message guards
# (queued, awaiting a callback, a follow-up or a dead-letter copy still to do)
# carry ``lease_shard``; a running attempt begun from a message is not here while
# the message guards it (decision 0015). The reaper queries each shard for
# ``lease_until`` in the past instead of scanning. Keys only: the reaper
# re-reads each candidate with a strongly consistent read before acting on it.
LEASE_INDEX = IndexDefinition(
    name="lease-index",
    partition_key=Key("lease_shard"),
    sort_key=Key("lease_until"),
    projection="KEYS_ONLY",
)
# Partitions of the lease index (by execution id). Fixed, not a setting: the
# reaper must query every partition a lease may have been written to.
LEASE_SHARDS = 4

# Sparse: only dead-lettered executions carry ``dead_letter``, newest first by
# ``dead_lettered_at``. All attributes, so listing needs no second read.
DEAD_LETTER_INDEX = IndexDefinition(
    name="dead-letter-index",
    partition_key=Key("dead_letter"),
    sort_key=Key("dead_lettered_at"),
    projection="ALL",
)

# Sparse: only executions an operator looks for across tasks (FAILED, waiting for
# or running a retry, a long job after its 202) carry ``attention_tenant``; a fire
# that succeeds at its first attempt never does, so it writes nothing here
# (decision 0028). A tenant's listing is one partition, newest first by
# ``attention_at``. Keys only: a long job's heartbeats then rewrite no index entry,
# and listing re-reads each page with one BatchGetItem, which also drops an entry
# whose item has moved on since (the index is eventually consistent).
ATTENTION_INDEX = IndexDefinition(
    name="attention-index",
    partition_key=Key("attention_tenant"),
    sort_key=Key("attention_at"),
    projection="KEYS_ONLY",
)

# Execution ids are ``<task_id>_<compact UTC instant>``, so within a task's
# partition the sort key orders executions by scheduled time.
EXECUTIONS = TableDefinition(
    logical_id="Executions",
    suffix="executions",
    env_var="DYNACRON_EXECUTIONS_TABLE",
    partition_key=Key("task_id"),
    sort_key=Key("execution_id"),
    indexes=(LEASE_INDEX, DEAD_LETTER_INDEX, ATTENTION_INDEX),
    ttl_attribute="expires_at",
)

# Small records that coordinate the scheduler itself: per-shard tick cursors,
# tick leases, and one record per tenant (task count, signing secrets).
COORDINATION = TableDefinition(
    logical_id="Coordination",
    suffix="coordination",
    env_var="DYNACRON_COORDINATION_TABLE",
    partition_key=Key("key"),
    ttl_attribute="expires_at",
)

# Key prefixes of the limit records in the coordination table (see ``adapters/aws/limits.py``):
# the workers' role may touch these and nothing else there (not tick leases).
HOST_KEY_PREFIX = "host#"
RATE_KEY_PREFIX = "rate#"
SLOT_KEY_PREFIX = "slot#"
LIMIT_KEY_PREFIXES = (HOST_KEY_PREFIX, RATE_KEY_PREFIX, SLOT_KEY_PREFIX)
# A tenant's record: its task count and signing secrets (workers only read it).
TENANT_KEY_PREFIX = "tenant#"
# A task creation's idempotency key (the API's alone).
CREATE_KEY_PREFIX = "create-key#"
# A tenant's calendars (the API's alone; decision 0056).
CALENDARS_KEY_PREFIX = "calendars#"
# A tenant's schedule census (decision 0046) lives in the executions table, whose
# sort key lets one Query read a partition's entries: partition
# ``census#<tenant>#<shard>`` (the shard of the task's id, so that a million tasks
# on one schedule spread their counting over ``CENSUS_SHARDS`` partitions), sort
# key the signature's key; ``tasks`` counts, ``signature`` is the text, and an entry
# whose signature ends (one-time, end bound) expires a day after (``expires_at``).
CENSUS_KEY_PREFIX = "census#"
# A task's change history (decision 0054) lives in the executions table too:
# partition ``changes#<task id>``, sort key the change id (in time order), kept
# after the task is deleted until its ``expires_at`` (the history retention, TTL).
CHANGES_KEY_PREFIX = "changes#"
CENSUS_SHARDS = 8
# A shard's tick cursor and history: the claim function may read it, nothing more.
CURSOR_KEY_PREFIX = "tick-cursor#"
# That the name-key backfill (decision 0045) has gone over the whole tasks table,
# written and read by an operator's `dynacron admin backfill-name-keys` alone.
NAME_KEYS_BACKFILLED_KEY = "admin#name-keys-backfilled"
# The same for the tenant-part backfill (decision 0053).
TENANT_PARTS_BACKFILLED_KEY = "admin#tenant-parts-backfilled"

DEAD_LETTER_QUEUE = QueueDefinition(
    logical_id="DeadLetterQueue",
    suffix="dead-letters",
    env_var="DYNACRON_DEAD_LETTER_QUEUE_URL",
    visibility_timeout_seconds=30,
    retention_seconds=14 * 24 * 3600,
)

WORKER_TIMEOUT_SECONDS = 60
UNDELIVERED_TIMEOUT_SECONDS = 30

# Where SQS moves a dispatch message received ``max_receive_count`` times without
# being deleted (decision 0022). A small function reads it: a message whose
# attempt never began becomes a dead-letter record (listed, redriven) and a copy in
# the dead-letter queue. Apart from the dead-letter queue, so that reading one
# never disturbs the other's copies. No redrive policy of its own: a moved message
# may keep its receive count, and a body that cannot be read is forwarded to the
# dead-letter queue by the function itself.
UNDELIVERED_QUEUE = QueueDefinition(
    logical_id="UndeliveredQueue",
    suffix="undelivered",
    env_var="DYNACRON_UNDELIVERED_QUEUE_URL",
    visibility_timeout_seconds=6 * UNDELIVERED_TIMEOUT_SECONDS,
    retention_seconds=14 * 24 * 3600,
)

# AWS advises a visibility timeout of at least six times the consumer's timeout.
DISPATCH_QUEUE = QueueDefinition(
    logical_id="DispatchQueue",
    suffix="dispatch",
    env_var="DYNACRON_DISPATCH_QUEUE_URL",
    visibility_timeout_seconds=6 * WORKER_TIMEOUT_SECONDS,
    retention_seconds=4 * 24 * 3600,
    dead_letter=UNDELIVERED_QUEUE,
    max_receive_count=5,
)

# The Powertools idempotency record of a handler call is kept on its execution's
# item, not in a table of its own (decision 0016).
TABLES = (TASKS, EXECUTIONS, COORDINATION)
QUEUES = (DEAD_LETTER_QUEUE, UNDELIVERED_QUEUE, DISPATCH_QUEUE)


def create_table_request(table: TableDefinition, name: str) -> dict[str, Any]:
    """The DynamoDB ``CreateTable`` arguments for ``table`` (on-demand billing)."""
    keys = [table.partition_key, *([table.sort_key] if table.sort_key else [])]
    for index in table.indexes:
        keys += [index.partition_key, index.sort_key]
    attributes = {key.name: key.type for key in keys}
    request: dict[str, Any] = {
        "TableName": name,
        "BillingMode": "PAY_PER_REQUEST",
        "AttributeDefinitions": [
            {"AttributeName": attr, "AttributeType": kind} for attr, kind in attributes.items()
        ],
        "KeySchema": _key_schema(table.partition_key, table.sort_key),
    }
    if table.indexes:
        request["GlobalSecondaryIndexes"] = [
            {
                "IndexName": index.name,
                "KeySchema": _key_schema(index.partition_key, index.sort_key),
                "Projection": _projection(index),
            }
            for index in table.indexes
        ]
    return request


def _projection(index: IndexDefinition) -> dict[str, Any]:
    projection: dict[str, Any] = {"ProjectionType": index.projection}
    if index.projection == "INCLUDE":
        projection["NonKeyAttributes"] = list(index.non_key_attributes)
    return projection


def _key_schema(partition_key: Key, sort_key: Key | None) -> list[dict[str, str]]:
    schema = [{"AttributeName": partition_key.name, "KeyType": "HASH"}]
    if sort_key is not None:
        schema.append({"AttributeName": sort_key.name, "KeyType": "RANGE"})
    return schema
