"""The reaper: executions whose lease ran out are taken over and made to move again.

It sweeps the lease index shard by shard, takes each expired lease over on the token
it saw, then acts by status: a RUNNING attempt failed, a QUEUED one is sent again, a
FAILED one's dead-letter copy is sent, an ended one's follow-ups are done; a lease
whose handling raises is set aside. Why, in docs/decisions/:
0008-lease-and-reaper-protocol.md, 0010-overlap-and-execution-follow-ups.md,
0015-message-guarded-leases.md and 0021-setting-aside-poison-work.md.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime

from dynacron.domain.clock import Clock
from dynacron.domain.executions import transitions
from dynacron.domain.executions.execution import ExecutionStatus, LeaseTerms, new_token
from dynacron.domain.tasks.task import task_id_of
from dynacron.ports import DispatchQueue, ExecutionStore, StoreUnavailable, TaskStore, reason_of
from dynacron.ports.faults import NO_FAULTS, Boundary, Faults
from dynacron.ports.metrics import Metrics
from dynacron.services import task_changes
from dynacron.services.clock_steps import ClockSteps
from dynacron.services.completions import CompletionTracker, Tracked
from dynacron.services.outcomes import AttemptOutcomes, Outcome

logger = logging.getLogger("dynacron")

# A reaper run describes at most this many overdue tracked runs (each an AssumeRole
# at worst and one or two calls, some 100 ms to seconds): the rest wait for the
# next run, first in the lease index, so a burst of lost events cannot hold one
# run past its timeout.
MAX_DESCRIBES_PER_RUN = 50


@dataclass
class ReapReport:
    """What one sweep did: leases found expired, taken over, lost to a race, set aside;
    and the outcomes of the attempts it ended, by name."""

    expired: int = 0
    reaped: int = 0
    lost_races: int = 0
    # Leases whose handling raised, taken out of the lease index.
    set_aside: int = 0
    # Tracked runs described (decision 0049), at most ``max_describes_per_run``.
    described: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)

    def add(self, outcome: str) -> None:
        """Count one attempt's ``outcome``."""
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1


@dataclass(frozen=True, kw_only=True)
class Reaper:
    """Takes over the expired leases of the lease index and makes their executions move."""

    executions: ExecutionStore
    queue: DispatchQueue
    outcomes: AttemptOutcomes
    metrics: Metrics
    clock: Clock
    lease_terms: LeaseTerms
    max_per_run: int = 1000
    faults: Faults = NO_FAULTS
    tasks: TaskStore | None = None
    # After a forward step of the wall clock, leases are measured as if it had not
    # happened until every live one was renewed since (decision 0037).
    steps: ClockSteps | None = None
    # A tracked run's lease running out means its end event is late or lost: the
    # run is described before the attempt is failed (decision 0049).
    completions: CompletionTracker | None = None
    max_describes_per_run: int = MAX_DESCRIBES_PER_RUN

    def _cutoff(self) -> tuple[datetime, datetime]:
        """Now, and the instant before which a lease ended is abandoned."""
        if self.steps is not None:
            return self.steps.abandoned_before(self.lease_terms)
        now = self.clock.now()
        return now, self.lease_terms.abandoned_before(now)

    def reap(self) -> ReapReport:
        """One sweep of the lease shards in turn, each earliest expiry first, at most
        ``max_per_run`` leases in all. Raises ``StoreUnavailable``, ending the sweep; anything else
        raised for one lease sets that lease aside and the sweep goes on."""
        report = ReapReport()
        for shard in range(self.executions.lease_shards):
            budget = self.max_per_run - report.expired
            if budget <= 0:
                break
            _, cutoff = self._cutoff()
            for execution_id in self.executions.expired_leases(shard, cutoff, budget):
                report.expired += 1
                try:
                    self._reap_one(execution_id, report)
                except StoreUnavailable:
                    raise
                except Exception as error:
                    self._set_aside(execution_id, error, report)
        return report

    def _set_aside(self, execution_id: str, error: Exception, report: ReapReport) -> None:
        """Take a lease whose handling raised out of the sweep, and tell its task's owner."""
        logger.warning(
            "expired lease set aside",
            extra={"execution_id": execution_id, "reason": reason_of(error)},
            exc_info=error,
        )
        now = self.clock.now()
        reason = f"handling its expired lease raised {reason_of(error)}"
        try:
            if self.executions.apply(execution_id, transitions.set_aside(reason, now)):
                report.set_aside += 1
                self.metrics.lease_set_aside()
            if self.tasks is not None and task_changes.set_aside_by_id(
                self.tasks,
                task_id_of(execution_id),
                f"the end of execution {execution_id} could not be handled: {reason_of(error)}",
                now,
                release_slot_of=execution_id,
            ):
                self.metrics.task_set_aside()
        except StoreUnavailable:
            raise
        except Exception:
            # Not even that (an id the index holds but no key can be made of): the
            # lease stays, and is met again next run; the sweep still goes on.
            logger.exception("could not set the lease aside", extra={"execution_id": execution_id})

    def _reap_one(self, execution_id: str, report: ReapReport) -> None:
        now, cutoff = self._cutoff()
        execution = self.executions.get(execution_id)
        if (
            execution is None
            or execution.lease_token is None
            or execution.lease_until is None
            or execution.lease_until >= cutoff
        ):
            return  # the index lagged behind a renewal or a finish
        if self.completions is not None:
            may_describe = report.described < self.max_describes_per_run
            tracked = self.completions.overdue(execution, describe=may_describe)
            if tracked is not None:
                if tracked != Tracked.DEFERRED:
                    report.described += 1
                report.add(tracked)
                return
        queued = execution.status is ExecutionStatus.QUEUED
        token = new_token()
        take_over = transitions.take_over(
            execution.lease_token,
            cutoff=cutoff,
            new_token=token,
            lease_until=self.lease_terms.pickup_deadline(now)
            if queued
            else now + self.lease_terms.running,
            keeping=self.executions.keeping(execution_id),
        )
        taken = self.executions.apply(execution_id, take_over)
        if not taken:
            report.lost_races += 1
            return
        report.reaped += 1
        self.metrics.lease_reaped()
        self.faults.reached(Boundary.REAPER_TOOK_OVER)
        if execution.status is ExecutionStatus.RUNNING:
            report.add(self.outcomes.lease_ran_out(execution, token))
        elif queued:
            self.queue.send_later(execution.as_dispatch(), 0)
            report.add("RESENT")
        elif execution.status is ExecutionStatus.FAILED:
            self.outcomes.send_dead_letter_copy(execution, execution.error or "", token)
            report.add(Outcome.DEAD_LETTERED)
        else:
            self.outcomes.follow_up(execution, token)
            report.add("FOLLOWED_UP")
