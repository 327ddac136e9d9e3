"""Running one attempt of an execution: take its lease, call its handler, record the outcome.

1. A message due later than now (a long retry delay, in hops of 15 minutes) is
   sent on, untouched.
2. ``begin``: one conditional write makes the execution RUNNING under a new lease,
   only if it was never seen or is QUEUED for exactly this attempt. Anything else
   is a duplicate (SQS delivered twice, two ticks sent it) or a stale attempt:
   the message is dropped, and nothing runs twice.
3. The handler is called inside Powertools idempotency keyed by execution id,
   while a heartbeat thread extends the lease. Right before the call, the limit
   slots taken at admission must still be held with time to spare; if one was
   lost, the attempt is postponed without calling (it uses no attempt).
4. The outcome is written with the lease token: SUCCEEDED; a 202 waits for the
   handler's callbacks; a failure is retried after a backoff or dead-lettered.

Infrastructure errors (DynamoDB, SQS) propagate, so the message returns to the
queue; if the lease was already taken, the reaper takes over when it runs out.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import replace
from types import TracebackType
from typing import Protocol

from dynacron.domain.clock import Clock
from dynacron.domain.executions import (
    DeliveryResult,
    Dispatch,
    Execution,
    HandlerAnswer,
    LeaseTerms,
    new_token,
    scheduling_lag,
    token_digest,
)
from dynacron.domain.retry import AttemptFailure, RetryPolicy
from dynacron.domain.tasks import SKIPPED_PAUSED, Task, TaskStatus
from dynacron.domain.tenants import DEFAULT_TENANT
from dynacron.faults import NO_FAULTS, Boundary, Faults
from dynacron.idempotency import GuardedResult, IdempotentHandlerCalls, RemainingTime
from dynacron.metrics import ReliabilityMetrics
from dynacron.queue import DispatchQueue
from dynacron.services.limits import LimitGate, Pass, Wait
from dynacron.services.outcomes import AttemptOutcomes, Outcome
from dynacron.store import ExecutionStore, TaskStore

logger = logging.getLogger("dynacron")


class Delivery(Protocol):
    def deliver(self, task: Task, dispatch: Dispatch, callback_token: str) -> DeliveryResult: ...


class ExecutionRunner:
    def __init__(
        self,
        *,
        tasks: TaskStore,
        executions: ExecutionStore,
        queue: DispatchQueue,
        delivery: Delivery,
        handler_calls: IdempotentHandlerCalls,
        outcomes: AttemptOutcomes,
        metrics: ReliabilityMetrics,
        clock: Clock,
        lease_terms: LeaseTerms,
        faults: Faults = NO_FAULTS,
        limits: LimitGate | None = None,
    ) -> None:
        self._tasks = tasks
        self._executions = executions
        self._queue = queue
        self._delivery = delivery
        self._handler_calls = handler_calls
        self._outcomes = outcomes
        self._metrics = metrics
        self._clock = clock
        self._terms = lease_terms
        self._faults = faults
        self._limits = limits

    def run(self, dispatch: Dispatch, invocation: RemainingTime | None = None) -> Outcome:
        """Run one attempt; returns what became of it. Raises only on infrastructure errors."""
        now = self._clock.now()
        if dispatch.not_before is not None and dispatch.not_before - self._terms.clock_skew > now:
            self._queue.send_later(dispatch, (dispatch.not_before - now).total_seconds())
            return Outcome.DEFERRED
        task = self._tasks.get(dispatch.task_id)
        # Limits, breaker and pauses are checked before the attempt begins: an
        # attempt that must wait is sent on unchanged and uses up nothing.
        admitted = self._limits.admit(task, dispatch) if self._limits and task else None
        if isinstance(admitted, Wait):
            later = replace(dispatch, not_before=admitted.until)
            self._queue.send_later(later, (admitted.until - now).total_seconds())
            return Outcome.WAITING
        lease_token, callback_token = new_token(), new_token()
        begun = self._executions.begin(
            dispatch,
            now=now,
            lease_until=now + self._terms.running,
            lease_token=lease_token,
            callback_digest=token_digest(callback_token),
            retry=task.retry if task is not None else RetryPolicy(),
            tenant_id=task.tenant_id if task is not None else DEFAULT_TENANT,
        )
        if not begun.began or begun.current is None:
            self._report_limits(admitted, None)
            self._metrics.duplicate_suppressed()
            return Outcome.DUPLICATE
        execution = begun.current
        self._faults.reached(Boundary.WORKER_BEGAN)
        if task is None:
            return self._outcomes.skipped(
                execution, lease_token, "the task was deleted before this execution ran", task
            )
        if task.status is TaskStatus.PAUSED:
            # Sent before the pause, or a dependent of a paused task: not run, and
            # not lost from sight either. Resume applies the catch-up policy.
            return self._outcomes.skipped(execution, lease_token, SKIPPED_PAUSED, task)
        if dispatch.attempt == 1:
            self._metrics.scheduling_lag(scheduling_lag(dispatch.scheduled_at, now).total_seconds())
        try:
            with Heartbeat(
                self._executions, dispatch.execution_id, lease_token, self._terms, self._clock
            ):
                guarded = self._handler_calls.call(
                    dispatch.execution_id,
                    lambda: self._call(task, dispatch, callback_token, admitted),
                    invocation,
                )
        except _HeldBack as held_back:
            # The idempotency record was deleted on the way out: nothing was called.
            self._report_limits(admitted, None)
            delay = (held_back.wait.until - self._clock.now()).total_seconds()
            return self._outcomes.postpone(execution, lease_token, delay)
        called = not (guarded.replayed or guarded.in_progress)
        self._report_limits(admitted, guarded.result if called else None)
        return self._record(execution, lease_token, guarded, task)

    def _call(
        self, task: Task, dispatch: Dispatch, callback_token: str, admitted: Pass | None
    ) -> DeliveryResult:
        # As late as possible: the slots must outlast the call itself.
        if self._limits is not None and admitted is not None:
            wait = self._limits.before_call(admitted)
            if wait is not None:
                raise _HeldBack(wait)
        return self._delivery.deliver(task, dispatch, callback_token)

    def _report_limits(self, admitted: Pass | None, result: DeliveryResult | None) -> None:
        if self._limits is not None and admitted is not None:
            self._limits.report(admitted, result)

    def _record(
        self, execution: Execution, lease_token: str, guarded: GuardedResult, task: Task
    ) -> Outcome:
        """Write what the handler call came to, under the attempt's lease token."""
        if guarded.replayed or guarded.in_progress:
            self._metrics.duplicate_suppressed()
        if guarded.in_progress:
            # A worker that died mid-call left its in-progress record: this attempt
            # waits for it to expire instead of failing (the handler never ran).
            return self._outcomes.postpone(
                execution, lease_token, self._handler_calls.in_progress_limit_seconds
            )
        self._faults.reached(Boundary.WORKER_OUTCOME_NOT_RECORDED)
        result = guarded.result
        if result.answer is HandlerAnswer.SUCCEEDED:
            # The task as read before the call: a slot is named before the send.
            return self._outcomes.succeeded(execution, lease_token, result.summary, task)
        if result.answer is HandlerAnswer.ACCEPTED:
            accepted_at = self._clock.now()
            waiting = self._executions.renew(
                execution.execution_id,
                lease_token,
                accepted_at + self._terms.awaiting_callback,
                accepted_at=accepted_at,
            )
            return Outcome.ACCEPTED if waiting else Outcome.LEASE_LOST
        failure = result.failure or AttemptFailure("the handler failed")
        return self._outcomes.failed(execution, lease_token, failure)


class _HeldBack(Exception):
    """A limit slot was lost before the call: carried out of the idempotent call,
    which deletes its in-progress record, so that the attempt can be postponed."""

    def __init__(self, wait: Wait) -> None:
        super().__init__(wait.reason)
        self.wait = wait


class Heartbeat:
    """Extends a running lease every ``heartbeat_interval`` until the block ends.

    A renewal refused by its condition means the lease was lost (the reaper took
    it over); the heartbeat stops, and the outcome write will be refused too.
    """

    def __init__(
        self,
        executions: ExecutionStore,
        execution_id: str,
        lease_token: str,
        terms: LeaseTerms,
        clock: Clock,
    ) -> None:
        self._executions = executions
        self._execution_id = execution_id
        self._lease_token = lease_token
        self._terms = terms
        self._clock = clock
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._beat, name=f"heartbeat-{execution_id}", daemon=True
        )

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join()

    def _beat(self) -> None:
        interval = self._terms.heartbeat_interval.total_seconds()
        while not self._stop.wait(interval):
            try:
                renewed = self._executions.renew(
                    self._execution_id,
                    self._lease_token,
                    self._clock.now() + self._terms.running,
                )
            except Exception:
                logger.warning("heartbeat failed; trying again", exc_info=True)
                continue
            if not renewed:
                logger.warning("lease lost", extra={"execution_id": self._execution_id})
                return
