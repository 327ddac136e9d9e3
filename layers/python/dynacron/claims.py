"""Handing a page of due tasks to a claim invocation (decision 0025).

A small looping tick finds more due work than its share of a CPU claims in a
second; it hands each large page to the claim function, which runs the page part
of the tick (consistent re-read, send, conditional claim) with a whole vCPU and
is billed only while there is such work. The port is ``PageClaims``; the AWS
adapter invokes the claim function asynchronously with a Lambda client it is
given. The event is the page's shard and the task ids the Query returned.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol

# What the looping tick sends in one page, at most: the tick's own page size bounds
# it (100); the cap keeps a bad event from making one invocation claim a bucket.
MAX_TASK_IDS = 1000


class InvalidClaimEvent(ValueError):
    """A claim invocation's event is not a page (``{"shard": N, "task_ids": [...]}``)."""


@dataclass(frozen=True)
class ClaimPage:
    """One page of due tasks of one shard, as the due index returned it."""

    shard: int
    task_ids: tuple[str, ...]


class PageClaims(Protocol):
    def hand_out(self, page: ClaimPage) -> None:
        """Start a claim of ``page`` elsewhere, without waiting for it.

        Raises when the page could not be handed out (the tick then claims it
        itself). A page handed out and never claimed stays due: the tick finds
        it again once the hand-out is no longer fresh.
        """


def page_to_event(page: ClaimPage) -> dict[str, Any]:
    return {"shard": page.shard, "task_ids": list(page.task_ids)}


def page_from_event(event: dict[str, Any]) -> ClaimPage:
    shard, task_ids = event.get("shard"), event.get("task_ids")
    if not isinstance(shard, int) or isinstance(shard, bool) or shard < 0:
        raise InvalidClaimEvent(f"a claim event names its shard as a number, not {shard!r}")
    if (
        not isinstance(task_ids, list)
        or not all(isinstance(task_id, str) and task_id for task_id in task_ids)
        or len(task_ids) > MAX_TASK_IDS
    ):
        raise InvalidClaimEvent(f"a claim event lists at most {MAX_TASK_IDS} task ids as strings")
    return ClaimPage(shard=shard, task_ids=tuple(task_ids))


class LambdaPageClaims:
    """Hands a page to the claim function: ``Invoke`` with InvocationType ``Event``.

    Lambda queues the event and answers 202 at once; the looping tick goes on.
    Any error (throttled, function missing, no permission) raises, and the tick
    claims the page itself.
    """

    def __init__(self, client: Any, function_name: str) -> None:
        self._client = client
        self._function = function_name

    def hand_out(self, page: ClaimPage) -> None:
        response = self._client.invoke(
            FunctionName=self._function,
            InvocationType="Event",
            Payload=json.dumps(page_to_event(page)).encode(),
        )
        status = response.get("StatusCode")
        if status != 202:
            raise ClaimNotQueued(f"the claim function answered {status}, not 202")


class ClaimNotQueued(RuntimeError):
    """Lambda did not queue a claim invocation."""
