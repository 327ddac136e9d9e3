"""Handing a page of due tasks to a claim invocation (decision 0025).

A small looping tick finds more due work than its share of a CPU claims in a
second; it hands each large page to the claim function, which runs the page part
of the tick (consistent re-read, send, conditional claim) with a whole vCPU and
is billed only while there is such work. The port is ``DuePageHandOut``; the AWS
adapter invokes the claim function asynchronously with a Lambda client it is
given. The event is the page's shard and the task ids the Query returned.
"""

from __future__ import annotations

from typing import Any

from dynacron.ports import DuePage

# What the looping tick sends in one page, at most: the tick's own page size bounds
# it (100); the cap keeps a bad event from making one invocation claim a bucket.
MAX_TASK_IDS = 1000


class InvalidClaimEvent(ValueError):
    """A claim invocation's event is not a page (``{"shard": N, "task_ids": [...]}``)."""


def page_to_event(page: DuePage) -> dict[str, Any]:
    return {"shard": page.shard, "task_ids": list(page.task_ids)}


def page_from_event(event: dict[str, Any]) -> DuePage:
    shard, task_ids = event.get("shard"), event.get("task_ids")
    if not isinstance(shard, int) or isinstance(shard, bool) or shard < 0:
        raise InvalidClaimEvent(f"a claim event names its shard as a number, not {shard!r}")
    if (
        not isinstance(task_ids, list)
        or not all(isinstance(task_id, str) and task_id for task_id in task_ids)
        or len(task_ids) > MAX_TASK_IDS
    ):
        raise InvalidClaimEvent(f"a claim event lists at most {MAX_TASK_IDS} task ids as strings")
    return DuePage(shard=shard, task_ids=tuple(task_ids))
