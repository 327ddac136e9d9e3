"""The wall clock steps back and forward by two hours around a burst (issue 23).

Local mode on the embedded store (and the AWS adapters on moto), driven by hand:
the tick, a worker and the reaper of one ``Dynacron`` share a clock whose wall
time the test steps alone
(``SettableClock.step``: the monotonic clock does not move), as NTP, a laptop's
resume or a VM's snapshot restore do. Every occurrence fires once, none is
stranded behind the shard's cursor, none is queued again while its call runs,
and each step is counted (decision 0037).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from dynacron.adapters.powertools.metrics import MetricTotals
from dynacron.api.requests import TaskCreate
from dynacron.definitions import metric_names
from dynacron.definitions.resources import DISPATCH_QUEUE
from dynacron.domain.clock import SettableClock
from dynacron.domain.executions.execution import ExecutionStatus
from dynacron.domain.instants import compact_instant, format_instant
from dynacron.entry.composition import Dynacron
from dynacron.entry.settings import LOOPBACK_NETWORKS
from dynacron.local.gateway import LocalContext
from dynacron.local.runtime import sqs_event
from dynacron.local.stores import SqliteStore, StoreOptions
from dynacron.services.clock_steps import lease_hold
from tests.integration.api_client import ALICE
from tests.pipeline import Pipeline
from tests.support import Sink

STEP = timedelta(hours=2)
QUEUE = DISPATCH_QUEUE.suffix


class Local:
    """One local-mode instance on the embedded store, its loops turned by hand."""

    def __init__(self, data_dir: Path, clock: SettableClock) -> None:
        self.clock = clock
        self.store = SqliteStore(StoreOptions(data_dir=data_dir))
        settings = self.store.open(clock, shard_count=2, delivery_allow_networks=LOOPBACK_NETWORKS)
        self.metrics = MetricTotals()
        self.app = Dynacron(
            settings,
            adapters=self.store.adapters(settings, clock),
            clock=clock,
            emit_metrics=self.metrics,
        )

    def register(self, **fields: Any) -> str:
        spec = TaskCreate(**fields).to_spec()
        return self.app.task_service.register(ALICE, spec).task_id

    def tick(self) -> None:
        self.app.ticker.tick()
        self.app.metrics.flush()

    def work(self) -> int:
        """Receive and run messages until none is visible; returns how many ran."""
        ran = 0
        while messages := self.store.receive(QUEUE, 10, wait_seconds=0):
            result = self.app.worker(
                sqs_event(messages, self.store.queue_arn(QUEUE)), LocalContext("worker")
            )
            failed = {f["itemIdentifier"] for f in result.get("batchItemFailures", [])}
            self.store.delete(QUEUE, [m for m in messages if m["MessageId"] not in failed])
            ran += len(messages)
        return ran

    def reap(self) -> None:
        self.app.reaper({}, LocalContext("reaper"))

    def run_for(self, span: timedelta, step: timedelta = timedelta(seconds=10)) -> None:
        """Tick, work and reap while the clock moves on by ``span``."""
        end = self.clock.now() + span
        while self.clock.now() < end:
            self.tick()
            self.work()
            self.reap()
            self.clock.advance(step)
        self.tick()
        self.work()

    def clock_steps(self) -> float:
        self.app.metrics.flush()
        return self.metrics.total(metric_names.CLOCK_STEPS)


@pytest.fixture
def local(tmp_path: Path, clock: SettableClock) -> Iterator[Local]:
    instance = Local(tmp_path / "data", clock)
    yield instance
    instance.store.close()


def occurrences_of(sink: Sink, task_id: str) -> dict[str, int]:
    """Handler calls of ``task_id``'s executions, by execution id."""
    return {k: n for k, n in sink.calls_by_key().items() if k.startswith(f"{task_id}_")}


def test_a_burst_around_a_step_back_and_its_correction_fires_every_occurrence_once(
    local: Local, sink: Sink, clock: SettableClock
) -> None:
    local.run_for(timedelta(minutes=5))  # the cursor and the history settle
    local.clock.step(-STEP)
    # A burst, filed while the clock is two hours behind: one-time tasks, some due
    # before the correction and some after it, and recurring ones.
    at = [clock.now() + timedelta(seconds=30 * (i + 1)) for i in range(8)]
    one_time = [
        local.register(at=format_instant(when), handler_url=f"{sink.url}/at/{i}")
        for i, when in enumerate(at)
    ]
    recurring = [
        local.register(rate="1 minute", handler_url=f"{sink.url}/rate/{i}") for i in range(4)
    ]
    local.run_for(timedelta(minutes=2))
    local.clock.step(STEP)  # corrected: what was filed meanwhile lies behind the cursor
    local.run_for(timedelta(minutes=5))

    for task_id in one_time:
        assert list(occurrences_of(sink, task_id).values()) == [1], task_id
    for task_id in recurring:
        calls = occurrences_of(sink, task_id)
        # Each occurrence once; and the task goes on firing after the correction.
        assert set(calls.values()) == {1}, calls
        corrected_at = compact_instant(clock.now() - timedelta(minutes=5))
        after = [k for k in calls if k.split("_", 1)[1] >= corrected_at]
        assert len(after) >= 4, (task_id, sorted(calls))
    assert sink.applied_twice == 0
    assert local.clock_steps() == 2


def test_a_step_forward_queues_no_call_again_while_it_runs(
    local: Local, sink: Sink, clock: SettableClock
) -> None:
    local.run_for(timedelta(minutes=1))
    sink.gate = threading.Event()
    task_id = local.register(
        at=format_instant(clock.now() + timedelta(seconds=5)), handler_url=f"{sink.url}/held"
    )
    clock.advance(timedelta(seconds=5))
    local.tick()
    # The worker's call is held by the handler, in another thread.
    messages = local.store.receive(QUEUE, 10, wait_seconds=0)
    assert len(messages) == 1
    arn = local.store.queue_arn(QUEUE)
    running = threading.Thread(
        target=local.app.worker, args=(sqs_event(messages, arn), LocalContext("worker"))
    )
    running.start()
    deadline = time.monotonic() + 10
    while not sink.deliveries and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(sink.deliveries) == 1

    clock.step(STEP)  # every lease and the message's visibility look long over
    local.tick()
    ran_again = local.work()  # the message is visible again: the running call's guard
    local.reap()
    [execution_id] = occurrences_of(sink, task_id)
    execution = local.app.executions.get(execution_id)
    assert execution is not None
    assert (execution.status, execution.attempt) == (ExecutionStatus.RUNNING, 1)
    assert ran_again == 1  # it was received again, and dropped as the call's guard
    assert len(sink.deliveries) == 1

    sink.gate.set()
    running.join(timeout=30)
    local.store.delete(QUEUE, messages)
    clock.step(-STEP)  # and corrected
    local.run_for(timedelta(minutes=2))
    execution = local.app.executions.get(execution_id)
    assert execution is not None
    assert (execution.status, execution.attempt) == (ExecutionStatus.SUCCEEDED, 1)
    assert sink.calls_by_key() == {execution_id: 1}
    assert local.clock_steps() == 2


def test_after_a_step_forward_is_corrected_recurring_tasks_fire_on_time_again(
    local: Local, sink: Sink, clock: SettableClock
) -> None:
    recurring = [
        local.register(rate="1 minute", handler_url=f"{sink.url}/rate/{i}") for i in range(3)
    ]
    recurring += [
        local.register(cron="* * * * *", handler_url=f"{sink.url}/cron/{i}") for i in range(2)
    ]
    # Runs that hold their slot keep the fast clock's plan (decision 0037).
    holding = [
        local.register(cron="* * * * *", overlap="skip", handler_url=f"{sink.url}/skip/{i}")
        for i in range(2)
    ]
    local.run_for(timedelta(minutes=3))
    clock.step(STEP)  # fast by two hours: each task is planned on the fast clock
    local.run_for(timedelta(minutes=3))
    clock.step(-STEP)  # corrected
    corrected_at = compact_instant(clock.now())
    local.run_for(timedelta(minutes=5))
    on_time_until = compact_instant(clock.now())
    # Then real time passes what the fast clock ran (a quiet stretch, no step):
    # those occurrences are met again and run nothing twice.
    clock.advance(STEP - timedelta(minutes=11))
    local.run_for(timedelta(minutes=10))

    for task_id in recurring:
        calls = occurrences_of(sink, task_id)
        assert set(calls.values()) == {1}, calls
        after = [k for k in calls if corrected_at <= k.split("_", 1)[1] < on_time_until]
        # On time again after the correction, not two hours later.
        assert len(after) >= 4, (task_id, sorted(calls))
        # And after real time caught up, on time still.
        latest = max(k.split("_", 1)[1] for k in calls)
        assert latest >= compact_instant(clock.now() - timedelta(minutes=2)), sorted(calls)
    for task_id in holding:
        calls = occurrences_of(sink, task_id)
        assert set(calls.values()) == {1}, calls
        latest = max(k.split("_", 1)[1] for k in calls)
        assert latest >= compact_instant(clock.now() - timedelta(minutes=2)), sorted(calls)
    assert sink.applied_twice == 0
    assert local.clock_steps() == 2


# The same on the AWS adapters, on moto ------------------------------------------------


def test_on_aws_a_burst_filed_during_a_step_back_is_not_stranded_behind_the_cursor(
    pipeline: Pipeline, sink: Sink, clock: SettableClock
) -> None:
    def run_for(span: timedelta) -> None:
        end = clock.now() + span
        while clock.now() < end:
            pipeline.tick()
            pipeline.work()
            clock.advance(timedelta(seconds=20))
        pipeline.tick()
        pipeline.work()

    run_for(timedelta(minutes=3))
    clock.step(-STEP)
    one_time = [
        pipeline.register(
            at=format_instant(clock.now() + timedelta(minutes=i + 1)), handler_url=f"{sink.url}/a"
        )
        for i in range(4)
    ]
    recurring = [pipeline.register(rate="1 minute", handler_url=f"{sink.url}/r") for _ in range(2)]
    run_for(timedelta(minutes=2))
    clock.step(STEP)
    run_for(timedelta(minutes=3))

    for task_id in one_time:
        assert list(occurrences_of(sink, task_id).values()) == [1], task_id
    for task_id in recurring:
        calls = occurrences_of(sink, task_id)
        assert set(calls.values()) == {1}, calls
        assert max(k.split("_", 1)[1] for k in calls) >= compact_instant(
            clock.now() - timedelta(minutes=2)
        ), sorted(calls)
    pipeline.app.metrics.flush()
    assert pipeline.metrics.total(metric_names.CLOCK_STEPS) == 2


def test_on_aws_a_step_forward_does_not_reap_a_job_that_answered_202(
    pipeline: Pipeline, sink: Sink, clock: SettableClock
) -> None:
    sink.status = 202  # the job goes on, and calls back within its callback lease
    task_id = pipeline.register(
        at=format_instant(clock.now() + timedelta(seconds=5)), handler_url=f"{sink.url}/long"
    )
    pipeline.reap()
    clock.advance(timedelta(seconds=5))
    pipeline.tick()
    pipeline.work()
    [execution_id] = occurrences_of(sink, task_id)

    clock.step(STEP)
    pipeline.reap()
    pipeline.tick()
    pipeline.work()
    execution = pipeline.execution(execution_id)
    assert execution is not None
    assert (execution.status, execution.attempt) == (ExecutionStatus.RUNNING, 1)
    assert sink.calls_by_key() == {execution_id: 1}

    # A job that never calls back is still given up on: one hold after the step
    # its lease is judged by the stepped clock, and it ran out.
    lease = pipeline.settings.lease_terms
    clock.advance(lease_hold(lease) + timedelta(seconds=1))
    pipeline.reap()
    execution = pipeline.execution(execution_id)
    assert execution is not None
    assert execution.attempt == 2 or execution.status.is_final, execution
