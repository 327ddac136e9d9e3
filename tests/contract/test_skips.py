"""Skips stored on a task, over every store: written whole by a replace, kept by a
claim while ahead, rewritten or dropped by the claim that passes one (decision 0055)."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from dynacron.domain.schedules.expressions import RateSchedule
from dynacron.domain.tasks.claiming import advanced, claim_occurrence
from dynacron.domain.tasks.skips import Skip
from dynacron.domain.tasks.task import DuePlacement
from dynacron.ports import AdapterSet
from tests.contract import task_changes
from tests.contract.builders import ROOMY, SHARDING, START, a_task

MINUTE = timedelta(minutes=1)


def test_a_claim_passes_a_skipped_occurrence_and_stores_what_is_left(
    adapters: AdapterSet,
) -> None:
    tasks = adapters.tasks
    # Given a recurring task with its next two occurrences and the fourth skipped
    task = a_task("job", schedule=RateSchedule(60, anchor=START))
    here = DuePlacement(bucket=SHARDING.bucket(START), shard=0)
    tasks.create_within_quota(task, here, ROOMY, "secret")
    skips = (
        Skip(by="alice", asked_at=START, at=(START, START + MINUTE), note="deploy"),
        Skip(by="bob", asked_at=START, at=(START + 3 * MINUTE,)),
    )
    skipping = dataclasses.replace(task, skips=skips, version=2)
    assert task_changes.replace(tasks, skipping, here, expected_version=1)
    assert tasks.get("job") == skipping

    # When the tick claims the first: it is passed over, the skip is cut to what is left
    now = START + timedelta(seconds=1)
    claim = claim_occurrence(skipping, now)
    assert claim is not None
    assert claim.scheduled_at is None
    placement = SHARDING.place("job", claim.next_run_at, now)
    assert task_changes.claim(tasks, claim, placement, now)
    stored = tasks.get("job")
    assert stored == advanced(skipping, claim, now)
    assert stored is not None
    assert [s.at for s in stored.skips] == [(START + MINUTE,), (START + 3 * MINUTE,)]

    # And the claim that passes the last instant of a skip drops it from the store
    later = START + MINUTE + timedelta(seconds=1)
    second = claim_occurrence(stored, later)
    assert second is not None
    assert second.scheduled_at is None
    assert task_changes.claim(
        tasks, second, SHARDING.place("job", second.next_run_at, later), later
    )
    after = tasks.get("job")
    assert after is not None
    assert after.skips == (skips[1],)
    assert after.next_run_at == START + 2 * MINUTE


def test_every_skip_passed_leaves_none_stored(adapters: AdapterSet) -> None:
    tasks = adapters.tasks
    skip = Skip(by="alice", asked_at=START, until=START + MINUTE)
    task = a_task("job", schedule=RateSchedule(60, anchor=START), skips=(skip,))
    tasks.create_within_quota(task, None, ROOMY, "secret")
    now = START + timedelta(seconds=1)
    claim = claim_occurrence(task, now)
    assert claim is not None
    assert claim.skips_left == ()
    assert task_changes.claim(tasks, claim, SHARDING.place("job", claim.next_run_at, now), now)
    stored = tasks.get("job")
    assert stored is not None
    assert stored.skips == ()
    assert stored == advanced(task, claim, now)
