"""Finding 1, as a hostile tenant: a poison task must not stop a shard.

Tenant A's poison items are written straight into the tasks table with boto3
(as a bug, a hand edit or a future migration could): a year without its
leading zero, a cron stored before parsers took ASCII only, a schedule kind nobody
knows, garbage fields. They sit in the same shards and the same page as tenant
B's tasks, and sort ahead of them. B's tasks all fire on time; A's are ERROR
with a reason their owner can read; the tick loop and the reaper go on.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import json
from datetime import datetime, timedelta
from typing import Any

import pytest
from rich.console import Console

from dynacron.adapters.aws.tasks import DynamoTaskStore
from dynacron.adapters.powertools.metrics import MetricTotals
from dynacron.api.requests import TaskCreate
from dynacron.api.responses import TaskView
from dynacron.cli import tables as cli_tables
from dynacron.definitions import metric_names
from dynacron.definitions.resources import DUE_INDEX
from dynacron.definitions.tick_timing import LoopTiming
from dynacron.domain.clock import SettableClock
from dynacron.domain.conditions import Transition
from dynacron.domain.instants import format_instant
from dynacron.domain.tasks.history import TaskChange
from dynacron.domain.tasks.task import TaskStatus, due_bucket_key, execution_id_for, shard_for
from dynacron.entry.composition import Dynacron
from dynacron.entry.settings import LOOPBACK_NETWORKS
from dynacron.local.aws import provision
from dynacron.ports.faults import Boundary, Faults
from dynacron.services.tick import Ticker
from dynacron.services.tick_loop import LoopEnd, ShardTickLoop
from tests.conftest import START, sleep_moving
from tests.integration.api_client import ALICE, call
from tests.pipeline import Pipeline
from tests.support import FakeLambdaContext, RaiseAt, Sink

BOB = "arn:aws:iam::000000000000:user/bob"
HOOK = "http://127.0.0.1:9/hook"
B_TASKS = 30
B_DUE = START + timedelta(seconds=30)
# A's poison falls due first, so it sorts ahead of B's tasks in the due index.
POISON_DUE = START + timedelta(seconds=20)


def raw(pipeline: Pipeline, task_id: str) -> dict[str, Any]:
    item = pipeline.dynamodb.get_item(
        TableName=pipeline.settings.tasks_table, Key={"task_id": {"S": task_id}}
    ).get("Item")
    assert item is not None
    return dict(item)


def ids_in_shard(shard: int, shard_count: int, prefix: str) -> Any:
    for n in itertools.count():
        task_id = f"{prefix}{n:04d}"
        if shard_for(task_id, shard_count) == shard:
            yield task_id


def rate_schedule(**fields: dict[str, Any]) -> dict[str, Any]:
    return {
        "M": {
            "kind": {"S": "rate"},
            "expression": {"S": "1 minute"},
            "every_seconds": {"N": "60"},
            "anchor": {"S": format_instant(POISON_DUE)},
            **fields,
        }
    }


# Each variant: the attributes that replace a valid item's.
POISON: dict[str, dict[str, Any]] = {
    # "0999-01-01T00:00:00Z" was once stored as "999-01-01T…": unreadable ever after.
    "bad-year": {"schedule": rate_schedule(start_at={"S": "999-01-01T00:00:00.000Z"})},
    # A cron stored before the parsers took ASCII digits only: it no longer compiles.
    "non-ascii-cron": {
        "schedule": {
            "M": {
                "kind": {"S": "cron"},
                "expression": {"S": "\u00b2 * * * *"},
                "timezone": {"S": "UTC"},
            }
        }
    },
    "unknown-kind": {"schedule": {"M": {"kind": {"S": "lunar"}, "phase": {"S": "full"}}}},
    "garbage": {"payload": {"S": "{not json"}, "version": {"S": "seven"}, "retry": {"L": []}},
}


def write_poison(
    pipeline: Pipeline, template: dict[str, Any], variants: list[str] | None = None
) -> dict[str, str]:
    """Poison variants (default: all), once in each shard; returns task id -> variant."""
    written: dict[str, str] = {}
    count = pipeline.settings.shard_count
    for shard in range(count):
        ids = ids_in_shard(shard, count, "poison")
        for variant in variants or list(POISON):
            fields = POISON[variant]
            task_id = f"{next(ids)}-{variant}"
            while shard_for(task_id, count) != shard:
                task_id = f"{next(ids)}-{variant}"
            item = copy.deepcopy(template) | copy.deepcopy(fields)
            item["task_id"] = {"S": task_id}
            item["next_run_at"] = {"S": format_instant(POISON_DUE)}
            bucket = pipeline.settings.sharding.bucket(POISON_DUE)
            item[DUE_INDEX.partition_key.name] = {"S": due_bucket_key(bucket, shard)}
            pipeline.dynamodb.put_item(TableName=pipeline.settings.tasks_table, Item=item)
            written[task_id] = variant
    return written


def register_b(pipeline: Pipeline, sink: Sink, count: int = B_TASKS) -> list[str]:
    return [
        pipeline.app.task_service.register(
            BOB,
            TaskCreate(
                name=f"b-{n}", at=format_instant(B_DUE), handler_url=f"{sink.url}/b/{n}"
            ).to_spec(),
        ).task_id
        for n in range(count)
    ]


def poison_beside_b(
    pipeline: Pipeline, sink: Sink, variants: list[str] | None = None
) -> tuple[list[str], dict[str, str]]:
    """B's on-time tasks, and A's poison items in every shard, ahead of B's."""
    a_task = pipeline.register(rate="1 minute", handler_url=f"{sink.url}/a")
    b_tasks = register_b(pipeline, sink)
    return b_tasks, write_poison(pipeline, raw(pipeline, a_task), variants)


@pytest.fixture(params=["all", *POISON])
def poisoned(
    request: pytest.FixtureRequest, pipeline: Pipeline, sink: Sink
) -> tuple[list[str], dict[str, str]]:
    """Each variant alone, then all of them at once."""
    return poison_beside_b(pipeline, sink, None if request.param == "all" else [request.param])


def test_poison_items_are_set_aside_and_every_other_task_fires_on_time(
    pipeline: Pipeline, sink: Sink, poisoned: tuple[list[str], dict[str, str]]
) -> None:
    """Finding 1: one poison task stopped its whole shard, every tick."""
    b_tasks, poison = poisoned
    # Given A's poison sorted ahead of B's tasks in both shards
    pipeline.clock.set(B_DUE)
    # When the tick runs (it raises nothing: the pipeline would fail the test)
    reports = pipeline.app.ticker.tick()
    # Then every B task was claimed, on time, in this one tick
    assert sum(r.claimed for r in reports) == B_TASKS
    assert all(late == 0 for r in reports for late in r.lateness_seconds)
    assert sum(r.set_aside for r in reports) == len(poison)
    for task_id in b_tasks:
        task = pipeline.app.tasks.get(task_id)
        assert task is not None
        assert task.last_scheduled_at == B_DUE
    # And each ran once
    pipeline.work()
    assert sorted(d.path for d in sink.snapshot()) == sorted(f"/b/{n}" for n in range(B_TASKS))
    # And each poison item is ERROR, with a reason, out of the due index
    for task_id, variant in poison.items():
        item = raw(pipeline, task_id)
        assert item["status"] == {"S": TaskStatus.ERROR.value}, variant
        assert item["status_reason"]["S"], variant
        assert DUE_INDEX.partition_key.name not in item, variant
    assert pipeline.metrics.total(metric_names.TASKS_SET_ASIDE) == len(poison)
    # And the next ticks find nothing more to do, and raise nothing
    pipeline.clock.advance(timedelta(seconds=1))
    assert pipeline.tick() == 0
    assert pipeline.metrics.total(metric_names.TASKS_SET_ASIDE) == len(poison)


def test_the_owner_sees_why_each_poison_task_was_set_aside(pipeline: Pipeline, sink: Sink) -> None:
    """Finding 1: the reason is where the owner looks, GET /tasks/{id} and GET /tasks."""
    _, poison = poison_beside_b(pipeline, sink)
    pipeline.clock.set(B_DUE)
    pipeline.tick()
    app = pipeline.app
    reasons = {
        "bad-year": "999-01-01",
        "non-ascii-cron": "ASCII",
        "unknown-kind": "lunar",
        "garbage": "cannot be read",
    }
    for task_id, variant in poison.items():
        status, body = call(app, "GET", f"/tasks/{task_id}")
        assert status == 200, body
        assert body["status"] == "ERROR"
        assert reasons[variant] in body["status_reason"], body["status_reason"]
    # And the CLI's table shows the reason beside the status
    table = cli_tables.tasks(TaskView.model_validate(body))
    console = Console(width=400, record=True)
    console.print(table)
    assert "ERROR: " in console.export_text()
    # A's listing shows them too (one unreadable item does not break the page)
    status, page = call(app, "GET", "/tasks", limit=100)
    assert status == 200, page
    listed = {t["task_id"]: t for t in page["items"]}
    assert {listed[t]["status"] for t in poison} == {"ERROR"}
    # B never sees A's tasks
    status, page = call(app, "GET", "/tasks", principal=BOB, limit=100)
    assert status == 200
    assert not set(poison) & {t["task_id"] for t in page["items"]}


def lease_shard_of(pipeline: Pipeline, execution_id: str) -> int:
    return shard_for(execution_id, pipeline.app.executions.lease_shards)


def write_poison_lease(
    pipeline: Pipeline, task_id: str, lease_shard: int, *, holds_slot: bool = False
) -> str:
    """A SUCCEEDED execution of ``task_id`` whose follow-up lease ran out long ago,
    in ``lease_shard``: the reaper must do what its end owed."""
    for second in itertools.count():
        scheduled_at = START - timedelta(hours=1, seconds=-second)
        execution_id = execution_id_for(task_id, scheduled_at)
        if lease_shard_of(pipeline, execution_id) == lease_shard:
            break
    pipeline.dynamodb.put_item(
        TableName=pipeline.settings.executions_table,
        Item={
            "task_id": {"S": task_id},
            "execution_id": {"S": execution_id},
            "tenant_id": {"S": ALICE},
            "scheduled_at": {"S": format_instant(scheduled_at)},
            "completed_at": {"S": format_instant(START - timedelta(minutes=30))},
            "status": {"S": "SUCCEEDED"},
            "attempt": {"N": "1"},
            "lease_token": {"S": "follow-up"},
            "lease_until": {"S": format_instant(START - timedelta(minutes=20))},
            "lease_shard": {"S": str(lease_shard)},
        },
    )
    if holds_slot:
        pipeline.dynamodb.update_item(
            TableName=pipeline.settings.tasks_table,
            Key={"task_id": {"S": task_id}},
            UpdateExpression="SET running_execution = :id REMOVE next_run_at, #bucket",
            ExpressionAttributeNames={"#bucket": DUE_INDEX.partition_key.name},
            ExpressionAttributeValues={":id": {"S": execution_id}},
        )
    return execution_id


def test_the_reaper_sweeps_past_a_poison_lease(pipeline: Pipeline, sink: Sink) -> None:
    """Finding 1: a lease whose handling raised crashed the reaper every minute, and
    no lease behind it in that shard was ever reaped."""
    app = pipeline.app
    lease_shards = app.executions.lease_shards
    # Given B's executions whose messages were lost, in every lease shard
    b_runs: list[str] = []
    while len(b_runs) < 16 or {lease_shard_of(pipeline, e) for e in b_runs} != set(
        range(lease_shards)
    ):
        task = app.task_service.register(
            BOB, TaskCreate(rate="1 hour", handler_url=f"{sink.url}/b/{len(b_runs)}").to_spec()
        )
        b_runs.append(app.task_service.trigger(BOB, task.task_id).execution_id)
    pipeline.sqs.purge_queue(QueueUrl=pipeline.settings.dispatch_queue_url)
    # And, ahead of them in every lease shard, follow-up leases the reaper cannot handle:
    # one of a fixed_delay task whose delay became unreadable while its run was out
    broken = pipeline.register(fixed_delay="1 hour", handler_url=f"{sink.url}/a")
    pipeline.dynamodb.update_item(
        TableName=pipeline.settings.tasks_table,
        Key={"task_id": {"S": broken}},
        UpdateExpression="SET #schedule.delay_seconds = :seven",
        ExpressionAttributeNames={"#schedule": "schedule"},
        ExpressionAttributeValues={":seven": {"S": "seven"}},
    )
    slot_holder = write_poison_lease(pipeline, broken, 0, holds_slot=True)
    # and, in every shard, one of a task that cannot even be read
    unreadable = pipeline.register(rate="1 hour", handler_url=f"{sink.url}/a")
    pipeline.dynamodb.update_item(
        TableName=pipeline.settings.tasks_table,
        Key={"task_id": {"S": unreadable}},
        UpdateExpression="SET #schedule.kind = :lunar",
        ExpressionAttributeNames={"#schedule": "schedule"},
        ExpressionAttributeValues={":lunar": {"S": "lunar"}},
    )
    poison = [slot_holder] + [
        write_poison_lease(pipeline, unreadable, shard) for shard in range(lease_shards)
    ]
    terms = pipeline.settings.lease_terms
    pipeline.clock.advance(terms.pickup_grace + terms.clock_skew + timedelta(seconds=1))
    # When the reaper runs (raising nothing: the pipeline would fail the test)
    report = pipeline.reap()
    # Then every one of B's lost executions was sent again, and ran
    assert report["RESENT"] == len(b_runs)
    assert report["set_aside"] == len(poison)
    pipeline.work()
    assert sorted(d.path for d in sink.snapshot()) == sorted(f"/b/{n}" for n in range(len(b_runs)))
    # And each poison lease is out of the sweep, with the reason on it
    for execution_id in poison:
        item = pipeline.dynamodb.get_item(
            TableName=pipeline.settings.executions_table,
            Key={
                "task_id": {"S": execution_id.rpartition("_")[0]},
                "execution_id": {"S": execution_id},
            },
        )["Item"]
        assert "lease_shard" not in item
        assert item["set_aside_reason"]["S"]
    assert pipeline.metrics.total(metric_names.LEASES_SET_ASIDE) == len(poison)
    # And the owner sees why: the tasks are ERROR, the slot holder's slot is free
    held = app.task_service.get(ALICE, broken)
    assert held.status is TaskStatus.ERROR
    assert slot_holder in (held.status_reason or "")
    assert "seven" in (held.status_reason or "")
    assert held.running_execution is None
    assert app.task_service.get(ALICE, unreadable).status is TaskStatus.ERROR
    # And the next runs meet none of them again
    pipeline.clock.advance(timedelta(minutes=1))
    assert pipeline.reap() == {"expired": 0, "reaped": 0}
    # And a PATCH with a sane schedule brings the task back
    status, body = call(app, "PATCH", f"/tasks/{broken}", {"fixed_delay": "1 hour"})
    assert status == 200, body
    assert body["status"] == "ACTIVE"
    assert body["status_reason"] is None
    assert body["next_run_at"] is not None


def looping_system(
    aws: tuple[Any, Any], clock: SettableClock, faults: Faults, **overrides: Any
) -> tuple[Dynacron, MetricTotals, list[dict[str, Any]]]:
    """One shard, worked by the deployed tick loop; metrics and their documents kept."""
    dynamodb, sqs = aws
    settings = provision(
        dynamodb,
        sqs,
        clock=clock,
        shard_count=1,
        delivery_allow_networks=LOOPBACK_NETWORKS,
        **overrides,
    )
    totals, documents = MetricTotals(), []

    def emit(document: dict[str, Any]) -> None:
        documents.append(document)
        totals(document)

    system = Dynacron(
        settings,
        dynamodb=dynamodb,
        sqs=sqs,
        clock=clock,
        sleep=sleep_moving(clock),
        faults=faults,
        emit_metrics=emit,
    )
    return system, totals, documents


def test_the_tick_loop_survives_ticks_that_raise(
    aws: tuple[Any, Any], clock: SettableClock
) -> None:
    """Finding 1: the deployed tick loop ended on the first exception of a tick, so
    the shard idled until the next minute's invocation, which failed the same way."""
    faults = RaiseAt(Boundary.TICK_SENT_NOT_CLAIMED, times=3)
    system, totals, documents = looping_system(aws, clock, faults)
    # Given a task every 10 s, and a tick whose first three sends end in an exception
    system.task_service.register(BOB, TaskCreate(handler_url=HOOK, rate="10 seconds").to_spec())
    clock.advance(timedelta(milliseconds=300))
    context = FakeLambdaContext(aws_request_id="invocation-1", remaining_millis=120_000)
    # When the invocation runs to its deadline
    result = system.tick({"shard": 0, "loop": True}, context)
    # Then it kept ticking to the end, every occurrence claimed in the end
    assert faults.left == 0
    assert result["ended"] == LoopEnd.DEADLINE.value
    assert result["ticks"] >= 90
    assert result["claimed"] == 10
    assert result["failed_ticks"] == 3
    # And each failure was counted, and metrics reached CloudWatch while it ran
    assert totals.total(metric_names.TICK_FAILURES) == 3
    assert len(documents) > 50


def test_a_long_tick_stops_before_its_lease_runs_out(
    aws: tuple[Any, Any], clock: SettableClock
) -> None:
    """Finding 1: a tick of tick_max_claims claims at 50 claims/s lasts 40 s, longer
    than the 30 s lease it runs under: another invocation could take the shard over
    in the middle of it. Every claim must be made while the lease is held."""
    timing = LoopTiming()
    seconds_per_claim = 0.2
    due = int(timing.lease_seconds / seconds_per_claim) + 30  # more than one lease's worth

    claims_at: list[tuple[datetime, datetime]] = []

    class SlowClaims:
        """Each claim takes 0.2 s of the test clock; notes the lease's end at each."""

        def reached(self, boundary: Boundary) -> None:
            if boundary is Boundary.TICK_CLAIMED_ONE:
                now = clock.advance(timedelta(seconds=seconds_per_claim))
                lease = system.leases.get(0)
                assert lease is not None
                claims_at.append((now, lease.lease_until))

    system, _, _ = looping_system(aws, clock, SlowClaims(), tick_concurrency=1, tick_page_size=10)
    # Given more tasks due at once than one lease's worth of claims
    at = format_instant(clock.now() + timedelta(seconds=1))
    for n in range(due):
        system.task_service.register(
            BOB, TaskCreate(handler_url=HOOK, at=at, name=f"t{n}").to_spec()
        )
    clock.advance(timedelta(seconds=1, milliseconds=300))
    loop = ShardTickLoop(
        ticker=system.ticker,
        leases=system.leases,
        clock=clock,
        shard=0,
        owner="holder",
        deadline=clock.now() + timedelta(minutes=5),
        timing=timing,
    )
    # When the loop steps until everything due is claimed
    while loop.report.claimed < due:
        pause = loop.step()
        assert pause is not None
        clock.advance(timedelta(seconds=pause))
    # Then every claim was made under a held lease: the first tick stopped short
    assert len(claims_at) == due
    late = [(now, until) for now, until in claims_at if now >= until]
    assert not late, f"{len(late)} claims after the lease ended, first {late[0]}"
    assert loop.report.cut_short >= 1


def test_the_owner_repairs_or_retries_a_task_set_aside(pipeline: Pipeline, sink: Sink) -> None:
    """Finding 1: what the owner can do with an ERROR task (README, HTTP API)."""
    app = pipeline.app
    _, poison = poison_beside_b(pipeline, sink, ["unknown-kind", "non-ascii-cron"])
    pipeline.clock.set(B_DUE)
    pipeline.tick()
    unreadable = next(t for t, v in poison.items() if v == "unknown-kind")
    broken = next(t for t, v in poison.items() if v == "non-ascii-cron")
    # An unreadable schedule is shown as such, and only a new one repairs it
    status, body = call(app, "GET", f"/tasks/{unreadable}")
    assert body["schedule"] == {"kind": "unreadable", "expression": ""}
    status, body = call(app, "PATCH", f"/tasks/{unreadable}", {"timezone": "Europe/Berlin"})
    assert status == 422, body
    assert "schedule" in json.dumps(body)
    assert call(app, "POST", f"/tasks/{unreadable}/resume")[0] == 422
    # pause and trigger refuse an ERROR task
    assert call(app, "POST", f"/tasks/{broken}/pause")[0] == 409
    assert call(app, "POST", f"/tasks/{broken}/trigger")[0] == 409
    status, body = call(app, "PATCH", f"/tasks/{unreadable}", {"rate": "1 minute"})
    assert status == 200, body
    assert (body["status"], body["status_reason"]) == ("ACTIVE", None)
    assert body["schedule"]["kind"] == "rate"
    # resume tries the non-ASCII cron again as it is: it is set aside again
    status, body = call(app, "POST", f"/tasks/{broken}/resume")
    assert status == 200, body
    assert body["status"] == "ACTIVE"
    # And the repaired task fires at its next occurrence, the other is ERROR again
    pipeline.clock.advance(timedelta(minutes=1))
    pipeline.tick()
    repaired = app.tasks.get(unreadable)
    assert repaired is not None
    assert repaired.last_scheduled_at is not None
    assert app.task_service.get(ALICE, broken).status is TaskStatus.ERROR


class OneClaimRaises(DynamoTaskStore):
    """A claim write that raises for one task only (not an infrastructure error)."""

    def __init__(self, client: Any, table: str, failing_task_id: str, census_table: str) -> None:
        super().__init__(client, table, census_table=census_table)
        self._failing = failing_task_id

    def apply(self, task_id: str, transition: Transition, change: TaskChange | None = None) -> bool:
        if task_id == self._failing and transition.move == "claim":
            raise ValueError("cannot write this task's claim")
        return super().apply(task_id, transition, change)


@pytest.mark.parametrize("concurrency", [1, 16])
def test_a_claim_that_raises_sets_its_task_aside_and_the_page_goes_on(
    system: Dynacron, aws: tuple[Any, Any], clock: SettableClock, concurrency: int
) -> None:
    """Finding 1: an exception from one claim ended the page (and the next ticks)."""
    at = format_instant(clock.now() + timedelta(seconds=1))
    task_ids = [
        system.task_service.register(BOB, TaskCreate(handler_url=HOOK, at=at).to_spec()).task_id
        for _ in range(20)
    ]
    clock.advance(timedelta(seconds=2))
    ticker = Ticker(
        tasks=OneClaimRaises(
            aws[0], system.settings.tasks_table, task_ids[7], system.settings.executions_table
        ),
        executions=system.executions,
        queue=system.queue,
        cursors=system.cursors,
        settings=dataclasses.replace(system.settings, tick_concurrency=concurrency).tick_settings,
        clock=clock,
    )
    reports = ticker.tick()
    assert sum(r.claimed for r in reports) == 19
    assert sum(r.set_aside for r in reports) == 1
    tasks = {t.task_id: t for t in system.tasks.get_many(task_ids)}
    assert tasks.pop(task_ids[7]).status is TaskStatus.ERROR
    assert {t.status for t in tasks.values()} == {TaskStatus.COMPLETED}
