"""Fan-in (decision 0058) over every store: a dependent of two upstreams, whose ends
are recorded by two finishers racing on its record, runs exactly once per set;
the records that carry it (the upstream's list of fan-in dependents, the
dependent's progress) survive the store's own writes."""

from __future__ import annotations

import dataclasses
import threading
from datetime import datetime, timedelta
from typing import Any

import pytest

from dynacron.domain.clock import SettableClock
from dynacron.domain.executions.execution import Execution, ExecutionStatus, LeaseTerms
from dynacron.domain.schedules.expressions import AfterSchedule
from dynacron.domain.tasks import transitions
from dynacron.domain.tasks.task import Task, downstream_execution_id
from dynacron.ports import AdapterSet, TaskStore
from dynacron.services.follow_ups import FAN_IN_MARK_GRACE, FollowUps, RunStarter
from tests.contract.builders import DEFAULT_TENANT, ROOMY, SHARDING, START, a_task

SECOND = timedelta(seconds=1)
TERMS = LeaseTerms(
    running=timedelta(minutes=5),
    awaiting_callback=timedelta(hours=1),
    pickup_grace=timedelta(minutes=5),
    clock_skew=timedelta(seconds=5),
)


class RacingTasks:
    """The task store, but the first read of ``task_id`` lets ``competitor`` run
    right after it: a second finisher that writes in between this one's read and
    its write."""

    def __init__(self, store: TaskStore, task_id: str) -> None:
        self._store = store
        self._task_id = task_id
        self.competitor: Any = None

    def _race(self, task_ids: Any) -> None:
        if self.competitor is not None and self._task_id in list(task_ids):
            competitor, self.competitor = self.competitor, None
            competitor()

    def read_many(self, task_ids: Any) -> Any:
        task_ids = list(task_ids)
        read = self._store.read_many(task_ids)
        self._race(task_ids)
        return read

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def follow_ups(adapters: AdapterSet, clock: SettableClock, tasks: Any = None) -> FollowUps:
    starter = RunStarter(
        executions=adapters.executions, queue=adapters.queue, clock=clock, lease_terms=TERMS
    )
    return FollowUps(
        tasks=tasks or adapters.tasks,
        executions=adapters.executions,
        starter=starter,
        sharding=SHARDING,
        clock=clock,
    )


def ended(
    task_id: str, at: datetime, status: ExecutionStatus = ExecutionStatus.SUCCEEDED
) -> Execution:
    return Execution(
        execution_id=f"{task_id}_{at:%Y%m%dT%H%M%S%f}",
        task_id=task_id,
        scheduled_at=at,
        status=status,
        attempt=1,
        started_at=at,
        completed_at=at,
    )


def registered(adapters: AdapterSet, when: str = "success") -> Task:
    """Upstreams a and b, and "joined" after both, registered as the API does."""
    tasks = adapters.tasks
    for upstream in ("a", "b"):
        tasks.create_within_quota(a_task(upstream), None, ROOMY, f"secret-{upstream}")
    joined = a_task(
        "joined",
        due=None,
        schedule=AfterSchedule(upstream_task_id="a", also_after=("b",), when=when),  # type: ignore[arg-type]
    )
    assert tasks.apply("a", transitions.mark_has_dependents(joined.tenant_id))
    assert tasks.apply(
        "b", transitions.mark_has_dependents(joined.tenant_id, fan_in_dependent="joined")
    )
    tasks.create_within_quota(joined, None, ROOMY, "secret-joined")
    return joined


def runs_of(adapters: AdapterSet, *upstreams: Execution) -> list[str]:
    """Which of the runs the upstreams' ends could have started exist."""
    candidates = [downstream_execution_id("joined", u.execution_id) for u in upstreams]
    return [c for c in candidates if adapters.executions.get(c) is not None]


def test_the_upstream_names_its_fan_in_dependent_and_keeps_it_across_writes(
    adapters: AdapterSet,
) -> None:
    registered(adapters)
    # The first upstream finds it by the dependents index; the second by its record
    assert adapters.tasks.dependents("a") == ["joined"]
    b = adapters.tasks.get("b")
    assert b is not None
    assert b.has_dependents
    assert b.fan_in_dependents == ("joined",)
    # A whole-task write of the upstream (a PATCH, a slot freed) keeps the list
    changed = dataclasses.replace(b, name="renamed", version=b.version + 1)
    assert adapters.tasks.replace(changed, None, transitions.replace(b.version))
    again = adapters.tasks.get("b")
    assert again is not None
    assert again.fan_in_dependents == ("joined",)


@pytest.mark.parametrize("same_instant", [False, True], ids=["apart", "same-millisecond"])
def test_two_finishers_racing_on_the_last_two_ends_start_one_run(
    adapters: AdapterSet, clock: SettableClock, same_instant: bool
) -> None:
    # Given a dependent of a and b, and an end of each (at the same instant, or apart)
    registered(adapters)
    end_a = ended("a", START + SECOND)
    end_b = ended("b", START + (SECOND if same_instant else 2 * SECOND))
    # And the finisher of b writing between the finisher of a's read and its write
    racing = RacingTasks(adapters.tasks, "joined")
    first = follow_ups(adapters, clock, racing)
    second = follow_ups(adapters, clock)
    racing.competitor = lambda: second.follow_up(end_b)

    # When both follow their ends up
    first.follow_up(end_a)

    # Then the dependent ran exactly once, started by the end whose write completed the set
    assert runs_of(adapters, end_a, end_b) == [
        downstream_execution_id("joined", end_a.execution_id)
    ]
    joined = adapters.tasks.get("joined")
    assert joined is not None
    assert joined.fan_in is not None
    assert joined.fan_in.fired is not None
    assert joined.fan_in.fired.execution_id == end_a.execution_id
    # And both follow-ups repeated (the reaper's replay) start nothing more
    second.follow_up(end_b)
    first.follow_up(end_a)
    assert len(runs_of(adapters, end_a, end_b)) == 1


def test_one_end_alone_starts_nothing_and_the_next_set_must_be_newer(
    adapters: AdapterSet, clock: SettableClock
) -> None:
    registered(adapters)
    finisher = follow_ups(adapters, clock)
    a1, b1 = ended("a", START + SECOND), ended("b", START + 2 * SECOND)
    finisher.follow_up(a1)
    assert runs_of(adapters, a1) == []
    finisher.follow_up(b1)
    assert runs_of(adapters, a1, b1) == [downstream_execution_id("joined", b1.execution_id)]
    # A second end of a alone starts nothing; an end of b from before the run neither
    a2 = ended("a", START + 3 * SECOND)
    late_b = dataclasses.replace(ended("b", START + SECOND), execution_id="b_late")
    finisher.follow_up(a2)
    finisher.follow_up(late_b)
    assert runs_of(adapters, a2, late_b) == []
    # A newer end of b completes the second set
    b2 = ended("b", START + 4 * SECOND)
    finisher.follow_up(b2)
    assert runs_of(adapters, a2, b2) == [downstream_execution_id("joined", b2.execution_id)]


def test_when_failure_counts_dead_letters_and_not_successes(
    adapters: AdapterSet, clock: SettableClock
) -> None:
    registered(adapters, when="failure")
    finisher = follow_ups(adapters, clock)
    a_ok, b_failed = ended("a", START + SECOND), ended("b", START + SECOND, ExecutionStatus.FAILED)
    finisher.follow_up(a_ok)
    finisher.follow_up(b_failed)
    assert runs_of(adapters, a_ok, b_failed) == []
    a_failed = ended("a", START + 2 * SECOND, ExecutionStatus.FAILED)
    finisher.follow_up(a_failed)
    assert runs_of(adapters, a_failed) == [downstream_execution_id("joined", a_failed.execution_id)]


def test_an_end_forgets_a_stale_fan_in_name_and_leaves_a_fresh_one(
    adapters: AdapterSet, clock: SettableClock
) -> None:
    # Given b naming "joined" and "ghost", whose create was refused after the mark
    registered(adapters)
    mark = transitions.mark_has_dependents(
        DEFAULT_TENANT, fan_in_dependent="ghost", marked_at=clock.now()
    )
    assert adapters.tasks.apply("b", mark)
    finisher = follow_ups(adapters, clock)
    # When b ends within the grace: the create may still be under way, the name stays
    finisher.follow_up(ended("b", START + SECOND))
    b = adapters.tasks.get("b")
    assert b is not None
    assert b.fan_in_dependents == ("ghost", "joined")
    # When b ends after it: the name is forgotten, the real dependent's kept
    clock.advance(FAN_IN_MARK_GRACE + SECOND)
    finisher.follow_up(ended("b", START + 2 * SECOND))
    b = adapters.tasks.get("b")
    assert b is not None
    assert b.fan_in_dependents == ("joined",)
    # And a repeat (the reaper's replay) writes nothing more
    finisher.follow_up(ended("b", START + 2 * SECOND))
    again = adapters.tasks.get("b")
    assert again is not None
    assert again.version == b.version


def test_an_end_of_an_upstream_whose_only_fan_in_name_was_stray_then_owes_nothing(
    adapters: AdapterSet, clock: SettableClock
) -> None:
    # Given b, with no dependent, named by a refused create long ago
    adapters.tasks.create_within_quota(a_task("b"), None, ROOMY, "secret-b")
    mark = transitions.mark_has_dependents(
        DEFAULT_TENANT, fan_in_dependent="ghost", marked_at=clock.now()
    )
    assert adapters.tasks.apply("b", mark)
    clock.advance(FAN_IN_MARK_GRACE + SECOND)
    finisher = follow_ups(adapters, clock)
    end = ended("b", START + SECOND)
    assert finisher.owes(end, adapters.tasks.get("b"))
    # When one end follows up
    finisher.follow_up(end)
    # Then the next end owes nothing: no follow-up lease, no write
    assert not finisher.owes(ended("b", START + 2 * SECOND), adapters.tasks.get("b"))


class DyingStarter:
    """A starter whose first start dies before anything is recorded: the finisher
    crashed between its write of the dependent's progress and the run's start."""

    def __init__(self, starter: RunStarter) -> None:
        self._starter = starter
        self.died = False

    def start(self, task: Task, dispatch: Any) -> bool:
        if not self.died:
            self.died = True
            raise RuntimeError("the finisher died")
        return self._starter.start(task, dispatch)


def test_a_finisher_dying_between_its_firing_write_and_the_start_loses_no_run(
    adapters: AdapterSet, clock: SettableClock
) -> None:
    # Given a dependent of a and b, and a's end counted
    registered(adapters)
    healthy = follow_ups(adapters, clock)
    a1, b1 = ended("a", START + SECOND), ended("b", START + 2 * SECOND)
    healthy.follow_up(a1)
    # And b's end completing the set, its finisher dying after the write, before the start
    dying = dataclasses.replace(healthy, starter=DyingStarter(healthy.starter))
    with pytest.raises(RuntimeError, match="died"):
        dying.follow_up(b1)
    assert runs_of(adapters, b1) == []
    # When the next set's ends are counted before the reaper repeats b's follow-up
    a2, b2 = ended("a", START + 3 * SECOND), ended("b", START + 4 * SECOND)
    healthy.follow_up(a2)
    healthy.follow_up(b2)
    healthy.follow_up(b1)  # the reaper's replay: its end no longer the one that fired

    # Then each set ran exactly once: the first started by the next end counted
    assert runs_of(adapters, a1, b1, a2, b2) == [
        downstream_execution_id("joined", b1.execution_id),
        downstream_execution_id("joined", b2.execution_id),
    ]
    first = adapters.executions.get(downstream_execution_id("joined", b1.execution_id))
    assert first is not None
    assert first.upstream is not None
    assert [end.execution_id for end in first.upstream.ends] == [b1.execution_id, a1.execution_id]
    # And every end repeated starts nothing more
    for end in (a1, b1, a2, b2):
        healthy.follow_up(end)
    assert len(runs_of(adapters, a1, b1, a2, b2)) == 2


def test_of_two_marks_racing_for_the_last_place_on_an_upstream_one_is_refused(
    adapters: AdapterSet,
) -> None:
    # Given an upstream, and two creates that each read it at the same version
    adapters.tasks.create_within_quota(a_task("b"), None, ROOMY, "secret-b")
    seen = adapters.tasks.get("b")
    assert seen is not None
    both_read = threading.Barrier(2)
    marked: dict[str, bool] = {}

    def mark(follower: str) -> None:
        both_read.wait()
        transition = transitions.mark_has_dependents(
            DEFAULT_TENANT, fan_in_dependent=follower, marked_at=START, seen_version=seen.version
        )
        marked[follower] = adapters.tasks.apply("b", transition)

    # When both mark it at once, each expecting the version it counted names at
    threads = [threading.Thread(target=mark, args=(f"x{i}",)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    # Then one mark holds and the other is refused: the upstream names one of them
    assert sorted(marked.values()) == [False, True]
    b = adapters.tasks.get("b")
    assert b is not None
    assert b.fan_in_dependents == tuple(f for f, held in marked.items() if held)
    assert b.version == seen.version + 1
