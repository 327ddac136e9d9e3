"""Tasks on SQLite (the ``TaskStore`` port).

Every change is one ``database.write()`` transaction that reads the row, checks
what the DynamoDB adapter's condition expression checks (the version read, the
owner, the status) and writes the whole row, its index columns with it. The write
lock is held from the read to the commit, so of two writers (threads or
processes) one wins and the other is told it lost.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any

from dynacron.adapters.sqlite.create_keys import mark_keys_created
from dynacron.adapters.sqlite.database import Database
from dynacron.adapters.sqlite.execution_records import carry_out
from dynacron.adapters.sqlite.records import (
    decode_page_token,
    dump,
    encode_page_token,
    load,
    read_task,
    shown_task,
)
from dynacron.adapters.sqlite.schema import (
    COORDINATION,
    MIGRATIONS,
    TASK_CHANGES,
    TASK_COLUMNS_ADDED,
    TASK_RUN_ORDER,
    TASK_TAGS_FILLED,
    TASKS,
    TASKS_LISTED,
)
from dynacron.domain.conditions import Transition
from dynacron.domain.errors import InvalidRequest, LimitExceeded
from dynacron.domain.instants import format_instant
from dynacron.domain.schedules.signatures import (
    CENSUS_KEY,
    COUNTED,
    CensusChange,
    Signature,
    census_change,
    counted_signature,
)
from dynacron.domain.tasks.history import TaskChange, change_from_map, change_to_map
from dynacron.domain.tasks.listing import (
    ALL_TASKS,
    NAME_KEY,
    TaskListing,
    TaskOrder,
    name_key,
    normalised_name,
)
from dynacron.domain.tasks.record import task_record
from dynacron.domain.tasks.tags import TagFilter, matches_all
from dynacron.domain.tasks.task import DuePlacement, Task
from dynacron.domain.tasks.transitions import STATUS, Replacement
from dynacron.ports import Page, UnreadableTask, UnreadableTaskError
from dynacron.ports.tasks import (
    MAX_STARTED_WITH_CHANGE,
    CensusEntry,
    all_readable,
    sorted_reads,
)


def _tags_condition(tags: tuple[TagFilter, ...]) -> tuple[str, tuple[Any, ...]] | None:
    """Every filter of ``tags`` on the record's ``tags`` object, keys and values bound as
    parameters (never a JSON path built from a key). A record that is not JSON (written
    around the API) matches nothing rather than failing the listing."""
    if not tags:
        return None
    terms: list[str] = []
    parameters: list[Any] = []
    for tag in tags:
        term = "SELECT 1 FROM json_each(tasks.record, '$.tags') AS tag WHERE tag.key = ?"
        parameters.append(tag.key)
        if tag.value is not None:
            term += " AND tag.type = 'text' AND tag.value = ?"
            parameters.append(tag.value)
        terms.append(f"EXISTS ({term})")
    return f"CASE WHEN json_valid(tasks.record) THEN {' AND '.join(terms)} ELSE 0 END", tuple(
        parameters
    )


# Ids per ``IN (...)`` read: well under SQLite's limit of bound parameters.
READ_CHUNK = 500
# A listing's order: what it is named in its page tokens, and the expressions it
# sorts by (each of the tasks row; together unique within a tenant).
_ORDERS: dict[TaskOrder, tuple[str, tuple[str, ...]]] = {
    TaskOrder.CREATED: ("tasks/tenant", ("tasks.created_at", "tasks.task_id")),
    TaskOrder.NAME: ("tasks/name", ("tasks.name_key",)),
    TaskOrder.NEXT_RUN: ("tasks/next-run", (TASK_RUN_ORDER, "tasks.task_id")),
}
# By creation with a tag filter: read from the tag table, the tasks that have the tag.
_TAGGED = ("tasks/tagged", ("tagged.created_at", "tagged.task_id"))
# The largest character: a name prefix's keys are those from the prefix up to it.
_LAST_CHARACTER = "\U0010ffff"
# Rows whose name key a file made before it lacks, filled per transaction.
_NAME_KEYS_FILLED = 5000

Record = dict[str, Any]


class SqliteTaskStore:
    """Tasks. The ``*_owned`` methods are the API's: each is scoped to one tenant,
    so another tenant's task is, to a caller, exactly a missing one."""

    def __init__(self, database: Database) -> None:
        self._database = database
        database.ensure_schema(TASKS + COORDINATION + MIGRATIONS + TASK_CHANGES)
        database.ensure_columns("tasks", TASK_COLUMNS_ADDED)
        _fill_name_keys(database)
        # The tag table is made and filled in one transaction: a fill that failed (a
        # crash, a busy writer) leaves no table, so the next open fills it again.
        with database.write() as connection:
            tags_kept = _has_table(connection, "task_tags")
            for statement in TASKS_LISTED:
                connection.execute(statement)
            if not tags_kept:
                connection.execute(TASK_TAGS_FILLED)

    # The API's ----------------------------------------------------------------------

    def create_within_quota(
        self,
        task: Task,
        placement: DuePlacement | None,
        max_tasks: int,
        fresh_secret: str,
        change: TaskChange | None = None,
    ) -> None:
        """Store ``task`` and count it against its tenant's quota, in one transaction
        (with ``change``'s record); the tenant gets its first signing secret here if it
        has none."""
        with self._database.write() as connection:
            _create_counted(connection, task, placement, max_tasks, fresh_secret)
            _record_change(connection, change, task.tenant_id)

    def create_many_within_quota(
        self,
        tasks: Sequence[tuple[Task, DuePlacement | None]],
        max_tasks: int,
        fresh_secret: str,
        changes: Sequence[TaskChange | None] | None = None,
        keys: Sequence[str | None] | None = None,
    ) -> list[Exception | None]:
        """Each of ``tasks`` stored and counted as ``create_within_quota`` does, all in
        one write transaction: in order, until the quota is reached; each refused
        task writes nothing and is answered with why; with ``changes``, each task
        stored has its record stored with it, and with ``keys``, its key marked
        created (``create_keys.mark_keys_created``), in that same transaction."""
        recorded = list(changes) if changes else [None] * len(tasks)
        keyed = list(keys) if keys else [None] * len(tasks)
        with self._database.write() as connection:
            outcomes = _create_many_counted(connection, tasks, max_tasks, fresh_secret)
            connection.executemany(
                _INSERT_CHANGE,
                [
                    _change_values(change, task.tenant_id)
                    for (task, _), change, refused in zip(tasks, recorded, outcomes, strict=True)
                    if refused is None and change is not None
                ],
            )
            created = [
                (key, task.task_id)
                for (task, _), key, refused in zip(tasks, keyed, outcomes, strict=True)
                if refused is None and key is not None
            ]
            if created:
                mark_keys_created(connection, tasks[0][0].tenant_id, created)
            return outcomes

    def get_owned(self, tenant_id: str, task_id: str) -> Task | None:
        """The task if it exists and belongs to ``tenant_id``, else None (either way)."""
        row = _row(self._database.connection(), task_id)
        if row is None or row["tenant_id"] != tenant_id:
            return None
        return shown_task(task_id, tenant_id, row["record"], row["version"])

    def page_owned(
        self,
        tenant_id: str,
        limit: int,
        token: str | None,
        tags: tuple[TagFilter, ...] = (),
        listing: TaskListing = ALL_TASKS,
    ) -> Page[Task]:
        """One page of a tenant's tasks, oldest first (or in ``listing``'s order);
        with ``tags`` and ``listing``'s filters, those matching every one only.
        ``token`` only resumes a page of this tenant's listing in the same order.

        Each order reads an index of its own (``schema.TASKS_LISTED``); by creation
        with a tag filter, the tag table's entries of that tag. Other filters are
        checked on the rows read in that order.
        """
        rows, next_token = _page_rows(
            self._database.connection(), tenant_id, limit, token, tags, listing
        )
        shown = [shown_task(r["task_id"], tenant_id, r["record"], r["version"]) for r in rows]
        # As on DynamoDB, the task as read decides (an unreadable one shows no tags).
        return Page(
            items=[t for t in shown if matches_all(t.tags, tags) and listing.matches(t)],
            next_token=next_token,
        )

    def delete_owned(self, tenant_id: str, task_id: str, change: TaskChange | None = None) -> bool:
        """Delete a tenant's task and release its quota (recording ``change``); False if
        it has no such task."""
        with self._database.write() as connection:
            row = _row(connection, task_id)
            if row is None or row["tenant_id"] != tenant_id:
                return False
            connection.execute("DELETE FROM tasks WHERE task_id = ?", (task_id,))
            _record_change(connection, change, tenant_id)
            _recount(connection, tenant_id, CensusChange(removed=_counted_as(row)))
            counted = connection.execute(
                "UPDATE tenants SET task_count = task_count - 1"
                " WHERE tenant_id = ? AND task_count > 0",
                (tenant_id,),
            ).rowcount
            if not counted:
                # As the DynamoDB transaction is refused: the count would go below 0.
                raise RuntimeError(f"tenant {tenant_id!r} counts no task to delete")
        return True

    # Reads --------------------------------------------------------------------------

    def get(self, task_id: str) -> Task | None:
        """The task, or None if missing; ``UnreadableTaskError`` if it cannot be decoded."""
        row = _row(self._database.connection(), task_id)
        if row is None:
            return None
        read = read_task(task_id, row["record"], row["version"])
        if isinstance(read, UnreadableTask):
            raise UnreadableTaskError(f"task {read.task_id}: {read.reason}")
        return read

    def get_many(self, task_ids: Iterable[str]) -> list[Task]:
        """The tasks that exist; ``UnreadableTaskError`` if one cannot be decoded."""
        return all_readable(self.read_many(task_ids))

    def read_many(self, task_ids: Iterable[str]) -> tuple[list[Task], list[UnreadableTask]]:
        """As ``get_many``, with the tasks that cannot be decoded apart, not raised."""
        rows = self._rows(list(dict.fromkeys(task_ids)))
        return sorted_reads(read_task(r["task_id"], r["record"], r["version"]) for r in rows)

    def _rows(self, task_ids: list[str]) -> Iterator[sqlite3.Row]:
        connection = self._database.connection()
        for start in range(0, len(task_ids), READ_CHUNK):
            chunk = task_ids[start : start + READ_CHUNK]
            marks = ", ".join("?" * len(chunk))
            yield from connection.execute(
                f"SELECT * FROM tasks WHERE task_id IN ({marks})", chunk
            ).fetchall()

    def stored_version(self, task_id: str) -> int | None:
        """The ``version`` column as stored (None if missing or the task is)."""
        row = _row(self._database.connection(), task_id)
        return row["version"] if row is not None else None

    # Changes ------------------------------------------------------------------------

    def replace(
        self,
        task: Task,
        placement: DuePlacement | None,
        replacement: Replacement,
        change: TaskChange | None = None,
    ) -> bool:
        """Store ``task`` whole, if the stored one meets ``replacement.expects`` and
        every task of ``replacement.unchanged`` its condition, with ``change``'s
        record: one transaction."""
        expected = {task.task_id: replacement.expects, **replacement.unchanged}
        with self._database.write() as connection:
            counted_as = None
            for task_id, expects in expected.items():
                row = _row(connection, task_id)
                if row is None or not expects.holds(_as_stored(row)):
                    return False
                if task_id == task.task_id:
                    counted_as = _counted_as(row)
            census = census_change(counted_as, task)
            _put(
                connection,
                _counted_record(task, counted_signature(task)),
                placement,
            )
            _recount(connection, task.tenant_id, census)
            _record_change(connection, change, task.tenant_id)
        return True

    def dependents(self, task_id: str) -> list[str]:
        """Ids of the tasks set to run after ``task_id`` (``after``)."""
        rows = self._database.connection().execute(
            "SELECT task_id FROM tasks WHERE after_task_id = ? ORDER BY task_id", (task_id,)
        )
        return [row["task_id"] for row in rows]

    def due_task_ids(
        self,
        bucket_key: str,
        now: datetime,
        limit: int,
        start_key: Any,
        due_from: datetime | None = None,
    ) -> tuple[list[str], Any]:
        """Ids due by ``now`` in one bucket of one shard, oldest first (from ``due_from``
        on, if given), and where the next page starts (None when the bucket is done)."""
        query = "SELECT task_id, next_run_at FROM tasks WHERE due_bucket = ? AND next_run_at <= ?"
        parameters: list[Any] = [bucket_key, format_instant(now)]
        if due_from is not None:
            query += " AND next_run_at >= ?"
            parameters.append(format_instant(due_from))
        if start_key is not None:
            if not isinstance(start_key, dict) or start_key.get("due_bucket") != bucket_key:
                raise ValueError(f"{start_key!r} is not a start key of bucket {bucket_key}")
            query += " AND (next_run_at, task_id) > (?, ?)"
            parameters += [start_key["next_run_at"], start_key["task_id"]]
        query += " ORDER BY next_run_at, task_id LIMIT ?"
        rows = self._database.connection().execute(query, (*parameters, limit + 1)).fetchall()
        page = rows[:limit]
        next_key = None
        if len(rows) > limit:
            last = page[-1]
            next_key = {
                "due_bucket": bucket_key,
                "next_run_at": last["next_run_at"],
                "task_id": last["task_id"],
            }
        return [row["task_id"] for row in page], next_key

    def apply(self, task_id: str, transition: Transition, change: TaskChange | None = None) -> bool:
        """Carry out ``transition`` on the task in one transaction: read the row, check
        what it expects, write the record it makes (the index columns with it) and
        ``change``'s record (its tenant, if not given, the row's)."""

        def carry_out(connection: sqlite3.Connection) -> bool:
            row = _row(connection, task_id)
            held = _carry_out(connection, task_id, transition)
            if held and row is not None:
                _record_change(connection, change, row["tenant_id"])
            return held

        return self._database.run(carry_out)

    def record_change(
        self, change: TaskChange, starting: Sequence[tuple[str, Transition]] = ()
    ) -> bool:
        """Record a change that writes no task (a trigger, a backfill), with the
        executions it starts, in one write transaction."""
        if len(starting) > MAX_STARTED_WITH_CHANGE:
            raise ValueError(f"at most {MAX_STARTED_WITH_CHANGE} executions start with a change")

        def carry_out_all(connection: sqlite3.Connection) -> None:
            for execution_id, created in starting:
                held, _ = carry_out(connection, execution_id, created)
                if not held:
                    raise _StartRefused(execution_id)  # its savepoint rolls back: nothing
            _record_change(connection, change, change.tenant_id or "")

        try:
            self._database.run(carry_out_all)
        except _StartRefused:
            return False
        return True

    def changes_page(
        self, tenant_id: str, task_id: str, limit: int, token: str | None
    ) -> Page[TaskChange]:
        """One page of the task's change records, newest first, if they are
        ``tenant_id``'s (another tenant's are none)."""
        after = _change_token(token)
        rows = (
            self._database.connection()
            .execute(
                """SELECT record FROM task_changes WHERE task_id = ? AND tenant_id = ?
               AND change_id < ? ORDER BY change_id DESC LIMIT ?""",
                (task_id, tenant_id, after, limit + 1),
            )
            .fetchall()
        )
        changes = [change_from_map(load(row["record"])) for row in rows[:limit]]
        more = len(rows) > limit
        return Page(items=changes, next_token=changes[-1].change_id if more else None)

    def get_change(self, tenant_id: str, task_id: str, change_id: str) -> TaskChange | None:
        """One change record of the tenant's task, or None."""
        row = (
            self._database.connection()
            .execute(
                """SELECT record FROM task_changes
               WHERE task_id = ? AND change_id = ? AND tenant_id = ?""",
                (task_id, change_id, tenant_id),
            )
            .fetchone()
        )
        return change_from_map(load(row["record"])) if row is not None else None

    def apply_each(self, changes: Sequence[tuple[str, Transition]]) -> list[bool | Exception]:
        """Carry out every change in one write transaction (one commit for a page of
        claims). A change that raises writes nothing (each runs in a savepoint of its
        own: a set-aside's census update is undone with its task's write); the others
        go on."""

        def carry_out(connection: sqlite3.Connection) -> list[bool | Exception]:
            answers: list[bool | Exception] = []
            for task_id, transition in changes:
                connection.execute("SAVEPOINT change")
                try:
                    answers.append(_carry_out(connection, task_id, transition))
                except sqlite3.OperationalError:
                    raise  # the file, not the change: the transaction fails
                except Exception as error:
                    connection.execute("ROLLBACK TO change")
                    answers.append(error)
                connection.execute("RELEASE change")
            return answers

        return self._database.run(carry_out) if changes else []

    # The schedule census (decision 0046) ---------------------------------------------

    def census_page(
        self,
        tenant_id: str,
        limit: int,
        token: str | None,
        ending_after: datetime | None = None,
    ) -> Page[CensusEntry]:
        """Up to ``limit`` census entries of the tenant, by key; ``token`` is the last
        key read."""
        if token is not None and not (len(token) == 16 and token.isalnum()):
            raise InvalidRequest("token", "not a token of this listing")
        ends = format_instant(ending_after) if ending_after is not None else ""
        rows = (
            self._database.connection()
            .execute(
                "SELECT signature_key, signature, tasks FROM census WHERE tenant_id = ?"
                " AND signature_key > ? AND (ends_at IS NULL OR ends_at >= ?)"
                " ORDER BY signature_key LIMIT ?",
                (tenant_id, token or "", ends, limit + 1),
            )
            .fetchall()
        )
        entries = [CensusEntry(Signature(r["signature"]), r["tasks"]) for r in rows[:limit]]
        next_token = rows[limit - 1]["signature_key"] if len(rows) > limit else None
        return Page(items=[e for e in entries if e.tasks], next_token=next_token)

    def count_uncounted(self, tenant_id: str, limit: int, token: str | None) -> Page[str]:
        """Count the tasks of one page of the tenant's that the census does not count
        yet, each in its own write transaction (the row read again in it)."""
        rows, next_token = _page_rows(
            self._database.connection(), tenant_id, limit, token, (), ALL_TASKS
        )
        counted: list[str] = []
        for listed in rows:
            with self._database.write() as connection:
                row = _row(connection, listed["task_id"])
                if row is None or CENSUS_KEY in _record_of(row):
                    continue
                read = read_task(row["task_id"], row["record"], row["version"])
                added = counted_signature(read) if isinstance(read, Task) else None
                if added is None:
                    continue
                record = _record_of(row)
                record[CENSUS_KEY] = added.key
                _write_record(connection, row, record)
                _recount(connection, tenant_id, CensusChange(added=added))
                counted.append(row["task_id"])
        return Page(items=counted, next_token=next_token)


def _counted_as(row: sqlite3.Row) -> str | None:
    """The census key the stored task is counted under, if any."""
    key = _record_of(row).get(CENSUS_KEY)
    return key if isinstance(key, str) else None


def _counted_record(task: Task, counted: Signature | str | None) -> Record:
    """The task's record, marked with the census key it is counted under."""
    record = task_record(task)
    if isinstance(counted, Signature):
        record[CENSUS_KEY] = counted.key
    elif counted is not None:
        record[CENSUS_KEY] = counted
    return record


def _uncounts(transition: Transition) -> bool:
    """Whether ``transition`` moves a task to a status the census does not count."""
    status = transition.sets.get(STATUS)
    return status is not None and status not in {s.value for s in COUNTED}


def _recount(connection: sqlite3.Connection, tenant_id: str, change: CensusChange) -> None:
    """Apply one task's census change, within the caller's write transaction."""
    if change.removed is not None:
        connection.execute(
            "UPDATE census SET tasks = tasks - 1 WHERE tenant_id = ? AND signature_key = ?",
            (tenant_id, change.removed),
        )
        connection.execute(
            "DELETE FROM census WHERE tenant_id = ? AND signature_key = ? AND tasks <= 0",
            (tenant_id, change.removed),
        )
    if change.added is not None:
        added = change.added
        connection.execute(
            _CENSUS_ADDED, (tenant_id, added.key, added.text, 1, _ends_at_text(added), 1)
        )


# ``n`` more tasks counted under a signature: (tenant, key, signature, n, ends_at, n).
_CENSUS_ADDED = """INSERT INTO census (tenant_id, signature_key, signature, tasks, ends_at)
    VALUES (?, ?, ?, ?, ?) ON CONFLICT (tenant_id, signature_key)
    DO UPDATE SET tasks = tasks + ?"""


def _ends_at_text(signature: Signature) -> str | None:
    ends_at = signature.ends_at
    return format_instant(ends_at) if ends_at else None


def _create_counted(
    connection: sqlite3.Connection,
    task: Task,
    placement: DuePlacement | None,
    max_tasks: int,
    fresh_secret: str,
) -> None:
    """Store ``task`` and count it, within the caller's write transaction; refused
    (over quota, or the id taken), it writes nothing."""
    refused = _create_many_counted(connection, [(task, placement)], max_tasks, fresh_secret)[0]
    if refused is not None:
        raise refused


def _over_quota(max_tasks: int) -> LimitExceeded:
    return LimitExceeded(
        "max_tasks_per_tenant",
        "tenant",
        f"this tenant already has {max_tasks} tasks, the most allowed; delete some first",
    )


def _create_many_counted(
    connection: sqlite3.Connection,
    tasks: Sequence[tuple[Task, DuePlacement | None]],
    max_tasks: int,
    fresh_secret: str,
) -> list[Exception | None]:
    """Store and count each of ``tasks`` (one tenant's), in order, within the caller's
    write transaction, until the quota is reached: why each was refused, or None.

    As many statements for a batch as for one task: the tenant's count read once,
    the ids looked up in one query, the rows inserted by one ``executemany``, each
    census entry and the count written once with what the batch adds to them. A
    refused task (over quota, or its id taken) writes nothing.
    """
    if not tasks:
        return []
    tenant_id = tasks[0][0].tenant_id
    assert all(task.tenant_id == tenant_id for task, _ in tasks), "one tenant's tasks"
    tenant = connection.execute(
        "SELECT task_count FROM tenants WHERE tenant_id = ?", (tenant_id,)
    ).fetchone()
    count = tenant["task_count"] if tenant is not None else 0
    taken = _existing_ids(connection, [task.task_id for task, _ in tasks])
    outcomes: list[Exception | None] = []
    rows: list[tuple[Any, ...]] = []
    census: dict[str, tuple[Signature, int]] = {}
    for task, placement in tasks:
        # Checked before the id, as DynamoDB reports the quota's condition first.
        if count >= max_tasks:
            outcomes.append(_over_quota(max_tasks))
            continue
        if task.task_id in taken:
            outcomes.append(InvalidRequest("task_id", f"a task {task.task_id!r} already exists"))
            continue
        taken.add(task.task_id)
        added = counted_signature(task)
        rows.append(_row_values(_counted_record(task, added), placement))
        if added is not None:
            _, counted = census.get(added.key, (added, 0))
            census[added.key] = (added, counted + 1)
        count += 1
        outcomes.append(None)
    if not rows:
        return outcomes
    connection.executemany(_INSERT_TASK, rows)
    connection.executemany(
        _CENSUS_ADDED,
        [
            (tenant_id, key, added.text, n, _ends_at_text(added), n)
            for key, (added, n) in census.items()
        ],
    )
    connection.execute(
        """INSERT INTO tenants (tenant_id, task_count, signing_secrets) VALUES (?, ?, ?)
           ON CONFLICT (tenant_id) DO UPDATE SET task_count = task_count + excluded.task_count,
           signing_secrets = COALESCE(signing_secrets, excluded.signing_secrets)""",
        (tenant_id, len(rows), json.dumps([fresh_secret])),
    )
    return outcomes


def _existing_ids(connection: sqlite3.Connection, task_ids: Sequence[str]) -> set[str]:
    """Which of ``task_ids`` a row already has."""
    found: set[str] = set()
    for start in range(0, len(task_ids), READ_CHUNK):
        chunk = task_ids[start : start + READ_CHUNK]
        marks = ",".join("?" * len(chunk))
        found.update(
            row[0]
            for row in connection.execute(
                f"SELECT task_id FROM tasks WHERE task_id IN ({marks})", chunk
            )
        )
    return found


def _carry_out(connection: sqlite3.Connection, task_id: str, transition: Transition) -> bool:
    """Within a write transaction: read the row, check what ``transition`` expects,
    write the record it makes (the index columns with it); whether it held."""
    row = _row(connection, task_id)
    stored = _as_stored(row) if row is not None else None
    if row is None or not transition.holds(stored):
        return False
    record = transition.applied_to(stored)
    counted_as = _counted_as(row)
    if counted_as is not None and _uncounts(transition):
        # Paused or set aside: out of the census, as it leaves the due index.
        record.pop(CENSUS_KEY, None)
        _recount(connection, row["tenant_id"], CensusChange(removed=counted_as))
    _write_record(connection, row, record)
    return True


def _row(connection: sqlite3.Connection, task_id: str) -> sqlite3.Row | None:
    row: sqlite3.Row | None = connection.execute(
        "SELECT * FROM tasks WHERE task_id = ?", (task_id,)
    ).fetchone()
    return row


def _record_of(row: sqlite3.Row) -> Record:
    """The stored record; one that is not even a JSON object (written around the API)
    is kept whole under ``unreadable_record`` so that a change can still be written."""
    try:
        return load(row["record"])
    except ValueError:
        return {"task_id": row["task_id"], "unreadable_record": row["record"]}


def _as_stored(row: sqlite3.Row) -> Record:
    """The row as a transition reads it: the record, with the key, owner
    and version its columns hold (a version the column does not hold, not being a
    whole number, counts as none, as the version read from it does)."""
    record = _record_of(row)
    record.update(task_id=row["task_id"], tenant_id=row["tenant_id"])
    record.pop("version", None)
    if row["version"] is not None:
        record["version"] = row["version"]
    return record


_INSERT_TASK = """INSERT OR REPLACE INTO tasks (task_id, tenant_id, created_at, version,
    due_bucket, next_run_at, after_task_id, record, name_key) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"""


def _put(connection: sqlite3.Connection, record: Record, placement: DuePlacement | None) -> None:
    connection.execute(_INSERT_TASK, _row_values(record, placement))


def _row_values(record: Record, placement: DuePlacement | None) -> tuple[Any, ...]:
    """The tasks row of ``record`` (filed under ``placement``), as ``_INSERT_TASK`` takes it."""
    record["due_bucket"] = placement.key if placement else None
    return (
        record["task_id"],
        record["tenant_id"],
        record["created_at"],
        record["version"],
        *_index_columns(record),
        dump(record),
        record[NAME_KEY],
    )


def _write_record(connection: sqlite3.Connection, row: sqlite3.Row, record: Record) -> None:
    version = record.get("version")
    connection.execute(
        """UPDATE tasks SET version = ?, due_bucket = ?, next_run_at = ?, after_task_id = ?,
           record = ? WHERE task_id = ?""",
        (
            version if isinstance(version, int) else None,
            *_index_columns(record),
            dump(record),
            row["task_id"],
        ),
    )


def _index_columns(record: Record) -> tuple[str | None, str | None, str | None]:
    def text(name: str) -> str | None:
        value = record.get(name)
        return value if isinstance(value, str) else None

    return text("due_bucket"), text("next_run_at"), text("after_task_id")


def _page_rows(
    connection: sqlite3.Connection,
    tenant_id: str,
    limit: int,
    token: str | None,
    tags: tuple[TagFilter, ...],
    listing: TaskListing,
) -> tuple[list[sqlite3.Row], str | None]:
    """One page of the tenant's rows in ``listing``'s order, and the next page's token."""
    order = listing.sorted_by
    source = "tasks"
    conditions = ["tasks.tenant_id = ?"]
    parameters: list[Any] = [tenant_id]
    name, keys = _ORDERS[order]
    if order is TaskOrder.CREATED and tags:
        # The filter with a value first: it names fewer tasks than a key alone.
        driving = sorted(tags, key=lambda tag: tag.value is None)[0]
        name, keys = _TAGGED
        source = "task_tags AS tagged JOIN tasks ON tasks.task_id = tagged.task_id"
        conditions = ["tagged.tenant_id = ?", "tagged.tag_key = ?"]
        parameters = [tenant_id, driving.key]
        if driving.value is not None:
            conditions.append("tagged.tag_value = ?")
            parameters.append(driving.value)
    if listing.name_prefix is not None:
        prefix = normalised_name(listing.name_prefix)
        conditions.append("tasks.name_key >= ? AND tasks.name_key < ?")
        parameters += [prefix, prefix + _LAST_CHARACTER]
    for condition, values in _field_conditions(tags, listing):
        conditions.append(condition)
        parameters += values
    if listing.descending:
        name += "/descending"
    after = decode_page_token(token, name, tenant_id, len(keys))
    if after is not None:
        marks = ", ".join("?" * len(keys))
        conditions.append(f"({', '.join(keys)}) {'<' if listing.descending else '>'} ({marks})")
        parameters += after
    direction = " DESC" if listing.descending else ""
    selected = ", ".join(f"{key} AS key{number}" for number, key in enumerate(keys))
    query = (
        f"SELECT tasks.*, {selected} FROM {source} WHERE {' AND '.join(conditions)}"
        f" ORDER BY {', '.join(key + direction for key in keys)} LIMIT ?"
    )
    rows = connection.execute(query, (*parameters, limit + 1)).fetchall()
    page = rows[:limit]
    last = [str(page[-1][f"key{n}"]) for n in range(len(keys))] if len(rows) > limit else None
    return page, encode_page_token(name, tenant_id, last)


def _field_conditions(
    tags: tuple[TagFilter, ...], listing: TaskListing
) -> list[tuple[str, tuple[Any, ...]]]:
    """The filters checked on each row read: tags, status, schedule kind (a record that
    is not JSON matches none of them rather than failing the listing)."""
    conditions = []
    tagged = _tags_condition(tags)
    if tagged is not None:
        conditions.append(tagged)
    for path, value in (("$.status", listing.status), ("$.schedule.kind", listing.kind)):
        if value is not None:
            conditions.append(
                (
                    "CASE WHEN json_valid(tasks.record)"
                    f" THEN json_extract(tasks.record, '{path}') = ? ELSE 0 END",
                    (str(value),),
                )
            )
    return conditions


def _has_table(connection: sqlite3.Connection, table: str) -> bool:
    found = connection.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)
    ).fetchone()
    return found is not None


# The ``migrations`` step recorded once every row has its name key.
NAME_KEYS_FILLED = "name-keys-filled"


def _fill_name_keys(database: Database) -> None:
    """Give the rows of a file made before the name key theirs (the name as the record
    holds it, the task id for a record that cannot be read), a chunk per transaction;
    the last chunk records the step done, so that later opens do not scan the tasks
    again (every row written since has its key)."""
    connection = database.connection()
    done = "SELECT 1 FROM migrations WHERE step = ?"
    if connection.execute(done, (NAME_KEYS_FILLED,)).fetchone() is not None:
        return
    after = 0
    while True:
        with database.write() as connection:
            rows = connection.execute(
                "SELECT rowid, task_id, record FROM tasks WHERE rowid > ? AND name_key IS NULL"
                " ORDER BY rowid LIMIT ?",
                (after, _NAME_KEYS_FILLED),
            ).fetchall()
            for row in rows:
                after = row["rowid"]
                connection.execute(
                    "UPDATE tasks SET name_key = ? WHERE task_id = ?",
                    (name_key(_stored_name(row), row["task_id"]), row["task_id"]),
                )
            if len(rows) < _NAME_KEYS_FILLED:
                connection.execute(
                    "INSERT OR IGNORE INTO migrations (step) VALUES (?)", (NAME_KEYS_FILLED,)
                )
                return


def _stored_name(row: sqlite3.Row) -> str:
    try:
        name = load(row["record"]).get("name")
    except ValueError:
        name = None
    return name if isinstance(name, str) else str(row["task_id"])


class _StartRefused(Exception):
    """An execution a change starts exists already: the change writes nothing."""


def _record_change(
    connection: sqlite3.Connection, change: TaskChange | None, tenant_id: str
) -> None:
    """Within the caller's write transaction: store ``change``'s record (decision 0054)."""
    if change is not None:
        connection.execute(_INSERT_CHANGE, _change_values(change, tenant_id))


_INSERT_CHANGE = """INSERT INTO task_changes (task_id, change_id, tenant_id, expires_at, record)
    VALUES (?, ?, ?, ?, ?)"""


def _change_values(change: TaskChange, tenant_id: str) -> tuple[Any, ...]:
    """The task_changes row of ``change`` (of ``tenant_id``'s task), as ``_INSERT_CHANGE``
    takes it."""
    owned = change if change.tenant_id else change.owned_by(tenant_id)
    values = change_to_map(owned)
    return (owned.task_id, owned.change_id, owned.tenant_id, values.get("expires_at"), dump(values))


# Above every change id (they start with a digit): the first page's bound.
_FIRST_PAGE = "~"


def _change_token(token: str | None) -> str:
    """Where a page of change records goes on from: below the change id ``token``."""
    if token is None:
        return _FIRST_PAGE
    if not token or len(token) > 64 or not token.isascii():
        raise InvalidRequest("next_token", "is not a token this listing gave")
    return token
