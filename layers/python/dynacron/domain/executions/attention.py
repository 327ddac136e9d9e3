"""Executions across a tenant's tasks: which ones are listed, and how a listing is asked for.

An operator looks across tasks for the few executions that need an eye: failed
ones, ones waiting for or running a retry, long jobs (a 202) still running. Only
those carry the attention attributes (``execution_record.ATTENTION``), so the
index they key stays sparse and a fire that succeeds at its first attempt writes
nothing to it (decision 0028). Which transitions set and remove them is in
``dynacron.domain.executions.transitions``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from dynacron.domain.errors import InvalidRequest
from dynacron.domain.executions.execution import Execution, ExecutionStatus
from dynacron.domain.instants import EARLIEST, LATEST, format_instant, parse_instant

# The statuses an execution can be listed in across tasks; the others are never
# indexed, so asking for them could only ever answer an incomplete list.
LISTED_STATUSES = (ExecutionStatus.FAILED, ExecutionStatus.QUEUED, ExecutionStatus.RUNNING)

STATUS_RULE = (
    "must be FAILED, QUEUED or RUNNING: only these are listed across tasks (a "
    "SUCCEEDED or SKIPPED execution is not indexed there; see a task's history "
    "with GET /tasks/{task_id}/executions)"
)


@dataclass(frozen=True)
class Attention:
    """An execution listed across ``tenant_id``'s tasks from ``at``."""

    tenant_id: str
    at: datetime


@dataclass(frozen=True)
class AttentionQuery:
    """Which listed executions to list: of one status or any, listed from ``since``
    to ``until`` (both inclusive, either open), newest first."""

    status: ExecutionStatus | None = None
    since: datetime | None = None
    until: datetime | None = None

    def __post_init__(self) -> None:
        if self.status is not None and self.status not in LISTED_STATUSES:
            raise InvalidRequest("status", STATUS_RULE)
        if self.since is not None and self.until is not None and self.since > self.until:
            raise InvalidRequest("since", "must not be after until")

    @property
    def bounds(self) -> tuple[str | None, str | None]:
        """``since`` and ``until`` as stored instants (whose text order is time order)."""
        since = format_instant(self.since) if self.since is not None else None
        until = format_instant(self.until) if self.until is not None else None
        return since, until

    @property
    def fingerprint(self) -> str:
        """The query in a few characters: a page token is only good for the query it
        came from (another filter's position means nothing here)."""
        since, until = self.bounds
        return f"{self.status.value if self.status else '*'}/{since or ''}/{until or ''}"

    def admits(self, tenant_id: str, execution: Execution) -> bool:
        """Whether ``execution``, as read now, belongs in ``tenant_id``'s listing: the
        index is read eventually consistently, so an item may have moved on."""
        if execution.tenant_id != tenant_id or execution.attention_at is None:
            return False
        if execution.status not in LISTED_STATUSES:
            return False
        if self.status is not None and execution.status is not self.status:
            return False
        since, until = self.bounds
        at = format_instant(execution.attention_at)
        return (since is None or at >= since) and (until is None or at <= until)


def attention_query(
    status: str | None = None, since: str | None = None, until: str | None = None
) -> AttentionQuery:
    """A listing's query from what a caller sent; ``InvalidRequest`` naming the field."""
    listed: ExecutionStatus | None = None
    if status is not None:
        try:
            listed = ExecutionStatus(status)
        except ValueError:
            raise InvalidRequest("status", STATUS_RULE) from None
    return AttentionQuery(listed, _instant("since", since), _instant("until", until))


def _instant(field: str, text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        instant = parse_instant(text)
    except InvalidRequest:
        raise InvalidRequest(
            field, f"{text!r} is not an ISO 8601 instant with an offset (Z or +hh:mm)"
        ) from None
    if not EARLIEST <= instant <= LATEST:
        raise InvalidRequest(field, f"must be from {EARLIEST.year} to {LATEST.year}")
    return instant
