"""Overlap, fixed_delay, pause/resume/trigger/backfill/PATCH and dependencies,
through the real tick, worker, reaper and API on moto, with a clock the test moves."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest

import dynacron
from dynacron.adapters.aws.tasks import DynamoTaskStore
from dynacron.adapters.delivery.registry import HandlerRegistry
from dynacron.api.requests import TaskPatch
from dynacron.definitions.resources import DUE_INDEX
from dynacron.domain.clock import SettableClock
from dynacron.domain.errors import Conflict, InvalidRequest
from dynacron.domain.executions.execution import Execution, ExecutionStatus
from dynacron.domain.tasks.history import TaskChange
from dynacron.domain.tasks.task import DuePlacement, Task, downstream_execution_id, execution_id_for
from dynacron.domain.tasks.transitions import Replacement
from dynacron.entry.settings import LOOPBACK_NETWORKS
from dynacron.local.aws import provision
from dynacron.local.chaos import CrashAt
from dynacron.ports.faults import Boundary
from dynacron.services.executions import Completion
from dynacron.services.tasks import TaskService
from tests.conftest import START
from tests.integration.api_client import ALICE, call
from tests.pipeline import Pipeline
from tests.support import Sink

MINUTE = timedelta(minutes=1)


def at(minutes: float) -> datetime:
    return START + timedelta(minutes=minutes)


def step(pipeline: Pipeline, when: datetime) -> None:
    """Move the clock to ``when``, tick, and run whatever was sent."""
    pipeline.clock.set(when)
    pipeline.tick()
    pipeline.work()


def task(pipeline: Pipeline, task_id: str) -> Task:
    found = pipeline.app.tasks.get(task_id)
    assert found is not None
    return found


def execution(pipeline: Pipeline, execution_id: str) -> Execution:
    found = pipeline.execution(execution_id)
    assert found is not None, execution_id
    return found


def delivered_ids(sink: Sink) -> list[str]:
    return [d.body["execution_id"] for d in sink.snapshot()]


def complete(pipeline: Pipeline, sink: Sink, execution_id: str) -> None:
    """The long job behind a 202 reports success with its callback token."""
    (delivery,) = [d for d in sink.snapshot() if d.body["execution_id"] == execution_id]
    token = delivery.headers["Dynacron-Callback-Token"]
    pipeline.app.execution_service.complete(ALICE, execution_id, token, Completion.SUCCEEDED, None)


# --- overlap ---------------------------------------------------------------


def test_overlap_skip_records_the_occurrence_as_skipped_and_frees_the_slot_at_the_end(
    pipeline: Pipeline, sink: Sink
) -> None:
    # Given an every-minute task whose handler takes the job (202) and runs long
    sink.status = 202
    task_id = pipeline.register(rate="1 minute", overlap="skip", handler_url=f"{sink.url}/h")
    first, second, third = (execution_id_for(task_id, at(m)) for m in (1, 2, 3))
    step(pipeline, at(1))
    assert task(pipeline, task_id).running_execution == first
    # When the next occurrence comes while the first still runs
    step(pipeline, at(2))
    # Then it is not delivered, and is recorded SKIPPED with the reason
    assert delivered_ids(sink) == [first]
    skipped = execution(pipeline, second)
    assert skipped.status is ExecutionStatus.SKIPPED
    assert skipped.error is not None
    assert first in skipped.error
    # And once the first ends, the next occurrence runs again
    complete(pipeline, sink, first)
    assert task(pipeline, task_id).running_execution is None
    step(pipeline, at(3))
    assert delivered_ids(sink) == [first, third]
    assert task(pipeline, task_id).next_run_at == at(4)


def test_overlap_allow_runs_alongside(pipeline: Pipeline, sink: Sink) -> None:
    sink.status = 202
    task_id = pipeline.register(rate="1 minute", handler_url=f"{sink.url}/h")
    step(pipeline, at(1))
    step(pipeline, at(2))
    assert delivered_ids(sink) == [execution_id_for(task_id, at(m)) for m in (1, 2)]
    assert task(pipeline, task_id).running_execution is None


def test_buffer_one_runs_one_waiting_occurrence_after_the_running_one(
    pipeline: Pipeline, sink: Sink
) -> None:
    sink.status = 202
    task_id = pipeline.register(rate="1 minute", overlap="buffer_one", handler_url=f"{sink.url}/h")
    first, second, third = (execution_id_for(task_id, at(m)) for m in (1, 2, 3))
    step(pipeline, at(1))
    # When two more occurrences come while the first runs
    step(pipeline, at(2))
    step(pipeline, at(3))
    # Then the first of them waits, the second is skipped (only one waits)
    assert task(pipeline, task_id).buffered_at == at(2)
    assert execution(pipeline, third).status is ExecutionStatus.SKIPPED
    assert delivered_ids(sink) == [first]
    # When the first ends, the waiting one runs at once, under its own scheduled id
    sink.status = 200
    complete(pipeline, sink, first)
    pipeline.work()
    assert delivered_ids(sink) == [first, second]
    assert execution(pipeline, second).status is ExecutionStatus.SUCCEEDED
    current = task(pipeline, task_id)
    assert current.running_execution is None
    assert current.buffered_at is None
    assert current.next_run_at == at(4)


def test_the_reaper_frees_the_slot_when_the_finisher_died_right_after_the_end(
    pipeline: Pipeline, sink: Sink
) -> None:
    task_id = pipeline.register(rate="1 minute", overlap="skip", handler_url=f"{sink.url}/h")
    first = execution_id_for(task_id, at(1))
    pipeline.clock.set(at(1))
    pipeline.tick()
    # Given a worker that dies right after recording SUCCEEDED
    pipeline.work(pipeline.component(faults=CrashAt([Boundary.ENDED_NOT_FOLLOWED_UP])))
    ended = execution(pipeline, first)
    assert ended.status is ExecutionStatus.SUCCEEDED
    assert ended.lease_token is not None
    assert task(pipeline, task_id).running_execution == first
    # When its follow-up lease runs out and the reaper runs
    terms = pipeline.settings.lease_terms
    pipeline.clock.advance(terms.running + terms.clock_skew + timedelta(seconds=1))
    pipeline.reap()
    # Then the slot is free and the execution owes nothing more; the handler ran once
    assert task(pipeline, task_id).running_execution is None
    assert execution(pipeline, first).lease_token is None
    pipeline.work()
    assert sink.calls_by_key() == {first: 1}


# --- fixed delay -----------------------------------------------------------


def test_fixed_delay_is_due_a_set_time_after_the_previous_run_finished(
    pipeline: Pipeline, sink: Sink
) -> None:
    task_id = pipeline.register(fixed_delay="30 seconds", handler_url=f"{sink.url}/h")
    first = execution_id_for(task_id, START)
    assert task(pipeline, task_id).next_run_at == START
    pipeline.tick()
    # While it runs the task is out of the due index, still ACTIVE
    running = task(pipeline, task_id)
    assert running.next_run_at is None
    assert running.status.value == "ACTIVE"
    assert running.running_execution == first
    # When the run ends 7 seconds later
    pipeline.clock.advance(timedelta(seconds=7))
    pipeline.work()
    # Then the next is due 30 seconds after that end, not after the start
    assert task(pipeline, task_id).next_run_at == START + timedelta(seconds=37)
    step(pipeline, START + timedelta(seconds=36))
    assert delivered_ids(sink) == [first]
    step(pipeline, START + timedelta(seconds=37))
    assert delivered_ids(sink) == [first, execution_id_for(task_id, START + timedelta(seconds=37))]


# --- pause, resume, trigger, backfill --------------------------------------


def test_pause_leaves_the_due_index_and_resume_applies_the_catch_up_policy(
    pipeline: Pipeline, sink: Sink
) -> None:
    task_id = pipeline.register(rate="1 minute", handler_url=f"{sink.url}/h")
    pipeline.clock.set(at(0.5))
    status, view = call(pipeline.app, "POST", f"/tasks/{task_id}/pause", {"note": "maintenance"})
    assert status == 200
    assert view["status"] == "PAUSED"
    assert view["pause_note"] == "maintenance"
    item = pipeline.dynamodb.get_item(
        TableName=pipeline.settings.tasks_table, Key={"task_id": {"S": task_id}}
    )["Item"]
    assert DUE_INDEX.partition_key.name not in item
    # Nothing runs while paused
    step(pipeline, at(3.5))
    assert delivered_ids(sink) == []
    # When resumed, run_once (the default) runs the earliest missed occurrence once,
    # skips the rest, and runs the on-time one
    status, view = call(pipeline.app, "POST", f"/tasks/{task_id}/resume")
    assert status == 200
    assert view["status"] == "ACTIVE"
    assert view["pause_note"] is None
    step(pipeline, at(3.5))
    # (the two run in one batch, at once: in either order)
    assert sorted(delivered_ids(sink)) == [execution_id_for(task_id, at(m)) for m in (1, 3)]
    assert task(pipeline, task_id).next_run_at == at(4)


def test_an_execution_arriving_for_a_paused_task_is_skipped_with_the_reason(
    pipeline: Pipeline, sink: Sink
) -> None:
    task_id = pipeline.register(rate="1 minute", handler_url=f"{sink.url}/h")
    pipeline.clock.set(at(1))
    pipeline.tick()
    assert call(pipeline.app, "POST", f"/tasks/{task_id}/pause")[0] == 200
    pipeline.work()
    skipped = execution(pipeline, execution_id_for(task_id, at(1)))
    assert skipped.status is ExecutionStatus.SKIPPED
    assert skipped.error is not None
    assert "paused" in skipped.error
    assert delivered_ids(sink) == []


def test_trigger_runs_now_with_its_own_id_and_leaves_the_schedule_alone(
    pipeline: Pipeline, sink: Sink
) -> None:
    task_id = pipeline.register(rate="1 minute", handler_url=f"{sink.url}/h")
    pipeline.clock.set(at(0.25))
    status, view = call(pipeline.app, "POST", f"/tasks/{task_id}/trigger")
    assert status == 202
    assert view["execution_id"].endswith("-trigger")
    assert view["status"] == "QUEUED"
    assert view["execution_id"] != execution_id_for(task_id, at(0.25))
    assert task(pipeline, task_id).next_run_at == at(1)
    pipeline.work()
    assert delivered_ids(sink) == [view["execution_id"]]
    # Paused tasks are not triggered; unknown ones are 404
    call(pipeline.app, "POST", f"/tasks/{task_id}/pause")
    assert call(pipeline.app, "POST", f"/tasks/{task_id}/trigger")[0] == 409
    assert call(pipeline.app, "POST", "/tasks/nope/trigger")[0] == 404


def backfill(pipeline: Pipeline, task_id: str, start: str, end: str) -> tuple[int, Any]:
    body = {"from": f"2026-11-30T{start}:00Z", "to": f"2026-11-30T{end}:00Z"}
    return call(pipeline.app, "POST", f"/tasks/{task_id}/backfill", body)


def test_backfill_runs_each_occurrence_once_however_often_it_is_asked(
    pipeline: Pipeline, sink: Sink
) -> None:
    task_id = pipeline.register(cron="*/10 * * * *", handler_url=f"{sink.url}/h")
    pipeline.clock.set(at(60))
    status, first = backfill(pipeline, task_id, "12:00", "12:30")
    assert status == 202
    assert len(first["execution_ids"]) == 4
    assert first["started"] == first["execution_ids"]
    # When an overlapping range is asked for, only the new occurrences start
    status, second = backfill(pipeline, task_id, "12:20", "12:50")
    assert status == 202
    assert second["already_requested"] == first["execution_ids"][2:]
    assert len(second["started"]) == 2
    pipeline.work()
    calls = sink.calls_by_key()
    assert len(calls) == 6
    assert set(calls.values()) == {1}
    assert all(key.endswith("-backfill") for key in calls)


class DyingQueue:
    """The dispatch queue of a process that dies at its first send: after the
    trigger's or backfill's write, before the message goes out."""

    def send_later(self, dispatch: Any, delay: float) -> None:
        raise RuntimeError("the API process died")


def test_a_trigger_or_backfill_dying_before_its_send_keeps_each_execution_with_its_record(
    pipeline: Pipeline, sink: Sink
) -> None:
    # Given an API process that dies once it has written, before it sends anything
    app = pipeline.app
    task_id = pipeline.register(cron="*/10 * * * *", handler_url=f"{sink.url}/h")
    pipeline.clock.set(at(60))
    dying = dataclasses.replace(
        app.task_service, starter=dataclasses.replace(app.starter, queue=DyingQueue())
    )
    # When a trigger and a backfill die there
    with pytest.raises(RuntimeError, match="died"):
        dying.trigger(ALICE, task_id)
    with pytest.raises(RuntimeError, match="died"):
        dying.backfill(ALICE, task_id, "2026-11-30T12:00:00Z", "2026-11-30T12:10:00Z")

    # Then every execution they wrote is in their change records, as a whole
    recorded = {c.what: c for c in app.tasks.changes_page(ALICE, task_id, 10, None).items}
    assert sorted(recorded) == ["backfill", "create", "trigger"]
    trigger, backfilled = recorded["trigger"], recorded["backfill"]
    written = app.executions.list_for_task(task_id, 10, None).items
    assert sorted(e.execution_id for e in written) == sorted(
        [trigger.after["execution_id"], *backfilled.after["executions"]]
    )
    assert len(written) == 3
    # And the reaper sends them once their pickup deadline passes: each runs once
    pipeline.clock.advance(timedelta(minutes=10))
    pipeline.reap()
    pipeline.work()
    assert sorted(sink.calls_by_key()) == sorted(e.execution_id for e in written)


def test_backfill_refuses_a_range_too_large_or_in_the_future(
    pipeline: Pipeline, sink: Sink
) -> None:
    task_id = pipeline.register(cron="* * * * * *", handler_url=f"{sink.url}/h")
    pipeline.clock.set(at(60))
    status, problem = backfill(pipeline, task_id, "12:00", "12:10")
    assert status == 422
    assert problem["errors"][0]["field"] == "to"
    assert "more than 100" in problem["detail"]
    status, problem = backfill(pipeline, task_id, "13:00", "14:00")
    assert status == 422
    assert "future" in problem["detail"]
    assert pipeline.app.executions.list_for_task(task_id, 10, None).items == []


# --- PATCH -----------------------------------------------------------------


def patch(pipeline: Pipeline, task_id: str, body: dict[str, Any]) -> tuple[int, Any]:
    return call(pipeline.app, "PATCH", f"/tasks/{task_id}", body)


def test_patch_keeps_an_occurrence_already_due_and_runs_it_with_the_new_handler(
    pipeline: Pipeline, sink: Sink
) -> None:
    task_id = pipeline.register(rate="1 minute", handler_url=f"{sink.url}/old")
    # Given the 12:01 occurrence is due but not yet claimed
    pipeline.clock.set(at(1) + timedelta(milliseconds=500))
    status, view = patch(
        pipeline, task_id, {"rate": "5 minutes", "handler_url": f"{sink.url}/new", "version": 1}
    )
    assert status == 200, view
    assert view["next_run_at"] == "2026-11-30T12:01:00.000Z"
    assert view["version"] == 2
    # Then it runs once, on the new handler, and the new schedule takes over
    step(pipeline, at(1) + timedelta(milliseconds=500))
    assert [(d.path, d.body["execution_id"]) for d in sink.snapshot()] == [
        ("/new", execution_id_for(task_id, at(1)))
    ]
    assert task(pipeline, task_id).next_run_at == at(6)


def test_patch_after_dispatch_keeps_the_execution_id_and_the_worker_reads_the_new_task(
    pipeline: Pipeline, sink: Sink
) -> None:
    task_id = pipeline.register(rate="1 minute", handler_url=f"{sink.url}/old")
    pipeline.clock.set(at(1))
    pipeline.tick()
    status, _ = patch(pipeline, task_id, {"handler_url": f"{sink.url}/new", "payload": {"v": 2}})
    assert status == 200
    pipeline.work()
    (delivery,) = sink.snapshot()
    assert delivery.path == "/new"
    assert delivery.body["payload"] == {"v": 2}
    assert delivery.body["execution_id"] == execution_id_for(task_id, at(1))
    # Without a schedule field, the schedule and next_run_at stay
    assert task(pipeline, task_id).next_run_at == at(2)


def test_patch_that_changes_the_zone_recomputes_the_next_occurrence(
    pipeline: Pipeline, sink: Sink
) -> None:
    task_id = pipeline.register(cron="0 9 * * *", handler_url=f"{sink.url}/h")
    assert task(pipeline, task_id).next_run_at == datetime.fromisoformat("2026-12-01T09:00Z")
    status, view = patch(pipeline, task_id, {"timezone": "Asia/Kathmandu"})
    assert status == 200, view
    assert view["schedule"] == {"kind": "cron", "expression": "0 9 * * *"}
    # 09:00 in Kathmandu (+05:45) is 03:15 UTC
    assert view["next_run_at"] == "2026-12-01T03:15:00.000Z"


def test_patch_to_a_one_time_task_runs_once_then_completes(pipeline: Pipeline, sink: Sink) -> None:
    task_id = pipeline.register(rate="1 minute", handler_url=f"{sink.url}/h")
    step(pipeline, at(1))
    status, view = patch(pipeline, task_id, {"at": "2026-11-30T12:30:00Z"})
    assert status == 200, view
    assert view["schedule"]["kind"] == "at"
    assert view["next_run_at"] == "2026-11-30T12:30:00.000Z"
    step(pipeline, at(30))
    assert delivered_ids(sink) == [execution_id_for(task_id, at(m)) for m in (1, 30)]
    assert task(pipeline, task_id).status.value == "COMPLETED"


def test_patch_is_conditional_on_the_version_and_validated_like_a_registration(
    pipeline: Pipeline, sink: Sink
) -> None:
    task_id = pipeline.register(rate="1 minute", handler_url=f"{sink.url}/h")
    assert patch(pipeline, task_id, {"name": "x", "version": 7})[0] == 409
    status, problem = patch(pipeline, task_id, {"cron": "61 * * * *"})
    assert status == 422
    assert problem["errors"][0]["field"].startswith("cron")
    assert patch(pipeline, "nope", {"name": "x"})[0] == 404
    assert task(pipeline, task_id).version == 1


# --- dependencies ----------------------------------------------------------


def chain(pipeline: Pipeline, sink: Sink) -> tuple[str, str, str]:
    first = pipeline.register(rate="1 minute", handler_url=f"{sink.url}/a")
    second = pipeline.register(after=first, handler_url=f"{sink.url}/b")
    third = pipeline.register(after=second, handler_url=f"{sink.url}/c")
    return first, second, third


def test_a_chain_of_three_runs_in_order_once_per_upstream_success(
    pipeline: Pipeline, sink: Sink
) -> None:
    a, b, c = chain(pipeline, sink)
    assert task(pipeline, b).next_run_at is None
    step(pipeline, at(1))
    a_id = execution_id_for(a, at(1))
    b_id = downstream_execution_id(b, a_id)
    c_id = downstream_execution_id(c, b_id)
    assert [(d.path, d.body["execution_id"]) for d in sink.snapshot()] == [
        ("/a", a_id),
        ("/b", b_id),
        ("/c", c_id),
    ]
    # The dependent receives the upstream execution id and a summary of its answer
    b_delivery = sink.snapshot()[1]
    assert b_delivery.body["upstream"]["execution_id"] == a_id
    assert b_delivery.body["upstream"]["status_code"] == 200
    assert execution(pipeline, b_id).upstream is not None
    # When the upstream success is signalled again (a repeated follow-up)
    pipeline.app.follow_ups.follow_up(execution(pipeline, a_id))
    pipeline.app.follow_ups.follow_up(execution(pipeline, b_id))
    pipeline.work()
    # Then nothing runs twice; the next upstream success runs the chain again
    assert sink.calls_by_key() == {a_id: 1, b_id: 1, c_id: 1}
    step(pipeline, at(2))
    assert len(sink.snapshot()) == 6


def test_a_failed_upstream_starts_nothing(pipeline: Pipeline, sink: Sink) -> None:
    _a, b, _ = chain(pipeline, sink)
    sink.answer = lambda delivery: (400 if delivery.path == "/a" else 200, {})
    step(pipeline, at(1))
    assert [d.path for d in sink.snapshot()] == ["/a"]
    assert pipeline.app.executions.list_for_task(b, 10, None).items == []


def test_a_cycle_or_an_unknown_upstream_is_refused_naming_the_field(
    pipeline: Pipeline, sink: Sink
) -> None:
    a, _, c = chain(pipeline, sink)
    status, problem = patch(pipeline, a, {"after": c})
    assert status == 422
    assert problem["errors"] == [{"field": "after", "message": problem["errors"][0]["message"]}]
    assert "cycle" in problem["detail"]
    assert task(pipeline, a).schedule.kind == "rate"
    status, problem = call(
        pipeline.app, "POST", "/tasks", {"after": "nope", "handler_url": f"{sink.url}/x"}
    )
    assert status == 422
    assert problem["errors"][0]["field"] == "after"
    status, problem = patch(pipeline, a, {"after": a})
    assert status == 422
    assert "cycle" in problem["detail"]


def test_fan_in_refuses_a_cycle_through_any_upstream_and_another_tenant_s_task(
    pipeline: Pipeline, sink: Sink
) -> None:
    # Given a, b after a, c after b, and a lone task d
    a, b, c = chain(pipeline, sink)
    d = pipeline.register(rate="1 minute", handler_url=f"{sink.url}/d")
    # A cycle through the second upstream of a list is found (d, then c -> b -> a)
    status, problem = patch(pipeline, a, {"after": [d, c]})
    assert status == 422
    assert problem["errors"][0]["field"] == "after"
    assert f"{a} -> {c} -> {b} -> {a}" in problem["detail"]
    assert task(pipeline, a).schedule.kind == "rate"
    # Another tenant's task in the list is as unknown as a missing one; nothing is stored
    bob = "arn:aws:iam::000000000000:user/bob"
    status, theirs = call(
        pipeline.app,
        "POST",
        "/tasks",
        {"rate": "1 hour", "handler_url": f"{sink.url}/x"},
        principal=bob,
    )
    assert status == 201
    body = {"after": [d, theirs["task_id"]], "handler_url": f"{sink.url}/x"}
    status, problem = call(pipeline.app, "POST", "/tasks", body)
    assert status == 422
    assert problem["errors"][0]["field"] == "after"
    assert theirs["task_id"] in problem["detail"]
    # A list naming a task twice, or more than 10, is refused before any store is read
    status, problem = call(pipeline.app, "POST", "/tasks", {**body, "after": [d, d]})
    assert (status, problem["errors"][0]["field"]) == (422, "after")
    status, problem = call(pipeline.app, "POST", "/tasks", {**body, "after": [d] * 11})
    assert (status, problem["errors"][0]["field"]) == (422, "after")
    listed = call(pipeline.app, "GET", "/tasks")[1]["items"]
    assert {t["task_id"] for t in listed} == {a, b, c, d}


def test_a_fan_in_create_refused_for_its_handler_leaves_no_mark_on_its_upstreams(
    pipeline: Pipeline, sink: Sink
) -> None:
    # Given two lone tasks
    a = pipeline.register(rate="1 minute", handler_url=f"{sink.url}/a")
    b = pipeline.register(rate="1 minute", handler_url=f"{sink.url}/b")
    # When a create after both is refused for what it runs, or its payload
    body = {"after": [a, b], "handler": "no-such-handler"}
    status, problem = call(pipeline.app, "POST", "/tasks", body)
    assert (status, problem["errors"][0]["field"]) == (422, "handler")
    # Then neither upstream names it: b's ends owe no follow-up for it
    assert task(pipeline, b).fan_in_dependents == ()
    assert not task(pipeline, b).has_dependents


def test_an_upstream_names_at_most_so_many_fan_in_dependents(
    pipeline: Pipeline, sink: Sink, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dynacron.services.tasks, "MAX_FAN_IN_DEPENDENTS", 2)
    a = pipeline.register(rate="1 minute", handler_url=f"{sink.url}/a")
    b = pipeline.register(rate="1 minute", handler_url=f"{sink.url}/b")
    body = {"after": [a, b], "handler_url": f"{sink.url}/x"}
    for _ in range(2):
        assert call(pipeline.app, "POST", "/tasks", body)[0] == 201
    # The third after b (not first) is refused, naming after, and marks nothing
    status, problem = call(pipeline.app, "POST", "/tasks", body)
    assert (status, problem["errors"][0]["field"]) == (422, "after")
    assert b in problem["detail"]
    assert len(task(pipeline, b).fan_in_dependents) == 2
    # After b first, the dependents index carries it: no limit there
    assert call(pipeline.app, "POST", "/tasks", {**body, "after": [b, a]})[0] == 201


class ReadThenRace(DynamoTaskStore):
    """The real store, letting a competing create land right after this one reads
    the upstream it will mark."""

    competitor: Callable[[], object] | None = None
    upstream_id = ""

    def get_owned(self, tenant_id: str, task_id: str) -> Task | None:
        read = super().get_owned(tenant_id, task_id)
        if self.competitor is not None and task_id == self.upstream_id:
            competitor, self.competitor = self.competitor, None
            competitor()
        return read


def test_two_creates_racing_for_an_upstreams_last_fan_in_place_cannot_both_take_it(
    pipeline: Pipeline, sink: Sink, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an upstream b with room for one more fan-in dependent
    monkeypatch.setattr(dynacron.services.tasks, "MAX_FAN_IN_DEPENDENTS", 2)
    app = pipeline.app
    a = pipeline.register(rate="1 minute", handler_url=f"{sink.url}/a")
    b = pipeline.register(rate="1 minute", handler_url=f"{sink.url}/b")
    body = {"after": [a, b], "handler_url": f"{sink.url}/x"}
    assert call(app, "POST", "/tasks", body)[0] == 201
    racing = ReadThenRace(
        pipeline.dynamodb,
        pipeline.settings.tasks_table,
        pipeline.settings.coordination_table,
        census_table=pipeline.settings.executions_table,
    )
    service = dataclasses.replace(app.task_service, tasks=racing)
    x = pipeline.register(rate="1 minute", handler_url=f"{sink.url}/x")
    # When a create takes the place between a PATCH's read of b and its mark
    racing.upstream_id = b
    racing.competitor = lambda: call(app, "POST", "/tasks", body)
    with pytest.raises(InvalidRequest) as refused:
        service.patch(ALICE, x, TaskPatch(after=[a, b]).to_changes())

    # Then the PATCH is refused, naming after, and b names two: the bound holds
    assert refused.value.field == "after"
    assert len(task(pipeline, b).fan_in_dependents) == 2
    assert task(pipeline, x).upstream_task_id is None


class RacingTasks(DynamoTaskStore):
    """The real store, letting a competing change land just before the next write."""

    competitor: Callable[[], object] | None = None

    def replace(
        self,
        task: Task,
        placement: DuePlacement | None,
        replacement: Replacement,
        change: TaskChange | None = None,
    ) -> bool:
        if self.competitor is not None:
            competitor, self.competitor = self.competitor, None
            competitor()
        return super().replace(task, placement, replacement, change)


def test_two_changes_racing_to_close_a_cycle_cannot_both_succeed(
    pipeline: Pipeline, sink: Sink
) -> None:
    app = pipeline.app
    x = pipeline.register(rate="1 minute", handler_url=f"{sink.url}/x")
    y = pipeline.register(rate="1 minute", handler_url=f"{sink.url}/y")
    racing = RacingTasks(
        pipeline.dynamodb,
        pipeline.settings.tasks_table,
        pipeline.settings.coordination_table,
        census_table=pipeline.settings.executions_table,
    )
    service = TaskService(
        tasks=racing,
        execution_store=app.executions,
        tenants=app.tenants,
        create_keys=app.adapters.create_keys,
        starter=app.starter,
        settings=pipeline.settings.task_settings,
        clock=pipeline.clock,
        handlers=app.handlers,
        urls=app.task_service.urls,
    )
    # Given "y after x" lands between the check and the write of "x after y"
    racing.competitor = lambda: app.task_service.patch(ALICE, y, TaskPatch(after=x).to_changes())
    # Then "x after y" is refused, and no cycle exists
    with pytest.raises(Conflict):
        service.patch(ALICE, x, TaskPatch(after=y).to_changes())
    assert task(pipeline, y).upstream_task_id == x
    assert task(pipeline, x).upstream_task_id is None


def test_a_dependent_receives_what_a_python_upstream_returned(
    aws: tuple[Any, Any], clock: SettableClock, sink: Sink
) -> None:
    registry = HandlerRegistry()

    @dynacron.handler("count-rows", registry=registry)
    def count_rows(run: dynacron.ExecutionContext) -> dict[str, int]:
        return {"rows": 3}

    settings = provision(*aws, shard_count=2, delivery_allow_networks=LOOPBACK_NETWORKS)
    pipeline = Pipeline(aws, settings, clock, handlers=registry)
    upstream = pipeline.register(at="2026-11-30T12:00:00Z", handler="count-rows")
    pipeline.register(after=upstream, handler_url=f"{sink.url}/report")
    step(pipeline, START)
    (delivery,) = sink.snapshot()
    assert delivery.body["upstream"] == {
        "execution_id": execution_id_for(upstream, START),
        "status_code": None,
        "excerpt": '{"rows":3}',
    }
    upstream_execution = execution(pipeline, execution_id_for(upstream, START))
    assert upstream_execution.result is not None
    assert upstream_execution.result.excerpt == '{"rows":3}'


def test_a_paused_dependent_gets_a_skipped_execution_and_its_own_dependents_nothing(
    pipeline: Pipeline, sink: Sink
) -> None:
    a, b, c = chain(pipeline, sink)
    assert call(pipeline.app, "POST", f"/tasks/{b}/pause")[0] == 200
    step(pipeline, at(1))
    b_id = downstream_execution_id(b, execution_id_for(a, at(1)))
    skipped = execution(pipeline, b_id)
    assert skipped.status is ExecutionStatus.SKIPPED
    assert [d.path for d in sink.snapshot()] == ["/a"]
    assert pipeline.app.executions.list_for_task(c, 10, None).items == []
