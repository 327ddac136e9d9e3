"""Catch-up, windows and jitter through the real tick, against moto."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from dynacron.api.requests import TaskCreate
from dynacron.domain.clock import SettableClock
from dynacron.domain.coordination.tenants import DEFAULT_TENANT
from dynacron.domain.executions.execution import Dispatch
from dynacron.domain.tasks.claiming import jitter_offset
from dynacron.domain.tasks.task import TaskStatus, execution_id_for
from dynacron.entry.composition import Dynacron
from tests.conftest import START
from tests.support import recording_ticker

HOOK = "http://127.0.0.1:9/hook"
MINUTE = timedelta(minutes=1)


def register(system: Dynacron, **fields: Any) -> str:
    return system.task_service.register(
        DEFAULT_TENANT, TaskCreate(handler_url=HOOK, **fields).to_spec()
    ).task_id


def queue_counts(system: Dynacron, aws: tuple[Any, Any]) -> tuple[int, int]:
    attributes = aws[1].get_queue_attributes(
        QueueUrl=system.settings.dispatch_queue_url, AttributeNames=["All"]
    )["Attributes"]
    return (
        int(attributes["ApproximateNumberOfMessages"]),
        int(attributes["ApproximateNumberOfMessagesDelayed"]),
    )


def test_run_all_sends_every_missed_occurrence_once_in_one_tick(
    system: Dynacron, aws: tuple[Any, Any], clock: SettableClock
) -> None:
    # Given an every-minute task with run_all, and a scheduler down for 30 minutes
    task_id = register(system, cron="* * * * *", catchup="run_all")
    # (and more claims per task and tick than the 10 of the default)
    ticker, queue = recording_ticker(system, tick_max_claims_per_task=30)
    clock.advance(timedelta(minutes=30, seconds=5))
    # When one tick runs
    reports = ticker.tick()
    # Then 12:01..12:30 are each sent once, with their own ids, and the task is
    # back on its grid at 12:31
    expected = [START + i * MINUTE for i in range(1, 31)]
    assert [d.scheduled_at for d in queue.accepted] == expected
    assert [d.execution_id for d in queue.accepted] == [
        execution_id_for(task_id, t) for t in expected
    ]
    assert sum(r.claimed for r in reports) == 30
    task = system.tasks.get(task_id)
    assert task is not None
    assert task.next_run_at == START + 31 * MINUTE
    assert sum(r.claimed for r in ticker.tick()) == 0


def test_run_all_drains_across_ticks_when_the_budget_runs_out(
    system: Dynacron, aws: tuple[Any, Any], clock: SettableClock
) -> None:
    task_id = register(system, cron="* * * * *", catchup="run_all")
    ticker, queue = recording_ticker(system, tick_max_claims=7)
    clock.advance(timedelta(minutes=30, seconds=5))
    per_tick = []
    for _ in range(6):
        per_tick.append(sum(r.claimed for r in ticker.tick()))
        clock.advance(timedelta(seconds=1))
    assert per_tick == [7, 7, 7, 7, 2, 0]
    sent = [d.scheduled_at for d in queue.accepted]
    assert sent == [START + i * MINUTE for i in range(1, 31)]
    task = system.tasks.get(task_id)
    assert task is not None
    assert task.next_run_at == START + 31 * MINUTE


def test_skip_sends_nothing_for_a_missed_occurrence(
    system: Dynacron, aws: tuple[Any, Any], clock: SettableClock
) -> None:
    task_id = register(system, cron="0 * * * *", catchup="skip")
    ticker, queue = recording_ticker(system)
    clock.advance(timedelta(hours=1, minutes=20))  # 13:00 missed by 20 minutes
    reports = ticker.tick()
    assert queue.accepted == []
    assert sum(r.rescheduled for r in reports) == 1
    task = system.tasks.get(task_id)
    assert task is not None
    assert task.next_run_at == START + timedelta(hours=2)
    assert task.last_scheduled_at is None
    clock.set(START + timedelta(hours=2, seconds=3))
    ticker.tick()
    assert [d.scheduled_at for d in queue.accepted] == [START + timedelta(hours=2)]


def test_end_at_completes_the_task_after_its_last_occurrence(
    system: Dynacron, aws: tuple[Any, Any], clock: SettableClock
) -> None:
    task_id = register(system, rate="1 hour", end_at="2026-11-30T14:30:00Z")
    ticker, queue = recording_ticker(system)
    for _ in range(4):
        clock.advance(timedelta(hours=1))
        ticker.tick()
    assert [d.scheduled_at for d in queue.accepted] == [
        START + timedelta(hours=1),
        START + timedelta(hours=2),
    ]
    task = system.tasks.get(task_id)
    assert task is not None
    assert task.status is TaskStatus.COMPLETED


def test_jitter_is_an_sqs_delay_that_keeps_time_and_id(
    system: Dynacron, aws: tuple[Any, Any], clock: SettableClock
) -> None:
    # Given tasks with up to 15 minutes of jitter, due now
    task_ids = [register(system, rate="1 minute", jitter_seconds=900) for _ in range(5)]
    ticker, queue = recording_ticker(system)
    clock.advance(MINUTE)
    ticker.tick()
    # Then each dispatch keeps its scheduled time and id, and is delayed by the
    # offset its execution id fixes
    scheduled = START + MINUTE
    expected = {
        execution_id_for(t, scheduled): jitter_offset(execution_id_for(t, scheduled), 900)
        for t in task_ids
    }
    assert {d.execution_id: d.delay_seconds for d in queue.accepted} == expected
    assert {d.scheduled_at for d in queue.accepted} == {scheduled}
    # And SQS holds the delayed ones back
    delayed = sum(1 for offset in expected.values() if offset > 0)
    assert queue_counts(system, aws) == (len(task_ids) - delayed, delayed)


def test_a_dispatch_with_a_delay_is_not_visible_at_once(
    system: Dynacron, aws: tuple[Any, Any]
) -> None:
    system.queue.send(
        [
            Dispatch(execution_id="t_1", task_id="t", scheduled_at=START, delay_seconds=60),
            Dispatch(execution_id="t_2", task_id="t", scheduled_at=START),
        ]
    )
    assert queue_counts(system, aws) == (1, 1)
