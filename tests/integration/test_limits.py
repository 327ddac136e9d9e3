"""Limits shared through the coordination table (moto): slots, token bucket, breaker
writes, and the worker waiting on them without using an attempt."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from botocore.exceptions import ClientError

from dynacron.adapters.aws.limits import DynamoLimitStore
from dynacron.adapters.powertools.metrics import MetricTotals
from dynacron.api.requests import RateLimitModel, TaskCreate
from dynacron.definitions import metric_names
from dynacron.domain.clock import SettableClock
from dynacron.domain.coordination.limits import HostState, RateLimit, after_failure
from dynacron.domain.executions.execution import Dispatch, ExecutionStatus
from dynacron.domain.tasks.claiming import jitter_offset
from dynacron.domain.tasks.task import Task, execution_id_for
from dynacron.entry.composition import Dynacron
from dynacron.ports.faults import Boundary
from dynacron.services.limits import SCOPE_FULL_RECHECK, LimitGate, Pass, Wait, host_scope_of
from dynacron.services.outcomes import Outcome
from tests.contract import coordination_changes as changes
from tests.integration.api_client import ALICE, call
from tests.pipeline import VirtualDelayQueue
from tests.support import Sink


def limit_store(system: Dynacron, aws: tuple[Any, Any]) -> DynamoLimitStore:
    return DynamoLimitStore(aws[0], system.settings.coordination_table)


def test_a_concurrency_limit_of_two_gives_out_two_slots_until_one_is_released(
    system: Dynacron, aws: tuple[Any, Any], clock: SettableClock
) -> None:
    store, now = limit_store(system, aws), clock.now()
    until = now + timedelta(seconds=10)
    first = changes.take_slot(store, "task#t", 2, "a", now, until)
    second = changes.take_slot(store, "task#t", 2, "b", now, until)
    assert first is not None
    assert second is not None
    assert first != second
    assert changes.take_slot(store, "task#t", 2, "c", now, until) is None
    assert changes.release_slot(store, first, "a")
    assert changes.take_slot(store, "task#t", 2, "c", now, until) == first
    # Only the holder frees a slot.
    assert not changes.release_slot(store, second, "a")


def test_a_dead_workers_slot_frees_itself_when_its_lease_runs_out(
    system: Dynacron, aws: tuple[Any, Any], clock: SettableClock
) -> None:
    store, now = limit_store(system, aws), clock.now()
    until = now + timedelta(seconds=10)
    assert changes.take_slot(store, "task#t", 1, "dead", now, until) is not None
    assert changes.take_slot(store, "task#t", 1, "next", now, until) is None
    later = now + timedelta(seconds=11)
    assert changes.take_slot(store, "task#t", 1, "next", later, later + timedelta(seconds=10))


def test_two_workers_share_one_token_bucket(
    system: Dynacron, aws: tuple[Any, Any], clock: SettableClock
) -> None:
    one, two = limit_store(system, aws), limit_store(system, aws)
    limit, now = RateLimit(per_second=5, burst=2), clock.now()
    assert one.take_token("h", limit, now) == 0
    assert two.take_token("h", limit, now) == 0
    wait = one.take_token("h", limit, now)
    assert abs(wait - 0.2) < 1e-3
    assert two.take_token("h", limit, now + timedelta(seconds=0.2)) == 0


def test_a_host_write_based_on_a_stale_read_is_refused(
    system: Dynacron, aws: tuple[Any, Any], clock: SettableClock
) -> None:
    store, now = limit_store(system, aws), clock.now()
    policy = system.settings.breaker_policy
    read = store.host("h")
    assert changes.replace_host(store, after_failure(read, now, policy), now)
    assert not changes.replace_host(store, after_failure(read, now, policy), now)
    assert store.host("h").consecutive_failures == 1


def test_an_execution_over_its_tasks_concurrency_waits_without_using_an_attempt(
    aws: tuple[Any, Any], settings: Any, clock: SettableClock, sink: Sink
) -> None:
    # Given a task allowed one execution at a time, whose one slot is held
    queue = VirtualDelayQueue(aws[1], settings.dispatch_queue_url, clock)
    system = Dynacron(settings, dynamodb=aws[0], sqs=aws[1], clock=clock, dispatch_queue=queue)
    task = system.task_service.register(
        ALICE,
        TaskCreate(rate="1 minute", handler_url=f"{sink.url}/hook", max_concurrency=1).to_spec(),
    )
    assert task.next_run_at is not None
    clock.set(task.next_run_at)
    holder = changes.take_slot(
        limit_store(system, aws),
        f"task#{task.task_id}",
        1,
        "other",
        clock.now(),
        clock.now() + timedelta(seconds=30),
    )
    assert holder is not None
    dispatch = Dispatch(execution_id_for(task.task_id, clock.now()), task.task_id, clock.now())

    # When a worker runs its next execution
    outcome = system.runner.run(dispatch)

    # Then it waits: not called, no execution record, sent on to come back later
    assert outcome is Outcome.WAITING
    assert sink.snapshot() == []
    assert system.executions.get(dispatch.execution_id) is None
    ((later, delay),) = queue.delays
    assert later.attempt == 1
    assert later.not_before is not None
    assert 1 <= delay <= 3
    assert later.not_before >= clock.now() + timedelta(seconds=1)


class AfterBegin:
    """Faults that run ``step`` once the attempt has begun: time passing (the writes
    before the call were slow) and another worker acting meanwhile."""

    def __init__(self, step: Callable[[], None]) -> None:
        self._step = step

    def reached(self, boundary: Boundary) -> None:
        if boundary is Boundary.WORKER_BEGAN:
            self._step()


def test_a_slot_taken_over_before_the_call_holds_the_call_back_without_using_an_attempt(
    aws: tuple[Any, Any], settings: Any, clock: SettableClock, sink: Sink
) -> None:
    # Given a task allowed one execution at a time, and a worker that admits its
    # execution, then stalls past the slot's lease while another worker takes it
    queue = VirtualDelayQueue(aws[1], settings.dispatch_queue_url, clock)
    store = DynamoLimitStore(aws[0], settings.coordination_table)
    slot_lease = timedelta(seconds=settings.http_timeout_seconds + 2 * settings.clock_skew_seconds)
    taken: list[str | None] = []

    def stall_while_another_takes_the_slot() -> None:
        now = clock.advance(slot_lease + timedelta(seconds=1))
        taken.append(changes.take_slot(store, scope, 1, "other", now, now + slot_lease))

    system = Dynacron(
        settings,
        dynamodb=aws[0],
        sqs=aws[1],
        clock=clock,
        dispatch_queue=queue,
        faults=AfterBegin(stall_while_another_takes_the_slot),
    )
    task = system.task_service.register(
        ALICE,
        TaskCreate(rate="1 minute", handler_url=f"{sink.url}/hook", max_concurrency=1).to_spec(),
    )
    scope = f"task#{task.task_id}"
    assert task.next_run_at is not None
    clock.set(task.next_run_at)
    dispatch = Dispatch(execution_id_for(task.task_id, clock.now()), task.task_id, clock.now())

    # When the worker reaches the call
    outcome = system.runner.run(dispatch)

    # Then it does not call (two would run at once): the same attempt waits, the
    # other worker keeps its slot
    assert taken != [None], "the other worker took the slot"
    assert outcome is Outcome.POSTPONED
    assert sink.snapshot() == []
    execution = system.executions.get(dispatch.execution_id)
    assert execution is not None
    assert execution.status is ExecutionStatus.QUEUED
    assert execution.attempt == 1
    ((later, delay),) = queue.delays
    assert later.attempt == 1
    assert 1 <= delay <= 3
    now = clock.now()
    assert changes.take_slot(store, scope, 1, "a third", now, now + slot_lease) is None

    # And once the other worker is done, the attempt runs, still the first
    assert taken[0] is not None
    assert changes.release_slot(store, taken[0], "other")
    clock.advance(timedelta(seconds=delay))
    rerun = Dynacron(settings, dynamodb=aws[0], sqs=aws[1], clock=clock, dispatch_queue=queue)
    assert rerun.runner.run(later) is Outcome.SUCCEEDED
    assert len(sink.snapshot()) == 1
    assert sink.snapshot()[0].body["attempt"] == 1


def test_a_slot_lease_run_short_before_the_call_is_extended_and_the_call_goes(
    aws: tuple[Any, Any], settings: Any, clock: SettableClock, sink: Sink
) -> None:
    # Given a worker whose writes before the call took most of its slot's lease
    store = DynamoLimitStore(aws[0], settings.coordination_table)
    slot_lease = timedelta(seconds=settings.http_timeout_seconds + 2 * settings.clock_skew_seconds)
    system = Dynacron(
        settings,
        dynamodb=aws[0],
        sqs=aws[1],
        clock=clock,
        faults=AfterBegin(lambda: clock.advance(slot_lease - timedelta(seconds=1))),
    )
    task = system.task_service.register(
        ALICE,
        TaskCreate(rate="1 minute", handler_url=f"{sink.url}/hook", max_concurrency=1).to_spec(),
    )
    assert task.next_run_at is not None
    clock.set(task.next_run_at)
    dispatch = Dispatch(execution_id_for(task.task_id, clock.now()), task.task_id, clock.now())
    taken_during_call: list[str | None] = []

    def answer(_: Any) -> tuple[int, dict[str, str]]:
        # Another worker, its clock a skew ahead, at the end of the longest call.
        late = clock.now() + timedelta(
            seconds=settings.http_timeout_seconds + settings.clock_skew_seconds
        )
        taken_during_call.append(
            changes.take_slot(store, f"task#{task.task_id}", 1, "other", late, late + slot_lease)
        )
        return 200, {}

    sink.answer = answer

    # When the worker reaches the call
    outcome = system.runner.run(dispatch)

    # Then the lease was extended first: nobody could take the slot during the call
    assert outcome is Outcome.SUCCEEDED
    assert taken_during_call == [None]


class CountedLimitStore(DynamoLimitStore):
    """The limit store, counting the slot writes a worker asks of it."""

    slot_writes = 0

    def apply_slot(self, slot: str, transition: Any) -> bool:
        self.slot_writes += 1
        return super().apply_slot(slot, transition)


def limit_gate(system: Dynacron, store: DynamoLimitStore, clock: SettableClock) -> LimitGate:
    settings = system.settings
    return LimitGate(
        store=store,
        metrics=system.metrics,
        clock=clock,
        breaker=settings.breaker_policy,
        call_timeout=timedelta(seconds=settings.http_timeout_seconds),
        clock_skew=timedelta(seconds=settings.clock_skew_seconds),
    )


def limited_task(system: Dynacron, sink: Sink, max_concurrency: int) -> Task:
    return system.task_service.register(
        ALICE,
        TaskCreate(
            rate="1 minute", handler_url=f"{sink.url}/hook", max_concurrency=max_concurrency
        ).to_spec(),
    )


def dispatches(task: Task, clock: SettableClock, count: int) -> list[Dispatch]:
    at = clock.now()
    return [
        Dispatch(execution_id_for(task.task_id, at + timedelta(minutes=n)), task.task_id, at)
        for n in range(count)
    ]


def test_a_worker_that_found_a_limit_full_waits_without_trying_it_again_for_a_moment(
    system: Dynacron, aws: tuple[Any, Any], clock: SettableClock, sink: Sink
) -> None:
    # Given a task allowed one execution at a time, whose slot another worker holds,
    # and a worker that found it so
    store = CountedLimitStore(aws[0], system.settings.coordination_table)
    gate, task = limit_gate(system, store, clock), limited_task(system, sink, 1)
    first, second = dispatches(task, clock, 2)
    scope, until = f"task#{task.task_id}", clock.now() + timedelta(seconds=30)
    other = changes.take_slot(store, scope, 1, "other", clock.now(), until)
    assert other is not None
    assert isinstance(gate.admit(task, first), Wait)

    # When the other worker gives the slot back, and the worker admits the next at once
    assert changes.release_slot(store, other, "other")
    writes = store.slot_writes
    at_once = gate.admit(task, second)

    # Then it waits (as it would have found the limit full), without a write; a
    # moment later it tries the store again and goes
    assert isinstance(at_once, Wait)
    assert store.slot_writes == writes
    clock.advance(SCOPE_FULL_RECHECK)
    assert isinstance(gate.admit(task, second), Pass)


def test_a_slot_a_worker_gave_back_is_the_next_it_takes_even_while_the_limit_looks_full(
    system: Dynacron, aws: tuple[Any, Any], clock: SettableClock, sink: Sink
) -> None:
    # Given a task allowed two at a time, one slot held by another worker, the other
    # by this worker, which then found the limit full
    store = CountedLimitStore(aws[0], system.settings.coordination_table)
    gate, task = limit_gate(system, store, clock), limited_task(system, sink, 2)
    first, second, third = dispatches(task, clock, 3)
    scope, until = f"task#{task.task_id}", clock.now() + timedelta(seconds=30)
    assert changes.take_slot(store, scope, 2, "other", clock.now(), until) is not None
    held = gate.admit(task, first)
    assert isinstance(held, Pass)
    (slot,) = held.slots
    assert isinstance(gate.admit(task, second), Wait)

    # When its call returns and the slot is given back
    gate.release(held)
    writes = store.slot_writes

    # Then the next execution takes that slot at once, in one write
    taken = gate.admit(task, third)
    assert isinstance(taken, Pass)
    assert taken.slots == [slot]
    assert store.slot_writes == writes + 1


class HostReadsCounted(DynamoLimitStore):
    """The limit store, counting its reads of host states: alone, or many at once."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.reads: list[list[str]] = []

    def host(self, host: str) -> Any:
        self.reads.append([host])
        return super().host(host)

    def hosts(self, hosts: Any) -> Any:
        self.reads.append(list(hosts))
        return super().hosts(hosts)


def test_a_waves_hosts_are_read_in_one_call_and_their_stored_breakers_hold(
    system: Dynacron, aws: tuple[Any, Any], clock: SettableClock, sink: Sink
) -> None:
    # Given three tasks on three hosts, one of whose breakers is open
    store = HostReadsCounted(aws[0], system.settings.coordination_table)
    gate = limit_gate(system, store, clock)
    port = sink.url.rsplit(":", 1)[1]
    tasks = [
        system.task_service.register(
            ALICE,
            TaskCreate(rate="1 minute", handler_url=f"http://127.0.0.{n}:{port}/hook").to_spec(),
        )
        for n in (1, 2, 3)
    ]
    hosts = [host_scope_of(task) for task in tasks]
    policy = dataclasses.replace(system.settings.breaker_policy, failure_threshold=1)
    assert changes.replace_host(
        store, after_failure(HostState(host=hosts[1]), clock.now(), policy), clock.now()
    )

    # When a worker reads the wave's hosts, then admits each of its records
    gate.read_hosts(tasks)
    admitted = [gate.admit(task, dispatches(task, clock, 1)[0]) for task in tasks]

    # Then the hosts were read once, together, and the open breaker holds its record back
    assert [sorted(read) for read in store.reads] == [sorted(hosts)]
    assert [type(answer) for answer in admitted] == [Pass, Wait, Pass]


class AtHandlerReturned:
    """Faults that run ``step`` once the handler has answered, before anything of
    the answer is written."""

    def __init__(self, step: Callable[[], None]) -> None:
        self._step = step

    def reached(self, boundary: Boundary) -> None:
        if boundary is Boundary.WORKER_HANDLER_RETURNED:
            self._step()


def test_a_slot_is_free_once_the_handler_answered_before_the_end_is_written(
    aws: tuple[Any, Any], settings: Any, clock: SettableClock, sink: Sink
) -> None:
    # Given a task allowed one execution at a time, and another worker that tries to
    # take its slot as soon as the handler has answered this worker's call
    store = DynamoLimitStore(aws[0], settings.coordination_table)
    taken: list[str | None] = []

    def another_worker_takes_the_slot() -> None:
        now = clock.now()
        taken.append(changes.take_slot(store, scope, 1, "other", now, now + timedelta(seconds=30)))

    system = Dynacron(
        settings,
        dynamodb=aws[0],
        sqs=aws[1],
        clock=clock,
        faults=AtHandlerReturned(another_worker_takes_the_slot),
    )
    task = limited_task(system, sink, 1)
    scope = f"task#{task.task_id}"
    (dispatch,) = dispatches(task, clock, 1)

    # When the worker runs the execution
    outcome = system.runner.run(dispatch)

    # Then the other worker got the slot before this one's end was written, and the
    # end was written all the same
    assert outcome is Outcome.SUCCEEDED
    assert taken != [None]
    execution = system.executions.get(dispatch.execution_id)
    assert execution is not None
    assert execution.status is ExecutionStatus.SUCCEEDED


def test_retry_after_from_one_task_slows_every_task_on_that_host(
    aws: tuple[Any, Any], settings: Any, clock: SettableClock, sink: Sink
) -> None:
    totals = MetricTotals()
    system = Dynacron(settings, dynamodb=aws[0], sqs=aws[1], clock=clock, emit_metrics=totals)
    sink.answer = lambda _: (429, {"Retry-After": "30"})
    first = system.task_service.register(
        ALICE, TaskCreate(at="2026-11-30T12:00:01Z", handler_url=sink.url).to_spec()
    )
    other = system.task_service.register(
        ALICE, TaskCreate(at="2026-11-30T12:00:01Z", handler_url=sink.url).to_spec()
    )
    clock.advance(timedelta(seconds=1))
    at = clock.now()
    assert system.runner.run(Dispatch(execution_id_for(first.task_id, at), first.task_id, at)) is (
        Outcome.RETRY_SCHEDULED
    )
    waiting = system.runner.run(Dispatch(execution_id_for(other.task_id, at), other.task_id, at))
    system.metrics.flush()
    assert waiting is Outcome.WAITING
    assert len(sink.snapshot()) == 1
    assert totals.total(metric_names.HOSTS_PAUSED) == 1
    assert totals.total(metric_names.WAITING_ON_PAUSE) == 1
    assert totals.total(metric_names.LIMIT_LATENESS) >= 30


def test_a_host_rate_limit_is_stored_with_the_task_and_shown(system: Dynacron, sink: Sink) -> None:
    task = system.task_service.register(
        ALICE,
        TaskCreate(
            rate="1 minute",
            handler_url=sink.url,
            max_concurrency=3,
            rate_limit=RateLimitModel(per_second=2.5, burst=4, max_in_flight=10),
        ).to_spec(),
    )
    stored = system.tasks.get(task.task_id)
    assert stored is not None
    assert stored.limits == task.limits
    assert stored.limits.rate_limit == RateLimit(2.5, 4)
    assert stored.limits.host_max_concurrency == 10


def test_the_forecast_shows_a_herd_before_it_happens(
    system: Dynacron, clock: SettableClock, sink: Sink
) -> None:
    for _ in range(3):
        system.task_service.register(
            ALICE, TaskCreate(cron="0 0 * * *", handler_url=sink.url).to_spec()
        )
    jittered = system.task_service.register(
        ALICE, TaskCreate(cron="0 0 * * *", handler_url=sink.url, jitter_seconds=900).to_spec()
    )
    assert jittered.next_run_at is not None
    offset = jitter_offset(execution_id_for(jittered.task_id, jittered.next_run_at), 900)
    status, body = call(system, "GET", "/forecast", hours=24)
    assert status == 200
    assert body["complete"] is True
    assert body["tasks"] == 4
    # The jittered one is spread over 15 minutes: it joins the herd only if its
    # offset (derived from its execution id) falls in the first minute
    herd = 3 + (offset < 60)
    assert body["peak"] == {"minute": "2026-12-01T00:00:00.000Z", "executions": herd}
    assert sum(m["executions"] for m in body["per_minute"]) == 4
    status, _ = call(system, "GET", "/forecast", hours=25)
    assert status == 422


def test_the_tick_enqueues_nothing_more_while_the_queue_holds_its_bound(
    aws: tuple[Any, Any], settings: Any, clock: SettableClock, sink: Sink
) -> None:
    paced = dataclasses.replace(settings, max_queued_dispatches=3)
    totals = MetricTotals()
    system = Dynacron(paced, dynamodb=aws[0], sqs=aws[1], clock=clock, emit_metrics=totals)
    for _ in range(5):
        system.task_service.register(
            ALICE, TaskCreate(at="2026-11-30T12:00:01Z", handler_url=sink.url).to_spec()
        )
    clock.advance(timedelta(seconds=2))
    assert sum(r.claimed for r in system.ticker.tick()) == 3
    # The queue is full: what is due stays due, not dropped...
    assert sum(r.claimed for r in system.ticker.tick()) == 0
    system.metrics.flush()
    assert totals.total(metric_names.DISPATCH_PACED) >= 1
    # ...and is sent once the workers have taken what was queued.
    url = paced.dispatch_queue_url
    while (
        messages := aws[1].receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
    ):
        for message in messages:
            aws[1].delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    assert sum(r.claimed for r in system.ticker.tick()) == 2


class ThrottledClaims:
    """DynamoDB that throttles the first few claims, as a burst can."""

    def __init__(self, client: Any, throttles: int) -> None:
        self._client = client
        self.left = throttles

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def update_item(self, **request: Any) -> Any:
        if self.left > 0 and request["TableName"].endswith("-tasks"):
            self.left -= 1
            raise ClientError(
                {"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "slow"}},
                "UpdateItem",
            )
        return self._client.update_item(**request)


def test_a_throttled_claim_is_retried_after_a_backoff_not_dropped(
    aws: tuple[Any, Any], settings: Any, clock: SettableClock, sink: Sink
) -> None:
    throttled = ThrottledClaims(aws[0], throttles=3)
    slept: list[float] = []
    system = Dynacron(settings, dynamodb=throttled, sqs=aws[1], clock=clock, sleep=slept.append)
    system.task_service.register(
        ALICE, TaskCreate(at="2026-11-30T12:00:01Z", handler_url=sink.url).to_spec()
    )
    clock.advance(timedelta(seconds=2))
    assert sum(r.claimed for r in system.ticker.tick()) == 1
    assert throttled.left == 0
    assert slept == [0.05, 0.1, 0.2]
