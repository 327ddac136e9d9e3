"""Issue 12's hostile tenant, everything at once: tenant B must not notice tenant A.

Tenant A, in the same shards as tenant B, does all the hostile things the focused
modules of this folder do one at a time: poison (what the API still lets near it,
and items written straight into the table), a resumed ``run_all`` flood, a handler
that drips bytes, a handler that answers ``429`` with ``Retry-After: 999999999``
from the host B's handlers live on, and a dispatch message lost before it began.
Tenant B has 100 one-time tasks due in the middle of it. The same scenario is run
once without tenant A, and B's lateness there is the yardstick.

Everything runs the project's own code on in-process moto, driven by
``tests.pipeline.Pipeline`` with a clock the test moves: each step sets the clock,
ticks every shard, works the queue dry and runs the reaper. Lateness is measured
in test-clock seconds: when B's attempt began minus when it was due.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest
from botocore.exceptions import EndpointConnectionError

from dynacron.adapters.aws.limits import DynamoLimitStore
from dynacron.api.requests import TaskCreate
from dynacron.definitions import metric_names
from dynacron.definitions.resources import (
    COORDINATION,
    DISPATCH_QUEUE,
    DUE_INDEX,
    HOST_KEY_PREFIX,
    UNDELIVERED_QUEUE,
)
from dynacron.domain.clock import SettableClock
from dynacron.domain.coordination.limits import host_scope
from dynacron.domain.executions.execution import ExecutionStatus
from dynacron.domain.instants import format_instant
from dynacron.domain.tasks.task import TaskStatus, execution_id_for, shard_for
from dynacron.entry.composition import Dynacron
from dynacron.local.aws import undelivered_queue_url
from dynacron.local.runtime import settle_undelivered
from dynacron.local.stores import SqsQueues
from dynacron.services.tasks import BatchItem
from tests.adversarial.test_poison_tasks import (
    BOB,
    POISON,
    POISON_DUE,
    raw,
    write_poison,
    write_poison_lease,
)
from tests.adversarial.test_worker_budget import DripServer
from tests.conftest import START, build_pipeline
from tests.integration.api_client import ALICE, call
from tests.pipeline import Pipeline
from tests.support import Sink

B_TASKS = 100
# A's per-second run_all tasks. Resumed after a day, each has a backlog of 65
# occurrences (the last 5 of the pause, as run_all's cap below says, and the 60
# within the misfire grace) and one more a second: every tick gives each of them
# its whole share (FLOOD_SHARE below), 60 claims against B's 50 or so.
# Each claim costs moto some 50 ms: the 100 tasks would take minutes.
FLOOD_TASKS = 20
# run_all runs at most this many missed occurrences of one downtime, as in
# test_fairness.py (the default, 100, only lengthens a backlog already longer
# than the window).
CATCHUP_MAX_RUNS = 5
# Each flood task's share of a tick (tick_max_claims_per_task, default 10): smaller
# here to keep the run short; the default's own bound is test_fairness.py's.
FLOOD_SHARE = 3
# B's tasks fall due 20 ms apart from the moment A's poison falls due, over two
# seconds; the steps are a second apart, so B's lateness runs from 0 to 0.98 s.
B_FIRST_DUE = POISON_DUE
B_SPACING = timedelta(milliseconds=20)
# Every step: set the clock, tick every shard, work the queue dry, reap. In the
# first, A's 429 handler pauses the shared host for A; in the second A's flood is
# resumed, and its drip, lost and edge tasks fall due; then B's.
STEPS = [B_FIRST_DUE + timedelta(seconds=s) for s in range(-2, 3)]
# The clock starts a day before: A's flood is paused for that day.
DAY_BEFORE = START - timedelta(days=1)
# Stored instants have millisecond precision: no more than that may separate B's
# lateness with A from B's lateness without A.
TOLERANCE_SECONDS = 0.001
RECEIVES = DISPATCH_QUEUE.max_receive_count or 0
SECOND = timedelta(seconds=1)
BUSY = "/a/busy"


class LosesOneTask:
    """DynamoDB as the workers see it: unreachable for every call about one task,
    so the dispatch of that task is received and never begun (a worker crash or an
    infrastructure error before ``begin``, every time), until SQS gives up on it."""

    def __init__(self, client: Any, task_id: str) -> None:
        self._client = client
        self.task_id = task_id
        self.raised = 0

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._client, name)
        if name.startswith("_") or not callable(attribute):
            return attribute

        def call(*args: Any, **kwargs: Any) -> Any:
            if self.task_id in repr(kwargs):
                self.raised += 1
                raise EndpointConnectionError(endpoint_url="http://127.0.0.1:9")
            return attribute(*args, **kwargs)

        return call


@dataclass
class TenantA:
    """What tenant A registered, wrote and broke."""

    sink: Sink
    drip: DripServer
    flood: list[str] = field(default_factory=list)
    edge: list[str] = field(default_factory=list)
    poison: dict[str, str] = field(default_factory=dict)
    broken_delay: str = ""
    poison_lease: str = ""
    busy: str = ""
    dripping: str = ""
    lost: str = ""


@dataclass
class Run:
    pipeline: Pipeline
    b_tasks: list[str]
    lateness: list[float]
    lossy: LosesOneTask | None = None


def in_shards(task_ids: list[str], pipeline: Pipeline) -> set[int]:
    return {shard_for(t, pipeline.settings.shard_count) for t in task_ids}


def register_flood(pipeline: Pipeline, shared: Sink) -> list[str]:
    """A's per-second run_all tasks, paused until the window (finding 4), on B's
    host: once A's 429 paused it for A, the flood waits there, cheaply."""
    flood = []
    service = pipeline.app.task_service
    for n in range(FLOOD_TASKS):
        task_id = pipeline.register(
            rate="1 second", catchup="run_all", handler_url=f"{shared.url}/a/flood/{n}"
        )
        service.pause(ALICE, task_id, "paused for a day")
        flood.append(task_id)
    return flood


def register_the_rest_of_a(pipeline: Pipeline, a: TenantA, shared: Sink) -> None:
    """Everything else A does, ten seconds before the window."""
    app = pipeline.app
    due = format_instant(STEPS[1])
    # Finding 1's poison through the API: each refused, naming its field...
    for fields, named in (
        ({"rate": "3000000 days", "anchor": format_instant(B_FIRST_DUE)}, "rate"),
        ({"rate": "1 hour", "start_at": "0999-01-01T00:00:00Z"}, "start_at"),
        ({"fixed_delay": "3000000 days"}, "fixed_delay"),
    ):
        status, problem = call(app, "POST", "/tasks", {"handler_url": a.sink.url, **fields})
        assert status == 422, problem
        assert [e["field"] for e in problem["errors"]] == [named]
    # ...and what the API still lets in, at its bounds, falls due in the window
    a.edge = [
        pipeline.register(rate="366 days", anchor=due, handler_url=f"{a.sink.url}/edge/rate"),
        pipeline.register(fixed_delay="8784 hours", handler_url=f"{a.sink.url}/edge/delay"),
        pipeline.register(
            rate="366 days", anchor="2999-12-31T00:00:00Z", handler_url=f"{a.sink.url}/edge/far"
        ),
    ]
    # Poison written straight into the table, in every shard, due with B's first task
    a.poison = write_poison(pipeline, raw(pipeline, a.edge[0]))
    # A fixed_delay task whose delay became unreadable while its run was out: the
    # reaper meets its follow-up lease (which holds the task's slot) in the window
    a.broken_delay = pipeline.register(fixed_delay="1 hour", handler_url=f"{a.sink.url}/broken")
    pipeline.dynamodb.update_item(
        TableName=pipeline.settings.tasks_table,
        Key={"task_id": {"S": a.broken_delay}},
        UpdateExpression="SET #schedule.delay_seconds = :seven",
        ExpressionAttributeNames={"#schedule": "schedule"},
        ExpressionAttributeValues={":seven": {"S": "seven"}},
    )
    a.poison_lease = write_poison_lease(pipeline, a.broken_delay, 0, holds_slot=True)
    # A handler on B's host that answers 429, Retry-After: 999999999 (finding 5)
    a.busy = pipeline.register(
        rate="1 second", anchor=format_instant(STEPS[0]), handler_url=f"{shared.url}{BUSY}"
    )
    # A handler that drips its answer a byte every 0.25 s (finding 3)
    a.dripping = pipeline.register(at=due, handler_url=a.drip.url)
    # A dispatch that no worker will ever begin (finding 2)
    a.lost = pipeline.register(at=due, handler_url=f"{a.sink.url}/lost")


def scenario(
    aws: tuple[Any, Any], clock: SettableClock, shared: Sink, a: TenantA | None, prefix: str
) -> Run:
    """B's 100 tasks due in a five-second window; with ``a``, tenant A does
    everything hostile in the same shards at the same time."""
    clock.set(DAY_BEFORE)
    pipeline = build_pipeline(
        aws,
        clock,
        prefix=prefix,
        catchup_max_runs=CATCHUP_MAX_RUNS,
        tick_max_claims_per_task=FLOOD_SHARE,
    )
    if a is not None:
        a.flood = register_flood(pipeline, shared)
    # A day passes; the shards tick now and then, and ten seconds before the window
    for _ in range(24):
        clock.advance(timedelta(hours=1))
        pipeline.tick()
    clock.set(STEPS[0] - timedelta(seconds=10))
    pipeline.tick()
    # (B's tasks in one batch, as POST /tasks/batch stores them: one by one, their
    # registration was a quarter of the test's time)
    outcomes = pipeline.app.task_service.register_many(
        BOB,
        [
            BatchItem(
                TaskCreate(
                    name=f"b-{n}",
                    at=format_instant(B_FIRST_DUE + n * B_SPACING),
                    handler_url=f"{shared.url}/b/{n}",
                ).to_spec()
            )
            for n in range(B_TASKS)
        ],
    )
    b_tasks = [outcome.task.task_id for outcome in outcomes if outcome.task is not None]
    assert len(b_tasks) == B_TASKS, [outcome.error for outcome in outcomes]
    assert in_shards(b_tasks, pipeline) == set(range(pipeline.settings.shard_count))
    worker, lossy = pipeline.app, None
    if a is not None:
        register_the_rest_of_a(pipeline, a, shared)
        lossy = LosesOneTask(pipeline.dynamodb, a.lost)
        worker = Dynacron(
            pipeline.settings,
            dynamodb=lossy,
            sqs=pipeline.sqs,
            clock=clock,
            emit_metrics=pipeline.metrics,
            dispatch_queue=pipeline.queue,
        )
    for at in STEPS:
        clock.set(at)
        if a is not None and at == STEPS[1]:
            for task_id in a.flood:
                pipeline.app.task_service.resume(ALICE, task_id)
        pipeline.tick()
        pipeline.work(worker)
        pipeline.reap()
    return Run(pipeline, b_tasks, lateness_of_b(pipeline, shared, b_tasks), lossy)


def lateness_of_b(pipeline: Pipeline, shared: Sink, b_tasks: list[str]) -> list[float]:
    """Each of B's tasks ran once, at its first attempt; seconds from due to begun."""
    calls = [d.path for d in shared.snapshot() if d.path.startswith("/b/")]
    assert sorted(calls) == sorted(f"/b/{n}" for n in range(B_TASKS))
    lateness = []
    for n, task_id in enumerate(b_tasks):
        (execution,) = pipeline.app.executions.list_for_task(task_id, 10, None).items
        assert execution.status is ExecutionStatus.SUCCEEDED, execution
        assert execution.attempt == 1
        assert execution.tenant_id == BOB
        assert execution.scheduled_at == B_FIRST_DUE + n * B_SPACING
        assert execution.started_at is not None
        lateness.append((execution.started_at - execution.scheduled_at).total_seconds())
    return lateness


def figures(lateness: list[float]) -> str:
    return f"p50 {statistics.median(lateness):.3f} s, max {max(lateness):.3f} s"


@pytest.mark.slow
def test_tenant_b_does_not_notice_a_hostile_tenant_a(
    aws: tuple[Any, Any], clock: SettableClock, sink: Sink
) -> None:
    """Finding 1, 2, 3, 4, 5 at once: a poison task stopped its shard (1), a message
    lost before begin vanished (2), a slow handler held the worker (3), a resumed
    run_all flood took every claim (4), and one tenant's Retry-After paused a shared
    host for all (5). Tenant B's 100 tasks in the same shards now all fire once, no
    later than without tenant A, on a host never paused for B."""
    # Given the window without tenant A: B's lateness as the yardstick
    alone_sink = Sink().start()
    try:
        alone = scenario(aws, clock, alone_sink, None, prefix="alone")
    finally:
        alone_sink.stop()
    # And tenant A, in the same shards, doing everything hostile at once
    drip = DripServer(0.25, drip_headers=False)
    a_sink = Sink().start()
    a = TenantA(sink=a_sink, drip=drip)

    def answer(delivery: Any) -> tuple[int, dict[str, str]]:
        if delivery.path == BUSY:
            return 429, {"Retry-After": "999999999"}
        return 200, {}

    sink.answer = answer
    try:
        # When the same window runs with A in it (the pipeline raises on anything
        # from the tick or the reaper that the test did not inject)
        run = scenario(aws, clock, sink, a, prefix="dynacron")
        pipeline = run.pipeline
        shards = set(range(pipeline.settings.shard_count))
        assert in_shards(a.flood, pipeline) == shards
        assert in_shards(list(a.poison), pipeline) == shards
        # Then every one of B's tasks fired once, no later than without A
        for n, (hostile, yardstick) in enumerate(zip(run.lateness, alone.lateness, strict=True)):
            assert hostile <= yardstick + TOLERANCE_SECONDS, (n, hostile, yardstick)
        # And B's host was never paused for B, nor did any of B's attempts wait:
        # nothing of B's was ever sent on for later (a wait, a retry, a return)
        held_for_b = [d for d, _ in pipeline.queue.delays if d.task_id in set(run.b_tasks)]
        assert held_for_b == []
        assert not paused_hosts(pipeline, BOB)
        # while A paused that host for itself, capped (finding 5)
        limits = DynamoLimitStore(pipeline.dynamodb, pipeline.settings.coordination_table)
        a_paused = limits.host(host_scope(ALICE, sink.url)).paused_until
        assert a_paused is not None
        assert a_paused <= STEPS[0] + timedelta(seconds=pipeline.settings.max_retry_after_seconds)
        assert pipeline.metrics.total(metric_names.WAITING_ON_PAUSE) > 0
        assert [d.path for d in sink.snapshot()].count(BUSY) == 1
        # And A's poison is ERROR with a reason its owner reads (finding 1)
        assert_poison_set_aside(pipeline, a)
        # And A's drip was cut off at the call's deadline, as a retryable failure (3)
        dripped = pipeline.execution(execution_id_for(a.dripping, STEPS[1]))
        assert dripped is not None
        assert "timed out" in (dripped.error or ""), dripped
        assert drip.sent < len(DripServer.RESPONSE)
        # And A's flood was sent after B's, capped per task and tick (its backlog of
        # 65 occurrences each outlasts the window), and waited on the host A paused
        flood = set(a.flood)
        flood_waits = [d for d, _ in pipeline.queue.delays if d.task_id in flood]
        per_tick = pipeline.settings.tick_max_claims_per_task
        assert len(flood_waits) == FLOOD_TASKS * per_tick * (len(STEPS) - 1)
        assert all(
            d.not_before is not None and a_paused <= d.not_before < a_paused + SECOND
            for d in flood_waits
        )
        assert not [d for d in sink.snapshot() if d.path.startswith("/a/flood/")]
        # And A's lost message is in A's dead letters, not in B's (finding 2)
        lost_id = assert_lost_is_a_dead_letter_of_a(pipeline, a)
        # And nothing failed but what was injected: the lost message's receives
        assert run.lossy is not None
        assert_only_injected_worker_failures(pipeline, run.lossy)
        summary = (
            f"hostile tenant: B {len(run.lateness)}/{B_TASKS} fired once; lateness alone "
            f"{figures(alone.lateness)}, with A {figures(run.lateness)}; A: "
            f"{len(flood_waits)} flood dispatches, {len(a.poison)} poison items + 1 poison lease "
            f"set aside, host paused for A until {format_instant(a_paused)}, "
            f"drip cut at {drip.sent}/{len(DripServer.RESPONSE)} bytes, "
            f"lost {lost_id} dead-lettered after {RECEIVES} receives"
        )
        print(summary)
    finally:
        drip.stop()
        a_sink.stop()


def paused_hosts(pipeline: Pipeline, tenant_id: str) -> list[dict[str, Any]]:
    """Host records under ``tenant_id``'s scope that hold a pause."""
    key = COORDINATION.partition_key.name
    items = pipeline.dynamodb.scan(
        TableName=pipeline.settings.coordination_table,
        FilterExpression="begins_with(#key, :scope) AND attribute_exists(paused_until)",
        ExpressionAttributeNames={"#key": key},
        ExpressionAttributeValues={":scope": {"S": f"{HOST_KEY_PREFIX}{tenant_id}/"}},
    )["Items"]
    return list(items)


def assert_poison_set_aside(pipeline: Pipeline, a: TenantA) -> None:
    app = pipeline.app
    assert len(a.poison) == len(POISON) * pipeline.settings.shard_count
    for task_id, variant in a.poison.items():
        item = raw(pipeline, task_id)
        assert DUE_INDEX.partition_key.name not in item, variant
        status, body = call(app, "GET", f"/tasks/{task_id}")
        assert status == 200, body
        assert body["status"] == "ERROR", variant
        assert body["status_reason"], variant
    broken = app.task_service.get(ALICE, a.broken_delay)
    assert broken.status is TaskStatus.ERROR
    assert a.poison_lease in (broken.status_reason or "")
    # the poison items, and the broken task its lease named
    assert pipeline.metrics.total(metric_names.TASKS_SET_ASIDE) == len(a.poison) + 1
    assert pipeline.metrics.total(metric_names.LEASES_SET_ASIDE) == 1
    # What the API let in at its bounds ran as any task does
    for task_id in a.edge[:2]:
        (execution,) = app.executions.list_for_task(task_id, 10, None).items
        assert execution.status is ExecutionStatus.SUCCEEDED


def assert_lost_is_a_dead_letter_of_a(pipeline: Pipeline, a: TenantA) -> str:
    lost_id = execution_id_for(a.lost, STEPS[1])
    assert pipeline.execution(lost_id) is None  # never began
    undelivered = undelivered_queue_url(pipeline.sqs)
    assert (
        settle_undelivered(
            pipeline.app, SqsQueues(pipeline.sqs, {UNDELIVERED_QUEUE.suffix: undelivered})
        )
        == 1
    )
    status, page = call(pipeline.app, "GET", "/dead-letters")
    assert status == 200, page
    listed = {e["execution_id"]: e for e in page["items"]}
    assert lost_id in listed, sorted(listed)
    assert "never began" in listed[lost_id]["error"]
    status, page = call(pipeline.app, "GET", "/dead-letters", principal=BOB)
    assert status == 200, page
    assert lost_id not in {e["execution_id"] for e in page["items"]}
    return lost_id


def assert_only_injected_worker_failures(pipeline: Pipeline, lossy: LosesOneTask) -> None:
    """Every record that failed, alone or with its whole batch, failed on the
    injected loss: one failure per receive of the lost message, and nothing else
    (the pipeline raises anything the test did not inject). A receive meets the
    loss once or twice: in the read of its wave's tasks in one call, if others came
    with it, then in its own read."""
    assert pipeline.record_failures == RECEIVES
    assert RECEIVES <= lossy.raised <= 2 * RECEIVES
