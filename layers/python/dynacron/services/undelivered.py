"""Dispatch messages SQS gave up on before their attempt began, settled by what their
execution's record says: recorded as a dead letter, taken over or handed to the
reaper as a redelivery would, or done with (``Settled``). Only an infrastructure
error fails a message here. Why, in docs/decisions/: 0022-dead-letters-before-begin.md
and 0021-setting-aside-poison-work.md.
"""

from __future__ import annotations

import dataclasses
import logging
from datetime import datetime
from enum import StrEnum

from dynacron.domain.clock import Clock
from dynacron.domain.errors import DynacronError
from dynacron.domain.executions import dead_letters, transitions
from dynacron.domain.executions.execution import (
    Dispatch,
    Execution,
    ExecutionStatus,
    LeaseTerms,
    new_token,
)
from dynacron.domain.executions.retry import RetryPolicy
from dynacron.domain.tasks.task import Task, task_id_of
from dynacron.ports import (
    DeadLetterQueue,
    ExecutionStore,
    StoreUnavailable,
    TaskStore,
    UnreadableTaskError,
    reason_of,
)
from dynacron.ports.faults import NO_FAULTS, Boundary, Faults
from dynacron.ports.messages import DecodeDispatch
from dynacron.ports.metrics import Metrics
from dynacron.services import task_changes
from dynacron.services.attempts import tenant_of
from dynacron.services.clock_steps import ClockSteps
from dynacron.services.outcomes import AttemptOutcomes

logger = logging.getLogger("dynacron")


class Settled(StrEnum):
    """How one undelivered message was settled."""

    # Recorded as a dead letter (listed, redrivable) and its slot freed.
    DEAD_LETTERED = "DEAD_LETTERED"
    # The message guarded a running attempt: taken over, or handed to the reaper.
    TAKEN_OVER = "TAKEN_OVER"
    WATCHED = "WATCHED"
    # The execution moved on without this message; nothing to do.
    MOVED_ON = "MOVED_ON"
    # No record and no task: nobody is owed a run or a dead letter.
    TASK_DELETED = "TASK_DELETED"
    # Not a dispatch: passed on to the dead-letter queue as it was.
    FORWARDED = "FORWARDED"
    # Settling it raised (not an infrastructure error): its task was set aside.
    SET_ASIDE = "SET_ASIDE"


NOT_A_DISPATCH = "an undelivered message that is not a dispatch"


def never_began(receives: int) -> str:
    """The dead letter's reason, as ``GET /dead-letters`` shows it."""
    return (
        f"never began: the dispatch message was received {receives} times without "
        "starting (a worker crash, timeout or error before the attempt began)"
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class UndeliveredDispatches:
    """Settles the undelivered queue's messages; raises only ``StoreUnavailable``."""

    tasks: TaskStore
    executions: ExecutionStore
    outcomes: AttemptOutcomes
    dead_letter_queue: DeadLetterQueue
    metrics: Metrics
    clock: Clock
    lease_terms: LeaseTerms
    max_receive_count: int
    decode: DecodeDispatch
    faults: Faults = NO_FAULTS
    # As the reaper's: no live lease looks expired for a forward step (decision 0037).
    steps: ClockSteps | None = None

    @property
    def _reason(self) -> str:
        return never_began(self.max_receive_count)

    def settle_message(self, body: str) -> Settled:
        """Settle one message of the undelivered queue, whatever its body."""
        try:
            dispatch = self.decode(body)
            if task_id_of(dispatch.execution_id) != dispatch.task_id:
                raise ValueError("the execution id is not one of the task's")
        except (ValueError, KeyError, TypeError, AttributeError, DynacronError):
            self.dead_letter_queue.forward(body, NOT_A_DISPATCH)
            return Settled.FORWARDED
        try:
            return self.settle(dispatch)
        except StoreUnavailable:
            raise
        except Exception as error:
            return self._set_aside(dispatch, error)

    def _set_aside(self, dispatch: Dispatch, error: Exception) -> Settled:
        """Settling ``dispatch`` raised: its task pays, not this queue (decision 0021)."""
        logger.warning(
            "settling an undelivered dispatch raised: its task is set aside",
            extra={"execution_id": dispatch.execution_id, "reason": reason_of(error)},
            exc_info=error,
        )
        reason = f"settling undelivered execution {dispatch.execution_id} raised {reason_of(error)}"
        try:
            if task_changes.set_aside_by_id(
                self.tasks,
                dispatch.task_id,
                reason,
                self.clock.now(),
                release_slot_of=dispatch.execution_id,
            ):
                self.metrics.task_set_aside()
        except StoreUnavailable:
            raise
        except Exception:
            logger.exception("could not set the task aside", extra={"task_id": dispatch.task_id})
        return Settled.SET_ASIDE

    def settle(self, dispatch: Dispatch) -> Settled:
        """Make sure the undelivered ``dispatch`` is seen: see the module's docstring.
        Raises only on infrastructure errors (the message is then read again)."""
        current = self.executions.get(dispatch.execution_id)
        if current is None:
            return self._record(dispatch)
        if (
            current.status is ExecutionStatus.QUEUED
            and current.attempt == dispatch.attempt
            and current.lease_token is not None
        ):
            return self._dead_letter_undelivered(current, current.lease_token)
        if (
            current.status is ExecutionStatus.RUNNING
            and not current.lease_indexed
            and current.lease_token is not None
            and current.lease_until is not None
        ):
            return self._guarded(current, current.lease_token)
        return Settled.MOVED_ON

    def _record(self, dispatch: Dispatch) -> Settled:
        now = self.clock.now()
        try:
            task: Task | None = self.tasks.get(dispatch.task_id)
        except UnreadableTaskError as error:
            if task_changes.set_aside_by_id(
                self.tasks, dispatch.task_id, str(error), now, release_slot_of=dispatch.execution_id
            ):
                self.metrics.task_set_aside()
            return self._record_unreadable(dispatch, str(error))
        if task is None:
            logger.warning(
                "an undelivered dispatch of a deleted task is dropped",
                extra={"execution_id": dispatch.execution_id},
            )
            return Settled.TASK_DELETED
        token = new_token()
        undelivered = dead_letters.record_undelivered(
            dispatch,
            now=now,
            error=self._reason,
            retry=task.retry,
            tenant_id=task.tenant_id,
            lease_until=now + self.lease_terms.running,
            lease_token=token,
            keeping=self.executions.keeping(dispatch.execution_id),
        )
        if not self.executions.apply(dispatch.execution_id, undelivered):
            # Recorded meanwhile: by a copy of this message that began, or by an
            # earlier reading of this one (whose copy the reaper sends if need be).
            return Settled.MOVED_ON
        self.faults.reached(Boundary.DEAD_LETTER_RECORDED_NOT_SENT)
        failed = _never_began(dispatch, now, self._reason, task.retry, task.tenant_id)
        self.outcomes.send_dead_letter_copy(failed, self._reason, token)
        self.metrics.dead_lettered()
        return Settled.DEAD_LETTERED

    def _record_unreadable(self, dispatch: Dispatch, why: str) -> Settled:
        """As ``_record``, for a task that cannot be read and was just set aside: the
        slot was freed by that write, so only the copy is owed. A redrive after the
        owner fixed the task (PATCH) runs it."""
        now = self.clock.now()
        token = new_token()
        reason = f"{self._reason}; the task was set aside: {why}"
        tenant_id = tenant_of(self.executions, dispatch)
        undelivered = dead_letters.record_undelivered(
            dispatch,
            now=now,
            error=reason,
            retry=RetryPolicy(),
            tenant_id=tenant_id,
            lease_until=now + self.lease_terms.running,
            lease_token=token,
            keeping=self.executions.keeping(dispatch.execution_id),
        )
        if not self.executions.apply(dispatch.execution_id, undelivered):
            return Settled.MOVED_ON
        self.faults.reached(Boundary.DEAD_LETTER_RECORDED_NOT_SENT)
        failed = _never_began(dispatch, now, reason, RetryPolicy(), tenant_id)
        self.dead_letter_queue.send(failed.as_dispatch(), reason)
        self.executions.apply(dispatch.execution_id, transitions.release(token))
        self.metrics.dead_lettered()
        return Settled.DEAD_LETTERED

    def _dead_letter_undelivered(self, queued: Execution, seen_token: str) -> Settled:
        now = self.clock.now()
        token = new_token()
        dead_letter = dead_letters.dead_letter_undelivered(
            seen_token,
            attempt=queued.attempt,
            now=now,
            error=self._reason,
            lease_until=now + self.lease_terms.running,
            new_token=token,
            tenant_id=queued.tenant_id,
            keeping=self.executions.keeping(queued.execution_id),
        )
        if not self.executions.apply(queued.execution_id, dead_letter):
            return Settled.MOVED_ON
        self.faults.reached(Boundary.DEAD_LETTER_RECORDED_NOT_SENT)
        failed = dataclasses.replace(
            queued,
            status=ExecutionStatus.FAILED,
            completed_at=now,
            error=self._reason,
            next_attempt_at=None,
        )
        self.outcomes.send_dead_letter_copy(failed, self._reason, token)
        self.metrics.dead_lettered()
        return Settled.DEAD_LETTERED

    def _guarded(self, running: Execution, seen_token: str) -> Settled:
        """The worker's rule for a message that comes back to its running attempt
        (``ExecutionRunner._not_begun``): take a lease that ran out over, else let the
        reaper watch it. Either way the lease is indexed before the message goes."""
        assert running.lease_until is not None
        if self.steps is not None:
            now, cutoff = self.steps.abandoned_before(self.lease_terms)
        else:
            now = self.clock.now()
            cutoff = self.lease_terms.abandoned_before(now)
        if running.lease_until < cutoff:
            token = new_token()
            take_over = transitions.take_over(
                seen_token,
                cutoff=cutoff,
                new_token=token,
                lease_until=now + self.lease_terms.running,
                keeping=self.executions.keeping(running.execution_id),
            )
            if self.executions.apply(running.execution_id, take_over):
                self.metrics.lease_reaped()
                self.outcomes.lease_ran_out(running, token)
                return Settled.TAKEN_OVER
        keeping = self.executions.keeping(running.execution_id)
        self.executions.apply(
            running.execution_id, transitions.hand_to_reaper(seen_token, keeping=keeping)
        )
        return Settled.WATCHED


def _never_began(
    dispatch: Dispatch, now: datetime, reason: str, retry: RetryPolicy, tenant_id: str
) -> Execution:
    """The dead letter of a dispatch that never began, as ``record_undelivered`` stored it."""
    return Execution(
        execution_id=dispatch.execution_id,
        task_id=dispatch.task_id,
        scheduled_at=dispatch.scheduled_at,
        status=ExecutionStatus.FAILED,
        attempt=dispatch.attempt,
        first_attempt=dispatch.attempt,
        completed_at=now,
        error=reason,
        retry=retry,
        upstream=dispatch.upstream,
        tenant_id=tenant_id,
    )
