"""Notifications per task (decision 0057): decided when an execution's end is
followed up, sent as messages on the dispatch queue, delivered by a worker.

``TaskNotifications`` runs in the follow-up of an execution's end, under the
follow-up lease that the reaper takes over if the finisher dies: it puts each
notice on the queue *before* it stores the task's new notification state, so a
crash in between sends the notice again rather than never (at least once), and
the state's ``counted`` (the ends it last counted) makes a repeat of an end count
nothing twice.
``NotificationDeliveries`` is the worker's side: one attempt per message, a
failed one sent again after a backoff, never touching the execution it reports.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from datetime import datetime

from dynacron.domain.clock import Clock
from dynacron.domain.executions.execution import Dispatch, Execution, ExecutionStatus
from dynacron.domain.executions.notifications import (
    Ending,
    LateCheck,
    Notice,
    NotificationMessage,
    NotificationState,
    decide,
    ending_of,
    late_check,
    state_to_map,
)
from dynacron.domain.tasks import transitions as task_transitions
from dynacron.domain.tasks.task import Task, is_backfill
from dynacron.ports import DispatchQueue, ExecutionStore, TaskStore
from dynacron.ports.delivery import Notifier

logger = logging.getLogger("dynacron")

# Version races on one task are short-lived (a claim, an API change).
MAX_RECORD_ATTEMPTS = 5
# A notification is tried this many times in all, the waits between growing from
# ``FIRST_RETRY_SECONDS`` fourfold, at most SQS's 15 minutes: about half an hour.
MAX_NOTIFY_ATTEMPTS = 6
FIRST_RETRY_SECONDS = 10
MAX_RETRY_SECONDS = 900


def retry_delay_seconds(attempt: int) -> int:
    """The wait after the failed ``attempt`` (1, 2, ...)."""
    return int(min(MAX_RETRY_SECONDS, FIRST_RETRY_SECONDS * 4 ** (attempt - 1)))


def _same_counts(before: NotificationState, after: NotificationState) -> bool:
    return dataclasses.replace(after, counted=before.counted) == before


@dataclass(frozen=True, kw_only=True)
class TaskNotifications:
    """What an execution's end sends, sent and counted; repeatable."""

    tasks: TaskStore
    executions: ExecutionStore
    queue: DispatchQueue
    clock: Clock

    def owes(self, execution: Execution, task: Task | None) -> bool:
        """Whether ``execution``'s end, for ``task`` as read, sends a notice or changes
        what its notifications counted. A task without ``notify``, or a success of
        one that has not been failing, owes nothing: its end costs nothing more."""
        if task is None or not task.notify.watches_ends:
            return False
        ending = ending_of(execution.status.value)
        if ending is None:
            return False
        state = task.notification_state
        decision = decide(task.notify, state, ending, self.clock.now(), execution.scheduled_at)
        return bool(decision.notices) or not _same_counts(state, decision.state)

    def after_end(self, execution: Execution) -> None:
        """Send what ``execution``'s end owes its task's notifications, then store
        the task's new notification state (conditional on the version read)."""
        ending = ending_of(execution.status.value)
        if ending is None:
            return
        subject = _Subject(
            execution.execution_id,
            execution.scheduled_at,
            execution.status.value,
            execution.error,
        )
        self._count(execution.task_id, subject, execution.execution_id, ending)

    def watch(self, task: Task, dispatch: Dispatch) -> None:
        """Start the on_late timer of ``dispatch``'s occurrence, if its task has one:
        at its first attempt only (a repeat of it is counted once, on arrival). A
        backfill's run has none: its occurrence is past by choice, and timed from it
        every one would be late at once."""
        if dispatch.attempt != 1 or task.notify.on_late is None:
            return
        if is_backfill(dispatch.execution_id):
            return
        check = late_check(task.notify, task.task_id, dispatch.execution_id, dispatch.scheduled_at)
        if check is not None:
            delay = (check.due_at - self.clock.now()).total_seconds()
            self.queue.send_late_check(check, max(0.0, delay))

    def watch_again(self, execution: Execution) -> None:
        """Start the on_late timer of a first attempt taken over once its lease ran
        out: its worker may have died between the begin and ``watch``. A timer that
        did start runs twice and is counted once (``LateCheck.counted_as``); only a
        lost first attempt pays the task's read."""
        if execution.attempt != 1:
            return
        task = self.tasks.get(execution.task_id)
        if task is not None:
            self.watch(task, execution.as_dispatch())

    def check_late(self, check: LateCheck) -> None:
        """An on_late timer ran out: nothing if its execution succeeded, else one
        (rate-limited) on_late notice. One that arrives early (a wait longer than a
        queue's delay) is sent on for the rest."""
        now = self.clock.now()
        if check.due_at > now:
            self.queue.send_late_check(check, (check.due_at - now).total_seconds())
            return
        execution = self.executions.get(check.execution_id)
        if execution is not None and execution.status is ExecutionStatus.SUCCEEDED:
            return
        subject = _Subject(
            check.execution_id,
            check.scheduled_at,
            execution.status.value if execution is not None else NOT_STARTED,
            execution.error if execution is not None else None,
        )
        self._count(check.task_id, subject, check.counted_as, Ending.LATE)

    def _count(self, task_id: str, subject: _Subject, counted_as: str, ending: Ending) -> None:
        for _ in range(MAX_RECORD_ATTEMPTS):
            task = self.tasks.get(task_id)
            if task is None or not task.notify.given:
                return
            if self._counted(task, subject, counted_as, ending):
                return

    def _counted(self, task: Task, subject: _Subject, counted_as: str, ending: Ending) -> bool:
        """One try: True once ``subject`` is counted (or needs no counting)."""
        state = task.notification_state
        if state.has_counted(counted_as):
            return True  # a repeat (the reaper's follow-up, a message twice): counted already
        now = self.clock.now()
        decision = decide(task.notify, state, ending, now, subject.scheduled_at)
        if not decision.notices and _same_counts(state, decision.state):
            return True
        if decision.notices:
            error = subject.error
            if error is None and ending is Ending.DEAD_LETTERED:
                # The dead letter's follow-up is handed the execution without its error.
                stored = self.executions.get(subject.execution_id)
                error = stored.error if stored is not None else None
            for notice in decision.notices:
                self.queue.send_notification(_message(task, subject, notice, error, now), 0)
        new_state = decision.state.counting(counted_as)
        record = task_transitions.record_notifications(task.version, state_to_map(new_state))
        return self.tasks.apply(task.task_id, record)


# The status a late notice reports for an occurrence whose execution has no record.
NOT_STARTED = "NOT_STARTED"


@dataclass(frozen=True)
class _Subject:
    """The execution a notice is about."""

    execution_id: str
    scheduled_at: datetime
    status: str
    error: str | None


def _message(
    task: Task, subject: _Subject, notice: Notice, error: str | None, now: datetime
) -> NotificationMessage:
    return NotificationMessage(
        kind=notice.kind,
        url=notice.url,
        count=notice.count,
        task_id=task.task_id,
        task_name=task.name,
        tenant_id=task.tenant_id,
        execution_id=subject.execution_id,
        scheduled_at=subject.scheduled_at,
        status=subject.status,
        error=error,
        notified_at=now,
    )


@dataclass(frozen=True, kw_only=True)
class NotificationDeliveries:
    """The worker's side: deliver one notification message; a failed attempt is
    sent again after a backoff, until ``MAX_NOTIFY_ATTEMPTS``, then logged and dropped."""

    notifier: Notifier
    queue: DispatchQueue

    def send_back(self, message: NotificationMessage) -> None:
        """A message this invocation has no time for, sent again as it is (no attempt used)."""
        self.queue.send_notification(message, 0)

    def deliver(self, message: NotificationMessage) -> bool:
        """True if the receiver took it. Raises only if a retry could not be queued
        (the message then comes back, as any message a worker failed)."""
        sent = self.notifier.send(message)
        if sent.error is None:
            return True
        if not sent.retryable or message.attempt >= MAX_NOTIFY_ATTEMPTS:
            logger.warning(
                "notification given up",
                extra={
                    "task_id": message.task_id,
                    "notice_id": message.notice_id,
                    "attempt": message.attempt,
                    "error": sent.error,
                },
            )
            return False
        again = dataclasses.replace(message, attempt=message.attempt + 1)
        self.queue.send_notification(again, retry_delay_seconds(message.attempt))
        return False
