"""One tick on moto: a due task sent once and moved on, the shard's cursor over old
buckets, bounded pages, a crash between send and claim; the other files of this
folder hold the loop, its concurrency, policies, elastic capacity and races."""

from __future__ import annotations

import dataclasses
import json
from datetime import timedelta
from typing import Any

import pytest

from dynacron.adapters.aws.tasks import DynamoTaskStore
from dynacron.api.requests import TaskCreate
from dynacron.domain.clock import SettableClock
from dynacron.domain.conditions import Transition
from dynacron.domain.coordination.tenants import DEFAULT_TENANT
from dynacron.domain.tasks.history import TaskChange
from dynacron.domain.tasks.task import TaskStatus, execution_id_for, shard_for
from dynacron.entry.composition import Dynacron
from dynacron.local.chaos import InjectedCrash
from dynacron.services.tick import Ticker
from tests.contract import coordination_changes as changes

HOOK = "http://127.0.0.1:9/hook"


def register(system: Dynacron, **fields: Any) -> str:
    return system.task_service.register(
        DEFAULT_TENANT, TaskCreate(handler_url=HOOK, **fields).to_spec()
    ).task_id


def drain_queue(system: Dynacron, aws: tuple[Any, Any]) -> list[dict[str, Any]]:
    _, sqs = aws
    bodies = []
    while True:
        messages = sqs.receive_message(
            QueueUrl=system.settings.dispatch_queue_url, MaxNumberOfMessages=10
        ).get("Messages", [])
        if not messages:
            return bodies
        for message in messages:
            bodies.append(json.loads(message["Body"]))
            sqs.delete_message(
                QueueUrl=system.settings.dispatch_queue_url,
                ReceiptHandle=message["ReceiptHandle"],
            )


def test_a_due_task_is_sent_once_and_moved_to_its_next_occurrence(
    system: Dynacron, aws: tuple[Any, Any], clock: SettableClock
) -> None:
    task_id = register(system, rate="10 seconds")
    start = clock.now()
    clock.advance(timedelta(seconds=9))
    assert sum(r.claimed for r in system.ticker.tick()) == 0

    clock.advance(timedelta(seconds=1, milliseconds=300))
    assert sum(r.claimed for r in system.ticker.tick()) == 1
    assert sum(r.claimed for r in system.ticker.tick()) == 0  # already claimed

    (body,) = drain_queue(system, aws)
    assert body == {
        "execution_id": execution_id_for(task_id, start + timedelta(seconds=10)),
        "task_id": task_id,
        "scheduled_at": "2026-11-30T12:00:10.000Z",
        "attempt": 1,
        "tenant_id": "default",
    }
    task = system.tasks.get(task_id)
    assert task is not None
    assert task.next_run_at == start + timedelta(seconds=20)
    assert task.last_scheduled_at == start + timedelta(seconds=10)
    assert task.version == 2


def test_a_one_time_task_completes_and_leaves_the_due_index(
    system: Dynacron, aws: tuple[Any, Any], clock: SettableClock
) -> None:
    task_id = register(system, at="2026-11-30T12:00:05Z")
    clock.advance(timedelta(seconds=6))
    assert sum(r.claimed for r in system.ticker.tick()) == 1
    task = system.tasks.get(task_id)
    assert task is not None
    assert task.status is TaskStatus.COMPLETED
    assert task.next_run_at is None
    dynamodb, _ = aws
    index = dynamodb.scan(TableName=system.settings.tasks_table, IndexName="due-index")
    assert index["Count"] == 0
    clock.advance(timedelta(hours=2))
    assert sum(r.claimed for r in system.ticker.tick()) == 0
    assert len(drain_queue(system, aws)) == 1


def settle_cursors(system: Dynacron) -> None:
    """Tick until every shard's cursor has caught up with the present."""
    for _ in range(10):
        reports = system.ticker.tick()
        if all(r.cursor and r.cursor >= system.clock.now() - timedelta(hours=2) for r in reports):
            return
    raise AssertionError("cursors never caught up")


def test_a_shard_without_a_cursor_walks_back_through_old_buckets_to_the_present(
    system: Dynacron, aws: tuple[Any, Any], clock: SettableClock
) -> None:
    # Given shards that have no cursor yet (e.g. the shard count was raised)
    dynamodb, _ = aws
    for shard in range(system.settings.shard_count):
        dynamodb.delete_item(
            TableName=system.settings.coordination_table,
            Key={"key": {"S": f"tick-cursor#{shard}"}},
        )
    reports = system.ticker.tick()
    # A week of empty hourly buckets is walked a bounded number per tick (48
    # old ones and the newest 2, after the newest 2's on-time range).
    assert all(r.buckets_queried <= 52 for r in reports)
    settle_cursors(system)


def test_work_left_in_older_buckets_is_found_after_downtime(
    system: Dynacron, aws: tuple[Any, Any], clock: SettableClock
) -> None:
    # Given tasks due over the next three hours, and a scheduler that then goes down
    settle_cursors(system)
    ids = [register(system, at=f"2026-11-30T{12 + h}:30:00Z") for h in range(3)]
    clock.advance(timedelta(hours=5))
    # When it comes back, one tick finds every one of them, bucket by bucket
    reports = system.ticker.tick()
    assert sum(r.claimed for r in reports) == 3
    assert {b["task_id"] for b in drain_queue(system, aws)} == set(ids)
    # And each cursor moved past the drained buckets, up to the last settled one
    for report in reports:
        assert report.cursor == clock.now() - timedelta(hours=1)


def test_a_long_backlog_never_moves_the_cursor_over_unqueried_buckets(
    system: Dynacron, aws: tuple[Any, Any], clock: SettableClock
) -> None:
    settle_cursors(system)
    task_id = register(system, at="2026-12-03T12:30:00Z")  # 72 buckets ahead
    clock.advance(timedelta(days=4, minutes=30))  # 96 buckets behind, walked 48 a tick
    claimed = [sum(r.claimed for r in system.ticker.tick()) for _ in range(3)]
    assert sum(claimed) == 1
    assert [b["task_id"] for b in drain_queue(system, aws)] == [task_id]


def test_missed_recurring_occurrences_run_once_and_rejoin_the_grid(
    system: Dynacron, aws: tuple[Any, Any], clock: SettableClock
) -> None:
    task_id = register(system, cron="*/5 * * * *")
    clock.advance(timedelta(hours=1, minutes=2))
    assert sum(r.claimed for r in system.ticker.tick()) == 1
    task = system.tasks.get(task_id)
    assert task is not None
    assert task.next_run_at == clock.now().replace(minute=5, second=0)
    assert len(drain_queue(system, aws)) == 1


def test_tick_reads_only_what_is_due_however_many_tasks_exist(
    system: Dynacron, clock: SettableClock
) -> None:
    for _ in range(150):
        register(system, rate="1 day")
    due = register(system, rate="10 seconds")
    clock.advance(timedelta(seconds=10))
    reports = system.ticker.tick()
    assert sum(r.candidates for r in reports) == 1
    assert sum(r.claimed for r in reports) == 1
    assert system.tasks.get(due) is not None


def test_a_large_due_set_is_taken_in_bounded_pages_and_budgets(
    system: Dynacron, aws: tuple[Any, Any], clock: SettableClock
) -> None:
    bounded = Ticker(
        tasks=system.tasks,
        executions=system.executions,
        queue=system.queue,
        cursors=system.cursors,
        settings=dataclasses.replace(
            system.settings, tick_page_size=7, tick_max_claims=40
        ).tick_settings,
        clock=clock,
    )
    for _ in range(120):
        register(system, at="2026-11-30T12:00:01Z")
    clock.advance(timedelta(seconds=2))
    per_tick = [sum(r.claimed for r in bounded.tick()) for _ in range(4)]
    # Each shard stops at its budget; what is left is taken by the next ticks.
    assert sum(per_tick) == 120
    assert max(per_tick) <= 40 * system.settings.shard_count
    assert per_tick[-1] == 0
    assert len({b["execution_id"] for b in drain_queue(system, aws)}) == 120


class CrashBeforeClaim(DynamoTaskStore):
    """Fault injection: the process dies after sending and before claiming (a crash,
    not an exception: one raised by a task's claim would set that task aside)."""

    def apply(self, task_id: str, transition: Transition, change: TaskChange | None = None) -> bool:
        if transition.move == "claim":
            raise InjectedCrash("process killed")
        return super().apply(task_id, transition, change)


def test_a_crash_between_send_and_claim_loses_nothing(
    system: Dynacron, aws: tuple[Any, Any], clock: SettableClock
) -> None:
    task_id = register(system, rate="1 minute")
    clock.advance(timedelta(minutes=1))
    crashing = Ticker(
        tasks=CrashBeforeClaim(aws[0], system.settings.tasks_table),
        executions=system.executions,
        queue=system.queue,
        cursors=system.cursors,
        settings=system.settings.tick_settings,
        clock=clock,
    )
    with pytest.raises(InjectedCrash):
        crashing.tick()
    # The occurrence was sent but not claimed: the next tick sends it again.
    assert sum(r.claimed for r in system.ticker.tick()) == 1
    bodies = drain_queue(system, aws)
    assert len(bodies) == 2
    assert {b["execution_id"] for b in bodies} == {
        execution_id_for(task_id, clock.now().replace(second=0))
    }


def test_a_paused_task_is_not_dispatched(
    system: Dynacron, aws: tuple[Any, Any], clock: SettableClock
) -> None:
    task_id = register(system, rate="10 seconds")
    dynamodb, _ = aws
    dynamodb.update_item(
        TableName=system.settings.tasks_table,
        Key={"task_id": {"S": task_id}},
        UpdateExpression="SET #s = :paused",
        ExpressionAttributeNames={"#s": "status"},
        ExpressionAttributeValues={":paused": {"S": "PAUSED"}},
    )
    clock.advance(timedelta(seconds=30))
    assert sum(r.claimed for r in system.ticker.tick()) == 0
    assert drain_queue(system, aws) == []


def test_a_cursor_ahead_of_the_clock_still_lets_the_present_be_queried(
    system: Dynacron, aws: tuple[Any, Any], clock: SettableClock
) -> None:
    # Given a cursor moved ahead by a ticker whose clock runs fast
    for shard in range(system.settings.shard_count):
        changes.advance(system.cursors, shard, clock.now() + timedelta(hours=3))
    register(system, rate="10 seconds")
    clock.advance(timedelta(seconds=10))
    # Then a tick on the true time still finds what is due now
    assert sum(r.claimed for r in system.ticker.tick()) == 1


def test_a_smaller_shard_count_ticks_the_dropped_shards_with_the_ones_it_keeps(
    system: Dynacron, aws: tuple[Any, Any], clock: SettableClock
) -> None:
    dynamodb, sqs = aws
    # Given tasks registered and ticked while the stack ran with 6 shards
    wide = Dynacron(
        dataclasses.replace(system.settings, shard_count=6),
        dynamodb=dynamodb,
        sqs=sqs,
        clock=clock,
    )
    ids = [register(wide, rate="1 minute") for _ in range(30)]
    wide.ticker.tick()
    assert {shard_for(task_id, 6) for task_id in ids} >= {2, 3, 4, 5}
    # When it runs with 2 (the system's count), past every task's next occurrence
    clock.advance(timedelta(minutes=1, seconds=1))
    reports = system.ticker.tick()
    # Then each kept shard ticked the dropped shards of its residue too, and every
    # task fired once
    assert (system.ticker.adopted(0), system.ticker.adopted(1)) == ([2, 4], [3, 5])
    assert sum(r.claimed for r in reports) == 30
    assert sorted(body["task_id"] for body in drain_queue(system, aws)) == sorted(ids)
    # And each next occurrence is filed in the 2 shards: the dropped ones empty out
    items = dynamodb.scan(TableName=system.settings.tasks_table)["Items"]
    filed = {item["task_id"]["S"]: item["due_bucket"]["S"] for item in items}
    assert {filed[task_id].rsplit("#", 1)[1] for task_id in ids} == {"0", "1"}
    assert all(filed[t].endswith(f"#{shard_for(t, 2)}") for t in ids)


def test_a_shard_count_never_lowered_adopts_nothing(system: Dynacron, clock: SettableClock) -> None:
    system.ticker.tick()
    assert [system.ticker.adopted(shard) for shard in range(2)] == [[], []]
