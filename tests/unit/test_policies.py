"""Tick-side policies in the pure domain: catch-up, windows, jitter."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta

import pytest

from dynacron.domain.schedules.expressions import Schedule, Window, parse_at, parse_cron, parse_rate
from dynacron.domain.tasks.claiming import Claim, advanced, claim_occurrence, jitter_offset
from dynacron.domain.tasks.task import (
    MAX_JITTER_SECONDS,
    CatchUp,
    CatchUpPolicy,
    Task,
    TaskStatus,
    execution_id_for,
)
from tests.unit.test_task_rules import T0
from tests.unit.test_task_rules import make_task as unit_task

MINUTE = timedelta(minutes=1)


def make_task(
    schedule: Schedule,
    next_run_at: datetime | None,
    catchup: CatchUp = CatchUp.RUN_ONCE,
    window_seconds: int = 24 * 3600,
    jitter_seconds: int = 0,
) -> Task:
    """An active task registered well before T0, with the given policies."""
    return dataclasses.replace(
        unit_task(schedule, next_run_at),
        created_at=T0 - timedelta(days=30),
        catchup=CatchUpPolicy(catchup, window_seconds),
        jitter_seconds=jitter_seconds,
    )


def drain(task: Task, now: datetime) -> tuple[list[datetime], Task]:
    """Claim until nothing is due, as the tick does; the occurrences that ran."""
    ran: list[datetime] = []
    while (claim := claim_occurrence(task, now)) is not None:
        if claim.scheduled_at is not None:
            ran.append(claim.scheduled_at)
        task = advanced(task, claim, now)
    return ran, task


EVERY_MINUTE = parse_cron("* * * * *")
# The scheduler was down from 12:00 to 12:30:05; the 12:00..12:29 occurrences
# are more than the 60 s grace late, 12:30 is on time.
BACK_AT = T0 + timedelta(minutes=30, seconds=5)


class TestCatchUp:
    def test_on_time_occurrences_always_run_whatever_the_policy(self) -> None:
        for policy in CatchUp:
            task = make_task(EVERY_MINUTE, T0, policy)
            ran, after = drain(task, T0 + timedelta(seconds=59))
            assert ran == [T0], policy
            assert after.next_run_at == T0 + MINUTE

    def test_run_once_runs_the_earliest_missed_one_then_the_on_time_one(self) -> None:
        ran, after = drain(make_task(EVERY_MINUTE, T0, CatchUp.RUN_ONCE), BACK_AT)
        assert ran == [T0, T0 + 30 * MINUTE]
        assert after.next_run_at == T0 + 31 * MINUTE

    def test_skip_runs_only_the_on_time_one(self) -> None:
        ran, after = drain(make_task(EVERY_MINUTE, T0, CatchUp.SKIP), BACK_AT)
        assert ran == [T0 + 30 * MINUTE]
        assert after.next_run_at == T0 + 31 * MINUTE

    def test_skip_with_nothing_on_time_only_moves_the_task_on(self) -> None:
        hourly = parse_cron("0 * * * *")
        task = make_task(hourly, T0, CatchUp.SKIP)
        claim = claim_occurrence(task, T0 + timedelta(minutes=20))
        assert claim == Claim(
            task=task,
            scheduled_at=None,
            next_run_at=T0 + timedelta(hours=1),
            skipped_since=T0,
        )
        assert claim.execution_id is None
        assert claim.dispatch(T0) is None
        after = advanced(task, claim, T0 + timedelta(minutes=20))
        assert after.status is TaskStatus.ACTIVE
        assert after.last_scheduled_at is None  # nothing ran

    def test_run_all_runs_every_missed_occurrence_once_in_order(self) -> None:
        ran, after = drain(make_task(EVERY_MINUTE, T0, CatchUp.RUN_ALL), BACK_AT)
        assert ran == [T0 + i * MINUTE for i in range(31)]
        assert after.next_run_at == T0 + 31 * MINUTE

    def test_run_all_each_missed_occurrence_has_its_own_execution_id(self) -> None:
        task = make_task(EVERY_MINUTE, T0, CatchUp.RUN_ALL)
        ids = []
        while (claim := claim_occurrence(task, BACK_AT)) is not None:
            ids.append(claim.execution_id)
            task = advanced(task, claim, BACK_AT)
        assert ids == [execution_id_for("t1", T0 + i * MINUTE) for i in range(31)]

    def test_run_all_is_bounded_by_its_window(self) -> None:
        task = make_task(EVERY_MINUTE, T0, CatchUp.RUN_ALL, window_seconds=600)
        first = claim_occurrence(task, BACK_AT)
        assert first is not None
        # 12:20:05 is the oldest that may still run: 12:21 is the first kept
        assert first.scheduled_at == T0 + 21 * MINUTE
        assert first.skipped_since == T0
        ran, _ = drain(task, BACK_AT)
        assert ran == [T0 + i * MINUTE for i in range(21, 31)]

    def test_run_all_drains_across_ticks_without_skipping_or_doubling(self) -> None:
        # The tick may stop mid-way (budget); the next tick carries on from the
        # stored state, so a later 'now' only adds the occurrences that came due.
        task = make_task(EVERY_MINUTE, T0, CatchUp.RUN_ALL)
        ran: list[datetime] = []
        now = BACK_AT
        for _ in range(3):
            for _ in range(7):  # at most 7 claims per tick
                claim = claim_occurrence(task, now)
                if claim is None:
                    break
                assert claim.scheduled_at is not None
                ran.append(claim.scheduled_at)
                task = advanced(task, claim, now)
            now += timedelta(seconds=20)
        more, _ = drain(task, now)
        ran += more
        assert ran == [T0 + i * MINUTE for i in range(len(ran))]
        assert ran[-1] == T0 + 31 * MINUTE  # 12:31 came due during the catch-up

    def test_a_one_time_task_registered_a_little_late_is_on_time(self) -> None:
        at = T0 - timedelta(minutes=3)
        task = dataclasses.replace(
            make_task(parse_at(at.isoformat()), at, CatchUp.SKIP), created_at=T0
        )
        claim = claim_occurrence(task, T0 + timedelta(seconds=1))
        assert claim is not None
        assert claim.scheduled_at == at

    def test_a_missed_one_time_task_with_skip_completes_without_running(self) -> None:
        at = T0 - timedelta(hours=2)
        claim = claim_occurrence(make_task(parse_at(at.isoformat()), at, CatchUp.SKIP), T0)
        assert claim is not None
        assert claim.scheduled_at is None
        assert claim.completes_task


class TestWindow:
    def test_no_occurrence_before_start_or_after_end(self) -> None:
        window = Window(start_at=T0 + timedelta(hours=2), end_at=T0 + timedelta(hours=4))
        schedule = parse_cron("0 * * * *", window=window)
        assert schedule.first_run(T0) == T0 + timedelta(hours=2)  # start_at is inclusive
        assert schedule.next_after(T0 + timedelta(hours=3)) == T0 + timedelta(hours=4)
        assert schedule.next_after(T0 + timedelta(hours=4)) is None

    def test_after_end_the_task_completes(self) -> None:
        schedule = parse_rate("1 hour", T0, Window(end_at=T0 + timedelta(hours=1)))
        task = make_task(schedule, T0 + timedelta(hours=1))
        claim = claim_occurrence(task, T0 + timedelta(hours=1))
        assert claim is not None
        assert claim.scheduled_at == T0 + timedelta(hours=1)
        assert advanced(task, claim, T0).status is TaskStatus.COMPLETED

    def test_a_rate_keeps_its_grid_through_the_window(self) -> None:
        schedule = parse_rate("7 minutes", T0, Window(start_at=T0 + timedelta(minutes=30)))
        # 30 is not on the 7-minute grid from T0: the first is 35
        assert schedule.first_run(T0) == T0 + timedelta(minutes=35)


class TestJitter:
    def test_offset_is_deterministic_bounded_and_spread(self) -> None:
        ids = [execution_id_for(f"task-{i}", T0) for i in range(3000)]
        offsets = [jitter_offset(i, 300) for i in ids]
        assert offsets == [jitter_offset(i, 300) for i in ids]
        assert min(offsets) >= 0
        assert max(offsets) <= 300
        assert len(set(offsets)) > 250

    def test_no_jitter_no_delay(self) -> None:
        claim = claim_occurrence(make_task(EVERY_MINUTE, T0), T0)
        assert claim is not None
        dispatch = claim.dispatch(T0)
        assert dispatch is not None
        assert dispatch.delay_seconds == 0

    def test_delay_keeps_scheduled_time_and_id_and_counts_from_the_schedule(self) -> None:
        task = make_task(EVERY_MINUTE, T0, jitter_seconds=600)
        claim = claim_occurrence(task, T0 + timedelta(seconds=2))
        assert claim is not None
        offset = jitter_offset(execution_id_for("t1", T0), 600)
        dispatch = claim.dispatch(T0 + timedelta(seconds=2))
        assert dispatch is not None
        assert dispatch.scheduled_at == T0
        assert dispatch.execution_id == execution_id_for("t1", T0)
        # The tick ran 2 s late: the delay makes the start scheduled_at + offset.
        assert dispatch.delay_seconds == max(offset - 2, 0)

    @pytest.mark.parametrize("late_by", [0, 300, 899, 2000])
    def test_delay_is_within_what_sqs_allows(self, late_by: int) -> None:
        task = make_task(EVERY_MINUTE, T0, jitter_seconds=MAX_JITTER_SECONDS)
        claim = claim_occurrence(task, T0)
        assert claim is not None
        delay = claim.start_delay_seconds(T0 + timedelta(seconds=late_by))
        assert 0 <= delay <= MAX_JITTER_SECONDS
