"""The changes the tick and the worker hand a store a page at a time (decision 0043):
each carried out as its one-at-a-time form would, each alone, whatever the others
come to."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from dynacron.domain.conditions import Transition
from dynacron.domain.coordination.tenants import DEFAULT_TENANT
from dynacron.domain.executions import transitions as exec_transitions
from dynacron.domain.executions.execution import Dispatch, ExecutionStatus
from dynacron.domain.tasks import transitions
from dynacron.domain.tasks.claiming import claim_occurrence
from dynacron.domain.tasks.task import TaskStatus
from dynacron.ports import AdapterSet, Applied, ExecutionStore, TaskStore
from tests.contract import changes, task_changes
from tests.contract.builders import RETRY, START, a_dispatch, a_task
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


def begin_new(executions: ExecutionStore, dispatch: Dispatch, token: str) -> Transition:
    return exec_transitions.begin_new(
        dispatch,
        now=START,
        lease_until=START + LEASE,
        lease_token=token,
        callback_digest="digest",
        retry=RETRY,
        tenant_id=DEFAULT_TENANT,
        keeping=executions.keeping(dispatch.execution_id),
    )


def test_a_batch_of_begins_is_carried_out_each_alone(adapters: AdapterSet) -> None:
    executions = adapters.executions
    # Given a batch of four messages: two never seen, one whose execution another
    # worker is running, one whose execution has finished
    fresh, running, finished, broken, last = (
        a_dispatch(name) for name in ("fresh", "running", "finished", "broken", "last")
    )
    assert executions.apply(running.execution_id, begin_new(executions, running, "other"))
    assert executions.apply(finished.execution_id, begin_new(executions, finished, "other"))
    assert changes.finish(
        executions, finished.execution_id, "other", ExecutionStatus.SUCCEEDED, START
    )
    held_elsewhere = executions.get(running.execution_id)
    done = executions.get(finished.execution_id)
    # and a begin that cannot be written at all (a value no store can keep)
    unwritable = begin_new(executions, broken, "mine")
    unwritable = dataclasses.replace(unwritable, sets={**unwritable.sets, "unwritable": object()})

    # When the batch's begins are handed to the store in one call
    answers = executions.apply_each(
        [
            (fresh.execution_id, begin_new(executions, fresh, "mine")),
            (running.execution_id, begin_new(executions, running, "mine")),
            (finished.execution_id, begin_new(executions, finished, "mine")),
            (broken.execution_id, unwritable),
            (last.execution_id, begin_new(executions, last, "mine")),
        ]
    )

    # Then the new ones began under this worker's lease, answered with the record as it now is
    for index, dispatch in ((0, fresh), (4, last)):
        began = answers[index]
        assert isinstance(began, Applied)
        assert began.held
        assert began.execution is not None
        assert began.execution.lease_token == "mine"
        assert began.execution.status is ExecutionStatus.RUNNING
        assert executions.get(dispatch.execution_id) == began.execution
    # and each refused one alone, answered with the record that refused it, unchanged
    assert answers[1] == Applied(False, held_elsewhere)
    assert answers[2] == Applied(False, done)
    assert executions.get(running.execution_id) == held_elsewhere
    assert executions.get(finished.execution_id) == done
    # and the one that raised is answered with its exception, nothing written
    assert isinstance(answers[3], Exception)
    assert executions.get(broken.execution_id) is None
    assert executions.apply_each([]) == []
