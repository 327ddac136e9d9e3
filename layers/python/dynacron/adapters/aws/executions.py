"""Executions and their leases in DynamoDB (the ``ExecutionStore`` port)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from botocore.exceptions import ClientError

from dynacron.adapters.aws.errors import translating
from dynacron.adapters.aws.execution_items import (
    _CALL_REPLACEABLE,
    _NAME,
    _VALUE,
    CALL_EXPIRES_AT,
    CALL_IN_PROGRESS_UNTIL,
    CALL_STATUS,
    ERROR_LIMIT,
    EXPIRES_AT,
    _call_sets,
    _replaceable_values,
    call_from_item,
    dead_letter_partition,
    execution_from_item,
)
from dynacron.adapters.aws.items import (
    PartitionQuery,
    from_item,
    is_condition_failure,
    query_page,
    to_item,
)
from dynacron.adapters.aws.task_items import (
    retry_to_map,
)
from dynacron.domain.executions import (
    Dispatch,
    Execution,
    ExecutionStatus,
    HandlerCallRecord,
    ResultSummary,
)
from dynacron.domain.instants import format_instant
from dynacron.domain.retry import RetryPolicy
from dynacron.domain.tasks import (
    Task,
    shard_for,
    task_id_of,
)
from dynacron.domain.tenants import DEFAULT_TENANT
from dynacron.messages import upstream_to_map
from dynacron.ports import (
    BeginResult,
    Page,
)
from dynacron.resources import (
    DEAD_LETTER_INDEX,
    LEASE_INDEX,
    LEASE_SHARDS,
)


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

    def _expiry(self, *ends: datetime | None) -> int:
        """The TTL (epoch seconds): ``retention`` after the latest of ``ends``.

        Each write that starts, moves on or ends an execution passes the moment it
        matters until (now, its lease's end, its next attempt), never its
        scheduled time: a backfilled or caught-up occurrence may be years old,
        and must not be born expired (with its lease and idempotency record).
        """
        return int((max(end for end in ends if end is not None) + self._retention).timestamp())

    def _write(
        self,
        execution_id: str,
        condition: str,
        sets: dict[str, Any],
        *,
        removes: tuple[str, ...] = (),
        computed: tuple[str, ...] = (),
        values: dict[str, Any] | None = None,
        return_values: str = "NONE",
    ) -> tuple[bool, dict[str, Any] | None]:
        """One conditional UpdateItem: ``sets`` become ``#name = :name``.

        Returns whether the condition held, and the item: the new one when asked
        for with ``return_values``, the old one when the condition failed.
        """
        assignments = [f"#{name} = :{name}" for name in sets] + list(computed)
        clauses = []
        if assignments:
            clauses.append("SET " + ", ".join(assignments))
        if removes:
            clauses.append("REMOVE " + ", ".join(f"#{name}" for name in removes))
        expression = " ".join(clauses)
        text = f"{expression} {condition}"
        all_values = {f":{name}": value for name, value in sets.items()} | (values or {})
        used_values = {f":{v}" for v in _VALUE.findall(text)}
        names = {f"#{n}": n for n in set(_NAME.findall(text))}
        values_used = to_item({k: v for k, v in all_values.items() if k in used_values})
        try:
            response = self._client.update_item(
                TableName=self._table,
                Key=self._key(execution_id),
                UpdateExpression=expression,
                ConditionExpression=condition,
                ReturnValues=return_values,
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
                **({"ExpressionAttributeNames": names} if names else {}),
                **({"ExpressionAttributeValues": values_used} if values_used else {}),
            )
        except ClientError as error:
            if is_condition_failure(error):
                return False, error.response.get("Item")
            raise
        return True, response.get("Attributes")

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
        running = {
            "status": ExecutionStatus.RUNNING.value,
            "attempt": dispatch.attempt,
            "started_at": format_instant(now),
            "lease_token": lease_token,
            "lease_until": format_instant(lease_until),
            "callback_digest": callback_digest,
            EXPIRES_AT: self._expiry(lease_until),
        }
        item = {
            "task_id": dispatch.task_id,
            "execution_id": dispatch.execution_id,
            "scheduled_at": format_instant(dispatch.scheduled_at),
            "first_attempt": dispatch.attempt,
            "retry": retry_to_map(retry),
            "tenant_id": tenant_id,
            "upstream": upstream_to_map(dispatch.upstream) if dispatch.upstream else None,
            **running,
            **(_call_sets(call) if call is not None else {}),
        }
        try:
            self._client.put_item(
                TableName=self._table,
                Item=to_item(item),
                ConditionExpression="attribute_not_exists(execution_id)",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
            return BeginResult(True, execution_from_item(to_item(item)))
        except ClientError as error:
            if not is_condition_failure(error):
                raise
            old = error.response.get("Item")
        current = execution_from_item(old) if old else None
        if current is None or current.status is not ExecutionStatus.QUEUED:
            return BeginResult(False, current)
        queued = "#status = :queued AND #attempt = :attempt"
        values = {":queued": ExecutionStatus.QUEUED.value}
        removes = ("next_attempt_at", "lease_shard")
        if call is not None:
            began, new = self._write(
                dispatch.execution_id,
                f"{queued} AND {_CALL_REPLACEABLE}",
                running | _call_sets(call),
                removes=removes,
                values=values | _replaceable_values(call_now_ms),
                return_values="ALL_NEW",
            )
            if began and new:
                return BeginResult(True, execution_from_item(new))
        began, new = self._write(
            dispatch.execution_id,
            queued,
            running,
            removes=removes,
            values=values,
            return_values="ALL_NEW",
        )
        if not (began and new):
            return BeginResult(False, current)
        if call is None:
            return BeginResult(True, execution_from_item(new))
        held = call_from_item(new)
        if held is None:  # deleted in between: save this call's record after all
            return self.save_call(dispatch.execution_id, lease_token, call, call_now_ms)
        return BeginResult(True, execution_from_item(new), held)

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
        item = {
            "task_id": dispatch.task_id,
            "execution_id": dispatch.execution_id,
            "scheduled_at": format_instant(dispatch.scheduled_at),
            "status": ExecutionStatus.QUEUED.value,
            "attempt": 1,
            "first_attempt": 1,
            "retry": retry_to_map(retry),
            "next_attempt_at": format_instant(dispatch.not_before or dispatch.scheduled_at),
            "lease_token": lease_token,
            "lease_until": format_instant(lease_until),
            "lease_shard": self._lease_shard(dispatch.execution_id),
            "tenant_id": tenant_id,
            EXPIRES_AT: self._expiry(lease_until, dispatch.not_before),
            "upstream": upstream_to_map(dispatch.upstream) if dispatch.upstream else None,
        }
        return self._put_new(item)

    def record_skipped(
        self, task: Task, execution_id: str, scheduled_at: datetime, reason: str, now: datetime
    ) -> bool:
        """An occurrence of ``task`` that never runs, and why: SKIPPED from the start."""
        return self._put_new(
            {
                "task_id": task.task_id,
                "tenant_id": task.tenant_id,
                "execution_id": execution_id,
                "scheduled_at": format_instant(scheduled_at),
                "status": ExecutionStatus.SKIPPED.value,
                "attempt": 0,
                "completed_at": format_instant(now),
                "error": reason[:ERROR_LIMIT],
                EXPIRES_AT: self._expiry(now),
            }
        )

    def _put_new(self, item: dict[str, Any]) -> bool:
        try:
            self._client.put_item(
                TableName=self._table,
                Item=to_item(item),
                ConditionExpression="attribute_not_exists(execution_id)",
            )
        except ClientError as error:
            if is_condition_failure(error):
                return False
            raise
        return True

    def renew(
        self,
        execution_id: str,
        lease_token: str,
        lease_until: datetime,
        accepted_at: datetime | None = None,
    ) -> bool:
        """Extend a running lease (a heartbeat); ``accepted_at`` marks a 202 answer,
        whose lease outlives the worker's message and so joins the lease index."""
        sets: dict[str, Any] = {
            "lease_until": format_instant(lease_until),
            EXPIRES_AT: self._expiry(lease_until),
        }
        if accepted_at is not None:
            sets["accepted_at"] = format_instant(accepted_at)
            sets["lease_shard"] = self._lease_shard(execution_id)
        return self._held_write(execution_id, lease_token, sets)

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
        sets: dict[str, Any] = {
            "status": status.value,
            "completed_at": format_instant(now),
            EXPIRES_AT: self._expiry(now, follow_up_until),
        }
        # The callback digest stays (as it does through requeue and dead_letter):
        # a replayed callback of this attempt is then told the execution ended
        # (409), not that its token is wrong. The next attempt's begin replaces it.
        removes: tuple[str, ...] = ("accepted_at",)
        if call is not None:
            sets |= _call_sets(call)
            removes += (CALL_IN_PROGRESS_UNTIL,)
        if follow_up_token is not None and follow_up_until is not None:
            sets["lease_token"] = follow_up_token
            sets["lease_until"] = format_instant(follow_up_until)
            sets["lease_shard"] = self._lease_shard(execution_id)
        else:
            removes += ("lease_token", "lease_until", "lease_shard")
        if result is not None:
            sets["result"] = {"status_code": result.status_code, "excerpt": result.excerpt}
        if error is None:
            removes += ("error",)
        else:
            sets["error"] = error[:ERROR_LIMIT]
        return self._held_write(execution_id, lease_token, sets, removes=removes)

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
    ) -> bool:
        """QUEUED for ``attempt`` from now on, due at ``not_before``, under a new lease."""
        sets: dict[str, Any] = {
            "status": ExecutionStatus.QUEUED.value,
            "attempt": attempt,
            "next_attempt_at": format_instant(not_before),
            "lease_until": format_instant(lease_until),
            "lease_shard": self._lease_shard(execution_id),
            "lease_token": new_token,
            EXPIRES_AT: self._expiry(not_before, lease_until),
        }
        if error is not None:
            sets["error"] = error[:ERROR_LIMIT]
        return self._held_write(
            execution_id,
            lease_token,
            sets,
            removes=("accepted_at",),
            expected=expected,
        )

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
        return self._held_write(
            execution_id,
            lease_token,
            {
                "status": ExecutionStatus.FAILED.value,
                "completed_at": format_instant(now),
                EXPIRES_AT: self._expiry(now, lease_until),
                "error": error[:ERROR_LIMIT],
                DEAD_LETTER_INDEX.partition_key.name: dead_letter_partition(tenant_id),
                DEAD_LETTER_INDEX.sort_key.name: format_instant(now),
                "lease_until": format_instant(lease_until),
                "lease_shard": self._lease_shard(execution_id),
                "lease_token": new_token,
            },
            removes=("accepted_at", "next_attempt_at"),
        )

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
        return self._put_new(
            {
                "task_id": dispatch.task_id,
                "execution_id": dispatch.execution_id,
                "scheduled_at": format_instant(dispatch.scheduled_at),
                "status": ExecutionStatus.FAILED.value,
                "attempt": dispatch.attempt,
                "first_attempt": dispatch.attempt,
                "retry": retry_to_map(retry),
                "tenant_id": tenant_id,
                "completed_at": format_instant(now),
                "error": error[:ERROR_LIMIT],
                DEAD_LETTER_INDEX.partition_key.name: dead_letter_partition(tenant_id),
                DEAD_LETTER_INDEX.sort_key.name: format_instant(now),
                "lease_token": lease_token,
                "lease_until": format_instant(lease_until),
                "lease_shard": self._lease_shard(dispatch.execution_id),
                # From when the record stops mattering, never from the occurrence.
                "expires_at": int((now + self._retention).timestamp()),
                "upstream": upstream_to_map(dispatch.upstream) if dispatch.upstream else None,
            }
        )

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
        ok, _ = self._write(
            execution_id,
            "#status = :queued AND #attempt = :attempt AND #lease_token = :seen",
            {
                "status": ExecutionStatus.FAILED.value,
                "completed_at": format_instant(now),
                "error": error[:ERROR_LIMIT],
                DEAD_LETTER_INDEX.partition_key.name: dead_letter_partition(tenant_id),
                DEAD_LETTER_INDEX.sort_key.name: format_instant(now),
                "lease_until": format_instant(lease_until),
                "lease_shard": self._lease_shard(execution_id),
                "lease_token": new_token,
            },
            removes=("next_attempt_at",),
            values={
                ":queued": ExecutionStatus.QUEUED.value,
                ":attempt": attempt,
                ":seen": seen_token,
            },
        )
        return ok

    def set_aside(self, execution_id: str, reason: str, now: datetime) -> bool:
        """Take an execution out of the lease index for good, saying why: handling its
        expired lease raised, and would again every time. Its status is left as it is."""
        ok, _ = self._write(
            execution_id,
            "attribute_exists(execution_id)",
            {"set_aside_reason": reason[:ERROR_LIMIT], "set_aside_at": format_instant(now)},
            removes=("lease_shard",),
        )
        return ok

    def release(self, execution_id: str, lease_token: str) -> bool:
        """Drop a lease whose obligation is met, leaving the execution out of the lease index."""
        ok, _ = self._write(
            execution_id,
            "#lease_token = :held",
            {},
            removes=("lease_token", "lease_until", "lease_shard"),
            values={":held": lease_token},
        )
        return ok

    def save_call(
        self, execution_id: str, lease_token: str, call: HandlerCallRecord, call_now_ms: int
    ) -> BeginResult:
        """Save an in-progress handler-call record on the attempt ``lease_token`` began,
        if the one there may be replaced: as ``begin`` would have, asked again.
        Not ``began`` if the attempt is no longer held with that token."""
        ok, old = self._write(
            execution_id,
            f"#status = :running AND #lease_token = :held AND {_CALL_REPLACEABLE}",
            _call_sets(call),
            values={":running": ExecutionStatus.RUNNING.value, ":held": lease_token}
            | _replaceable_values(call_now_ms),
            return_values="ALL_NEW",
        )
        if ok and old:
            return BeginResult(True, execution_from_item(old))
        current = execution_from_item(old) if old else None
        if current is None or current.status is not ExecutionStatus.RUNNING:
            return BeginResult(False, current)
        if current.lease_token != lease_token:
            return BeginResult(False, current)
        return BeginResult(True, current, call_from_item(old))

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
        ok, _ = self._write(
            execution_id,
            "attribute_exists(execution_id) AND #status <> :succeeded",
            _call_sets(call),
            removes=(CALL_IN_PROGRESS_UNTIL,),
            values={":succeeded": ExecutionStatus.SUCCEEDED.value},
        )
        return ok

    def clear_call(self, execution_id: str, in_progress_until_ms: int | None) -> bool:
        """Drop the in-progress handler-call record saved with ``in_progress_until_ms``:
        the call did not succeed, the next one may run. A record saved since by another
        call (after this one's had expired) is left alone."""
        mine = (
            f"#{CALL_IN_PROGRESS_UNTIL} = :mine"
            if in_progress_until_ms is not None
            else f"attribute_not_exists(#{CALL_IN_PROGRESS_UNTIL})"
        )
        ok, _ = self._write(
            execution_id,
            f"#{CALL_STATUS} = :in_progress AND {mine}",
            {},
            removes=(CALL_STATUS, CALL_EXPIRES_AT, CALL_IN_PROGRESS_UNTIL),
            values={":in_progress": HandlerCallRecord.IN_PROGRESS, ":mine": in_progress_until_ms},
        )
        return ok

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
        ok, _ = self._write(
            execution_id,
            "#lease_token = :seen AND #lease_until < :cutoff",
            {
                "lease_token": new_token,
                "lease_until": format_instant(lease_until),
                "lease_shard": self._lease_shard(execution_id),
                EXPIRES_AT: self._expiry(lease_until),
            },
            values={":seen": seen_token, ":cutoff": format_instant(cutoff)},
        )
        return ok

    def watch(self, execution_id: str, seen_token: str) -> bool:
        """Put a running lease still held by ``seen_token`` into the lease index, unchanged.

        For a live attempt whose message arrived again: once the reaper watches the
        lease, that copy of the message may be deleted. False if the holder moved
        on meanwhile (whatever it moved to is watched, or final).
        """
        ok, _ = self._write(
            execution_id,
            "#status = :running AND #lease_token = :seen",
            {"lease_shard": self._lease_shard(execution_id)},
            values={":running": ExecutionStatus.RUNNING.value, ":seen": seen_token},
        )
        return ok

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
        ok, item = self._write(
            execution_id,
            "#status = :failed AND #dead_letter = :partition",
            {
                "status": ExecutionStatus.QUEUED.value,
                "next_attempt_at": format_instant(now),
                "lease_until": format_instant(lease_until),
                "lease_shard": self._lease_shard(execution_id),
                "lease_token": new_token,
                EXPIRES_AT: self._expiry(now, lease_until),
            },
            computed=("#attempt = #attempt + :one", "#first_attempt = #attempt + :one"),
            removes=(
                DEAD_LETTER_INDEX.partition_key.name,
                DEAD_LETTER_INDEX.sort_key.name,
                "completed_at",
            ),
            values={
                ":failed": ExecutionStatus.FAILED.value,
                ":one": 1,
                ":partition": dead_letter_partition(tenant_id),
            },
            return_values="ALL_NEW",
        )
        return execution_from_item(item) if ok and item else None

    def _held_write(
        self,
        execution_id: str,
        lease_token: str,
        sets: dict[str, Any],
        *,
        removes: tuple[str, ...] = (),
        expected: ExecutionStatus = ExecutionStatus.RUNNING,
    ) -> bool:
        ok, _ = self._write(
            execution_id,
            "#status = :expected AND #lease_token = :held",
            sets,
            removes=removes,
            values={":expected": expected.value, ":held": lease_token},
        )
        return ok

    def expired_leases(self, shard: int, cutoff: datetime, limit: int) -> list[str]:
        """Ids of executions in one lease shard whose lease ended before ``cutoff``."""
        ids: list[str] = []
        start_key: dict[str, Any] | None = None
        while len(ids) < limit:
            kwargs: dict[str, Any] = {
                "TableName": self._table,
                "IndexName": LEASE_INDEX.name,
                "KeyConditionExpression": "#shard = :shard AND #until < :cutoff",
                "ExpressionAttributeNames": {
                    "#shard": LEASE_INDEX.partition_key.name,
                    "#until": LEASE_INDEX.sort_key.name,
                },
                "ExpressionAttributeValues": to_item(
                    {":shard": str(shard), ":cutoff": format_instant(cutoff)}
                ),
                "Limit": limit - len(ids),
            }
            if start_key:
                kwargs["ExclusiveStartKey"] = start_key
            response = self._client.query(**kwargs)
            ids += [from_item(i)["execution_id"] for i in response.get("Items", [])]
            start_key = response.get("LastEvaluatedKey")
            if not start_key:
                break
        return ids

    def dead_letters(self, tenant_id: str, limit: int, token: str | None) -> Page[Execution]:
        """A tenant's dead-lettered executions, most recent first (its own index partition)."""
        partition = dead_letter_partition(tenant_id)
        query = PartitionQuery(
            self._table, DEAD_LETTER_INDEX.partition_key.name, partition, DEAD_LETTER_INDEX, True
        )
        return query_page(self._client, query, limit, token, execution_from_item)

    def get(self, execution_id: str) -> Execution | None:
        response = self._client.get_item(
            TableName=self._table, Key=self._key(execution_id), ConsistentRead=True
        )
        item = response.get("Item")
        return execution_from_item(item) if item else None

    def list_for_task(self, task_id: str, limit: int, token: str | None) -> Page[Execution]:
        """A task's executions, newest scheduled time first."""
        query = PartitionQuery(self._table, "task_id", task_id, newest_first=True)
        return query_page(self._client, query, limit, token, execution_from_item)

    def owner_of(self, dispatch: Dispatch) -> str:
        """The tenant of a dispatch whose task is gone or cannot be read: as the message
        says, or, for a message sent before messages said, as another execution of
        the task recorded it."""
        if dispatch.tenant_id is not None:
            return dispatch.tenant_id
        recorded = self.list_for_task(dispatch.task_id, 1, None).items
        return recorded[0].tenant_id if recorded else DEFAULT_TENANT
