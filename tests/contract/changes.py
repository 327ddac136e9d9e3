"""Each change of an execution as the services make it: the domain's transition, carried
out by the store (``ExecutionStore.apply``), with the store's ``keeping``. One line
per change, so that a contract test reads as the sequence of moves it checks."""

from __future__ import annotations

from datetime import datetime

from dynacron.domain.executions import call_records, dead_letters, transitions
from dynacron.domain.executions.attention import Attention
from dynacron.domain.executions.execution import (
    Dispatch,
    Execution,
    ExecutionStatus,
    HandlerCallRecord,
    ResultSummary,
)
from dynacron.domain.executions.retry import RetryPolicy
from dynacron.domain.tasks.task import Task
from dynacron.ports import ExecutionStore
from dynacron.services.attempts import begin, save_call, tenant_of

__all__ = ["begin", "save_call", "tenant_of"]


def enqueue(
    store: ExecutionStore,
    dispatch: Dispatch,
    *,
    retry: RetryPolicy,
    lease_until: datetime,
    lease_token: str,
    tenant_id: str,
) -> bool:
    keeping = store.keeping(dispatch.execution_id)
    change = transitions.enqueue(
        dispatch,
        retry=retry,
        lease_until=lease_until,
        lease_token=lease_token,
        tenant_id=tenant_id,
        keeping=keeping,
    )
    return store.apply(dispatch.execution_id, change)


def record_skipped(
    store: ExecutionStore,
    task: Task,
    execution_id: str,
    scheduled_at: datetime,
    reason: str,
    now: datetime,
) -> bool:
    keeping = store.keeping(execution_id)
    change = transitions.record_skipped(
        task, execution_id, scheduled_at, reason, now, keeping=keeping
    )
    return store.apply(execution_id, change)


def renew(
    store: ExecutionStore,
    execution_id: str,
    lease_token: str,
    lease_until: datetime,
    accepted_at: datetime | None = None,
    attention: Attention | None = None,
) -> bool:
    keeping = store.keeping(execution_id)
    change = transitions.renew(
        lease_token, lease_until, accepted_at, attention=attention, keeping=keeping
    )
    return store.apply(execution_id, change)


def finish(
    store: ExecutionStore,
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
    change = transitions.finish(
        lease_token,
        status,
        now,
        follow_up_token=follow_up_token,
        follow_up_until=follow_up_until,
        error=error,
        result=result,
        call=call,
        keeping=store.keeping(execution_id),
    )
    return store.apply(execution_id, change)


def requeue(
    store: ExecutionStore,
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
    change = transitions.requeue(
        lease_token,
        expected=expected,
        attempt=attempt,
        not_before=not_before,
        lease_until=lease_until,
        new_token=new_token,
        error=error,
        attention=attention,
        keeping=store.keeping(execution_id),
    )
    return store.apply(execution_id, change)


def dead_letter(
    store: ExecutionStore,
    execution_id: str,
    lease_token: str,
    *,
    now: datetime,
    error: str,
    lease_until: datetime,
    new_token: str,
    tenant_id: str,
) -> bool:
    change = dead_letters.dead_letter(
        lease_token,
        now=now,
        error=error,
        lease_until=lease_until,
        new_token=new_token,
        tenant_id=tenant_id,
        keeping=store.keeping(execution_id),
    )
    return store.apply(execution_id, change)


def record_undelivered(
    store: ExecutionStore,
    dispatch: Dispatch,
    *,
    now: datetime,
    error: str,
    retry: RetryPolicy,
    tenant_id: str,
    lease_until: datetime,
    lease_token: str,
) -> bool:
    change = dead_letters.record_undelivered(
        dispatch,
        now=now,
        error=error,
        retry=retry,
        tenant_id=tenant_id,
        lease_until=lease_until,
        lease_token=lease_token,
        keeping=store.keeping(dispatch.execution_id),
    )
    return store.apply(dispatch.execution_id, change)


def dead_letter_undelivered(
    store: ExecutionStore,
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
    change = dead_letters.dead_letter_undelivered(
        seen_token,
        attempt=attempt,
        now=now,
        error=error,
        lease_until=lease_until,
        new_token=new_token,
        tenant_id=tenant_id,
        keeping=store.keeping(execution_id),
    )
    return store.apply(execution_id, change)


def set_aside(store: ExecutionStore, execution_id: str, reason: str, now: datetime) -> bool:
    return store.apply(execution_id, transitions.set_aside(reason, now))


def release(store: ExecutionStore, execution_id: str, lease_token: str) -> bool:
    return store.apply(execution_id, transitions.release(lease_token))


def keep_call(store: ExecutionStore, execution_id: str, call: HandlerCallRecord) -> bool:
    return store.apply(execution_id, call_records.keep_call(call))


def clear_call(store: ExecutionStore, execution_id: str, in_progress_until_ms: int | None) -> bool:
    return store.apply(execution_id, call_records.clear_call(in_progress_until_ms))


def take_over(
    store: ExecutionStore,
    execution_id: str,
    seen_token: str,
    *,
    cutoff: datetime,
    new_token: str,
    lease_until: datetime,
) -> bool:
    change = transitions.take_over(
        seen_token,
        cutoff=cutoff,
        new_token=new_token,
        lease_until=lease_until,
        keeping=store.keeping(execution_id),
    )
    return store.apply(execution_id, change)


def hand_to_reaper(store: ExecutionStore, execution_id: str, seen_token: str) -> bool:
    keeping = store.keeping(execution_id)
    return store.apply(execution_id, transitions.hand_to_reaper(seen_token, keeping=keeping))


def redrive(
    store: ExecutionStore,
    tenant_id: str,
    execution_id: str,
    *,
    now: datetime,
    lease_until: datetime,
    new_token: str,
) -> Execution | None:
    change = dead_letters.redrive(
        tenant_id,
        now=now,
        lease_until=lease_until,
        new_token=new_token,
        keeping=store.keeping(execution_id),
    )
    redriven = store.apply_returning(execution_id, change)
    return redriven.execution if redriven.held else None
