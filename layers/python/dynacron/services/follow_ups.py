"""What the end of an execution owes: its dependents started, its task's run slot freed.

It runs under the follow-up lease the end keeps, and again by the reaper if the
finisher died, so everything here is safe to repeat. Why, in docs/decisions/:
0010-overlap-and-execution-follow-ups.md, 0012-dependencies.md and
0021-setting-aside-poison-work.md (an unreadable dependent is set aside alone).
"""

from __future__ import annotations

import dataclasses
import logging
from datetime import datetime, timedelta

from dynacron.domain.clock import Clock
from dynacron.domain.conditions import Transition
from dynacron.domain.executions import transitions
from dynacron.domain.executions.execution import (
    Dispatch,
    Execution,
    ExecutionStatus,
    LeaseTerms,
    ResultSummary,
    Upstream,
    new_token,
)
from dynacron.domain.instants import to_utc_ms
from dynacron.domain.schedules.expressions import FixedDelaySchedule
from dynacron.domain.tasks import fan_in
from dynacron.domain.tasks import transitions as task_transitions
from dynacron.domain.tasks.task import (
    Sharding,
    Task,
    TaskStatus,
    UpstreamEnd,
    downstream_execution_id,
    execution_id_for,
    skipped_reason,
)
from dynacron.ports import DispatchQueue, ExecutionStore, TaskStore
from dynacron.ports.metrics import Metrics
from dynacron.ports.tasks import UnreadableTaskError
from dynacron.services import task_changes
from dynacron.services.notifications import TaskNotifications

logger = logging.getLogger("dynacron")

# Version races on one task are short-lived (a tick's claim, an API change);
# after this many the reaper's later pass finishes the job.
MAX_SLOT_ATTEMPTS = 5
# The ends a dependent may wait for (its ``when``, decision 0058).
UPSTREAM_ENDS = (ExecutionStatus.SUCCEEDED, ExecutionStatus.FAILED)
# A fan-in name younger than this is left, even for a task not (yet) found: its
# create or change marks the upstream first and writes the dependent a moment later.
FAN_IN_MARK_GRACE = timedelta(minutes=5)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunStarter:
    """Starts an execution that does not come from the tick: recorded first, then sent."""

    executions: ExecutionStore
    queue: DispatchQueue
    clock: Clock
    lease_terms: LeaseTerms

    def start(self, task: Task, dispatch: Dispatch) -> bool:
        """Queue ``dispatch``'s first attempt; False (and nothing sent) if its id exists."""
        created = self.executions.apply(dispatch.execution_id, self.queued(task, dispatch))
        if created:
            self.send(dispatch)
        return created

    def queued(self, task: Task, dispatch: Dispatch) -> Transition:
        """The write that records ``dispatch``'s first attempt (if its id is new), for
        a caller that carries it out with others (``TaskStore.record_change``), then
        ``send``s it. Its pickup deadline lets the reaper send it if that caller dies
        between the two."""
        return transitions.enqueue(
            dispatch,
            retry=task.retry,
            lease_until=self.lease_terms.pickup_deadline(self.clock.now()),
            lease_token=new_token(),
            tenant_id=task.tenant_id,
            keeping=self.executions.keeping(dispatch.execution_id),
        )

    def send(self, dispatch: Dispatch) -> None:
        """Send the recorded ``dispatch`` to the workers."""
        self.queue.send_later(dispatch, 0)


@dataclasses.dataclass(frozen=True, kw_only=True)
class FollowUps:
    """Does what an ended execution owes, repeatably; the finisher or the reaper calls it."""

    tasks: TaskStore
    executions: ExecutionStore
    starter: RunStarter
    sharding: Sharding
    clock: Clock
    metrics: Metrics | None = None
    # The task's notifications (decision 0057); None: this process sends none.
    notifications: TaskNotifications | None = None

    def owes(self, execution: Execution, task: Task | None) -> bool:
        """Whether ``execution``, ending now, owes anything: it holds ``task``'s run
        slot, or it succeeded or failed and some task runs after it. Most executions owe
        nothing, and their end then costs no follow-up lease."""
        if task is not None and task.running_execution == execution.execution_id:
            return True
        if self.notifications is not None and self.notifications.owes(execution, task):
            return True
        if execution.status not in UPSTREAM_ENDS:
            return False
        if task is not None and not task.has_dependents:
            return False
        if task is not None and task.fan_in_dependents:
            return True
        return bool(self.tasks.dependents(execution.task_id))

    def task_of(self, execution: Execution) -> Task | None:
        """``execution``'s task, for ``owes``; None if it was deleted."""
        return self.tasks.get(execution.task_id)

    def follow_up(self, execution: Execution) -> None:
        """Everything ``execution``'s end owes; repeatable."""
        if execution.status in UPSTREAM_ENDS:
            self._start_dependents(execution)
        task = self._free_slot(execution)
        # Only a task with notify is read again, to count the end (decision 0057).
        if self.notifications is not None and task is not None and task.notify.given:
            self.notifications.after_end(execution)

    def _dependent_ids(self, upstream_task_id: str) -> tuple[list[str], tuple[str, ...]]:
        """The tasks that may run after ``upstream_task_id``: those whose first upstream
        it is (the dependents index), and those that name it after another (fan-in,
        on its own record, decision 0058); and the latter alone."""
        try:
            upstream = self.tasks.get(upstream_task_id)
        except UnreadableTaskError:
            upstream = None  # its dependents, if any, are still in the index
        if upstream is not None and not upstream.has_dependents:
            return [], ()  # most ends: no index query
        ids = self.tasks.dependents(upstream_task_id)
        fan_in_ids = upstream.fan_in_dependents if upstream is not None else ()
        return list(dict.fromkeys([*ids, *fan_in_ids])), fan_in_ids

    def _unmark_strays(
        self, upstream_task_id: str, fan_in_ids: tuple[str, ...], dependents: list[Task]
    ) -> None:
        """Forget each fan-in name of the upstream whose task is gone or no longer
        follows it (a refused create, a change of ``after``, a delete):
        else every end of the upstream would owe a follow-up for it, for ever. One
        conditional write each, once; a mark newer than ``FAN_IN_MARK_GRACE`` stays,
        as its create may still be under way."""
        following = {
            task.task_id
            for task in dependents
            if upstream_task_id in getattr(task.schedule, "upstream_task_ids", ())
        }
        marked_before = self.clock.now() - FAN_IN_MARK_GRACE
        for stray in fan_in_ids:
            if stray not in following:
                unmark = task_transitions.unmark_fan_in_dependent(stray, marked_before)
                self.tasks.apply(upstream_task_id, unmark)

    def _start_dependents(self, upstream: Execution) -> None:
        ended_at = upstream.completed_at or self.clock.now()
        ids, fan_in_ids = self._dependent_ids(upstream.task_id)
        dependents, unreadable = self.tasks.read_many(ids)
        if fan_in_ids:
            unreadable_ids = {poison.task_id for poison in unreadable}
            kept = [i for i in fan_in_ids if i not in unreadable_ids]
            self._unmark_strays(upstream.task_id, tuple(kept), dependents)
        for poison in unreadable:
            logger.warning(
                "dependent task set aside",
                extra={"task_id": poison.task_id, "reason": poison.reason},
            )
            aside = task_changes.set_aside(self.tasks, poison, poison.reason, self.clock.now())
            if aside and self.metrics:
                self.metrics.task_set_aside()
        end = UpstreamEnd(ended_at, upstream.execution_id)
        firing = Upstream(
            upstream.execution_id, upstream.result or ResultSummary(), upstream.status.value
        )
        for task in dependents:
            # The index lags behind a PATCH of ``after``: each dependent decides.
            counted = self._counted(task, upstream, end)
            if counted is not None:
                self._run(counted, firing, ended_at)

    def _run(self, task: Task, firing: Upstream, ended_at: datetime) -> None:
        """Start the run of ``task`` that the end ``firing`` caused (recorded as
        skipped if the task is not active); repeatable, its id derived from the end."""
        execution_id = downstream_execution_id(task.task_id, firing.execution_id)
        if task.status is not TaskStatus.ACTIVE:
            skipped = transitions.record_skipped(
                task,
                execution_id,
                ended_at,
                skipped_reason(task),
                self.clock.now(),
                keeping=self.executions.keeping(execution_id),
            )
            self.executions.apply(execution_id, skipped)
            return
        self.starter.start(
            task,
            Dispatch(
                execution_id=execution_id,
                task_id=task.task_id,
                scheduled_at=ended_at,
                upstream=self._ends(task, firing),
            ),
        )

    def _make_sure_fired(self, task: Task) -> None:
        """Start ``task``'s last fan-in run if its finisher has not (it died): the
        write about to count the next end leaves nothing that says it is owed
        (``fan_in.unconfirmed_firing``). One read when it was started, as it nearly
        always was; nothing for a firing older than the executions' retention (its
        record may be gone because it ran)."""
        fired = fan_in.unconfirmed_firing(task)
        if fired is None:
            return
        execution_id = downstream_execution_id(task.task_id, fired.execution_id)
        retention = self.executions.keeping(execution_id).retention
        if self.clock.now() - fired.completed_at >= retention:
            return
        if self.executions.get(execution_id) is not None:
            return
        upstream = self.executions.get(fired.execution_id)
        firing = Upstream(
            fired.execution_id,
            (upstream.result if upstream is not None else None) or ResultSummary(),
            upstream.status.value if upstream is not None else None,
        )
        logger.warning(
            "fan-in run started for a finisher that died or is late",
            extra={"task_id": task.task_id, "execution_id": execution_id},
        )
        self._run(task, firing, fired.completed_at)

    def _ends(self, task: Task, firing: Upstream) -> Upstream:
        """What the run is told of the ends that started it: ``firing``'s, and for a
        fan-in the others of its set, each read from its execution record."""
        others: list[Upstream] = []
        ends = task.fan_in.ends if task.fan_in is not None else {}
        for upstream_id in getattr(task.schedule, "upstream_task_ids", ()):
            end = ends.get(upstream_id)
            if end is not None and end.execution_id != firing.execution_id:
                other = self.executions.get(end.execution_id)
                result = other.result if other is not None else None
                status = other.status.value if other is not None else None
                others.append(Upstream(end.execution_id, result or ResultSummary(), status))
        return dataclasses.replace(firing, others=tuple(others))

    def _counted(self, task: Task, upstream: Execution, end: UpstreamEnd) -> Task | None:
        """The dependent as written if ``upstream``'s end starts a run of ``task``
        (``domain.tasks.fan_in``), else None.
        A fan-in's progress is written with the version read; of two ends racing to
        complete its set, one write fires it and the other, read again, finds it
        fired. Raises after ``MAX_SLOT_ATTEMPTS`` lost races: the follow-up lease
        stays, and the reaper repeats it."""
        for _ in range(MAX_SLOT_ATTEMPTS):
            step = fan_in.on_upstream_end(task, upstream.task_id, end, upstream.status.value)
            if step.updated is None:
                return task if step.starts_run else None
            self._make_sure_fired(task)
            now = self.clock.now()
            placement = self.sharding.place_task(step.updated, now)
            if self.tasks.replace(step.updated, placement, task_transitions.replace(task.version)):
                return step.updated if step.starts_run else None
            reread = self.tasks.get(task.task_id)
            if reread is None:
                return None
            task = reread
        raise RuntimeError(
            f"fan-in of task {task.task_id!r}: lost {MAX_SLOT_ATTEMPTS} version races "
            f"recording {upstream.execution_id!r}; the reaper repeats the follow-up"
        )

    def _free_slot(self, execution: Execution) -> Task | None:
        """Let the task run its next scheduled occurrence, if this execution held the
        slot; the task as last read or written (None if it was deleted).

        buffer_one: the waiting occurrence is recorded and sent before the task names
        it as running, so the slot never points at an execution that does not exist.
        If that one already ended meanwhile (only after a crash here), it never freed
        the slot, so it is freed for it now. fixed_delay: the next run is filed
        ``delay`` after this one ended.
        """
        task = None
        for _ in range(MAX_SLOT_ATTEMPTS):
            task = self.tasks.get(execution.task_id)
            if task is None or task.running_execution != execution.execution_id:
                return task
            now = to_utc_ms(self.clock.now())
            if task.buffered_at is not None:
                promoted = self._promote_buffered(task, task.buffered_at, now)
                if promoted is None:
                    continue  # the task changed meanwhile: read it again
                if not (promoted.status.is_final and promoted.lease_token is None):
                    return task
                execution = promoted
                continue
            freed = self._freed(task, execution.completed_at or now, now)
            expected = task_transitions.replace(task.version)
            if self.tasks.replace(freed, self.sharding.place_task(freed, now), expected):
                return freed
        return task

    def _promote_buffered(
        self, task: Task, buffered_at: datetime, now: datetime
    ) -> Execution | None:
        """Start the waiting occurrence and give it the slot; None on a version race."""
        execution_id = execution_id_for(task.task_id, buffered_at)
        dispatch = Dispatch(
            execution_id=execution_id, task_id=task.task_id, scheduled_at=buffered_at
        )
        self.starter.start(task, dispatch)
        promoted = dataclasses.replace(
            task,
            running_execution=execution_id,
            buffered_at=None,
            version=task.version + 1,
            updated_at=now,
        )
        placement = self.sharding.place_task(promoted, now)
        if not self.tasks.replace(promoted, placement, task_transitions.replace(task.version)):
            return None
        return self.executions.get(execution_id)

    @staticmethod
    def _freed(task: Task, ended_at: datetime, now: datetime) -> Task:
        next_run_at = task.next_run_at
        status = task.status
        if isinstance(task.schedule, FixedDelaySchedule):
            next_run_at = task.schedule.next_after(ended_at)
            if next_run_at is None and status is TaskStatus.ACTIVE:
                status = TaskStatus.COMPLETED
        return dataclasses.replace(
            task,
            running_execution=None,
            next_run_at=next_run_at,
            status=status,
            version=task.version + 1,
            updated_at=now,
        )
