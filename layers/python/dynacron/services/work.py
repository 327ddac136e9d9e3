"""Running one attempt of an execution: begin it under a lease, call its handler,
record the outcome (``ExecutionRunner``).

Why, in docs/decisions/: 0006-retry-mechanism.md (a message due later is sent on),
0015-message-guarded-leases.md (the message guards the running lease),
0016-idempotency-record-on-the-execution.md (the handler-call record),
0013-limits-breakers-pacing.md, 0021-setting-aside-poison-work.md (a task that makes
the worker raise) and 0022-dead-letters-before-begin.md (a record that fails before
``begin``; a record the invocation has no time left for).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from dynacron.domain.clock import Clock
from dynacron.domain.conditions import Transition
from dynacron.domain.executions import transitions
from dynacron.domain.executions.attention import Attention
from dynacron.domain.executions.execution import (
    DeliveryResult,
    Dispatch,
    Execution,
    ExecutionStatus,
    HandlerAnswer,
    HandlerCallRecord,
    LeaseTerms,
    new_token,
    scheduling_lag,
    token_digest,
)
from dynacron.domain.executions.retry import AttemptFailure, RetryPolicy
from dynacron.domain.tasks.task import Task, TaskStatus, skipped_reason
from dynacron.ports import (
    Applied,
    BeginResult,
    DispatchQueue,
    ExecutionStore,
    StoreUnavailable,
    TaskStore,
    UnreadableTaskError,
    reason_of,
)
from dynacron.ports.delivery import Delivery
from dynacron.ports.faults import NO_FAULTS, Boundary, Faults
from dynacron.ports.guards import GuardedResult, HandlerCalls, RemainingTime
from dynacron.ports.metrics import Metrics
from dynacron.services import attempts, task_changes
from dynacron.services.attempt_records import AttemptRecords, BatchBegin, Heartbeats, HeldBack
from dynacron.services.attempts import tenant_of
from dynacron.services.clock_steps import ClockSteps
from dynacron.services.limits import LimitGate, Pass, Wait
from dynacron.services.notifications import TaskNotifications
from dynacron.services.outcomes import AttemptOutcomes, Outcome

logger = logging.getLogger("dynacron")
# A task in these states runs none of its executions: they are recorded SKIPPED.
NOT_RUNNING = (TaskStatus.PAUSED, TaskStatus.ERROR)


@dataclass(frozen=True)
class _Attempt:
    """One attempt as the worker runs it: the tokens it begins with, when, and what
    the limits admitted (None: none apply)."""

    dispatch: Dispatch
    task: Task | None
    lease_token: str
    callback_token: str
    began_at: datetime
    admitted: Pass | None


@dataclass(frozen=True)
class PendingEnd:
    """A record of a batch whose handler succeeded: its end, which saves the success,
    is written with the batch's others (``ExecutionRunner.end_each``)."""

    records: AttemptRecords
    execution: Execution
    lease_token: str
    task: Task
    success: HandlerCallRecord


# What ``begin_each`` hands back for one message: what became of it already, the
# exception it raised, or what is left to run (the handler call) on a thread of its own.
Started = Outcome | Exception | Callable[[], "Outcome | PendingEnd"]


class ExecutionRunner:
    """Runs the attempts the dispatch messages name: one message at a time (``run``),
    or a batch's, begun together and ended together (``begin_each``, ``end_each``)."""

    def __init__(
        self,
        *,
        tasks: TaskStore,
        executions: ExecutionStore,
        queue: DispatchQueue,
        delivery: Delivery,
        handler_calls: HandlerCalls,
        outcomes: AttemptOutcomes,
        metrics: Metrics,
        clock: Clock,
        lease_terms: LeaseTerms,
        faults: Faults = NO_FAULTS,
        limits: LimitGate | None = None,
        steps: ClockSteps | None = None,
        notifications: TaskNotifications | None = None,
    ) -> None:
        self._steps = steps
        self._notifications = notifications
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
        self._heartbeats = Heartbeats(executions, lease_terms, clock)

    def run(self, dispatch: Dispatch, invocation: RemainingTime | None = None) -> Outcome:
        """Run one attempt; returns what became of it. Raises only on infrastructure errors."""
        prepared = self._prepare(dispatch, self._tasks.get)
        if isinstance(prepared, Outcome):
            return prepared
        if prepared.task is None or prepared.task.status in NOT_RUNNING:
            return self._skip_attempt(prepared)
        outcome = self._call(prepared, prepared.task, invocation)
        assert isinstance(outcome, Outcome)  # ends are written by the call itself
        return outcome

    def begin_each(
        self, dispatches: Sequence[Dispatch], invocation: RemainingTime | None = None
    ) -> list[Started]:
        """Begin a batch's attempts together: their tasks read in one call, their
        begins written in one (``ExecutionStore.apply_each``); each attempt keeps its
        own lease, handler-call record, limits and refusal, as ``run`` gives it. Answers,
        for each message in order, what became of it already (deferred, waiting, set
        aside, or the exception it raised), or what is left: its handler call, which
        answers an ``Outcome``, or a ``PendingEnd`` for ``end_each``. Raises only when
        the tasks cannot be read at all."""
        read, found = self._reader([dispatch.task_id for dispatch in dispatches])
        if self._limits is not None and found:
            self._limits.read_hosts(found)
        started: list[Started] = []
        begins: list[tuple[int, _Attempt, Task, HandlerCallRecord]] = []
        for dispatch in dispatches:
            try:
                prepared = self._prepare(dispatch, read)
            except Exception as error:
                started.append(error)
                continue
            task = prepared.task if isinstance(prepared, _Attempt) else None
            if isinstance(prepared, Outcome):
                started.append(prepared)
            elif task is None or task.status in NOT_RUNNING:
                started.append(functools.partial(self._skip_attempt, prepared))
            else:
                begins.append((len(started), prepared, task, self._handler_calls.in_progress()))
                started.append(Outcome.DUPLICATE)  # replaced below, once begun
        if not begins:
            return started
        changes = [
            (attempt.dispatch.execution_id, self._begin_new(attempt, task, call))
            for _, attempt, task, call in begins
        ]
        try:
            answers: list[Applied | Exception] = self._executions.apply_each(changes)
        except StoreUnavailable as unavailable:
            answers = [unavailable] * len(changes)
        for (index, attempt, task, call), answer in zip(begins, answers, strict=True):
            began = BatchBegin(answer, call)
            started[index] = functools.partial(
                self._call, attempt, task, invocation, began=began, end_later=True
            )
        return started

    def end_each(self, pending: Sequence[PendingEnd]) -> list[Outcome | Exception]:
        """Write the ends of a batch's succeeded attempts in one call, each saving its
        handler's success, then do what each owes; answers, in order, what each came
        to, or the exception it raised. A refused end (the lease was taken over) keeps
        the success for the attempt that took over, as one attempt alone does."""
        endings = [
            self._outcomes.ending(
                end.execution,
                end.lease_token,
                ExecutionStatus.SUCCEEDED,
                end.task,
                result=end.success.response,
                call=end.success,
            )
            for end in pending
        ]
        changes = [
            (end.execution.execution_id, ending.finish)
            for end, ending in zip(pending, endings, strict=True)
        ]
        try:
            # Whether each held is all an end needs: no record to decode.
            answers: list[Applied | Exception] = self._executions.apply_each(
                changes, returning=False
            )
        except StoreUnavailable as unavailable:
            answers = [unavailable] * len(changes)
        outcomes: list[Outcome | Exception] = []
        for end, ending, answer in zip(pending, endings, answers, strict=True):
            if isinstance(answer, Exception):
                outcomes.append(answer)
                continue
            try:
                ended = self._outcomes.ended(ending, answer.held)
                if ended is None:
                    end.records.keep_success(end.success)
                    outcomes.append(Outcome.LEASE_LOST)
                else:
                    outcomes.append(self._outcomes.follow_through(ended))
            except Exception as error:
                outcomes.append(error)
        return outcomes

    def _reader(self, task_ids: list[str]) -> tuple[Callable[[str], Task | None], list[Task]]:
        """``TaskStore.get`` for ``task_ids``, read in one call, and the tasks that call
        found: a task that cannot be decoded is read again alone, to raise as ``get``
        raises; all of them, if the store failed the call (each record then fails, or
        not, alone)."""
        if len(task_ids) <= 1:
            return self._tasks.get, []
        try:
            found, unreadable = self._tasks.read_many(task_ids)
        except StoreUnavailable:
            return self._tasks.get, []
        tasks = {task.task_id: task for task in found}
        again = {poison.task_id for poison in unreadable}
        return (
            lambda task_id: self._tasks.get(task_id) if task_id in again else tasks.get(task_id)
        ), found

    def _prepare(
        self, dispatch: Dispatch, read: Callable[[str], Task | None]
    ) -> Outcome | _Attempt:
        """What ``dispatch`` comes to before its attempt begins (sent on, waiting, set
        aside), or the attempt to begin."""
        now = self._clock.now()
        if dispatch.not_before is not None and dispatch.not_before - self._terms.clock_skew > now:
            self._queue.send_later(dispatch, (dispatch.not_before - now).total_seconds())
            return Outcome.DEFERRED
        try:
            task, admitted = self._admit(dispatch, read)
        except StoreUnavailable:
            raise
        except Exception as error:
            return self._set_aside(dispatch, error, now)
        if isinstance(admitted, Wait):
            return self._wait(dispatch, admitted, now)
        return _Attempt(dispatch, task, new_token(), new_token(), now, admitted)

    def _skip_attempt(self, attempt: _Attempt) -> Outcome:
        """An attempt whose task is gone or does not run: begun and SKIPPED at once."""
        self._report_limits(attempt.admitted, None)
        return self._skip(self._beginning(attempt)(), attempt.lease_token, attempt.task)

    def _begin_new(self, attempt: _Attempt, task: Task, call: HandlerCallRecord) -> Transition:
        """The begin of ``attempt`` as a new execution, with ``call`` (``attempts.begin``'s
        first try, written with the batch's others)."""
        now = attempt.began_at
        return transitions.begin_new(
            attempt.dispatch,
            now=now,
            lease_until=now + self._terms.running,
            lease_token=attempt.lease_token,
            callback_digest=token_digest(attempt.callback_token),
            retry=task.retry,
            tenant_id=task.tenant_id,
            call=call,
            keeping=self._executions.keeping(attempt.dispatch.execution_id),
        )

    def _beginning(self, attempt: _Attempt) -> Callable[..., BeginResult]:
        """The begin of ``attempt`` (``attempts.begin``), to be called with or without the
        in-progress record of its handler call."""
        task, dispatch, now = attempt.task, attempt.dispatch, attempt.began_at
        return functools.partial(
            attempts.begin,
            self._executions,
            dispatch,
            now=now,
            lease_until=now + self._terms.running,
            lease_token=attempt.lease_token,
            callback_digest=token_digest(attempt.callback_token),
            retry=task.retry if task is not None else RetryPolicy(),
            tenant_id=task.tenant_id if task is not None else tenant_of(self._executions, dispatch),
        )

    def _call(
        self,
        attempt: _Attempt,
        task: Task,
        invocation: RemainingTime | None,
        *,
        began: BatchBegin | None = None,
        end_later: bool = False,
    ) -> Outcome | PendingEnd:
        """Begin ``attempt`` (unless ``began`` did) and call its handler, guarded by its
        handler-call record; ``end_later``: a success is left to ``end_each``."""
        dispatch, lease_token, admitted = attempt.dispatch, attempt.lease_token, attempt.admitted
        # The attempt begins in the write that saves the in-progress record of its
        # handler call, and ends in the write that saves its success (decision 0016).
        records = AttemptRecords(
            dispatch.execution_id,
            begin=self._beginning(attempt),
            lease_token=lease_token,
            task=task,
            executions=self._executions,
            outcomes=self._outcomes,
            faults=self._faults,
            began=began,
            end_later=end_later,
        )
        try:
            guarded = self._handler_calls.call(
                dispatch.execution_id,
                records,
                lambda: self._call_handler(
                    task, dispatch, lease_token, attempt.callback_token, attempt.began_at, admitted
                ),
                invocation,
            )
        except HeldBack as held_back:
            # The idempotency record was deleted on the way out: nothing was called.
            assert records.begun is not None
            self._report_limits(admitted, None)
            delay = (held_back.wait.until - self._clock.now()).total_seconds()
            return self._outcomes.postpone(records.begun, lease_token, delay)
        return self._called(records, guarded, lease_token, task, admitted)

    def _admit(
        self, dispatch: Dispatch, read: Callable[[str], Task | None]
    ) -> tuple[Task | None, Pass | Wait | None]:
        """The task as it is now, and what its limits, breaker and pauses say. Checked
        before the attempt begins: an attempt that must wait is sent on unchanged and
        uses up nothing. None for a deleted task (or one that does not run)."""
        task = read(dispatch.task_id)
        if self._limits is None or task is None or task.status in NOT_RUNNING:
            return task, None
        return task, self._limits.admit(task, dispatch)

    def _wait(self, dispatch: Dispatch, wait: Wait, now: datetime) -> Outcome:
        """Send the message on unchanged, due when ``wait`` ends."""
        self._keep_pickup_lease(dispatch, wait.until)
        later = replace(dispatch, not_before=wait.until)
        self._queue.send_later(later, (wait.until - now).total_seconds())
        return Outcome.WAITING

    def _called(
        self,
        records: AttemptRecords,
        guarded: GuardedResult,
        lease_token: str,
        task: Task,
        admitted: Pass | None,
    ) -> Outcome | PendingEnd:
        """What the guarded handler call came to: refused before it began, taken over
        before the call, or a result to record."""
        if records.begun is None:
            self._report_limits(admitted, None)
            return self._not_begun(records.refused)
        if guarded.result is None:
            # Begun, then taken over before the handler was called (Powertools
            # asked to save its record again, and the lease was gone).
            self._report_limits(admitted, None)
            return Outcome.LEASE_LOST
        called = not (guarded.replayed or guarded.in_progress)
        self._report_limits(admitted, guarded.result if called else None)
        return self._record(records, records.begun, lease_token, guarded.result, guarded, task)

    def return_unbegun(self, dispatch: Dispatch) -> None:
        """Give back a message this invocation has no time for, as a fresh message.

        Nothing began, so no attempt is used; the copy sent starts SQS's receive
        count afresh, so running short of time never pushes a message toward the
        dead-letter queue. The caller reports the received one as done.
        """
        self._queue.send_later(dispatch, 0)

    def _keep_pickup_lease(self, dispatch: Dispatch, until: datetime) -> None:
        """A queued attempt that waits past its pickup lease would be resent by the
        reaper every ``pickup_grace``: move its due time and lease to the wait's end.

        Only a wait that ends after the lease could run out pays the read; an
        attempt with no record yet (a first attempt from the tick) has no lease.
        """
        due = dispatch.not_before or dispatch.scheduled_at
        if until < self._terms.pickup_deadline(due) - self._terms.clock_skew:
            return
        queued = self._executions.get(dispatch.execution_id)
        if (
            queued is None
            or queued.status is not ExecutionStatus.QUEUED
            or queued.attempt != dispatch.attempt
            or queued.lease_token is None
        ):
            return
        requeue = transitions.requeue(
            queued.lease_token,
            expected=ExecutionStatus.QUEUED,
            attempt=dispatch.attempt,
            not_before=until,
            lease_until=self._terms.pickup_deadline(until),
            new_token=new_token(),
            keeping=self._executions.keeping(dispatch.execution_id),
        )
        self._executions.apply(dispatch.execution_id, requeue)

    def _set_aside(self, dispatch: Dispatch, error: Exception, now: datetime) -> Outcome:
        """The task made the worker raise before the attempt began: it is set aside
        (ERROR with the reason, and the run slot freed if this execution holds it:
        nothing else would free it), and this execution is recorded SKIPPED with the
        reason, so that its owner sees both and the batch goes on (decision 0021)."""
        if isinstance(error, UnreadableTaskError):
            reason = str(error)
        else:
            reason = f"running execution {dispatch.execution_id} raised {reason_of(error)}"
        logger.warning(
            "task set aside by the worker",
            extra={"task_id": dispatch.task_id, "reason": reason},
            exc_info=error,
        )
        if task_changes.set_aside_by_id(
            self._tasks, dispatch.task_id, reason, now, release_slot_of=dispatch.execution_id
        ):
            self._metrics.task_set_aside()
        lease_token = new_token()
        begun = attempts.begin(
            self._executions,
            dispatch,
            now=now,
            lease_until=now + self._terms.running,
            lease_token=lease_token,
            callback_digest=token_digest(new_token()),
            retry=RetryPolicy(),
            tenant_id=tenant_of(self._executions, dispatch),
        )
        if not begun.began or begun.current is None:
            return self._not_begun(begun.current)
        # No task to hand the end to: its slot was freed above, and a SKIPPED
        # execution starts no dependents.
        return self._outcomes.skipped(
            begun.current, lease_token, f"the task was set aside: {reason}", None
        )

    def _skip(self, begun: BeginResult, lease_token: str, task: Task | None) -> Outcome:
        """A message whose task was deleted, paused or set aside: the attempt begins
        and is SKIPPED at once, without a handler call."""
        if not begun.began or begun.current is None:
            return self._not_begun(begun.current)
        self._faults.reached(Boundary.WORKER_BEGAN)
        if task is None:
            return self._outcomes.skipped(
                begun.current, lease_token, "the task was deleted before this execution ran", task
            )
        # Sent before the pause (or before the task was set aside), or a dependent
        # of such a task: not run, and not lost from sight either. Resume applies
        # the catch-up policy.
        return self._outcomes.skipped(begun.current, lease_token, skipped_reason(task), task)

    def _call_handler(
        self,
        task: Task,
        dispatch: Dispatch,
        lease_token: str,
        callback_token: str,
        began_at: datetime,
        admitted: Pass | None,
    ) -> DeliveryResult:
        """The handler call, run by Powertools once the attempt has begun."""
        self._faults.reached(Boundary.WORKER_BEGAN)
        if self._notifications is not None:
            # The occurrence's on_late timer, if its task has one (decision 0057):
            # once its begin held, so a duplicate (refused) starts no second one.
            self._notifications.watch(task, dispatch)
        if dispatch.attempt == 1:
            lag = scheduling_lag(dispatch.scheduled_at, began_at)
            self._metrics.scheduling_lag(lag.total_seconds())
        with self._heartbeats.keeping(dispatch.execution_id, lease_token):
            # As late as possible: the slots must outlast the call itself.
            if self._limits is not None and admitted is not None:
                wait = self._limits.before_call(admitted)
                if wait is not None:
                    raise HeldBack(wait)
            called_at = self._clock.now()
            try:
                result = self._delivery.deliver(task, dispatch, callback_token)
            finally:
                duration = self._clock.now() - called_at
                self._metrics.handler_duration(duration.total_seconds())
            if self._limits is not None and admitted is not None:
                # The handler is done with this execution: the next one may call it
                # while this one's end is written (``report`` tells the breaker later).
                self._limits.release(admitted)
            return result

    def _not_begun(self, current: Execution | None) -> Outcome:
        """The message may not begin an attempt: a duplicate, or stale.

        Unless the execution is running under a lease the reaper does not watch:
        then this message (a redelivery of the one that began it, or a copy) is
        what guards it, and may only be deleted once the lease is taken over
        (it ran out: the worker died) or watched by the reaper (it is alive).
        """
        if (
            current is not None
            and current.status is ExecutionStatus.RUNNING
            and not current.lease_indexed
            and current.lease_token is not None
            and current.lease_until is not None
        ):
            if self._steps is not None:
                # As the reaper: no live lease looks expired for a step (decision 0037).
                now, cutoff = self._steps.abandoned_before(self._terms)
            else:
                now = self._clock.now()
                cutoff = self._terms.abandoned_before(now)
            if current.lease_until < cutoff:
                token = new_token()
                take_over = transitions.take_over(
                    current.lease_token,
                    cutoff=cutoff,
                    new_token=token,
                    lease_until=now + self._terms.running,
                    keeping=self._executions.keeping(current.execution_id),
                )
                if self._executions.apply(current.execution_id, take_over):
                    self._metrics.lease_reaped()
                    return self._outcomes.lease_ran_out(current, token)
            # Alive, or renewed just now: the reaper watches it from here on. If the
            # holder moved on instead, what it moved to is watched or final.
            keeping = self._executions.keeping(current.execution_id)
            hand_over = transitions.hand_to_reaper(current.lease_token, keeping=keeping)
            self._executions.apply(current.execution_id, hand_over)
        self._metrics.duplicate_suppressed()
        return Outcome.DUPLICATE

    def _report_limits(self, admitted: Pass | None, result: DeliveryResult | None) -> None:
        if self._limits is not None and admitted is not None:
            self._limits.report(admitted, result)

    def _record(
        self,
        records: AttemptRecords,
        execution: Execution,
        lease_token: str,
        result: DeliveryResult,
        guarded: GuardedResult,
        task: Task,
    ) -> Outcome | PendingEnd:
        """Write what the handler call came to, under the attempt's lease token."""
        if guarded.replayed or guarded.in_progress:
            self._metrics.duplicate_suppressed()
        if guarded.in_progress:
            # A worker that died mid-call left its in-progress record: this attempt
            # waits for it to expire instead of failing (the handler never ran).
            return self._outcomes.postpone(
                execution, lease_token, self._handler_calls.in_progress_limit_seconds
            )
        if records.succeeded is not None:
            # The batch's ends save it (``end_each``).
            return PendingEnd(records, execution, lease_token, task, records.succeeded)
        if records.success_saved:
            # Saving the success ended the attempt, unless the lease was lost.
            ended = records.ended
            return self._outcomes.follow_through(ended) if ended else Outcome.LEASE_LOST
        if result.answer is HandlerAnswer.SUCCEEDED:
            # Replayed: a late worker saved this success after its lease was taken
            # over. The task as read before the call: a slot is named before the send.
            return self._outcomes.succeeded(execution, lease_token, result.summary, task)
        if result.answer is HandlerAnswer.ACCEPTED:
            accepted_at = self._clock.now()
            renew = transitions.renew(
                lease_token,
                accepted_at + (result.hold_for or self._terms.awaiting_callback),
                accepted_at=accepted_at,
                # A long job: listed across its tenant's tasks while it runs.
                attention=Attention(execution.tenant_id, accepted_at),
                keeping=self._executions.keeping(execution.execution_id),
                run_arn=result.run_arn,
            )
            waiting = self._executions.apply(execution.execution_id, renew)
            return Outcome.ACCEPTED if waiting else Outcome.LEASE_LOST
        failure = result.failure or AttemptFailure("the handler failed")
        return self._outcomes.failed(execution, lease_token, failure)
