"""What keeps one attempt within its bounds while ``work.ExecutionRunner`` runs it:
the invocation's time for one more record, the handler-call record kept on the
execution item, the heartbeat that extends the lease, and the limit slot lost
just before the call."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta

from dynacron.domain.clock import Clock
from dynacron.domain.executions import call_records, transitions
from dynacron.domain.executions.execution import (
    Execution,
    ExecutionStatus,
    HandlerCallRecord,
    LeaseTerms,
)
from dynacron.domain.tasks.task import Task
from dynacron.ports import Applied, BeginResult, ExecutionStore
from dynacron.ports.faults import Boundary, Faults
from dynacron.ports.guards import AttemptRefused, RemainingTime
from dynacron.services.attempts import save_call
from dynacron.services.limits import Wait
from dynacron.services.outcomes import AttemptOutcomes, Ended

logger = logging.getLogger("dynacron")


class InvocationBudget:
    """Whether one invocation has time left to start one more record.

    One more record needs a whole handler call (its deadline) and ``margin`` to
    admit, begin and record it, counted from the moment it would start: records
    run at once (decision 0034) ask as each one starts, in the batch's order. The
    first record is always taken: an invocation too short for even one call is a
    misconfiguration, and returning everything would run nothing, for ever. Safe
    to ask from several threads.
    """

    def __init__(self, invocation: RemainingTime | None, call: timedelta, margin: timedelta):
        self._invocation = invocation
        self._needed_ms = (call + margin) / timedelta(milliseconds=1)
        self._lock = threading.Lock()
        self._taken = 0
        self._out_of_time = False

    def take_one(self) -> bool:
        """True if the next record may start now (and counts it); False: return it.
        Once False, False for the rest of the batch: no record starts after one that
        was given back, so none overtakes it."""
        invocation = self._invocation
        with self._lock:
            if self._taken and invocation is not None and not self._out_of_time:
                self._out_of_time = invocation.get_remaining_time_in_millis() < self._needed_ms
            if self._out_of_time:
                return False
            self._taken += 1
            return True


@dataclass(frozen=True)
class BatchBegin:
    """What a batch's begins (one ``ExecutionStore.apply_each``) came to for one
    attempt, begun with ``call``, its in-progress handler-call record."""

    answer: Applied | Exception
    call: HandlerCallRecord

    @property
    def queued(self) -> bool:
        """Refused because the execution waits QUEUED for an attempt (a retry): for
        ``attempts.begin`` to begin as it begins one."""
        answer = self.answer
        return (
            isinstance(answer, Applied)
            and not answer.held
            and answer.execution is not None
            and answer.execution.status is ExecutionStatus.QUEUED
        )

    def result(self) -> BeginResult:
        """As ``attempts.begin`` answers a new execution's begin; raises what the
        store raised for it."""
        if isinstance(self.answer, Exception):
            raise self.answer
        return BeginResult(self.answer.held, self.answer.execution)


class HeldBack(Exception):
    """A limit slot was lost before the call: carried out of the idempotent call,
    which deletes its in-progress record, so that the attempt can be postponed."""

    def __init__(self, wait: Wait) -> None:
        super().__init__(wait.reason)
        self.wait = wait


class AttemptRecords:
    """The execution item as the keeper of one attempt's handler-call record
    (``idempotency.CallRecords``, decision 0016).

    Saving the in-progress record is the write that begins the attempt (``begin``,
    refused for a duplicate or stale message); saving the success is the write that
    ends it, SUCCEEDED. If the lease was lost while the handler ran, the success is
    still kept, for the attempt that took over to replay.
    """

    def __init__(
        self,
        execution_id: str,
        *,
        begin: Callable[..., BeginResult],
        lease_token: str,
        task: Task,
        executions: ExecutionStore,
        outcomes: AttemptOutcomes,
        faults: Faults,
        began: BatchBegin | None = None,
        end_later: bool = False,
    ) -> None:
        self._execution_id = execution_id
        # The batch's begin of this attempt, written already (decision 0034); None:
        # the first save begins it.
        self._began = began
        # The success is saved by the batch's ends (``succeeded``), not here.
        self._end_later = end_later
        # The success to save, when the batch saves it.
        self.succeeded: HandlerCallRecord | None = None
        self._begin = begin
        self._lease_token = lease_token
        self._task = task
        self._executions = executions
        self._outcomes = outcomes
        self._faults = faults
        # The execution as this attempt began it; None until then.
        self.begun: Execution | None = None
        # Refused: the execution as it was, which says why.
        self.refused: Execution | None = None
        self.success_saved = False
        # The end written with the success; None if the lease was lost first.
        self.ended: Ended | None = None
        self._saved: HandlerCallRecord | None = None

    def save_in_progress(self, record: HandlerCallRecord, now_ms: int) -> HandlerCallRecord | None:
        """Begin the attempt with ``record`` (or, once begun, save it again): None, or
        the record that still counts; ``AttemptRefused`` when the message may not begin."""
        began, self._began = self._began, None
        if self.begun is None and began is not None and not began.queued:
            # Begun by the batch with the record it saved (the same but for the
            # milliseconds between the two).
            begun, record = began.result(), began.call
        elif self.begun is None:
            # A retry (QUEUED, not new) begins alone, as any attempt did before.
            begun = self._begin(call=record, call_now_ms=now_ms)
        else:  # Powertools asks again after a record expired meanwhile
            begun = save_call(
                self._executions, self._execution_id, self._lease_token, record, now_ms
            )
        if not begun.began or begun.current is None:
            self.refused = begun.current
            raise AttemptRefused
        self.begun = self.begun or begun.current
        if begun.held_call is None:
            self._saved = record
        return begun.held_call

    def save_success(self, record: HandlerCallRecord) -> None:
        """End the execution SUCCEEDED with ``record``, or keep the success for the
        attempt that took the lease over."""
        assert self.begun is not None
        if self._end_later:
            self.succeeded = record
            self.success_saved = True
            return
        ending = self._outcomes.ending(
            self.begun,
            self._lease_token,
            ExecutionStatus.SUCCEEDED,
            self._task,
            result=record.response,
            call=record,
        )
        self.ended = self._outcomes.end(ending)
        self.success_saved = True
        if self.ended is None:
            self.keep_success(record)

    def keep_success(self, record: HandlerCallRecord) -> None:
        """The end was refused: taken over while the handler ran. The success must not
        be lost, nor called again: the attempt that took over replays it."""
        self._executions.apply(self._execution_id, call_records.keep_call(record))
        self._faults.reached(Boundary.WORKER_OUTCOME_NOT_RECORDED)

    def delete(self) -> None:
        """Clear the in-progress record this attempt saved, if it saved one."""
        if self._saved is not None:
            clear = call_records.clear_call(self._saved.in_progress_until_ms)
            self._executions.apply(self._execution_id, clear)

    def load(self) -> HandlerCallRecord | None:
        """The handler-call record the execution holds now."""
        return self._executions.held_call(self._execution_id)


class Heartbeats:
    """Extends the running leases of one worker, each every ``heartbeat_interval``
    while its attempt is inside ``keeping()``, all from one thread.

    A renewal refused by its condition means the lease was lost (the reaper took
    it over): that lease is renewed no more, and the outcome write will be refused
    too. No lease is renewed once ``keeping()`` has returned. The thread starts
    with the first lease and ends after ``linger`` with none (a thread per
    attempt cost more than the rest of a fire's bookkeeping on the embedded store).
    """

    def __init__(
        self,
        executions: ExecutionStore,
        terms: LeaseTerms,
        clock: Clock,
        linger: float = 1.0,
    ) -> None:
        self._executions = executions
        self._terms = terms
        self._clock = clock
        self._linger = linger
        self._changed = threading.Condition()
        # (execution id, lease token) -> when its next renewal is due (monotonic).
        self._due: dict[tuple[str, str], float] = {}
        self._renewing: tuple[str, str] | None = None
        self._thread: threading.Thread | None = None
        # When the thread wakes next on its own (monotonic): a lease due later needs
        # no wake-up (with one interval for all, a new lease is never due first, so
        # a burst of attempts does not wake the thread once per attempt).
        self._wakes_at = 0.0

    @contextmanager
    def keeping(self, execution_id: str, lease_token: str) -> Iterator[None]:
        """Renew the lease while inside; on leaving, wait for a renewal under way."""
        lease = (execution_id, lease_token)
        interval = self._terms.heartbeat_interval.total_seconds()
        with self._changed:
            due = self._due[lease] = time.monotonic() + interval
            if self._thread is None:
                self._thread = threading.Thread(target=self._beat, name="heartbeats", daemon=True)
                self._wakes_at = due
                self._thread.start()
            elif due < self._wakes_at:
                self._changed.notify_all()
        try:
            yield
        finally:
            with self._changed:
                self._due.pop(lease, None)
                while self._renewing == lease:
                    self._changed.wait()

    def _next(self) -> tuple[str, str] | None:
        """The lease to renew now, once it is due; None: none left to keep."""
        with self._changed:
            while True:
                if not self._due:
                    self._wakes_at = time.monotonic() + self._linger
                    self._changed.wait(self._linger)
                    if not self._due:
                        self._thread = None
                        return None
                    continue
                lease, due = min(self._due.items(), key=lambda item: item[1])
                wait = due - time.monotonic()
                if wait <= 0:
                    self._due[lease] = due + self._terms.heartbeat_interval.total_seconds()
                    self._renewing = lease
                    return lease
                self._wakes_at = due
                self._changed.wait(wait)

    def _beat(self) -> None:
        while (lease := self._next()) is not None:
            execution_id, lease_token = lease
            renewed = True
            try:
                renew = transitions.renew(
                    lease_token,
                    self._clock.now() + self._terms.running,
                    keeping=self._executions.keeping(execution_id),
                )
                renewed = self._executions.apply(execution_id, renew)
            except Exception:
                logger.warning("heartbeat failed; trying again", exc_info=True)
            with self._changed:
                self._renewing = None
                if not renewed:
                    self._due.pop(lease, None)
                    logger.warning("lease lost", extra={"execution_id": execution_id})
                self._changed.notify_all()
