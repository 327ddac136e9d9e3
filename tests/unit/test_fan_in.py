"""Fan-in (decision 0058) on domain values: ``after`` as one id or a list with
``when``, its record, and the rule that says when an upstream's end starts a run."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest

from dynacron.domain.errors import InvalidRequest
from dynacron.domain.schedules.expressions import AfterSchedule
from dynacron.domain.tasks.changes import TaskChanges, apply_changes
from dynacron.domain.tasks.fan_in import on_upstream_end
from dynacron.domain.tasks.record import task_from_record, task_record
from dynacron.domain.tasks.specs import ScheduleSpec, TaskSpec, new_task, spec_of
from dynacron.domain.tasks.task import Task, UpstreamEnd

T0 = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
HOOK = "http://127.0.0.1:9/"


def after(upstreams: str | tuple[str, ...], when: str | None = None) -> Task:
    spec = TaskSpec(schedule=ScheduleSpec(after=upstreams, when=when), handler_url=HOOK)
    return new_task(spec, T0, task_id="joined", tenant_id="alice")


def end(upstream: str, seconds: float) -> UpstreamEnd:
    return UpstreamEnd(T0 + timedelta(seconds=seconds), f"{upstream}_{seconds}")


def test_after_takes_one_id_or_a_list_and_a_condition() -> None:
    one = after("a")
    assert one.schedule == AfterSchedule(upstream_task_id="a")
    several = after(("a", "b", "c"), "always")
    assert several.schedule == AfterSchedule(
        upstream_task_id="a", also_after=("b", "c"), when="always"
    )
    # What registers it again, and what the record keeps, say the same
    assert spec_of(several).schedule.after == ("a", "b", "c")
    assert spec_of(several).schedule.when == "always"
    assert task_from_record(task_record(several)) == several
    # A one-upstream success dependent's record is as before fan-in existed
    assert task_record(one)["schedule"] == {
        "kind": "after",
        "upstream_task_id": "a",
        "also_after": None,
        "when": None,
        "start_at": None,
        "end_at": None,
    }


@pytest.mark.parametrize(
    ("upstreams", "when", "field", "says"),
    [
        (("a", "a"), None, "after", "more than once"),
        (tuple(f"t{i}" for i in range(11)), None, "after", "more than 10"),
        ((), None, "after", "1 to 10"),
        (("a",), "sometimes", "when", "'success'"),
    ],
)
def test_a_bad_after_or_when_is_refused_by_name(
    upstreams: tuple[str, ...], when: str | None, field: str, says: str
) -> None:
    with pytest.raises(InvalidRequest) as refused:
        after(upstreams, when)
    assert refused.value.field == field
    assert says in refused.value.message


def test_when_applies_to_after_only_and_a_new_list_keeps_it() -> None:
    with pytest.raises(InvalidRequest, match="'after'"):
        new_task(
            TaskSpec(schedule=ScheduleSpec(rate="1 hour", when="failure"), handler_url=HOOK),
            T0,
            task_id="t",
            tenant_id="alice",
        )
    task = after(("a", "b"), "failure")
    changed = apply_changes(task, TaskChanges(after=("a", "c")), T0)
    assert changed.schedule == AfterSchedule(
        upstream_task_id="a", also_after=("c",), when="failure"
    )


def apply(
    task: Task, upstream: str, ended: UpstreamEnd, status: str = "SUCCEEDED"
) -> tuple[Task, bool]:
    """The end as a follow-up applies it, with the write assumed to succeed."""
    step = on_upstream_end(task, upstream, ended, status)
    return (step.updated or task), step.starts_run


def test_one_upstream_runs_on_every_matching_end_and_stores_nothing() -> None:
    task = after("a")
    step = on_upstream_end(task, "a", end("a", 1), "SUCCEEDED")
    assert step.starts_run
    assert step.updated is None
    assert not on_upstream_end(task, "a", end("a", 2), "FAILED").starts_run
    assert not on_upstream_end(task, "a", end("a", 2), "SKIPPED").starts_run
    assert not on_upstream_end(task, "b", end("b", 2), "SUCCEEDED").starts_run


def test_several_upstreams_run_once_per_set_of_newer_ends() -> None:
    task = after(("a", "b"))
    # a twice, then b: one run, fired by b's end
    task, ran = apply(task, "a", end("a", 1))
    assert not ran
    task, ran = apply(task, "a", end("a", 2))
    assert not ran
    task, ran = apply(task, "b", end("b", 3))
    assert ran
    assert task.fan_in is not None
    assert task.fan_in.fired == end("b", 3)
    # The same end told again (a replay) starts the same run again: its id is derived
    # from it, so it is recorded once; nothing is written
    replay = on_upstream_end(task, "b", end("b", 3), "SUCCEEDED")
    assert replay.starts_run
    assert replay.updated is None
    # An end of a that finished before the run's set (a slow follow-up) counts for nothing
    assert on_upstream_end(task, "a", end("a", 2.5), "SUCCEEDED").updated is None
    # The next set needs a newer end of each
    task, ran = apply(task, "b", end("b", 4))
    assert not ran
    task, ran = apply(task, "a", end("a", 5))
    assert ran


def test_ends_in_the_same_millisecond_are_ordered_by_execution_id() -> None:
    task = after(("a", "b"))
    task, _ = apply(task, "a", UpstreamEnd(T0, "a_1"))
    task, ran = apply(task, "b", UpstreamEnd(T0, "b_1"))
    assert ran
    # Another end at that very instant, of an id after the newest of the set, is newer
    task, _ = apply(task, "a", UpstreamEnd(T0, "c_1"))
    assert task.fan_in is not None
    assert task.fan_in.ends["a"] == UpstreamEnd(T0, "c_1")


def test_a_patched_list_drops_the_ends_of_upstreams_no_longer_named() -> None:
    task = after(("a", "b"))
    task, _ = apply(task, "b", end("b", 1))
    task = dataclasses.replace(
        task, schedule=AfterSchedule(upstream_task_id="a", also_after=("c",))
    )
    task, ran = apply(task, "a", end("a", 2))
    assert not ran
    assert task.fan_in is not None
    assert set(task.fan_in.ends) == {"a"}
