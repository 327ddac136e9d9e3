"""The reaper: executions whose lease ran out are made to move again.

An execution holds a lease while something is owed to it: a queued attempt must
start, a running attempt must heartbeat or finish, a dead letter's copy must reach
the dead-letter queue. The reaper watches the leases that no SQS message guards
(a running attempt begun from a message is recovered by that message coming back:
decision 0015). It asks the sparse lease index for leases that
ended more than the clock-skew margin ago (a query per shard, never a Scan), and
for each one takes the lease over with a conditional write on the token it saw.
A worker that renews or finishes first makes that write fail, and the reaper
leaves the execution alone; if the reaper wins, the worker's writes fail instead.

Then, by status:

- RUNNING: the attempt failed (a 202 handler never called back, or the worker
  died after a copy of its message handed the lease over); it is retried after
  its backoff, or dead-lettered;
- QUEUED: the attempt's message never started (lost in a crash); it is sent again;
- FAILED: the dead-letter copy was never sent; it is sent now (and the run slot freed);
- SUCCEEDED or SKIPPED: what its end owed (dependents, the run slot; see
  ``follow_ups``) may not have happened; it is done now.

A lease whose handling raises (its task cannot be read, its fixed delay overflows
a date) would raise again every run, and stop the sweep at that lease each time.
It is set aside instead: out of the lease index, the reason on the execution, and
its task ERROR with the reason (its run slot freed if this execution held it,
since nothing else ever will). The sweep goes on. Infrastructure errors still end
the run: the next one tries again. See decision 0021.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from dynacron.domain.clock import Clock
from dynacron.domain.executions import transitions
from dynacron.domain.executions.execution import ExecutionStatus, LeaseTerms, new_token
from dynacron.domain.tasks.task import task_id_of
from dynacron.ports import DispatchQueue, ExecutionStore, StoreUnavailable, TaskStore, reason_of
from dynacron.ports.faults import NO_FAULTS, Boundary, Faults
from dynacron.ports.metrics import Metrics
from dynacron.services.outcomes import AttemptOutcomes, Outcome

logger = logging.getLogger("dynacron")


@dataclass
class ReapReport:
    expired: int = 0
    reaped: int = 0
    lost_races: int = 0
    # Leases whose handling raised, taken out of the lease index.
    set_aside: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)

    def add(self, outcome: str) -> None:
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1


@dataclass(frozen=True, kw_only=True)
class Reaper:
    executions: ExecutionStore
    queue: DispatchQueue
    outcomes: AttemptOutcomes
    metrics: Metrics
    clock: Clock
    lease_terms: LeaseTerms
    max_per_run: int = 1000
    faults: Faults = NO_FAULTS
    tasks: TaskStore | None = None

    def reap(self) -> ReapReport:
        report = ReapReport()
        for shard in range(self.executions.lease_shards):
            budget = self.max_per_run - report.expired
            if budget <= 0:
                break
            now = self.clock.now()
            cutoff = self.lease_terms.abandoned_before(now)
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
            if self.tasks is not None and self.tasks.set_aside_by_id(
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
        now = self.clock.now()
        cutoff = self.lease_terms.abandoned_before(now)
        execution = self.executions.get(execution_id)
        if (
            execution is None
            or execution.lease_token is None
            or execution.lease_until is None
            or execution.lease_until >= cutoff
        ):
            return  # the index lagged behind a renewal or a finish
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
