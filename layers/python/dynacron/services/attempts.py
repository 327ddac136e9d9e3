"""How an attempt begins, stated once for every store: which transitions, in which order.

``begin`` tries the domain's ``begin_new`` (an execution never seen before), then
``begin_queued`` (one QUEUED for exactly this attempt); each is one conditional
change the store carries out (``ExecutionStore.apply_returning``), so a concurrent
writer between two of them makes the next one refuse, never write twice.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from dynacron.domain.coordination.tenants import DEFAULT_TENANT
from dynacron.domain.executions import call_records, transitions
from dynacron.domain.executions.execution import Dispatch, ExecutionStatus, HandlerCallRecord
from dynacron.domain.executions.retry import RetryPolicy
from dynacron.ports.executions import BeginResult, ExecutionStore


def begin(
    executions: ExecutionStore,
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

    Allowed for an execution never seen before (a new record), or one QUEUED for
    exactly this attempt. Anything else (finished, running elsewhere, waiting for
    another attempt) means the message is a duplicate or stale, and is refused:
    not ``began``, with the execution as it is.

    The lease stays out of the lease index: the SQS message that began the
    attempt stays undeleted until the attempt has moved on, and comes back
    if the worker dies (decision 0015). What outlives the message (a 202, a
    follow-up, a dead letter's copy, a queued retry) is indexed again.

    With ``call`` (in progress), the same write saves the handler-call record
    if the one there may be replaced (by the wall clock's ``call_now_ms``). If
    not, the attempt begins all the same and ``held_call`` is the record that
    still counts.
    """
    execution_id = dispatch.execution_id
    terms: dict[str, Any] = {
        "now": now,
        "lease_until": lease_until,
        "lease_token": lease_token,
        "callback_digest": callback_digest,
        "keeping": executions.keeping(execution_id),
    }
    new = transitions.begin_new(dispatch, retry=retry, tenant_id=tenant_id, call=call, **terms)
    created = executions.apply_returning(execution_id, new)
    current = created.execution
    if created.held:
        return BeginResult(True, current)
    if current is None or current.status is not ExecutionStatus.QUEUED:
        return BeginResult(False, current)
    if call is not None:
        with_call = transitions.begin_queued(dispatch, call=call, call_now_ms=call_now_ms, **terms)
        saved = executions.apply_returning(execution_id, with_call)
        if saved.held:
            return BeginResult(True, saved.execution)
    # Without the call's record: the one there could not be replaced (it counts).
    began = executions.apply_returning(execution_id, transitions.begin_queued(dispatch, **terms))
    if not began.held:
        return BeginResult(False, current)
    if call is None:
        return BeginResult(True, began.execution)
    if began.call is None:  # deleted in between: save this call's record after all
        return save_call(executions, execution_id, lease_token, call, call_now_ms)
    return BeginResult(True, began.execution, began.call)


def save_call(
    executions: ExecutionStore,
    execution_id: str,
    lease_token: str,
    call: HandlerCallRecord,
    call_now_ms: int,
) -> BeginResult:
    """Save an in-progress handler-call record on the attempt ``lease_token`` began,
    if the one there may be replaced: as ``begin`` would have, asked again. Not
    ``began`` if the attempt is no longer held with that token; ``held_call`` is the
    record that still counts if it could not be replaced."""
    saving = call_records.save_call(lease_token, call, call_now_ms)
    saved = executions.apply_returning(execution_id, saving)
    current = saved.execution
    if saved.held:
        return BeginResult(True, current)
    if (
        current is None
        or current.status is not ExecutionStatus.RUNNING
        or current.lease_token != lease_token
    ):
        return BeginResult(False, current)
    return BeginResult(True, current, saved.call)


def tenant_of(executions: ExecutionStore, dispatch: Dispatch) -> str:
    """The tenant of a dispatch whose task is gone or cannot be read: as the message
    says, or, for a message sent before messages said, as another execution of the
    task recorded it."""
    if dispatch.tenant_id is not None:
        return dispatch.tenant_id
    recorded = executions.list_for_task(dispatch.task_id, 1, None).items
    return recorded[0].tenant_id if recorded else DEFAULT_TENANT
