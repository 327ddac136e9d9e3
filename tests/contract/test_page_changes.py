"""The changes the tick and the worker hand a store a page at a time (decision 0043):
each carried out as its one-at-a-time form would, each alone, whatever the others
come to."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from dynacron.domain.conditions import Transition
from dynacron.domain.tasks import transitions
from dynacron.domain.tasks.claiming import claim_occurrence
from dynacron.domain.tasks.task import TaskStatus
from dynacron.ports import AdapterSet, TaskStore
from tests.contract import task_changes
from tests.contract.builders import START, a_task
from tests.contract.test_tasks import create, due_ids

NOW = START + timedelta(seconds=1)
LEASE = timedelta(seconds=30)


def claim_of(tasks: TaskStore, task_id: str) -> Transition:
    stored = tasks.get(task_id)
    assert stored is not None
    claim = claim_occurrence(stored, NOW)
    assert claim is not None
    return transitions.claim(claim, None, NOW)


def test_a_page_of_claims_is_carried_out_each_alone(adapters: AdapterSet) -> None:
    tasks = adapters.tasks
    # Given five due one-time tasks, their claims read
    for name in ("first", "stale", "broken", "last"):
        create(tasks, a_task(name))
    claims = {name: claim_of(tasks, name) for name in ("first", "stale", "broken", "last")}
    # one claimed meanwhile by another tick (its claim here is stale)
    stale = tasks.get("stale")
    assert stale is not None
    other = claim_occurrence(stale, NOW)
    assert other is not None
    assert task_changes.claim(tasks, other, None, NOW)
    # and one whose change cannot be written at all (a value no store can keep)
    broken = claims["broken"]
    unwritable = dataclasses.replace(broken, sets={**broken.sets, "unwritable": object()})

    # When the page of claims is handed to the store in one call, with one for a
    # task that does not exist
    answers = tasks.apply_each(
        [
            ("first", claims["first"]),
            ("stale", claims["stale"]),
            ("broken", unwritable),
            ("missing", claims["first"]),
            ("last", claims["last"]),
        ]
    )

    # Then each is answered in order: held, refused, what it raised, refused, held
    assert answers[0] is True
    assert answers[1] is False
    assert isinstance(answers[2], Exception)
    assert answers[3] is False
    assert answers[4] is True
    # and only the two that held wrote anything
    for name in ("first", "last", "stale"):
        claimed = tasks.get(name)
        assert claimed is not None
        assert (claimed.status, claimed.version) == (TaskStatus.COMPLETED, 2)
    untouched = tasks.get("broken")
    assert untouched is not None
    assert (untouched.status, untouched.version) == (TaskStatus.ACTIVE, 1)
    assert tasks.get("missing") is None
    assert due_ids(tasks) == ["broken"]
    # and the same page again holds nowhere (each claim names the version it read)
    again = tasks.apply_each([("first", claims["first"]), ("last", claims["last"])])
    assert again == [False, False]


def test_an_empty_page_of_claims_changes_nothing(adapters: AdapterSet) -> None:
    tasks = adapters.tasks
    create(tasks, a_task("job"))
    assert tasks.apply_each([]) == []
    assert due_ids(tasks) == ["job"]
