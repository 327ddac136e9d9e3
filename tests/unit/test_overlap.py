"""Overlap, fixed delay and derived execution ids in the pure domain."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from dynacron.domain.schedules.expressions import FixedDelaySchedule, Window, parse_rate
from dynacron.domain.tasks.claiming import advanced, claim_occurrence
from dynacron.domain.tasks.task import (
    Overlap,
    TaskStatus,
    backfill_execution_id,
    downstream_execution_id,
    execution_id_for,
    task_id_of,
    triggered_execution_id,
)
from tests.unit.test_task_rules import T0
from tests.unit.test_task_rules import make_task as unit_task

MINUTE = timedelta(minutes=1)
EVERY_MINUTE = parse_rate("1 minute", anchor=T0)


def test_a_claim_fills_the_slot_only_for_tasks_that_have_one() -> None:
    allowing = unit_task(EVERY_MINUTE, T0)
    skipping = dataclasses.replace(allowing, overlap=Overlap.SKIP)
    for task, expected in ((allowing, None), (skipping, execution_id_for("t", T0))):
        claim = claim_occurrence(dataclasses.replace(task, task_id="t"), T0)
        assert claim is not None
        assert advanced(claim.task, claim, T0).running_execution == expected


def test_skip_passes_over_an_occurrence_due_while_the_slot_is_taken() -> None:
    task = dataclasses.replace(
        unit_task(EVERY_MINUTE, T0 + MINUTE), overlap=Overlap.SKIP, running_execution="t_x"
    )
    claim = claim_occurrence(task, T0 + MINUTE)
    assert claim is not None
    assert claim.scheduled_at is None
    assert claim.overlap_skipped == T0 + MINUTE
    assert claim.overlap_reason is not None
    assert "t_x" in claim.overlap_reason
    # The grid moves on; the slot stays with the running execution
    after = advanced(task, claim, T0 + MINUTE)
    assert after.next_run_at == T0 + 2 * MINUTE
    assert after.running_execution == "t_x"


def test_buffer_one_keeps_the_first_waiting_occurrence_and_skips_the_next() -> None:
    task = dataclasses.replace(
        unit_task(EVERY_MINUTE, T0 + MINUTE), overlap=Overlap.BUFFER_ONE, running_execution="t_x"
    )
    first = claim_occurrence(task, T0 + MINUTE)
    assert first is not None
    assert first.buffered == T0 + MINUTE
    assert first.overlap_skipped is None
    waiting = advanced(task, first, T0 + MINUTE)
    assert waiting.buffered_at == T0 + MINUTE
    second = claim_occurrence(waiting, T0 + 2 * MINUTE)
    assert second is not None
    assert second.buffered is None
    assert second.overlap_skipped == T0 + 2 * MINUTE
    assert advanced(waiting, second, T0 + 2 * MINUTE).buffered_at == T0 + MINUTE


def test_fixed_delay_waits_for_the_end_and_never_completes_on_a_claim() -> None:
    task = unit_task(FixedDelaySchedule(delay_seconds=30), T0)
    claim = claim_occurrence(task, T0)
    assert claim is not None
    assert claim.scheduled_at == T0
    assert claim.awaits_finish
    assert not claim.completes_task
    after = advanced(task, claim, T0)
    assert after.status is TaskStatus.ACTIVE
    assert after.next_run_at is None
    assert after.running_execution == execution_id_for(task.task_id, T0)


def test_fixed_delay_counts_from_the_end_and_respects_its_window() -> None:
    schedule = FixedDelaySchedule(delay_seconds=30, window=Window(end_at=T0 + MINUTE))
    assert schedule.first_run(T0) == T0
    assert schedule.next_after(T0 + timedelta(seconds=20)) == T0 + timedelta(seconds=50)
    assert schedule.next_after(T0 + timedelta(seconds=40)) is None
    assert FixedDelaySchedule(30, Window(start_at=T0 + MINUTE)).first_run(T0) == T0 + MINUTE


def test_derived_ids_belong_to_their_task_and_differ_from_scheduled_ones() -> None:
    scheduled = execution_id_for("up", T0)
    derived = [
        triggered_execution_id("up", T0),
        backfill_execution_id("up", T0),
        downstream_execution_id("down", scheduled),
    ]
    assert [task_id_of(i) for i in derived] == ["up", "up", "down"]
    assert len({scheduled, *derived}) == 4
    # Same upstream execution, same dependent id; another upstream task, another id
    assert downstream_execution_id("down", scheduled) == derived[2]
    assert downstream_execution_id("down", execution_id_for("other", T0)) != derived[2]
