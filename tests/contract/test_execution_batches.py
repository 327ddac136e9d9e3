"""A worker's batch of begins, and of ends, handed to the execution store in one call
(``ExecutionStore.apply_each``): each carried out as ``apply_returning`` would, each
alone, whatever the others come to."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from dynacron.domain.conditions import Transition
from dynacron.domain.coordination.tenants import DEFAULT_TENANT
from dynacron.domain.executions import transitions
from dynacron.domain.executions.execution import Dispatch, ExecutionStatus, ResultSummary
from dynacron.ports import AdapterSet, Applied, ExecutionStore
from tests.contract import changes
from tests.contract.builders import RETRY, START, a_dispatch, call_in_progress

LEASE = timedelta(seconds=30)
LATER = START + timedelta(seconds=2)


def begin_new(executions: ExecutionStore, dispatch: Dispatch, token: str) -> Transition:
    return transitions.begin_new(
        dispatch,
        now=START,
        lease_until=START + LEASE,
        lease_token=token,
        callback_digest="digest",
        retry=RETRY,
        tenant_id=DEFAULT_TENANT,
        call=call_in_progress(START),
        keeping=executions.keeping(dispatch.execution_id),
    )


def unwritable(change: Transition) -> Transition:
    """``change`` with a value no store can keep: carrying it out raises."""
    return dataclasses.replace(change, sets={**change.sets, "unwritable": object()})


def succeed(executions: ExecutionStore, execution_id: str, token: str) -> Transition:
    return transitions.finish(
        token,
        ExecutionStatus.SUCCEEDED,
        LATER,
        result=ResultSummary(200, "ok"),
        keeping=executions.keeping(execution_id),
    )


def test_a_batch_of_begins_is_carried_out_each_alone(adapters: AdapterSet) -> None:
    executions = adapters.executions
    # Given a batch of five messages: two never seen, one whose execution another
    # worker is running, one whose execution has finished, and one whose begin
    # cannot be written at all
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

    # When the batch's begins are handed to the store in one call
    answers = executions.apply_each(
        [
            (fresh.execution_id, begin_new(executions, fresh, "mine")),
            (running.execution_id, begin_new(executions, running, "mine")),
            (finished.execution_id, begin_new(executions, finished, "mine")),
            (broken.execution_id, unwritable(begin_new(executions, broken, "mine"))),
            (last.execution_id, begin_new(executions, last, "mine")),
        ]
    )

    # Then the new ones began under this worker's lease, with their handler-call
    # record, answered with the record as it now is
    for index, dispatch in ((0, fresh), (4, last)):
        began = answers[index]
        assert isinstance(began, Applied)
        assert began.held
        assert began.execution is not None
        assert began.execution.lease_token == "mine"
        assert began.execution.status is ExecutionStatus.RUNNING
        assert began.call == call_in_progress(START)
        assert executions.get(dispatch.execution_id) == began.execution
    # and each refused one alone, answered with the record that refused it, unchanged
    assert answers[1] == Applied(False, held_elsewhere, call_in_progress(START))
    assert answers[2] == Applied(False, done, executions.held_call(finished.execution_id))
    assert executions.get(running.execution_id) == held_elsewhere
    assert executions.get(finished.execution_id) == done
    # and the one that raised is answered with its exception, nothing written
    assert isinstance(answers[3], Exception)
    assert executions.get(broken.execution_id) is None


def test_a_batch_of_ends_is_carried_out_each_alone(adapters: AdapterSet) -> None:
    executions = adapters.executions
    # Given three attempts this worker began, one of them taken over by the reaper
    # since (its lease token is no longer this worker's), and one whose end cannot
    # be written
    first, lost, broken = (a_dispatch(name) for name in ("first", "lost", "broken"))
    for dispatch in (first, lost, broken):
        assert executions.apply(dispatch.execution_id, begin_new(executions, dispatch, "mine"))
    take_over = transitions.take_over(
        "mine",
        cutoff=START + LEASE + timedelta(seconds=1),
        new_token="reaper",
        lease_until=LATER + LEASE,
        keeping=executions.keeping(lost.execution_id),
    )
    assert executions.apply(lost.execution_id, take_over)
    taken_over = executions.get(lost.execution_id)
    still_running = executions.get(broken.execution_id)

    # When their ends are handed to the store in one call
    answers = executions.apply_each(
        [
            (first.execution_id, succeed(executions, first.execution_id, "mine")),
            (lost.execution_id, succeed(executions, lost.execution_id, "mine")),
            (broken.execution_id, unwritable(succeed(executions, broken.execution_id, "mine"))),
        ]
    )

    # Then the one still held ended SUCCEEDED
    ended = answers[0]
    assert isinstance(ended, Applied)
    assert ended.held
    assert ended.execution is not None
    assert ended.execution.status is ExecutionStatus.SUCCEEDED
    assert executions.get(first.execution_id) == ended.execution
    # and the one taken over was refused alone and left as the reaper made it
    refused = answers[1]
    assert isinstance(refused, Applied)
    assert not refused.held
    assert refused.execution == taken_over
    assert executions.get(lost.execution_id) == taken_over
    # and the one that raised changed nothing
    assert isinstance(answers[2], Exception)
    assert executions.get(broken.execution_id) == still_running


def test_an_empty_batch_changes_nothing(adapters: AdapterSet) -> None:
    assert adapters.executions.apply_each([]) == []


def test_a_batch_not_returning_answers_whether_each_held(adapters: AdapterSet) -> None:
    executions = adapters.executions
    # Given two attempts this worker began, one ended already
    first, done = a_dispatch("first"), a_dispatch("done")
    for dispatch in (first, done):
        assert executions.apply(dispatch.execution_id, begin_new(executions, dispatch, "mine"))
    assert executions.apply(done.execution_id, succeed(executions, done.execution_id, "mine"))
    # When both ends are handed over, asked for no records back
    answers = executions.apply_each(
        [
            (first.execution_id, succeed(executions, first.execution_id, "mine")),
            (done.execution_id, succeed(executions, done.execution_id, "mine")),
        ],
        returning=False,
    )
    # Then each is answered with whether it held alone, and carried out as asked
    assert answers == [Applied(True), Applied(False)]
    ended = executions.get(first.execution_id)
    assert ended is not None
    assert ended.status is ExecutionStatus.SUCCEEDED
