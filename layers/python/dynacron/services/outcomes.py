"""How an attempt ends: recorded once, the same way by the worker, the reaper and the API.

Every write here is guarded by the lease token of the attempt, so whoever loses a
race (a late worker against the reaper, a callback against a timeout) learns it
from a failed condition and changes nothing.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum

from dynacron.domain.clock import Clock
from dynacron.domain.conditions import Transition
from dynacron.domain.executions import dead_letters, transitions
from dynacron.domain.executions.attention import Attention
from dynacron.domain.executions.execution import (
    Dispatch,
    Execution,
    ExecutionStatus,
    HandlerCallRecord,
    LeaseTerms,
    ResultSummary,
    new_token,
)
from dynacron.domain.executions.retry import AttemptFailure, decide
from dynacron.domain.instants import format_instant
from dynacron.domain.tasks.task import Task
from dynacron.ports import DeadLetterQueue, DispatchQueue, ExecutionStore
from dynacron.ports.faults import NO_FAULTS, Boundary, Faults
from dynacron.ports.metrics import Metrics
from dynacron.services.follow_ups import FollowUps


class Outcome(StrEnum):
    """What became of one message or attempt: the worker's, the reaper's and the API's answer."""

    SUCCEEDED = "SUCCEEDED"
    ACCEPTED = "ACCEPTED"
    RETRY_SCHEDULED = "RETRY_SCHEDULED"
    DEAD_LETTERED = "DEAD_LETTERED"
    SKIPPED = "SKIPPED"
    # The message had nothing left to do: a duplicate, or a stale attempt.
    DUPLICATE = "DUPLICATE"
    # The message arrived before its attempt was due and was sent on.
    DEFERRED = "DEFERRED"
    # A limit, an open breaker or a paused host: sent on to wait; no attempt used.
    WAITING = "WAITING"
    # Another call of the handler was still in progress: the same attempt, later.
    POSTPONED = "POSTPONED"
    # Someone else (the reaper, a callback) acted on the execution first.
    LEASE_LOST = "LEASE_LOST"


@dataclass(frozen=True)
class Ended:
    """An attempt's end, written: what remains is what the end owes, if anything."""

    execution: Execution
    follow_up_token: str | None

    @property
    def outcome(self) -> Outcome:
        """The execution's final status, as an outcome."""
        return Outcome(self.execution.status.value)


@dataclass(frozen=True)
class Ending:
    """An attempt's end before it is written: the write, and what it ends as."""

    finish: Transition
    ended: Ended


class Unread:
    """The task was not read by the caller: ``AttemptOutcomes`` reads it."""


UNREAD = Unread()


@dataclass(frozen=True, kw_only=True)
class AttemptOutcomes:
    """Ends attempts under their lease token: success, failure (retry or dead letter),
    a lease run out, a postponement; a refused write changes nothing."""

    executions: ExecutionStore
    queue: DispatchQueue
    dead_letter_queue: DeadLetterQueue
    metrics: Metrics
    clock: Clock
    lease_terms: LeaseTerms
    follow_ups: FollowUps
    faults: Faults = NO_FAULTS

    def succeeded(
        self,
        execution: Execution,
        lease_token: str,
        result: ResultSummary | None = None,
        task: Task | Unread | None = UNREAD,
    ) -> Outcome:
        """SUCCEEDED; ``task`` is the task as the worker read it, if it did."""
        ending = self.ending(execution, lease_token, ExecutionStatus.SUCCEEDED, task, result=result)
        return self._end_and_follow_through(ending)

    def skipped(
        self, execution: Execution, lease_token: str, reason: str, task: Task | None
    ) -> Outcome:
        """A running attempt that must not call its handler (the task was deleted or paused)."""
        ending = self.ending(execution, lease_token, ExecutionStatus.SKIPPED, task, error=reason)
        return self._end_and_follow_through(ending)

    def _end_and_follow_through(self, ending: Ending) -> Outcome:
        ended = self.end(ending)
        return self.follow_through(ended) if ended else Outcome.LEASE_LOST

    def end(self, ending: Ending) -> Ended | None:
        """Carry out ``ending``, the end's one write; None if the lease was lost.
        ``follow_through`` does what the end owes."""
        execution_id = ending.ended.execution.execution_id
        return self.ended(ending, self.executions.apply(execution_id, ending.finish))

    def ending(
        self,
        execution: Execution,
        lease_token: str,
        status: ExecutionStatus,
        task: Task | Unread | None,
        *,
        error: str | None = None,
        result: ResultSummary | None = None,
        call: HandlerCallRecord | None = None,
    ) -> Ending:
        """The end's write (with ``call``, the handler's success saved in it too), to be
        carried out (``end``; a worker's batch carries out its records' in one call)
        and then told to ``ended``."""
        now = self.clock.now()
        ended = dataclasses.replace(
            execution, status=status, completed_at=now, error=error, result=result
        )
        if isinstance(task, Unread):
            task = self.follow_ups.task_of(execution)
        follow_up_token = new_token() if self.follow_ups.owes(ended, task) else None
        finish = transitions.finish(
            lease_token,
            status,
            now,
            follow_up_token=follow_up_token,
            follow_up_until=now + self.lease_terms.running,
            error=error,
            result=result,
            call=call,
            keeping=self.executions.keeping(execution.execution_id),
        )
        return Ending(finish, Ended(ended, follow_up_token))

    def ended(self, ending: Ending, held: bool) -> Ended | None:
        """What an end's write came to (``held``: it was written); None if the lease was lost."""
        if not held:
            return None
        self.metrics.execution_ended(ending.ended.execution.status.value)
        return ending.ended

    def follow_through(self, ended: Ended) -> Outcome:
        """Do what ``ended`` owes, if anything, and say what it came to."""
        if ended.follow_up_token is not None:
            self.faults.reached(Boundary.ENDED_NOT_FOLLOWED_UP)
            self.follow_up(ended.execution, ended.follow_up_token)
        return ended.outcome

    def follow_up(self, execution: Execution, lease_token: str) -> None:
        """Do what an ended execution owes, then drop the lease that guaranteed it."""
        self.follow_ups.follow_up(execution)
        self.executions.apply(execution.execution_id, transitions.release(lease_token))

    def failed(self, execution: Execution, lease_token: str, failure: AttemptFailure) -> Outcome:
        """A failed attempt: the next one queued after its backoff, or a dead letter."""
        self.metrics.attempt_failed()
        decision = decide(
            execution.retry,
            failure,
            execution_id=execution.execution_id,
            attempt=execution.attempt,
            attempts_used=execution.attempts_used,
        )
        if decision.retry_in_seconds is None:
            return self._dead_letter(execution, lease_token, f"{failure.error} ({decision.reason})")
        if not self._queue_attempt(
            execution, lease_token, execution.attempt + 1, decision.retry_in_seconds, failure.error
        ):
            return Outcome.LEASE_LOST
        self.metrics.retry_scheduled()
        return Outcome.RETRY_SCHEDULED

    def lease_ran_out(self, execution: Execution, lease_token: str) -> Outcome:
        """A running attempt whose lease ran out, taken over with ``lease_token``: it
        failed (its worker died, or a 202 handler never called back)."""
        lease_end = format_instant(execution.lease_until) if execution.lease_until else "?"
        waiting = "a callback" if execution.accepted_at else "a heartbeat"
        failure = AttemptFailure(f"the lease ran out at {lease_end} without {waiting}")
        notifications = self.follow_ups.notifications
        if notifications is not None:
            # Before the failure is written: a crash in between leaves the lease to
            # run out again, and this to be done again (decision 0057).
            notifications.watch_again(execution)
        return self.failed(execution, lease_token, failure)

    def postpone(self, execution: Execution, lease_token: str, delay_seconds: float) -> Outcome:
        """Run the same attempt again later; it did not fail, it could not start yet."""
        if not self._queue_attempt(execution, lease_token, execution.attempt, delay_seconds):
            return Outcome.LEASE_LOST
        return Outcome.POSTPONED

    def _queue_attempt(
        self,
        execution: Execution,
        lease_token: str,
        attempt: int,
        delay_seconds: float,
        error: str | None = None,
    ) -> bool:
        now = self.clock.now()
        due = now + timedelta(seconds=delay_seconds)
        # Recorded before it is sent: if the sender dies in between, the queued
        # attempt's lease runs out and the reaper sends it.
        requeue = transitions.requeue(
            lease_token,
            expected=ExecutionStatus.RUNNING,
            attempt=attempt,
            not_before=due,
            lease_until=self.lease_terms.pickup_deadline(due),
            new_token=new_token(),
            error=error,
            # A failed attempt waits for a retry: listed across its tenant's tasks.
            attention=Attention(execution.tenant_id, now) if error is not None else None,
            keeping=self.executions.keeping(execution.execution_id),
        )
        if not self.executions.apply(execution.execution_id, requeue):
            return False
        self.faults.reached(Boundary.RETRY_RECORDED_NOT_SENT)
        self.queue.send_later(
            Dispatch(
                execution_id=execution.execution_id,
                task_id=execution.task_id,
                scheduled_at=execution.scheduled_at,
                attempt=attempt,
                not_before=due,
                upstream=execution.upstream,
                tenant_id=execution.tenant_id,
            ),
            delay_seconds,
        )
        return True

    def _dead_letter(self, execution: Execution, lease_token: str, error: str) -> Outcome:
        now = self.clock.now()
        chore_token = new_token()
        dead_letter = dead_letters.dead_letter(
            lease_token,
            now=now,
            error=error,
            lease_until=now + self.lease_terms.running,
            new_token=chore_token,
            tenant_id=execution.tenant_id,
            keeping=self.executions.keeping(execution.execution_id),
        )
        if not self.executions.apply(execution.execution_id, dead_letter):
            return Outcome.LEASE_LOST
        self.faults.reached(Boundary.DEAD_LETTER_RECORDED_NOT_SENT)
        failed = dataclasses.replace(execution, status=ExecutionStatus.FAILED, completed_at=now)
        self.send_dead_letter_copy(failed, error, chore_token)
        self.metrics.dead_lettered()
        return Outcome.DEAD_LETTERED

    def send_dead_letter_copy(self, execution: Execution, error: str, lease_token: str) -> None:
        """Free what the failed execution held, put the copy in the dead-letter queue,
        then drop the lease that guaranteed both."""
        self.follow_ups.follow_up(execution)
        self.dead_letter_queue.send(execution.as_dispatch(), error)
        self.executions.apply(execution.execution_id, transitions.release(lease_token))
