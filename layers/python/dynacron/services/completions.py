"""Completion tracking (decision 0049): a tracked Step Functions or ECS run's end
ends its execution, through the same outcomes a long job's ``complete`` callback
uses.

Its end arrives as an EventBridge state-change event (``on_event``), at least once
and in any order: an event for an ended execution, another attempt or another
resource changes nothing. If it never arrives, the tracked lease runs out and the
reaper asks ``overdue``: the run is described once, as the task's role; still
running, the lease is extended by ``CHECK_AFTER``; ended, the execution ends as
it did.

Local mode's emulator emits no events: there ``look_at_running`` describes the
running tracked runs every few seconds and feeds each end it finds to ``ended``,
the path an event takes. Deployed, nothing polls: the events end the runs.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from typing import Any

from dynacron.domain.clock import Clock
from dynacron.domain.errors import ExecutionNotFound
from dynacron.domain.executions import transitions
from dynacron.domain.executions.completion import (
    CHECK_AFTER,
    RunEnd,
    RunMissing,
    StillRunning,
    run_end_of_event,
)
from dynacron.domain.executions.execution import Execution, ExecutionStatus, ResultSummary
from dynacron.domain.executions.retry import AttemptFailure
from dynacron.ports import ExecutionStore, TaskStore
from dynacron.ports.runs import RunDescriber, RunDescriptionFailed
from dynacron.services.outcomes import AttemptOutcomes, Outcome

logger = logging.getLogger("dynacron")

# A tracked lease ends at most ``CHECK_AFTER`` from its last renewal: every running
# tracked run's lease ends before now plus this.
_EVERY_TRACKED_LEASE = CHECK_AFTER + timedelta(minutes=5)


class Tracked(StrEnum):
    """What one event or one overdue check came to, besides an attempt's outcome."""

    # The event reports no end, or names no run dynacron started.
    NOT_AN_END = "NOT_AN_END"
    # No such execution, or it ended, or it is at another attempt, or its task's
    # target does not name the event's resource: a repeat, a late or a foreign event.
    STALE = "STALE"
    STILL_RUNNING = "STILL_RUNNING"
    # The service could not say; asked again after ``CHECK_AFTER``.
    ASK_AGAIN = "ASK_AGAIN"
    # Not described this reaper run (its describes were used up): the lease stays
    # overdue, and the next run looks at it first.
    DEFERRED = "DEFERRED"


@dataclass(frozen=True, kw_only=True)
class CompletionTracker:
    """Ends tracked executions when their runs end."""

    executions: ExecutionStore
    tasks: TaskStore
    outcomes: AttemptOutcomes
    clock: Clock
    describer: RunDescriber | None = None

    def on_event(self, event: Mapping[str, Any]) -> str:
        """One EventBridge state-change event; says what it came to."""
        end = run_end_of_event(event)
        if end is None:
            return Tracked.NOT_AN_END
        return self.ended(end)

    def ended(self, end: RunEnd) -> str:
        """A run's end: its execution ends SUCCEEDED or FAILED (retried by the task's
        policy), if the run is its current attempt's."""
        try:
            execution = self.executions.get(end.execution_id)
        except (ExecutionNotFound, ValueError):
            execution = None
        if execution is None or not self._waiting(execution, end.attempt):
            return Tracked.STALE
        # Only the run the attempt started: on a shared state machine or cluster,
        # an event forged for it, or another run named like it, ends nothing.
        # (An attempt accepted before run ARNs were recorded has none to compare.)
        if execution.run_arn is not None and end.run_arn != execution.run_arn:
            return Tracked.STALE
        task = self.tasks.get(execution.task_id)
        target = task.target if task is not None else None
        if target is None or not target.tracked or target.arn != end.resource_arn:
            return Tracked.STALE
        return self._end(execution, end)

    def look_at_running(self, limit: int = 100) -> list[str]:
        """Describe the running tracked runs (at most ``limit`` leases looked at a
        shard) and end the executions of those that ended, as their events would:
        local mode's stand-in for the events its emulator never emits. Says what
        each ended run came to."""
        if self.describer is None:
            return []
        said: list[str] = []
        horizon = self.clock.now() + _EVERY_TRACKED_LEASE
        for shard in range(self.executions.lease_shards):
            for execution_id in self.executions.expired_leases(shard, horizon, limit):
                execution = self.executions.get(execution_id)
                if execution is None or not self._waiting(execution, execution.attempt):
                    continue
                task = self.tasks.get(execution.task_id)
                if task is None or task.target is None or not task.target.tracked:
                    continue
                try:
                    state = self.describer.describe(task, execution)
                except RunDescriptionFailed as error:
                    logger.info(
                        "tracked run not described; looked at again",
                        extra={"execution_id": execution_id, "reason": error.reason},
                    )
                    continue
                if isinstance(state, RunEnd):
                    said.append(self.ended(state))
        return said

    def overdue(self, execution: Execution, *, describe: bool = True) -> str | None:
        """The reaper found ``execution``'s lease run out: if it is a tracked run's,
        describe the run and act on it (``DEFERRED`` and nothing changed when not
        ``describe``); None if it is not (the reaper goes on)."""
        if self.describer is None or execution.accepted_at is None:
            return None
        if execution.status is not ExecutionStatus.RUNNING or execution.lease_token is None:
            return None
        task = self.tasks.get(execution.task_id)
        if task is None or task.target is None or not task.target.tracked:
            return None
        if not describe:
            return Tracked.DEFERRED
        try:
            state = self.describer.describe(task, execution)
        except RunDescriptionFailed as error:
            if not error.retryable:
                failure = AttemptFailure(
                    f"the run's end never arrived and describing it was refused: {error.reason}"
                )
                return self.outcomes.failed(execution, execution.lease_token, failure)
            logger.warning(
                "tracked run not described",
                extra={"execution_id": execution.execution_id, "reason": error.reason},
            )
            return self._extend(execution, Tracked.ASK_AGAIN)
        if isinstance(state, StillRunning):
            return self._extend(execution, Tracked.STILL_RUNNING)
        if isinstance(state, RunMissing):
            failure = AttemptFailure(f"the run's end never arrived and it is gone: {state.reason}")
            return self.outcomes.failed(execution, execution.lease_token, failure)
        return self._end(execution, state)

    def _waiting(self, execution: Execution, attempt: int) -> bool:
        return (
            execution.status is ExecutionStatus.RUNNING
            and execution.lease_token is not None
            and execution.accepted_at is not None
            and execution.attempt == attempt
        )

    def _end(self, execution: Execution, end: RunEnd) -> str:
        assert execution.lease_token is not None
        if end.succeeded:
            outcome = self.outcomes.succeeded(
                execution, execution.lease_token, ResultSummary(None, end.said)
            )
        else:
            outcome = self.outcomes.failed(
                execution, execution.lease_token, AttemptFailure(end.said)
            )
        # LEASE_LOST: a copy of this event, or the reaper, ended it first.
        return Tracked.STALE if outcome is Outcome.LEASE_LOST else outcome

    def _extend(self, execution: Execution, said: Tracked) -> str:
        assert execution.lease_token is not None
        renew = transitions.renew(
            execution.lease_token,
            self.clock.now() + CHECK_AFTER,
            keeping=self.executions.keeping(execution.execution_id),
        )
        return said if self.executions.apply(execution.execution_id, renew) else Tracked.STALE
