"""Hostile tenants against the tick's fairness, misfires and record lifetimes (issue 12).

Tenant A floods a shard with a resumed ``run_all`` backlog; tenant B's on-time
tasks in the same shard must not wait for it (finding 4). Lateness the scheduler
causes itself (pacing) must never turn into a missed occurrence (finding 6). A
backfilled or caught-up occurrence years old must not be written already expired
(finding 7). Everything runs the real tick and stores, with a clock the test
moves: against moto, or the embedded set where the test needs the tick alone.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from dynacron.api.requests import TaskCreate
from dynacron.domain.clock import SettableClock
from dynacron.domain.executions.execution import Dispatch, ExecutionStatus
from dynacron.domain.executions.retry import RetryPolicy
from dynacron.domain.instants import format_instant
from dynacron.domain.tasks.task import TaskStatus, execution_id_for
from dynacron.entry.composition import EXECUTION_RETENTION, Dynacron
from dynacron.entry.settings import LOOPBACK_NETWORKS
from dynacron.local.aws import provision
from dynacron.services.page_claimer import TickReport
from dynacron.services.tick import Ticker
from tests.conftest import sleep_moving
from tests.contract import changes, coordination_changes
from tests.support import recording_ticker

HOOK = "http://127.0.0.1:9/hook"
TENANT_A = "tenant-a"
TENANT_B = "tenant-b"
SECOND = timedelta(seconds=1)


@pytest.fixture
def one_shard(aws: tuple[Any, Any], clock: SettableClock) -> Dynacron:
    """A system whose every task lives in one shard, so tenants share it."""
    dynamodb, sqs = aws
    settings = provision(
        dynamodb,
        sqs,
        clock=clock,
        shard_count=1,
        delivery_allow_networks=LOOPBACK_NETWORKS,
        tick_concurrency=1,
    )
    return Dynacron(settings, dynamodb=dynamodb, sqs=sqs, clock=clock, sleep=sleep_moving(clock))


@pytest.fixture
def one_embedded_shard(embedded: Callable[..., Dynacron]) -> Dynacron:
    """The same on the embedded set: the flood tests need the tick, not AWS."""
    return embedded(shard_count=1, tick_concurrency=1)


def register(system: Dynacron, tenant_id: str, **fields: Any) -> str:
    return system.task_service.register(
        tenant_id, TaskCreate(handler_url=HOOK, **fields).to_spec()
    ).task_id


def tick(ticker: Ticker) -> TickReport:
    (report,) = ticker.tick()
    return report


def stored_expiry(aws: tuple[Any, Any], system: Dynacron, execution_id: str) -> datetime:
    item = aws[0].get_item(
        TableName=system.settings.executions_table,
        Key={
            "task_id": {"S": execution_id.rpartition("_")[0]},
            "execution_id": {"S": execution_id},
        },
        ConsistentRead=True,
    )["Item"]
    return datetime.fromtimestamp(int(item["expires_at"]["N"]), tz=UTC)


# Finding 4 -----------------------------------------------------------------------


def flood_and_on_time(
    system: Dynacron,
    ticker: Ticker,
    clock: SettableClock,
    *,
    with_flood: bool,
    flood_tasks: int = 100,
    on_time_tasks: int = 100,
) -> tuple[list[str], list[str], datetime]:
    """Tenant A's 100 per-second run_all tasks paused for a day and resumed (if
    ``with_flood``), and tenant B's 100 tasks due at the returned instant."""
    flood: list[str] = []
    if with_flood:
        flood = [
            register(system, TENANT_A, rate="1 second", catchup="run_all")
            for _ in range(flood_tasks)
        ]
        for task_id in flood:
            system.task_service.pause(TENANT_A, task_id, "paused for a day")
    # A day passes (the shard ticks now and then; nothing is due)
    for _ in range(24):
        clock.advance(timedelta(hours=1))
        tick(ticker)
    on_time = [register(system, TENANT_B, rate="1 minute") for _ in range(on_time_tasks)]
    for task_id in flood:
        system.task_service.resume(TENANT_A, task_id)
    clock.advance(timedelta(minutes=1))
    return flood, on_time, clock.now()


def test_a_resumed_run_all_flood_never_delays_what_is_due_now(
    one_embedded_shard: Dynacron, clock: SettableClock
) -> None:
    """Finding 4: 100 per-second run_all tasks resumed after a day's pause sorted
    first and took every claim of every tick (8.6 M occurrences ahead of everyone
    else); tenant B's on-time tasks in the same shard never fired."""
    system = one_embedded_shard
    # Given tenant A's flood and tenant B's 100 tasks, all due now, in one shard
    ticker, queue = recording_ticker(system, catchup_max_runs=5)
    flood, on_time, due = flood_and_on_time(system, ticker, clock, with_flood=True)
    # When one tick runs
    report = tick(ticker)
    # Then every one of B's tasks fired in it, on time, once, before any of A's
    sent_b = [d for d in queue.accepted if d.task_id in set(on_time)]
    assert sorted(d.task_id for d in sent_b) == sorted(on_time)
    assert {d.scheduled_at for d in sent_b} == {due}
    assert {(clock.now() - d.scheduled_at).total_seconds() for d in sent_b} == {0.0}
    assert [d.task_id in set(on_time) for d in queue.accepted[:100]] == [True] * 100
    # And A had at most its share of the tick: tick_max_claims_per_task each
    sent_a = [d for d in queue.accepted if d.task_id in set(flood)]
    per_task = system.settings.tick_max_claims_per_task
    assert sent_a  # A is served too, after B
    assert max(report.claims_by_task[t] for t in flood) <= per_task
    assert report.held_back > 0
    # And A's backlog is bounded: of a day of missed occurrences each task runs the
    # latest catchup_max_runs (5), from a minute and 5 s ago; the rest are skipped,
    # and one SKIPPED execution per task says so
    missed_run = [d for d in sent_a if d.scheduled_at < due - timedelta(seconds=60)]
    assert len(missed_run) == 5 * len(flood)
    assert min(d.scheduled_at for d in sent_a) == due - timedelta(seconds=65)
    assert report.catchup_cut == len(flood)
    cut = system.executions.list_for_task(flood[0], 200, None).items
    skipped = [e for e in cut if e.status is ExecutionStatus.SKIPPED]
    assert len(skipped) == 1
    assert "at most the latest 5" in (skipped[0].error or "")
    # And no occurrence was sent twice
    assert len({d.execution_id for d in queue.accepted}) == len(queue.accepted)


def test_on_time_lateness_is_the_same_with_and_without_a_flood(
    one_embedded_shard: Dynacron, clock: SettableClock
) -> None:
    """Finding 4: tenant B's lateness with tenant A's flood in the shard is no worse
    than without it (the injected clock: 0 s in both; figures in the report)."""
    system = one_embedded_shard
    ticker, queue = recording_ticker(system)
    _, on_time, due = flood_and_on_time(system, ticker, clock, with_flood=False)
    tick(ticker)
    alone = sorted((clock.now() - d.scheduled_at).total_seconds() for d in queue.accepted)
    assert len(alone) == len(on_time)
    assert alone == [0.0] * 100
    assert {d.scheduled_at for d in queue.accepted} == {due}


class SteppingClock(SettableClock):
    """Once ``stepping``, each reading moves it on by ``step``: a tick that takes time."""

    def __init__(self, start: datetime, step: timedelta) -> None:
        super().__init__(start)
        self.step = step
        self.stepping = False

    def now(self) -> datetime:
        current = super().now()
        if self.stepping:
            self.advance(self.step)
        return current


def test_a_backlog_is_worked_for_a_bounded_time_per_tick(
    aws: tuple[Any, Any], clock: SettableClock
) -> None:
    """Finding 4: a tick worked a backlog until its claim budget was spent (2,000
    claims, seconds against DynamoDB), so the next tick, and what is due in it,
    waited for the flood; now the backlog gets tick_backlog_seconds of each tick."""
    dynamodb, sqs = aws
    stepping = SteppingClock(clock.now(), step=timedelta(milliseconds=300))
    settings = provision(
        dynamodb,
        sqs,
        clock=stepping,
        shard_count=1,
        delivery_allow_networks=LOOPBACK_NETWORKS,
        tick_concurrency=1,
        tick_page_size=10,
    )
    system = Dynacron(settings, dynamodb=dynamodb, sqs=sqs, clock=stepping)
    ticker, queue = recording_ticker(system)
    # Given tenant A's 30 resumed per-second run_all tasks and B's 10 on-time ones
    flood, on_time, _ = flood_and_on_time(
        system, ticker, stepping, with_flood=True, flood_tasks=30, on_time_tasks=10
    )
    # When a tick runs whose every reading of the clock takes 0.3 s
    stepping.stepping = True
    report = tick(ticker)
    stepping.stepping = False
    # Then B's tasks were all sent first, and A's backlog stopped 0.8 s after the
    # tick began: three rounds of a page (10 claims each), not 10 claims of each
    # of A's 30 tasks
    assert {d.task_id for d in queue.accepted[:10]} == set(on_time)
    sent_a = [d for d in queue.accepted if d.task_id in set(flood)]
    assert len(sent_a) == 3 * 10
    assert report.claim_writes == 10 + 3 * 10


# Finding 6 -----------------------------------------------------------------------


def hourly_skip_task(
    system: Dynacron, ticker: Ticker, clock: SettableClock
) -> tuple[str, datetime]:
    """A catchup: skip task due in an hour; the shard ticks until 10 s before it."""
    task_id = register(system, TENANT_B, rate="1 hour", catchup="skip")
    due = clock.now() + timedelta(hours=1)
    for _ in range(6):
        clock.advance(timedelta(minutes=9, seconds=50))
        tick(ticker)
    clock.set(due - timedelta(seconds=10))
    tick(ticker)
    return task_id, due


def test_an_occurrence_held_back_by_pacing_runs_late_never_skipped(
    one_shard: Dynacron, aws: tuple[Any, Any], clock: SettableClock
) -> None:
    """Finding 6: an occurrence held back by dispatch pacing for 5 minutes was
    counted as missed, and a catchup: skip task dropped it silently."""
    system = one_shard
    ticker, queue = recording_ticker(system, max_queued_dispatches=1)
    task_id, due = hourly_skip_task(system, ticker, clock)
    # Given a full dispatch queue (pacing) while the shard keeps ticking
    sqs = aws[1]
    sqs.send_message(QueueUrl=system.settings.dispatch_queue_url, MessageBody="{}")
    for _ in range(31):
        clock.advance(timedelta(seconds=10))
        assert tick(ticker).claim_budget == 0
    # When the workers catch up, 5 minutes and 10 s after it was due
    sqs.purge_queue(QueueUrl=system.settings.dispatch_queue_url)
    report = tick(ticker)
    # Then it runs, late, once
    assert [d.execution_id for d in queue.accepted] == [execution_id_for(task_id, due)]
    assert report.lateness_seconds == [300.0]
    for _ in range(3):
        clock.advance(timedelta(seconds=10))
        tick(ticker)
    assert len(queue.accepted) == 1
    task = system.tasks.get(task_id)
    assert task is not None
    assert task.next_run_at == due + timedelta(hours=1)


def test_an_occurrence_due_in_a_real_outage_is_still_skipped(
    one_shard: Dynacron, aws: tuple[Any, Any], clock: SettableClock
) -> None:
    """Finding 6: downtime (no tick of the shard for 5 minutes) is still a misfire,
    and catchup: skip still skips it."""
    system = one_shard
    ticker, queue = recording_ticker(system)
    task_id, due = hourly_skip_task(system, ticker, clock)
    # Given no tick of the shard from 10 s before it was due until 5 minutes after
    clock.advance(timedelta(minutes=5, seconds=10))
    # When the scheduler comes back
    report = tick(ticker)
    # Then the occurrence was missed, and skip skips it
    assert queue.accepted == []
    assert report.rescheduled == 1
    task = system.tasks.get(task_id)
    assert task is not None
    assert task.status is TaskStatus.ACTIVE
    assert task.next_run_at == due + timedelta(hours=1)


def test_an_occurrence_due_while_its_task_was_paused_is_missed(
    one_shard: Dynacron, aws: tuple[Any, Any], clock: SettableClock
) -> None:
    """Finding 6: a pause is a misfire even though the shard kept ticking."""
    system = one_shard
    ticker, queue = recording_ticker(system)
    task_id, due = hourly_skip_task(system, ticker, clock)
    system.task_service.pause(TENANT_B, task_id, None)
    for _ in range(31):
        clock.advance(timedelta(seconds=10))
        tick(ticker)
    system.task_service.resume(TENANT_B, task_id)
    clock.advance(SECOND)
    tick(ticker)
    assert queue.accepted == []
    task = system.tasks.get(task_id)
    assert task is not None
    assert task.next_run_at == due + timedelta(hours=1)


# Finding 7 -----------------------------------------------------------------------


def test_a_backfilled_occurrence_200_days_old_is_not_born_expired(
    one_shard: Dynacron, aws: tuple[Any, Any], clock: SettableClock
) -> None:
    """Finding 7: expires_at was the scheduled time + 90 days, so a backfill of an
    occurrence 200 days old was written already expired (TTL could delete it in
    flight, with its lease, idempotency record and "once ever" guarantee)."""
    system = one_shard
    task_id = register(system, TENANT_B, cron="0 3 * * *")
    old = (clock.now() - timedelta(days=200)).replace(hour=3, minute=0)
    # When the occurrence 200 days old is backfilled
    backfill = system.task_service.backfill(
        TENANT_B, task_id, format_instant(old), format_instant(old)
    )
    (execution_id,) = backfill.started
    # Then its record lives on for the retention, counted from now
    assert stored_expiry(aws, system, execution_id) >= clock.now() + EXECUTION_RETENTION
    # When it runs, an hour later, and finishes two hours after that
    clock.advance(timedelta(hours=1))
    dispatch = Dispatch(execution_id=execution_id, task_id=task_id, scheduled_at=old)
    began = changes.begin(
        system.executions,
        dispatch,
        now=clock.now(),
        lease_until=clock.now() + timedelta(seconds=30),
        lease_token="token-1",
        callback_digest="digest",
        retry=RetryPolicy(),
        tenant_id=TENANT_B,
    )
    assert began.began
    clock.advance(timedelta(hours=2))
    assert changes.finish(
        system.executions, execution_id, "token-1", ExecutionStatus.SUCCEEDED, clock.now()
    )
    # Then it expires the retention after its end
    assert stored_expiry(aws, system, execution_id) == clock.now() + EXECUTION_RETENTION


def test_a_skipped_record_of_an_old_occurrence_counts_from_when_it_was_written(
    one_shard: Dynacron, aws: tuple[Any, Any], clock: SettableClock
) -> None:
    """Finding 7: a SKIPPED record (catch-up, overlap) of an occurrence 200 days old."""
    system = one_shard
    task_id = register(system, TENANT_B, cron="0 3 * * *")
    task = system.tasks.get(task_id)
    assert task is not None
    old = clock.now() - timedelta(days=200)
    execution_id = execution_id_for(task_id, old)
    assert changes.record_skipped(system.executions, task, execution_id, old, "why", clock.now())
    assert stored_expiry(aws, system, execution_id) == clock.now() + EXECUTION_RETENTION


def test_two_ticks_of_one_shard_record_an_outage_once(
    one_shard: Dynacron, clock: SettableClock
) -> None:
    """Finding 6: the shard's heartbeat is one conditional write on what was read, so
    two ticks of one shard (a lease handover) neither lose nor double an outage."""
    cursors = one_shard.cursors
    grace = timedelta(seconds=one_shard.settings.misfire_grace_seconds)
    first = cursors.read(0).history.record(clock.now(), grace)
    assert coordination_changes.record_tick(cursors, 0, first, cursors.read(0).history)
    clock.advance(timedelta(minutes=5))
    seen = cursors.read(0).history
    mine, theirs = seen.record(clock.now(), grace), seen.record(clock.now() + SECOND, grace)
    assert coordination_changes.record_tick(cursors, 0, mine, seen)
    assert not coordination_changes.record_tick(cursors, 0, theirs, seen)
    stored = cursors.read(0).history
    assert stored.outages == mine.outages
    assert len(stored.outages) == 1
    assert stored.last_tick == clock.now()
