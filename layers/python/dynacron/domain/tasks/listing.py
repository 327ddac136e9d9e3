"""How a tenant's tasks are listed (``GET /tasks``): in which order, and which
ones, as both stores answer it (decision 0045).

A name is matched by a case-insensitive prefix: each task is stored with a
normalised name key (NFKC, case-folded, then the task id), which the stores index
per tenant, so a prefix is one range of that index and a listing by name is the
index in order.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from enum import StrEnum

from dynacron.domain.errors import InvalidRequest
from dynacron.domain.tasks.task import Task, TaskStatus

# The record's attribute (and SQLite's column) holding the name key.
NAME_KEY = "name_key"
# Between the name and the task id: below every printable character, so a name
# sorts before the longer names it is a prefix of.
_SEPARATOR = "\x1f"
# A DynamoDB index sort key holds at most 1,024 bytes: the name part is cut to this
# many (on a character boundary), leaving room for any task id the API accepts.
MAX_NAME_KEY_BYTES = 600
MAX_NAME_PREFIX = 200


class TaskOrder(StrEnum):
    """What a listing is sorted by."""

    CREATED = "created_at"
    NAME = "name"
    NEXT_RUN = "next_run_at"


def normalised_name(text: str) -> str:
    """``text`` as names are compared: NFKC, then case-folded (``ß`` reads as ``ss``)."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    encoded = folded.encode()
    if len(encoded) <= MAX_NAME_KEY_BYTES:
        return folded
    return encoded[:MAX_NAME_KEY_BYTES].decode(errors="ignore")


def name_key(name: str, task_id: str) -> str:
    """The key a task is filed under by name: unique (the task id ends it)."""
    return f"{normalised_name(name)}{_SEPARATOR}{task_id}"


def name_matches(name: str, prefix: str) -> bool:
    """Whether ``name`` starts with ``prefix``, both normalised: the last word on a
    match (an index key is cut at ``MAX_NAME_KEY_BYTES``, and a name may hold the
    separator)."""
    return (
        unicodedata.normalize("NFKC", name)
        .casefold()
        .startswith(unicodedata.normalize("NFKC", prefix).casefold())
    )


@dataclass(frozen=True)
class TaskListing:
    """A listing of a tenant's tasks beyond its tag filters: by name prefix, status
    or schedule kind, sorted by creation (the default), name or next run.

    ``order`` None is the listing's natural order: by name when a prefix is given,
    else by creation. A prefix lists by name only (the index it reads is in name
    order); any other order with a prefix is refused.
    """

    name_prefix: str | None = None
    order: TaskOrder | None = None
    descending: bool = False
    status: TaskStatus | None = None
    kind: str | None = None

    def __post_init__(self) -> None:
        if self.name_prefix is not None:
            if not 1 <= len(self.name_prefix) <= MAX_NAME_PREFIX:
                raise InvalidRequest(
                    "name_prefix", f"must be 1 to {MAX_NAME_PREFIX} characters long"
                )
            if self.order not in (None, TaskOrder.NAME):
                raise InvalidRequest(
                    "sort",
                    f"name_prefix lists tasks by name only, not by {self.order}: "
                    "leave sort out or give sort=name",
                )

    @property
    def sorted_by(self) -> TaskOrder:
        """The order the listing is in (``order``, or the natural one)."""
        if self.order is not None:
            return self.order
        return TaskOrder.NAME if self.name_prefix is not None else TaskOrder.CREATED

    def matches(self, task: Task) -> bool:
        """Whether ``task``, as read, belongs in the listing (an index may be behind)."""
        if self.name_prefix is not None and not name_matches(task.name, self.name_prefix):
            return False
        if self.status is not None and task.status != self.status:
            return False
        return self.kind is None or task.schedule.kind == self.kind


ALL_TASKS = TaskListing()
