"""The TaskStore contract under contention: racing claimers claim each due task exactly once."""

from __future__ import annotations

import threading
from collections import Counter
from datetime import timedelta

import pytest

from dynacron.domain.tasks.claiming import claim_occurrence
from dynacron.domain.tasks.task import DuePlacement, TaskStatus
from dynacron.ports import AdapterSet, TaskStore
from tests.contract import task_changes
from tests.contract.builders import ROOMY, SHARDING, START, a_task

TASKS = 1000
CLAIMERS = 8
# Each claimer reads this many tasks, then claims them: the tick's page, made small.
READ_BATCH = 25
# Of each claimer's eighth, this many are wanted by its neighbour too.
CONTESTED = 25
HERE = DuePlacement(bucket=SHARDING.bucket(START), shard=0)


def wanted_by(k: int, eighths: list[list[str]]) -> list[str]:
    """What claimer ``k`` claims: its own eighth, the first ``CONTESTED`` of them in
    turn with as many of its neighbour's, which the neighbour claims first thing too.

    Every task is wanted by one claimer, and the contested ones by two at about the
    same moment: a real race at a fraction of the reads and writes of all against all.
    """
    mine, neighbours = eighths[k], eighths[(k + 1) % len(eighths)]
    contested = zip(mine[:CONTESTED], neighbours[:CONTESTED], strict=True)
    return [task_id for pair in contested for task_id in pair] + mine[CONTESTED:]


# Slow on moto: 1,000 claims, each a full round of moto's request parsing and
# expression validation (the tasks are created in batches, as `POST /tasks/batch` does:
# the race is in the claims).
@pytest.mark.slow
def test_racing_claimers_claim_each_due_task_exactly_once(adapters: AdapterSet) -> None:
    tasks: TaskStore = adapters.tasks
    now = START + timedelta(seconds=1)

    # Given 1,000 one-time tasks due at the same instant, in one bucket of one shard
    for first in range(0, TASKS, 100):
        batch = [(a_task(f"race-{n:04d}"), HERE) for n in range(first, first + 100)]
        assert tasks.create_many_within_quota(batch, ROOMY, "secret") == [None] * len(batch)
    due: list[str] = []
    start_key = None
    while True:
        page, start_key = tasks.due_task_ids(HERE.key, now, 100, start_key)
        due += page
        if start_key is None:
            break
    assert sorted(due) == [f"race-{n:04d}" for n in range(TASKS)]

    # When 8 claimers race, each wanting its own eighth and part of its neighbour's,
    # each claiming as the tick does (read, the domain's claim, the conditional write)
    share = TASKS // CLAIMERS
    eighths = [due[k * share : (k + 1) * share] for k in range(CLAIMERS)]
    won: list[str] = []
    refused: list[str] = []
    already_claimed: list[str] = []
    lock = threading.Lock()
    barrier = threading.Barrier(CLAIMERS, timeout=60)
    errors: list[BaseException] = []

    def claimer(k: int) -> None:
        wanted = wanted_by(k, eighths)
        mine: dict[str, list[str]] = {"won": [], "refused": [], "already": []}
        try:
            barrier.wait()
            for start in range(0, len(wanted), READ_BATCH):
                for task in tasks.get_many(wanted[start : start + READ_BATCH]):
                    claim = claim_occurrence(task, now)
                    if claim is None:  # read after another claimer's claim: nothing due
                        mine["already"].append(task.task_id)
                        continue
                    placement = SHARDING.place(task.task_id, claim.next_run_at, now)
                    outcome = (
                        "won" if task_changes.claim(tasks, claim, placement, now) else "refused"
                    )
                    mine[outcome].append(task.task_id)
        except BaseException as error:  # reported by the test thread below
            errors.append(error)
        with lock:
            won.extend(mine["won"])
            refused.extend(mine["refused"])
            already_claimed.extend(mine["already"])

    threads = [threading.Thread(target=claimer, args=(k,)) for k in range(CLAIMERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors

    # Then every task was claimed exactly once; of a contested one's two claimers,
    # the other was refused or found it claimed already
    assert Counter(won) == Counter(due)
    contested = {task_id for eighth in eighths for task_id in eighth[:CONTESTED]}
    assert len(contested) == CLAIMERS * CONTESTED
    assert Counter(won + refused + already_claimed) == Counter(
        {task_id: 2 if task_id in contested else 1 for task_id in due}
    )
    assert tasks.due_task_ids(HERE.key, now, 100, None)[0] == []
    claimed = tasks.get_many(due)
    assert len(claimed) == TASKS
    assert {(t.status, t.version, t.last_scheduled_at) for t in claimed} == {
        (TaskStatus.COMPLETED, 2, START)
    }
