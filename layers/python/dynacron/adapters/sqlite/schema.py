"""The stores' tables on one SQLite file: one table per concern.

Each table keeps the full record as JSON text (``record``, in the DynamoDB item's
map shape, so both backends name every field alike) and, beside it, the columns
its queries need, each indexed as the matching DynamoDB index is. The columns are
written from the record in the same transaction, so they never disagree with it.
Partial indexes play the part of DynamoDB's sparse ones: a row without the
column is not in the index.

Expired leases and slots are told apart by their times. Finished executions are
deleted once their ``expires_at`` has passed (DynamoDB's TTL does it on AWS) by
``adapters/sqlite/retention.py``, which ``dynacron local`` runs every minute.
"""

from __future__ import annotations

TASKS = (
    """CREATE TABLE IF NOT EXISTS tasks (
        task_id TEXT PRIMARY KEY,
        tenant_id TEXT NOT NULL,
        created_at TEXT NOT NULL,
        version INTEGER,
        due_bucket TEXT,
        next_run_at TEXT,
        after_task_id TEXT,
        record TEXT NOT NULL
    )""",
    # The due index: a bucket of one shard, oldest first.
    """CREATE INDEX IF NOT EXISTS tasks_due ON tasks (due_bucket, next_run_at, task_id)
        WHERE due_bucket IS NOT NULL""",
    # A tenant's tasks, oldest first.
    "CREATE INDEX IF NOT EXISTS tasks_tenant ON tasks (tenant_id, created_at, task_id)",
    # Who runs after a task (``after`` schedules).
    """CREATE INDEX IF NOT EXISTS tasks_after ON tasks (after_task_id, task_id)
        WHERE after_task_id IS NOT NULL""",
)

# A task's change history (decision 0054): one row per change, written in the
# transaction of the change; kept after the task is deleted, until ``expires_at``
# (epoch seconds, the history retention), when the retention sweep deletes it.
TASK_CHANGES = (
    """CREATE TABLE IF NOT EXISTS task_changes (
        task_id TEXT NOT NULL,
        change_id TEXT NOT NULL,
        tenant_id TEXT NOT NULL,
        expires_at INTEGER,
        record TEXT NOT NULL,
        PRIMARY KEY (task_id, change_id)
    )""",
    """CREATE INDEX IF NOT EXISTS task_changes_expiry ON task_changes (expires_at)
        WHERE expires_at IS NOT NULL""",
)

# Columns of the tasks table added since the first release (decision 0045): a file
# made before gets them, and its rows their values (``tasks.py``), before the
# indexes that use them.
TASK_COLUMNS_ADDED = (("name_key", "TEXT"),)

# A tenant's next-run order: a task due to run (in the due index) by its next run, one
# that is not (paused, completed, set aside) after every instant.
NO_NEXT_RUN = "~"
TASK_RUN_ORDER = (
    f"CASE WHEN due_bucket IS NULL THEN '{NO_NEXT_RUN}'"
    f" ELSE coalesce(next_run_at, '{NO_NEXT_RUN}') END"
)


def _tag_rows_of(row: str) -> str:
    """The INSERT of a task row's tag rows: ``new`` in the triggers that keep the tag
    table, ``tasks`` (every row) in the fill of a file made before it."""
    source = "tasks, " if row == "tasks" else ""
    return f"""INSERT OR IGNORE
        INTO task_tags (task_id, tag_key, tag_value, tenant_id, created_at)
        SELECT {row}.task_id, tag.key, CASE WHEN tag.type = 'text' THEN tag.value END,
               {row}.tenant_id, {row}.created_at
        FROM {source}json_each(
            CASE WHEN json_valid({row}.record) THEN {row}.record ELSE '{{}}' END, '$.tags'
        ) AS tag
        WHERE tag.key IS NOT NULL"""


TASKS_LISTED = (
    # A tenant's tasks by name: the name key is the normalised name and the task id.
    "CREATE INDEX IF NOT EXISTS tasks_name ON tasks (tenant_id, name_key)",
    # A tenant's tasks by next run, those without one last. An index on an expression
    # of the column the tick already writes: nothing more for a claim to set.
    f"CREATE INDEX IF NOT EXISTS tasks_next_run ON tasks (tenant_id, {TASK_RUN_ORDER}, task_id)",
    # A task's tags, one row each, so that a tag filter reads the tasks that have the
    # tag, not the whole tenant. Kept by triggers, whoever writes the task's row; a
    # claim (which never changes the tags) compares them and writes nothing here.
    """CREATE TABLE IF NOT EXISTS task_tags (
        task_id TEXT NOT NULL,
        tag_key TEXT NOT NULL,
        tag_value TEXT,
        tenant_id TEXT NOT NULL,
        created_at TEXT NOT NULL,
        PRIMARY KEY (task_id, tag_key)
    ) WITHOUT ROWID""",
    """CREATE INDEX IF NOT EXISTS task_tags_value
        ON task_tags (tenant_id, tag_key, tag_value, created_at, task_id)""",
    """CREATE INDEX IF NOT EXISTS task_tags_key
        ON task_tags (tenant_id, tag_key, created_at, task_id)""",
    f"""CREATE TRIGGER IF NOT EXISTS task_tags_on_insert AFTER INSERT ON tasks BEGIN
        DELETE FROM task_tags WHERE task_id = new.task_id;
        {_tag_rows_of("new")};
    END""",
    f"""CREATE TRIGGER IF NOT EXISTS task_tags_on_update AFTER UPDATE OF record ON tasks
        WHEN CASE WHEN json_valid(old.record) AND json_valid(new.record)
            THEN json_extract(old.record, '$.tags') IS NOT json_extract(new.record, '$.tags')
            ELSE 1 END
    BEGIN
        DELETE FROM task_tags WHERE task_id = new.task_id;
        {_tag_rows_of("new")};
    END""",
    """CREATE TRIGGER IF NOT EXISTS task_tags_on_delete AFTER DELETE ON tasks BEGIN
        DELETE FROM task_tags WHERE task_id = old.task_id;
    END""",
)

# Migrations done once per file, by name: a row here says the step is done, so that
# opening the store does not look again (a look may read every task).
MIGRATIONS = ("CREATE TABLE IF NOT EXISTS migrations (step TEXT PRIMARY KEY) WITHOUT ROWID",)

# Fills the tag table of a file made before it (run once, when the table is made).
TASK_TAGS_FILLED = _tag_rows_of("tasks")

EXECUTIONS = (
    """CREATE TABLE IF NOT EXISTS executions (
        execution_id TEXT PRIMARY KEY,
        task_id TEXT NOT NULL,
        lease_shard TEXT,
        lease_until TEXT,
        dead_letter TEXT,
        dead_lettered_at TEXT,
        record TEXT NOT NULL,
        attention_tenant TEXT,
        attention_at TEXT
    )""",
    # A task's executions: ids of one task sort by scheduled time.
    "CREATE INDEX IF NOT EXISTS executions_task ON executions (task_id, execution_id)",
    # The lease index the reaper walks, one shard at a time.
    """CREATE INDEX IF NOT EXISTS executions_lease
        ON executions (lease_shard, lease_until, execution_id)
        WHERE lease_shard IS NOT NULL""",
    # Each tenant's dead letters, newest first.
    """CREATE INDEX IF NOT EXISTS executions_dead_letter
        ON executions (dead_letter, dead_lettered_at, execution_id)
        WHERE dead_letter IS NOT NULL""",
)

# Columns added since the first release: a file made before gets them (empty, so
# its older rows are not listed across tasks) before the indexes that use them.
EXECUTION_COLUMNS_ADDED = (("attention_tenant", "TEXT"), ("attention_at", "TEXT"))

EXECUTIONS_ATTENTION = (
    # Each tenant's executions listed across its tasks, newest first (decision 0028).
    """CREATE INDEX IF NOT EXISTS executions_attention
        ON executions (attention_tenant, attention_at, execution_id)
        WHERE attention_tenant IS NOT NULL""",
)

# The history sweep's index (``retention.py``): records no lease keeps, by when they
# may go. An index on the record's own field: no column to fill, in old files too.
EXECUTION_EXPIRY = "json_extract(record, '$.expires_at')"
EXECUTIONS_EXPIRY = (
    f"""CREATE INDEX IF NOT EXISTS executions_expiry
        ON executions ({EXECUTION_EXPIRY}) WHERE lease_shard IS NULL""",
)

COORDINATION = (
    """CREATE TABLE IF NOT EXISTS tenants (
        tenant_id TEXT PRIMARY KEY,
        task_count INTEGER NOT NULL DEFAULT 0,
        signing_secrets TEXT
    )""",
    """CREATE TABLE IF NOT EXISTS shard_cursors (
        shard INTEGER PRIMARY KEY,
        bucket TEXT,
        last_tick_at TEXT,
        ticking_since TEXT,
        outages TEXT
    )""",
    """CREATE TABLE IF NOT EXISTS shard_leases (
        shard INTEGER PRIMARY KEY,
        owner TEXT NOT NULL,
        lease_until TEXT NOT NULL,
        successor TEXT
    )""",
    """CREATE TABLE IF NOT EXISTS limit_hosts (
        host TEXT PRIMARY KEY,
        version INTEGER NOT NULL,
        record TEXT NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS limit_rates (
        host TEXT PRIMARY KEY,
        tat REAL NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS limit_slots (
        slot TEXT PRIMARY KEY,
        holder TEXT NOT NULL,
        lease_until TEXT NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS create_keys (
        tenant_id TEXT NOT NULL,
        key TEXT NOT NULL,
        task_id TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        created INTEGER NOT NULL,
        expires_at INTEGER NOT NULL,
        PRIMARY KEY (tenant_id, key)
    )""",
    "CREATE INDEX IF NOT EXISTS create_keys_expiry ON create_keys (expires_at)",
    # Each tenant's calendars (decision 0056): JSON text, and a version.
    """CREATE TABLE IF NOT EXISTS calendars (
        tenant_id TEXT PRIMARY KEY,
        calendars TEXT NOT NULL,
        version INTEGER NOT NULL
    )""",
    # Each tenant's schedule census (decision 0046): how many of its tasks share a
    # schedule signature. A row counting none is deleted, so rows never outnumber
    # tasks; ``ends_at`` (a one-time minute, an end bound) lets a read skip the past.
    """CREATE TABLE IF NOT EXISTS census (
        tenant_id TEXT NOT NULL,
        signature_key TEXT NOT NULL,
        signature TEXT NOT NULL,
        tasks INTEGER NOT NULL,
        ends_at TEXT,
        PRIMARY KEY (tenant_id, signature_key)
    )""",
    # Facts about the store as a whole: the shard count its tasks are filed under.
)
