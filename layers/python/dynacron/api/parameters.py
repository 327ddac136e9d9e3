"""The HTTP API's parameters as its OpenAPI document declares them: each bound
here is what the resolver validates before a route runs (a 422 naming the field)."""

from __future__ import annotations

from typing import Annotated, Literal

from aws_lambda_powertools.event_handler.openapi.params import Header, Path, Query

from dynacron.domain.coordination.create_keys import KEY_PATTERN, MAX_KEY_LENGTH
from dynacron.domain.tasks.listing import MAX_NAME_PREFIX
from dynacron.domain.tasks.tags import FILTER_PATTERN, FILTER_RULE, MAX_TAG_FILTERS

CreateKeyHeader = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        min_length=1,
        max_length=MAX_KEY_LENGTH,
        pattern=KEY_PATTERN,
        description="Retry a create safely: the same key and body within 24 hours return "
        "the task the first request made (Idempotent-Replayed: true), not a second one",
    ),
]
PreferHeader = Annotated[
    str | None,
    Header(
        alias="Prefer",
        description="RFC 7240 preferences: return=minimal answers each created or replayed "
        "item with only its task's task_id and status (Preference-Applied: return=minimal); "
        "other preferences are ignored",
    ),
]
PageLimit = Annotated[int, Query(ge=1, le=100, description="Items per page")]
# Room for a page's last key holding a long name (a name index key of up to 600
# bytes of folded name, each character escaped in the token's JSON).
PageToken = Annotated[str | None, Query(max_length=4096, description="From the previous page")]
# An array, never null: a query parameter is absent or given, and a "null" form
# lets a fuzzer send a lone string it deems invalid that reads as a valid array.
TagFilters = Annotated[
    list[str],
    Query(
        description=f"Only tasks with this tag: {FILTER_RULE}; repeat it for tasks with "
        "every one given. A filtered page may hold fewer than limit tasks: follow next_token",
        json_schema_extra={
            "items": {"type": "string", "pattern": FILTER_PATTERN},
            "maxItems": MAX_TAG_FILTERS,
        },
    ),
]
NamePrefix = Annotated[
    str | None,
    Query(
        min_length=1,
        max_length=MAX_NAME_PREFIX,
        description="Only tasks whose name starts with this, case-insensitively (Unicode "
        "case folding: 'Straße' matches 'STRASSE'); listed by name",
    ),
]
ListingSort = Annotated[
    Literal["created_at", "name", "next_run_at"] | None,
    Query(
        description="The order: created_at (the default), name (the default with "
        "name_prefix, and the only order with it), or next_run_at (tasks without a next "
        "run last; local mode only: see the operation's description)",
    ),
]
ListingOrder = Annotated[
    Literal["asc", "desc"], Query(description="Ascending (the default) or descending")
]
ListedTaskStatus = Annotated[
    Literal["ACTIVE", "PAUSED", "COMPLETED", "ERROR"] | None,
    Query(description="Only tasks in this status"),
]
ListedScheduleKind = Annotated[
    Literal["cron", "rate", "at", "fixed_delay", "after"] | None,
    Query(description="Only tasks whose schedule is of this kind"),
]
PreviewCount = Annotated[int, Query(ge=1, le=100, description="How many occurrences")]
ForecastHours = Annotated[int, Query(ge=1, le=24, description="Hours ahead to count")]
PreviewAfter = Annotated[
    str | None,
    Query(max_length=64, description="ISO 8601 instant to start after (default: now)"),
]
SkipInstant = Annotated[
    str | None,
    Query(max_length=64, description="ISO 8601 occurrence to stop skipping (default: every one)"),
]
ListedStatus = Annotated[
    Literal["FAILED", "QUEUED", "RUNNING"] | None,
    Query(
        description="Only executions in this status (any listed one if left out). Only "
        "these are listed across tasks: FAILED (dead letters), QUEUED (waiting for a retry, "
        "or redriven), RUNNING (running a retry, or a long job after its 202). A SUCCEEDED "
        "or SKIPPED execution is not: see GET /tasks/{task_id}/executions",
    ),
]
ListedSince = Annotated[
    str | None,
    Query(
        max_length=64,
        description="ISO 8601 instant with an offset: listed at or after it (inclusive)",
    ),
]
ListedUntil = Annotated[
    str | None,
    Query(
        max_length=64,
        description="ISO 8601 instant with an offset: listed at or before it (inclusive)",
    ),
]
TaskId = Annotated[str, Path(max_length=200, description="The id POST /tasks returned")]
ExecutionId = Annotated[str, Path(max_length=300, description="<task_id>_<scheduled instant>")]


MINIMAL = "return=minimal"


def prefers_minimal(prefer: str | None) -> bool:
    """Whether a ``Prefer`` header (RFC 7240) asks for ``return=minimal``: only the first
    ``return`` preference counts, names are case-insensitive, and any other
    preference, or one not understood, is ignored (never refused)."""
    for preference in (prefer or "").split(","):
        name, _, value = preference.split(";", 1)[0].partition("=")
        if name.strip().lower() == "return":
            return value.strip().strip('"').lower() == "minimal"
    return False
