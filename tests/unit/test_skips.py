"""Skips in the pure domain: what a request names, what a claim passes over and
drops, what a preview marks (decision 0055)."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from dynacron.domain.errors import InvalidRequest
from dynacron.domain.instants import format_instant
from dynacron.domain.schedules.expressions import FixedDelaySchedule, OneTimeSchedule, parse_rate
from dynacron.domain.schedules.previews import marking_passed_over, preview
from dynacron.domain.tasks.claiming import advanced, claim_occurrence
from dynacron.domain.tasks.record import task_from_record, task_record
from dynacron.domain.tasks.skips import (
    MAX_SKIPPED_OCCURRENCES,
    MAX_SKIPS,
    Skip,
    SkipRequest,
    added,
    removed,
    requested_skip,
    skip_covering,
    skips_ahead,
)
from dynacron.domain.tasks.task import Overlap, TaskStatus
from dynacron.domain.tasks.transitions import claim as claim_transition
from tests.unit.test_task_rules import T0, make_task

MINUTE = timedelta(minutes=1)
EVERY_MINUTE = parse_rate("1 minute", anchor=T0)


def asked(request: SkipRequest, next_run_at=T0, schedule=EVERY_MINUTE) -> Skip:  # type: ignore[no-untyped-def]
    return requested_skip(request, schedule, "UTC", next_run_at, by="alice", now=T0 - MINUTE)


def test_occurrences_names_the_next_n_from_the_next_run() -> None:
    skip = asked(SkipRequest(occurrences=3, note="deploy"))
    assert skip.at == (T0, T0 + MINUTE, T0 + 2 * MINUTE)
    assert (skip.by, skip.note) == ("alice", "deploy")
    assert skip.reason == "skipped at the request of alice: deploy"


def test_at_must_name_occurrences_still_ahead_and_until_must_skip_something() -> None:
    assert asked(SkipRequest(at=("2026-11-30T12:05:00Z",))).at == (T0 + 5 * MINUTE,)
    with pytest.raises(InvalidRequest, match="not an occurrence"):
        asked(SkipRequest(at=("2026-11-30T12:05:30Z",)))
    with pytest.raises(InvalidRequest, match="has passed"):
        asked(SkipRequest(at=("2026-11-30T11:59:00Z",)))
    with pytest.raises(InvalidRequest, match="would skip nothing"):
        asked(SkipRequest(until="2026-11-30T12:00:00Z"))
    with pytest.raises(InvalidRequest, match="exactly one"):
        asked(SkipRequest(occurrences=1, until="2026-11-30T13:00:00Z"))
    with pytest.raises(InvalidRequest, match="no grid"):
        asked(SkipRequest(occurrences=1), schedule=FixedDelaySchedule(delay_seconds=30))


def test_a_task_keeps_a_bounded_number_of_skips() -> None:
    one = asked(SkipRequest(occurrences=1))
    with pytest.raises(InvalidRequest, match=f"at most {MAX_SKIPS}"):
        added((one,) * MAX_SKIPS, one)
    many = asked(SkipRequest(occurrences=MAX_SKIPPED_OCCURRENCES))
    with pytest.raises(InvalidRequest, match="use 'until'"):
        added((many,), one)


def test_a_skipped_occurrence_is_passed_over_and_the_next_one_runs() -> None:
    # Given a task whose next occurrence is skipped
    skip = asked(SkipRequest(occurrences=1, note="deploy"))
    task = dataclasses.replace(make_task(EVERY_MINUTE, T0), skips=(skip,))

    # When the tick claims it: nothing runs, the occurrence is recorded SKIPPED with why
    claim = claim_occurrence(task, T0)
    assert claim is not None
    assert claim.scheduled_at is None
    assert claim.recorded_skip == (T0, "skipped at the request of alice: deploy")
    assert claim.next_run_at == T0 + MINUTE
    after = advanced(task, claim, T0)
    assert after.skips == ()
    assert claim_transition(claim, "k", T0).removes >= {"skips"}

    # Then the one after runs as before
    following = claim_occurrence(after, T0 + MINUTE)
    assert following is not None
    assert following.scheduled_at == T0 + MINUTE
    assert following.recorded_skip is None


def test_until_covers_every_occurrence_before_it_and_is_dropped_once_passed() -> None:
    skip = asked(SkipRequest(until="2026-11-30T12:02:00Z"))
    task = dataclasses.replace(make_task(EVERY_MINUTE, T0), skips=(skip,))
    first = claim_occurrence(task, T0)
    assert first is not None
    assert first.scheduled_at is None
    assert first.skips_left is None  # still ahead: the claim rewrites nothing of it
    task = advanced(task, first, T0)
    second = claim_occurrence(task, T0 + MINUTE)
    assert second is not None
    assert second.scheduled_at is None
    assert second.skips_left == ()
    task = advanced(task, second, T0 + MINUTE)
    third = claim_occurrence(task, T0 + 2 * MINUTE)
    assert third is not None
    assert third.scheduled_at == T0 + 2 * MINUTE


def test_a_skipped_occurrence_does_not_take_the_run_slot() -> None:
    skip = asked(SkipRequest(occurrences=1))
    task = dataclasses.replace(
        make_task(EVERY_MINUTE, T0), overlap=Overlap.SKIP, skips=(skip,), running_execution=None
    )
    claim = claim_occurrence(task, T0)
    assert claim is not None
    assert advanced(task, claim, T0).running_execution is None


def test_a_skipped_one_time_task_completes_without_running() -> None:
    skip = Skip(by="alice", asked_at=T0, at=(T0,))
    task = dataclasses.replace(make_task(OneTimeSchedule(at=T0), T0), skips=(skip,))
    claim = claim_occurrence(task, T0)
    assert claim is not None
    assert claim.scheduled_at is None
    assert claim.recorded_skip is not None
    done = advanced(task, claim, T0)
    assert (done.status, done.skips) == (TaskStatus.COMPLETED, ())


def test_removing_a_skip_before_it_is_reached() -> None:
    three = asked(SkipRequest(occurrences=3))
    until = asked(SkipRequest(until="2026-11-30T12:10:00Z"))
    assert removed((three, until), None) == ()
    left = removed((three, until), T0 + MINUTE)
    assert left[0].at == (T0, T0 + 2 * MINUTE)
    assert left[1].until == T0 + MINUTE
    assert skip_covering(left, T0 + MINUTE) is None
    assert skips_ahead(left, T0 + MINUTE) == (dataclasses.replace(three, at=(T0 + 2 * MINUTE,)),)


def test_skips_survive_the_record_and_show_in_a_preview() -> None:
    skip = asked(SkipRequest(at=("2026-11-30T12:01:00Z",), note="incident 42"))
    task = dataclasses.replace(make_task(EVERY_MINUTE, T0), skips=(skip,))
    assert task_from_record(task_record(task)) == task
    assert task_record(make_task(EVERY_MINUTE, T0))["skips"] is None

    shown = marking_passed_over(
        preview(EVERY_MINUTE, "UTC", T0, 3),
        lambda o: s.reason if (s := skip_covering(task.skips, o)) else None,
    )
    assert [format_instant(p.occurrence) for p in shown.passed_over] == ["2026-11-30T12:01:00.000Z"]
    assert shown.passed_over[0].reason.endswith("incident 42")
