"""Executions and their leases on SQLite (the ``ExecutionStore`` port).

The rules are the domain's (``dynacron.domain.executions.transitions``): a service builds
the same ``Transition`` the DynamoDB adapter compiles into a condition expression,
and this store carries it out inside one ``database.write()`` transaction: read the
record, check ``holds``, write ``applied_to`` with the index columns taken from it.
The write lock is held from the read to the commit, so of a reaper and a late worker
acting on one execution, only one wins, whichever process each runs in.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from dynacron.adapters.sqlite.database import Database
from dynacron.adapters.sqlite.execution_records import carry_out, read_record
from dynacron.adapters.sqlite.records import (
    Listing,
    decode_page_token,
    encode_page_token,
    load,
)
from dynacron.adapters.sqlite.schema import (
    EXECUTION_COLUMNS_ADDED,
    EXECUTIONS,
    EXECUTIONS_ATTENTION,
    EXECUTIONS_EXPIRY,
)
from dynacron.definitions.resources import LEASE_SHARDS
from dynacron.domain.conditions import Transition
from dynacron.domain.executions.attention import AttentionQuery
from dynacron.domain.executions.execution import Execution, HandlerCallRecord
from dynacron.domain.executions.record import (
    DEAD_LETTER,
    DEAD_LETTERED_AT,
    Keeping,
    call_from_record,
    dead_letter_partition,
    execution_from_record,
)
from dynacron.domain.instants import format_instant
from dynacron.domain.tasks.task import shard_for
from dynacron.ports import Applied, Page

_DEAD_LETTER_LISTING = Listing(
    "executions/dead-letter",
    "executions",
    DEAD_LETTER,
    (DEAD_LETTERED_AT, "execution_id"),
    newest_first=True,
)
# Ids of one task sort by scheduled time.
_TASK_LISTING = Listing("executions/task", "executions", "task_id", ("execution_id",), True)


class SqliteExecutionStore:
    """Executions and their leases. Each transition is one write transaction."""

    def __init__(
        self, database: Database, retention: timedelta, lease_shards: int = LEASE_SHARDS
    ) -> None:
        self._database = database
        self._retention = retention
        self._lease_shards = lease_shards
        database.ensure_schema(EXECUTIONS)
        database.ensure_columns("executions", EXECUTION_COLUMNS_ADDED)
        database.ensure_schema(EXECUTIONS_ATTENTION)
        database.ensure_schema(EXECUTIONS_EXPIRY)

    @property
    def lease_shards(self) -> int:
        return self._lease_shards

    def keeping(self, execution_id: str) -> Keeping:
        return Keeping(str(shard_for(execution_id, self._lease_shards)), self._retention)

    def apply(self, execution_id: str, transition: Transition) -> bool:
        """Carry out ``transition`` in one write transaction; False if it did not hold."""
        held, _ = self._database.run(lambda c: carry_out(c, execution_id, transition))
        return held

    def apply_returning(self, execution_id: str, transition: Transition) -> Applied:
        """As ``apply``, with the record: the new one if the transition held, else the
        one that made it fail (None if there is none)."""
        held, record = self._database.run(lambda c: carry_out(c, execution_id, transition))
        return _applied(held, record)

    def apply_each(
        self, changes: Sequence[tuple[str, Transition]], *, returning: bool = True
    ) -> list[Applied | Exception]:
        """Carry out every change in one write transaction (one commit for a batch's
        begins or ends), each in a savepoint of its own: one that raises writes
        nothing; the others go on."""

        def carry_out_each(connection: sqlite3.Connection) -> list[Applied | Exception]:
            answers: list[Applied | Exception] = []
            for execution_id, transition in changes:
                connection.execute("SAVEPOINT change")
                try:
                    held, record = carry_out(connection, execution_id, transition)
                except sqlite3.OperationalError:
                    raise  # the file, not the change: the transaction fails
                except Exception as error:
                    connection.execute("ROLLBACK TO change")
                    answers.append(error)
                else:
                    answers.append(_applied(held, record) if returning else Applied(held))
                connection.execute("RELEASE change")
            return answers

        return self._database.run(carry_out_each) if changes else []

    def held_call(self, execution_id: str) -> HandlerCallRecord | None:
        """The handler-call record kept on the execution, if any (expired ones too)."""
        return call_from_record(read_record(self._database.connection(), execution_id))

    # Reads --------------------------------------------------------------------------

    def expired_leases(self, shard: int, cutoff: datetime, limit: int) -> list[str]:
        """Ids of executions in one lease shard whose lease ended before ``cutoff``."""
        rows = self._database.connection().execute(
            """SELECT execution_id FROM executions WHERE lease_shard = ? AND lease_until < ?
               ORDER BY lease_until, execution_id LIMIT ?""",
            (str(shard), format_instant(cutoff), limit),
        )
        return [row["execution_id"] for row in rows]

    def dead_letters(self, tenant_id: str, limit: int, token: str | None) -> Page[Execution]:
        """A tenant's dead-lettered executions, most recent first."""
        return self._page(_DEAD_LETTER_LISTING, dead_letter_partition(tenant_id), limit, token)

    def needing_attention(
        self, tenant_id: str, query: AttentionQuery, limit: int, token: str | None
    ) -> Page[Execution]:
        """The tenant's listed executions that ``query`` admits, newest first by when
        they were listed (the partial index ``executions_attention``)."""
        listing = f"executions/attention/{query.fingerprint}"
        after = decode_page_token(token, listing, tenant_id, 2)
        sql = "SELECT record, attention_at FROM executions WHERE attention_tenant = ?"
        args: list[Any] = [tenant_id]
        since, until = query.bounds
        if since is not None:
            sql += " AND attention_at >= ?"
            args.append(since)
        if until is not None:
            sql += " AND attention_at <= ?"
            args.append(until)
        if query.status is not None:
            sql += " AND json_extract(record, '$.status') = ?"
            args.append(query.status.value)
        if after is not None:
            sql += " AND (attention_at, execution_id) < (?, ?)"
            args += after
        sql += " ORDER BY attention_at DESC, execution_id DESC LIMIT ?"
        rows = self._database.connection().execute(sql, (*args, limit + 1)).fetchall()
        executions = [execution_from_record(load(row["record"])) for row in rows[:limit]]
        last = executions[-1] if len(rows) > limit else None
        key = [rows[limit - 1]["attention_at"], last.execution_id] if last else None
        return Page(executions, encode_page_token(listing, tenant_id, key))

    def get(self, execution_id: str) -> Execution | None:
        record = read_record(self._database.connection(), execution_id)
        return execution_from_record(record) if record else None

    def list_for_task(self, task_id: str, limit: int, token: str | None) -> Page[Execution]:
        """A task's executions, newest scheduled time first (ids of one task sort by it)."""
        return self._page(_TASK_LISTING, task_id, limit, token)

    def _page(
        self, listing: Listing, partition: str, limit: int, token: str | None
    ) -> Page[Execution]:
        rows, next_token = listing.page(self._database.connection(), partition, limit, token)
        return Page([execution_from_record(load(row["record"])) for row in rows], next_token)


def _applied(held: bool, record: dict[str, Any] | None) -> Applied:
    if not record:
        return Applied(held)
    return Applied(held, execution_from_record(record), call_from_record(record))
