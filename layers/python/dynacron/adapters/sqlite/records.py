"""Records as JSON text, and what every SQLite store does with them: page tokens
bound to their listing and partition, instants in their stored form.

A task's record is the domain's (``domain.tasks.record``), the DynamoDB item's
map shape too, so an item and a row say the same thing in the same words.
"""

from __future__ import annotations

import base64
import binascii
import json
import sqlite3
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from dynacron.domain.errors import InvalidRequest
from dynacron.domain.instants import format_instant, parse_instant
from dynacron.domain.tasks.record import retry_from_map as retry_from_map
from dynacron.domain.tasks.record import schedule_from_map, task_from_record
from dynacron.domain.tasks.task import (
    UNREADABLE_SCHEDULE,
    Task,
    TaskStatus,
)
from dynacron.ports import REASON_LIMIT, UnreadableTask, reason_of

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def dump(record: dict[str, Any]) -> str:
    """A record as stored: absent fields are left out, as DynamoDB leaves them out."""
    return json.dumps(_without_nones(record), separators=(",", ":"), sort_keys=True)


def _without_nones(record: dict[str, Any]) -> dict[str, Any]:
    return {
        k: _without_nones(v) if isinstance(v, dict) else v
        for k, v in record.items()
        if v is not None
    }


def load(text: str) -> dict[str, Any]:
    """A stored record; ``ValueError`` if the text is not a JSON object."""
    values = json.loads(text)
    if not isinstance(values, dict):
        raise ValueError("the stored record is not a JSON object")
    return values


def instant_or_none(value: Any) -> datetime | None:
    return parse_instant(value) if value is not None else None


def optional_instant(value: datetime | None) -> str | None:
    return format_instant(value) if value is not None else None


# Page tokens --------------------------------------------------------------------


def encode_page_token(listing: str, partition: str, last_key: list[str] | None) -> str | None:
    """An opaque token that resumes ``listing`` of ``partition`` after ``last_key``."""
    if last_key is None:
        return None
    page = {"listing": listing, "partition": partition, "key": last_key}
    return base64.urlsafe_b64encode(json.dumps(page).encode()).decode()


def decode_page_token(
    token: str | None, listing: str, partition: str, key_length: int
) -> list[str] | None:
    """The key ``token`` resumes after; it must come from this listing of this partition
    (another tenant's token, or another listing's, is the caller's mistake)."""
    if not token:
        return None
    try:
        page = json.loads(base64.urlsafe_b64decode(token.encode()))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        page = None
    key = page.get("key") if isinstance(page, dict) else None
    if (
        not isinstance(page, dict)
        or page.get("listing") != listing
        or page.get("partition") != partition
        or not isinstance(key, list)
        or len(key) != key_length
        or not all(isinstance(part, str) for part in key)
    ):
        raise InvalidRequest("next_token", "is not a token this API returned")
    return key


@dataclass(frozen=True)
class Listing:
    """A paged listing of one partition of a table, in the order of ``order`` (columns
    whose values, together, are unique), as a DynamoDB query of one partition is."""

    name: str
    table: str
    partition_column: str
    order: tuple[str, ...]
    newest_first: bool = False

    def page(
        self,
        connection: sqlite3.Connection,
        partition: str,
        limit: int,
        token: str | None,
        where: tuple[str, tuple[Any, ...]] | None = None,
    ) -> tuple[list[sqlite3.Row], str | None]:
        """One page of rows of ``partition`` and the token of the next (None at the end);
        with ``where`` (a condition and its parameters), only the rows it keeps."""
        after = decode_page_token(token, self.name, partition, len(self.order))
        columns = ", ".join(self.order)
        query = f"SELECT * FROM {self.table} WHERE {self.partition_column} = ?"
        parameters: list[Any] = [partition]
        if where is not None:
            query += f" AND ({where[0]})"
            parameters += where[1]
        if after is not None:
            marks = ", ".join("?" * len(after))
            query += f" AND ({columns}) {'<' if self.newest_first else '>'} ({marks})"
            parameters += after
        direction = " DESC" if self.newest_first else ""
        query += " ORDER BY " + ", ".join(c + direction for c in self.order) + " LIMIT ?"
        rows = connection.execute(query, (*parameters, limit + 1)).fetchall()
        page = rows[:limit]
        last = [str(page[-1][column]) for column in self.order] if len(rows) > limit else None
        return page, encode_page_token(self.name, partition, last)


# Tasks --------------------------------------------------------------------------


def read_task(task_id: str, text: str, version: int | None) -> Task | UnreadableTask:
    """The task a row holds, or why it cannot be read (any exception counts: a row
    written around the API can break decoding anywhere)."""
    try:
        return task_from_record(load(text))
    except Exception as error:
        return UnreadableTask(
            task_id=task_id,
            reason=f"the stored task cannot be read ({reason_of(error)})"[:REASON_LIMIT],
            seen_version=version,
        )


def shown_task(task_id: str, tenant_id: str, text: str, version: int | None) -> Task:
    """The task a row holds, for its owner to see: an unreadable one is shown as an
    ERROR task with what could be read, every other field at its default."""
    read = read_task(task_id, text, version)
    if isinstance(read, Task):
        return read
    try:
        values = load(text)
    except ValueError:
        values = {}

    def text_of(name: str) -> str | None:
        value = values.get(name)
        return value if isinstance(value, str) else None

    def instant(name: str, default: datetime) -> datetime:
        try:
            return parse_instant(values[name])
        except Exception:
            return default

    try:
        schedule = schedule_from_map(values["schedule"])
    except Exception:
        schedule = UNREADABLE_SCHEDULE
    try:
        payload = dict(json.loads(values["payload"]))
    except Exception:
        payload = {}
    try:
        next_run_at = instant_or_none(values.get("next_run_at"))
    except Exception:
        next_run_at = None
    return Task(
        task_id=task_id,
        name=text_of("name") or task_id,
        schedule=schedule,
        handler_url=text_of("handler_url"),
        handler_name=text_of("handler"),
        payload=payload,
        status=TaskStatus.ERROR,
        status_reason=text_of("status_reason") or read.reason,
        next_run_at=next_run_at,
        created_at=instant("created_at", _EPOCH),
        updated_at=instant("updated_at", _EPOCH),
        version=version or 0,
        tenant_id=tenant_id,
    )
