"""Executions and their leases on SQLite (the ``ExecutionStore`` port).

The rules are the domain's (``dynacron.domain.executions.transitions``): each method builds
the same ``Transition`` the DynamoDB adapter compiles into a condition expression,
and carries it out inside one ``database.write()`` transaction: read the record,
check ``holds``, write ``applied_to`` with the index columns taken from it. The
write lock is held from the read to the commit, so of a reaper and a late worker
acting on one execution, only one wins, whichever process each runs in.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from dynacron.adapters.sqlite.database import Database
from dynacron.adapters.sqlite.execution_records import (
    call_from_record,
    carry_out,
    execution_from_record,
    read_record,
)
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
)
from dynacron.definitions.resources import LEASE_SHARDS
from dynacron.domain.conditions import Transition
from dynacron.domain.coordination.tenants import DEFAULT_TENANT
from dynacron.domain.executions import transitions
from dynacron.domain.executions.attention import Attention, AttentionQuery
from dynacron.domain.executions.execution import (
    Dispatch,
    Execution,
    ExecutionStatus,
    HandlerCallRecord,
    ResultSummary,
)
from dynacron.domain.executions.record import (
    DEAD_LETTER,
    DEAD_LETTERED_AT,
    dead_letter_partition,
)
from dynacron.domain.executions.retry import RetryPolicy
from dynacron.domain.instants import format_instant
from dynacron.domain.tasks.task import Task, shard_for
from dynacron.ports import BeginResult, Page

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
    """Executions and their leases. Every write by a lease holder names its
    ``lease_token``; every change of holder writes a new one."""

    def __init__(
        self, database: Database, retention: timedelta, lease_shards: int = LEASE_SHARDS
    ) -> None:
        self._database = database
        self._retention = retention
        self._lease_shards = lease_shards
        database.ensure_schema(EXECUTIONS)
        database.ensure_columns("executions", EXECUTION_COLUMNS_ADDED)
        database.ensure_schema(EXECUTIONS_ATTENTION)

    @property
    def lease_shards(self) -> int:
        return self._lease_shards

    def _lease_shard(self, execution_id: str) -> str:
        return str(shard_for(execution_id, self._lease_shards))

    def _apply(self, execution_id: str, transition: Transition) -> bool:
        """Carry out ``transition`` atomically; False if it did not hold."""
        with self._database.write() as connection:
            applied, _ = carry_out(connection, execution_id, transition)
        return applied

    def begin(
        self,
        dispatch: Dispatch,
        *,
        now: datetime,
        lease_until: datetime,
        lease_token: str,
        callback_digest: str,
        retry: RetryPolicy,
        tenant_id: str = DEFAULT_TENANT,
        call: HandlerCallRecord | None = None,
        call_now_ms: int = 0,
    ) -> BeginResult:
        """Start ``dispatch``'s attempt: RUNNING under a new lease, for an execution never
        seen before or one QUEUED for exactly this attempt; anything else is refused.

        With ``call`` (in progress), the handler-call record is saved too if the one
        there may be replaced; if not, the attempt begins all the same and
        ``held_call`` is the record that still counts. One transaction throughout.
        """
        terms: dict[str, Any] = {
            "now": now,
            "lease_until": lease_until,
            "lease_token": lease_token,
            "callback_digest": callback_digest,
            "retention": self._retention,
        }
        execution_id = dispatch.execution_id
        new = transitions.begin_new(dispatch, retry=retry, tenant_id=tenant_id, call=call, **terms)
        with self._database.write() as connection:
            began, record = carry_out(connection, execution_id, new)
            if began and record:
                return BeginResult(True, execution_from_record(record))
            current = execution_from_record(record) if record else None
            if current is None or current.status is not ExecutionStatus.QUEUED:
                return BeginResult(False, current)
            if call is not None:
                with_call = transitions.begin_queued(
                    dispatch, call=call, call_now_ms=call_now_ms, **terms
                )
                began, record = carry_out(connection, execution_id, with_call)
                if began and record:
                    return BeginResult(True, execution_from_record(record))
            queued = transitions.begin_queued(dispatch, **terms)
            began, record = carry_out(connection, execution_id, queued)
            if not (began and record):
                return BeginResult(False, current)
            if call is None:
                return BeginResult(True, execution_from_record(record))
            # The record there could not be replaced, so it is still there and counts.
            return BeginResult(True, execution_from_record(record), call_from_record(record))

    def enqueue(
        self,
        dispatch: Dispatch,
        *,
        retry: RetryPolicy,
        lease_until: datetime,
        lease_token: str,
        tenant_id: str,
    ) -> bool:
        """Record a new execution QUEUED for its first attempt; False if the id exists."""
        return self._apply(
            dispatch.execution_id,
            transitions.enqueue(
                dispatch,
                retry=retry,
                lease_until=lease_until,
                lease_token=lease_token,
                tenant_id=tenant_id,
                lease_shard=self._lease_shard(dispatch.execution_id),
                retention=self._retention,
            ),
        )

    def record_skipped(
        self, task: Task, execution_id: str, scheduled_at: datetime, reason: str, now: datetime
    ) -> bool:
        """An occurrence of ``task`` that never runs, and why: SKIPPED from the start."""
        skipped = transitions.record_skipped(
            task, execution_id, scheduled_at, reason, now, retention=self._retention
        )
        return self._apply(execution_id, skipped)

    def renew(
        self,
        execution_id: str,
        lease_token: str,
        lease_until: datetime,
        accepted_at: datetime | None = None,
        attention: Attention | None = None,
    ) -> bool:
        """Extend a running lease; ``accepted_at`` (a 202) puts it in the lease index."""
        renewal = transitions.renew(
            lease_token,
            lease_until,
            accepted_at,
            lease_shard=self._lease_shard(execution_id),
            retention=self._retention,
            attention=attention,
        )
        return self._apply(execution_id, renewal)

    def finish(
        self,
        execution_id: str,
        lease_token: str,
        status: ExecutionStatus,
        now: datetime,
        *,
        follow_up_token: str | None = None,
        follow_up_until: datetime | None = None,
        error: str | None = None,
        result: ResultSummary | None = None,
        call: HandlerCallRecord | None = None,
    ) -> bool:
        """End a running attempt for good; with ``follow_up_token`` a short watched lease
        stays until what the end owes is done (``release``)."""
        end = transitions.finish(
            lease_token,
            status,
            now,
            follow_up_token=follow_up_token,
            follow_up_until=follow_up_until,
            error=error,
            result=result,
            call=call,
            lease_shard=self._lease_shard(execution_id),
            retention=self._retention,
        )
        return self._apply(execution_id, end)

    def requeue(
        self,
        execution_id: str,
        lease_token: str,
        *,
        expected: ExecutionStatus,
        attempt: int,
        not_before: datetime,
        lease_until: datetime,
        new_token: str,
        error: str | None = None,
        attention: Attention | None = None,
    ) -> bool:
        """QUEUED for ``attempt`` from now on, due at ``not_before``, under a new lease."""
        requeued = transitions.requeue(
            lease_token,
            expected=expected,
            attempt=attempt,
            not_before=not_before,
            lease_until=lease_until,
            new_token=new_token,
            error=error,
            lease_shard=self._lease_shard(execution_id),
            retention=self._retention,
            attention=attention,
        )
        return self._apply(execution_id, requeued)

    def dead_letter(
        self,
        execution_id: str,
        lease_token: str,
        *,
        now: datetime,
        error: str,
        lease_until: datetime,
        new_token: str,
        tenant_id: str,
    ) -> bool:
        """FAILED and listed as a dead letter of ``tenant_id``, with a short watched lease
        until its copy for the dead-letter queue is sent (``release``)."""
        failed = transitions.dead_letter(
            lease_token,
            now=now,
            error=error,
            lease_until=lease_until,
            new_token=new_token,
            tenant_id=tenant_id,
            lease_shard=self._lease_shard(execution_id),
            retention=self._retention,
        )
        return self._apply(execution_id, failed)

    def record_undelivered(
        self,
        dispatch: Dispatch,
        *,
        now: datetime,
        error: str,
        retry: RetryPolicy,
        tenant_id: str,
        lease_until: datetime,
        lease_token: str,
    ) -> bool:
        """A dispatch whose attempt never began, recorded FAILED and listed as a dead
        letter; False if the execution has a record (the same message read twice)."""
        undelivered = transitions.record_undelivered(
            dispatch,
            now=now,
            error=error,
            retry=retry,
            tenant_id=tenant_id,
            lease_until=lease_until,
            lease_token=lease_token,
            lease_shard=self._lease_shard(dispatch.execution_id),
            retention=self._retention,
        )
        return self._apply(dispatch.execution_id, undelivered)

    def dead_letter_queued(
        self,
        execution_id: str,
        seen_token: str,
        *,
        attempt: int,
        now: datetime,
        error: str,
        lease_until: datetime,
        new_token: str,
        tenant_id: str,
    ) -> bool:
        """A QUEUED attempt whose message was given up on: FAILED and listed, only while
        still queued for ``attempt`` under ``seen_token``."""
        failed = transitions.dead_letter_queued(
            seen_token,
            attempt=attempt,
            now=now,
            error=error,
            lease_until=lease_until,
            new_token=new_token,
            tenant_id=tenant_id,
            lease_shard=self._lease_shard(execution_id),
        )
        return self._apply(execution_id, failed)

    def set_aside(self, execution_id: str, reason: str, now: datetime) -> bool:
        """Out of the lease index for good, saying why; its status is left as it is."""
        return self._apply(execution_id, transitions.set_aside(reason, now))

    def release(self, execution_id: str, lease_token: str) -> bool:
        """Drop a lease whose obligation is met (out of the lease index)."""
        return self._apply(execution_id, transitions.release(lease_token))

    def save_call(
        self, execution_id: str, lease_token: str, call: HandlerCallRecord, call_now_ms: int
    ) -> BeginResult:
        """Save an in-progress handler-call record on the attempt ``lease_token`` holds,
        if the one there may be replaced; ``held_call`` is the one that still counts
        if not. Not ``began`` if the attempt is no longer held with that token."""
        saving = transitions.save_call(lease_token, call, call_now_ms)
        with self._database.write() as connection:
            saved, record = carry_out(connection, execution_id, saving)
        if saved and record:
            return BeginResult(True, execution_from_record(record))
        current = execution_from_record(record) if record else None
        if current is None or current.status is not ExecutionStatus.RUNNING:
            return BeginResult(False, current)
        if current.lease_token != lease_token:
            return BeginResult(False, current)
        return BeginResult(True, current, call_from_record(record))

    def held_call(self, execution_id: str) -> HandlerCallRecord | None:
        """The handler-call record kept on the execution, if any (expired ones too)."""
        return call_from_record(read_record(self._database.connection(), execution_id))

    def keep_call(self, execution_id: str, call: HandlerCallRecord) -> bool:
        """Save a completed handler-call record whoever holds the lease now (unless the
        execution has succeeded already)."""
        return self._apply(execution_id, transitions.keep_call(call))

    def clear_call(self, execution_id: str, in_progress_until_ms: int | None) -> bool:
        """Drop the in-progress handler-call record saved with ``in_progress_until_ms``."""
        return self._apply(execution_id, transitions.clear_call(in_progress_until_ms))

    def take_over(
        self,
        execution_id: str,
        seen_token: str,
        *,
        cutoff: datetime,
        new_token: str,
        lease_until: datetime,
    ) -> bool:
        """Claim a lease still held by ``seen_token`` that ended before ``cutoff``; the
        new lease is watched by the reaper."""
        taken = transitions.take_over(
            seen_token,
            cutoff=cutoff,
            new_token=new_token,
            lease_until=lease_until,
            lease_shard=self._lease_shard(execution_id),
            retention=self._retention,
        )
        return self._apply(execution_id, taken)

    def watch(self, execution_id: str, seen_token: str) -> bool:
        """Put a running lease still held by ``seen_token`` into the lease index, unchanged."""
        watched = transitions.watch(seen_token, lease_shard=self._lease_shard(execution_id))
        return self._apply(execution_id, watched)

    def redrive(
        self,
        tenant_id: str,
        execution_id: str,
        *,
        now: datetime,
        lease_until: datetime,
        new_token: str,
    ) -> Execution | None:
        """A dead letter of ``tenant_id`` QUEUED again under the same id, with a fresh
        retry budget and the next attempt number; None if it is not one."""
        redriven = transitions.redrive(
            tenant_id,
            now=now,
            lease_until=lease_until,
            new_token=new_token,
            lease_shard=self._lease_shard(execution_id),
            retention=self._retention,
        )
        with self._database.write() as connection:
            redone, record = carry_out(connection, execution_id, redriven)
        return execution_from_record(record) if redone and record else None

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

    def across_tasks(
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

    def owner_of(self, dispatch: Dispatch) -> str:
        """The tenant of a dispatch whose task is gone or unreadable: as the message says,
        or as another execution of the task recorded it."""
        if dispatch.tenant_id is not None:
            return dispatch.tenant_id
        recorded = self.list_for_task(dispatch.task_id, 1, None).items
        return recorded[0].tenant_id if recorded else DEFAULT_TENANT
