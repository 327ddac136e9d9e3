"""An existing stack's upgrade to the write-sharded tenant and name indexes
(decision 0053): CloudFormation adds or deletes one global secondary index per
stack update, so the ``task_index_upgrade`` steps must each change one."""

from __future__ import annotations

import itertools

import pytest

from dynacron.definitions.resources import (
    DEPENDENTS_INDEX,
    DUE_INDEX,
    TASKS,
    UNSHARDED_NAME_INDEX,
    UNSHARDED_TENANT_INDEX,
)
from infra.config import SchedulerConfig
from infra.constructs.storage import tasks_indexes

# The tasks table's indexes as a stack made before decision 0053 has them.
BEFORE = {
    DUE_INDEX.name,
    UNSHARDED_TENANT_INDEX.name,
    DEPENDENTS_INDEX.name,
    UNSHARDED_NAME_INDEX.name,
}


def test_each_upgrade_step_adds_or_deletes_one_index_and_ends_at_the_definitions() -> None:
    steps = [BEFORE] + [{index.name for index in tasks_indexes(step)} for step in (1, 2, 3, 0)]
    for before, after in itertools.pairwise(steps):
        assert len(before ^ after) == 1, (before, after)
    assert steps[-1] == {index.name for index in TASKS.indexes}
    # and a new stack (no step given) is built at the end state at once
    assert SchedulerConfig().task_index_upgrade == 0


def test_a_step_that_is_none_is_refused() -> None:
    with pytest.raises(ValueError, match="task_index_upgrade"):
        SchedulerConfig(task_index_upgrade=4)
