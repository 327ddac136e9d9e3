"""on_late timers (decision 0057) over every store: an occurrence's first attempt
starts one, timed from when it was due; a backfill's run, due long ago by choice,
starts none (else every backfilled occurrence would be late at once)."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from dynacron.domain.clock import SettableClock
from dynacron.domain.executions.execution import Dispatch
from dynacron.domain.executions.notifications import NotifySettings, NotifyTarget
from dynacron.domain.tasks.task import backfill_execution_id, execution_id_for
from dynacron.ports import AdapterSet
from dynacron.services.notifications import TaskNotifications
from tests.contract.builders import a_task

LATE = NotifySettings(on_late=NotifyTarget("http://127.0.0.1:9/late", within_seconds=60))


def test_a_backfill_run_starts_no_late_timer_and_a_past_due_occurrence_does(
    adapters: AdapterSet, clock: SettableClock
) -> None:
    # Given a task told when an occurrence is not done within 60 s, and an hour-old one
    task = dataclasses.replace(a_task("job"), notify=LATE)
    notifications = TaskNotifications(
        tasks=adapters.tasks, executions=adapters.executions, queue=adapters.queue, clock=clock
    )
    past = clock.now() - timedelta(hours=1)
    # When its backfill run is first attempted: no timer
    backfill = Dispatch(backfill_execution_id("job", past), "job", past)
    notifications.watch(task, backfill)
    assert adapters.queue.depth() == 0
    # When the occurrence's own run is (a catch-up after an outage): a timer, due now
    notifications.watch(task, Dispatch(execution_id_for("job", past), "job", past))
    assert adapters.queue.depth() == 1
