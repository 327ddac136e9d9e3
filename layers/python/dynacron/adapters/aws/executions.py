"""Executions and their leases in DynamoDB (the ``ExecutionStore`` port).

Each state transition is the domain's (``dynacron.domain.executions.transitions``): what it
expects and what it changes. Here each is carried out as one conditional write.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from dynacron.adapters.aws.errors import translating
from dynacron.adapters.aws.execution_items import call_from_item, execution_from_item
from dynacron.adapters.aws.execution_queries import (
    attention_page,
    dead_letter_page,
    expired_lease_ids,
    task_history_page,
)
from dynacron.adapters.aws.expressions import apply_transition, apply_transition_returning
from dynacron.adapters.aws.items import to_item
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
from dynacron.domain.executions.retry import RetryPolicy
from dynacron.domain.tasks.task import Task, shard_for, task_id_of
from dynacron.ports import BeginResult, Page


class DynamoExecutionStore:
    """Executions and their leases. Each state transition is one conditional write.

    Every write by a lease holder names the ``lease_token`` it holds, and every
    change of holder (begin, requeue, take_over, redrive) writes a new token: of
    a reaper and a late worker acting on one execution, only one can win.
    """

    def __init__(
        self, client: Any, table_name: str, retention: timedelta, lease_shards: int = LEASE_SHARDS
    ) -> None:
        self._client = translating(client)
        self._table = table_name
        self._retention = retention
        self._lease_shards = lease_shards

    @property
    def lease_shards(self) -> int:
        return self._lease_shards

    def _key(self, execution_id: str) -> dict[str, Any]:
        return to_item({"task_id": task_id_of(execution_id), "execution_id": execution_id})

    def _lease_shard(self, execution_id: str) -> str:
        return str(shard_for(execution_id, self._lease_shards))

    def _apply(self, execution_id: str, transition: Transition) -> bool:
        """Carry out ``transition`` as one conditional write; False if it did not hold."""
        return apply_transition(self._client, self._table, self._key(execution_id), transition)

    def _apply_returning(
        self, execution_id: str, transition: Transition
    ) -> tuple[bool, dict[str, Any] | None]:
        """As ``_apply``, with the item: the new one if the transition held, else the
        one that made it fail (None if there is none)."""
        return apply_transition_returning(
            self._client, self._table, self._key(execution_id), transition
        )

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
        """Start ``dispatch``'s attempt: RUNNING under a new lease.

        Allowed for an execution never seen before (one conditional put), or one
        QUEUED for exactly this attempt (one conditional update). Anything else
        (finished, running elsewhere, waiting for another attempt) means the
        message is a duplicate or stale, and is refused.

        The lease stays out of the lease index: the SQS message that began the
        attempt stays undeleted until the attempt has moved on, and comes back
        if the worker dies (decision 0015). What outlives the message (a 202, a
        follow-up, a dead letter's copy, a queued retry) is indexed again.

        With ``call`` (in progress), the same write saves the handler-call record
        if the one there may be replaced (by the wall clock's ``call_now_ms``). If
        not, the attempt begins all the same and ``held_call`` is the record that
        still counts.
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
        began, item = self._apply_returning(execution_id, new)
        if began and item:
            return BeginResult(True, execution_from_item(item))
        current = execution_from_item(item) if item else None
        if current is None or current.status is not ExecutionStatus.QUEUED:
            return BeginResult(False, current)
        if call is not None:
            with_call = transitions.begin_queued(
                dispatch, call=call, call_now_ms=call_now_ms, **terms
            )
            began, item = self._apply_returning(execution_id, with_call)
            if began and item:
                return BeginResult(True, execution_from_item(item))
        began, item = self._apply_returning(
            execution_id, transitions.begin_queued(dispatch, **terms)
        )
        if not (began and item):
            return BeginResult(False, current)
        if call is None:
            return BeginResult(True, execution_from_item(item))
        held = call_from_item(item)
        if held is None:  # deleted in between: save this call's record after all
            return self.save_call(execution_id, lease_token, call, call_now_ms)
        return BeginResult(True, execution_from_item(item), held)

    def enqueue(
        self,
        dispatch: Dispatch,
        *,
        retry: RetryPolicy,
        lease_until: datetime,
        lease_token: str,
        tenant_id: str,
    ) -> bool:
        """Record a new execution QUEUED for its first attempt; False if the id exists.

        For runs that do not come from the tick (trigger, backfill, dependents,
        a buffered occurrence): the record comes first, so asking twice creates
        nothing twice, and if the message is then lost its lease runs out and the
        reaper sends it.
        """
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
        """Extend a running lease (a heartbeat); ``accepted_at`` marks a 202 answer,
        whose lease outlives the worker's message and so joins the lease index."""
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
        """End a running attempt for good (SUCCEEDED, or SKIPPED).

        With ``follow_up_token``, a short lease stays on it until what its end
        owes is done (``release``): dependents started, the task's run slot freed.
        If the finisher dies first, the reaper does it. Without, the lease goes.
        With ``call`` (completed), the same write saves the handler-call record.
        """
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
        """FAILED and listed as a dead letter, in its tenant's partition.

        A short lease stays on it until the copy for the dead-letter queue is sent
        (``release``); if the sender dies first, the reaper sends the copy.
        """
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
        letter of ``tenant_id`` (decision 0022); False if the execution has a record.

        One conditional put, so reading the same message twice records it once. As
        with ``dead_letter``, a short lease stays until the copy for the dead-letter
        queue is sent and the task's run slot freed; if that is cut short, the reaper
        does it.
        """
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
        """A QUEUED attempt whose message SQS gave up on before it began: FAILED and
        listed, as ``dead_letter`` does for a running one. Only while it is still
        queued for that ``attempt`` under ``seen_token`` (the reaper resending it, or
        its message beginning, makes this fail)."""
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
        """Take an execution out of the lease index for good, saying why: handling its
        expired lease raised, and would again every time. Its status is left as it is."""
        return self._apply(execution_id, transitions.set_aside(reason, now))

    def release(self, execution_id: str, lease_token: str) -> bool:
        """Drop a lease whose obligation is met, leaving the execution out of the lease index."""
        return self._apply(execution_id, transitions.release(lease_token))

    def save_call(
        self, execution_id: str, lease_token: str, call: HandlerCallRecord, call_now_ms: int
    ) -> BeginResult:
        """Save an in-progress handler-call record on the attempt ``lease_token`` began,
        if the one there may be replaced: as ``begin`` would have, asked again.
        Not ``began`` if the attempt is no longer held with that token."""
        saved, item = self._apply_returning(
            execution_id, transitions.save_call(lease_token, call, call_now_ms)
        )
        if saved and item:
            return BeginResult(True, execution_from_item(item))
        current = execution_from_item(item) if item else None
        if current is None or current.status is not ExecutionStatus.RUNNING:
            return BeginResult(False, current)
        if current.lease_token != lease_token:
            return BeginResult(False, current)
        return BeginResult(True, current, call_from_item(item))

    def held_call(self, execution_id: str) -> HandlerCallRecord | None:
        """The handler-call record kept on the execution, if any (expired ones too)."""
        response = self._client.get_item(
            TableName=self._table, Key=self._key(execution_id), ConsistentRead=True
        )
        return call_from_item(response.get("Item"))

    def keep_call(self, execution_id: str, call: HandlerCallRecord) -> bool:
        """Save a completed handler-call record, whoever holds the lease now: a success
        reached after the lease was lost is replayed by the attempt that took over
        (unless that one has succeeded already)."""
        return self._apply(execution_id, transitions.keep_call(call))

    def clear_call(self, execution_id: str, in_progress_until_ms: int | None) -> bool:
        """Drop the in-progress handler-call record saved with ``in_progress_until_ms``:
        the call did not succeed, the next one may run. A record saved since by another
        call (after this one's had expired) is left alone."""
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
        """Claim a lease still held by ``seen_token`` that ended before ``cutoff`` (the
        reaper's move, and a redelivered message's). A holder that renewed or finished
        meanwhile makes this fail. The new lease is in the lease index: if the taker
        dies too, the reaper carries on."""
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
        """Put a running lease still held by ``seen_token`` into the lease index, unchanged.

        For a live attempt whose message arrived again: once the reaper watches the
        lease, that copy of the message may be deleted. False if the holder moved
        on meanwhile (whatever it moved to is watched, or final).
        """
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
        """A dead letter of ``tenant_id`` QUEUED again under the same execution id, with a
        fresh retry budget and the next attempt number; None if it is not one."""
        redriven = transitions.redrive(
            tenant_id,
            now=now,
            lease_until=lease_until,
            new_token=new_token,
            lease_shard=self._lease_shard(execution_id),
            retention=self._retention,
        )
        ok, item = self._apply_returning(execution_id, redriven)
        return execution_from_item(item) if ok and item else None

    def expired_leases(self, shard: int, cutoff: datetime, limit: int) -> list[str]:
        """Ids of executions in one lease shard whose lease ended before ``cutoff``."""
        return expired_lease_ids(self._client, self._table, shard, cutoff, limit)

    def dead_letters(self, tenant_id: str, limit: int, token: str | None) -> Page[Execution]:
        """A tenant's dead-lettered executions, most recent first (its own index partition)."""
        return dead_letter_page(self._client, self._table, tenant_id, limit, token)

    def across_tasks(
        self, tenant_id: str, query: AttentionQuery, limit: int, token: str | None
    ) -> Page[Execution]:
        """The tenant's listed executions that ``query`` admits, newest first by when
        they were listed (its own partition of the attention index)."""
        return attention_page(self._client, self._table, tenant_id, query, limit, token)

    def get(self, execution_id: str) -> Execution | None:
        response = self._client.get_item(
            TableName=self._table, Key=self._key(execution_id), ConsistentRead=True
        )
        item = response.get("Item")
        return execution_from_item(item) if item else None

    def list_for_task(self, task_id: str, limit: int, token: str | None) -> Page[Execution]:
        """A task's executions, newest scheduled time first."""
        return task_history_page(self._client, self._table, task_id, limit, token)

    def owner_of(self, dispatch: Dispatch) -> str:
        """The tenant of a dispatch whose task is gone or cannot be read: as the message
        says, or, for a message sent before messages said, as another execution of
        the task recorded it."""
        if dispatch.tenant_id is not None:
            return dispatch.tenant_id
        recorded = self.list_for_task(dispatch.task_id, 1, None).items
        return recorded[0].tenant_id if recorded else DEFAULT_TENANT
