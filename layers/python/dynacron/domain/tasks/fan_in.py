"""When an upstream's end starts a dependent (decision 0058): pure, on the dependent
as read; the follow-up writes what it decides with the version read, so of two ends
racing to complete one set exactly one write fires it.

A dependent of one upstream runs once per matching end (decision 0012; nothing is
stored). A dependent of several runs once each time every upstream has a matching
end newer than its last run: than ``FanInState.through``, the newest end of the
set that started it, compared by (``completed_at``, execution id).

The write that completes a set is recorded before its run is started, and only
``fired`` remembers which end that was: the first write after it (the next end
counted) makes sure that run was started (``unconfirmed_firing``), so a finisher
that died between its write and the start, whose replay no longer finds its end
in ``fired``, loses nothing.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from dynacron.domain.schedules.expressions import AfterSchedule, AfterWhen
from dynacron.domain.tasks.task import FanInState, Task, UpstreamEnd

# Execution statuses each ``when`` counts; SKIPPED counts for none.
MATCHING: dict[AfterWhen, frozenset[str]] = {
    "success": frozenset({"SUCCEEDED"}),
    "failure": frozenset({"FAILED"}),
    "always": frozenset({"SUCCEEDED", "FAILED"}),
}


@dataclass(frozen=True)
class FanInStep:
    """What one upstream end does to a dependent: ``updated`` to write (with the
    version read; None: nothing to write), and whether this end starts a run."""

    updated: Task | None
    starts_run: bool


NOTHING = FanInStep(updated=None, starts_run=False)


def counts(schedule: AfterSchedule, status: str) -> bool:
    """Whether an end with ``status`` is one ``schedule`` waits for."""
    return status in MATCHING[schedule.when]


def unconfirmed_firing(task: Task) -> UpstreamEnd | None:
    """The end that fired ``task``'s last run, while no end has been counted since:
    a write of the next end replaces what says that run is owed, so it first makes
    sure the run was started. None once an end newer than the set is counted (the
    write that counted it made sure)."""
    state = task.fan_in
    if state is None or state.fired is None or state.through is None:
        return None
    if any(end > state.through for end in state.ends.values()):
        return None
    return state.fired


def on_upstream_end(task: Task, upstream_task_id: str, end: UpstreamEnd, status: str) -> FanInStep:
    """What ``task`` does when ``upstream_task_id``'s execution ends as ``end`` with
    ``status``. Repeatable: the same end again writes nothing, and starts the run
    again only if it was this end that fired (the run's id is derived from it, so
    starting it twice records it once)."""
    schedule = task.schedule
    if not isinstance(schedule, AfterSchedule):
        return NOTHING
    if upstream_task_id not in schedule.upstream_task_ids or not counts(schedule, status):
        return NOTHING
    if not schedule.fans_in:
        return FanInStep(updated=None, starts_run=True)
    state = task.fan_in or FanInState()
    if state.fired == end:
        return FanInStep(updated=None, starts_run=True)  # a replay of the firing end
    last = state.ends.get(upstream_task_id)
    if last is not None and last >= end:
        return NOTHING  # an older or the same end, told again or late
    if state.through is not None and end <= state.through:
        return NOTHING  # not newer than the last run's set: that run stood in for it
    ends = {
        upstream: recorded
        for upstream, recorded in {**state.ends, upstream_task_id: end}.items()
        # An upstream removed by a PATCH of ``after`` no longer counts.
        if upstream in schedule.upstream_task_ids
    }
    complete = all(
        upstream in ends and (state.through is None or ends[upstream] > state.through)
        for upstream in schedule.upstream_task_ids
    )
    if complete:
        fan_in = FanInState(ends=ends, fired=end, through=max(ends.values()))
    else:
        fan_in = FanInState(ends=ends, fired=state.fired, through=state.through)
    updated = dataclasses.replace(task, fan_in=fan_in, version=task.version + 1)
    return FanInStep(updated=updated, starts_run=complete)
