"""The queues on SQLite: what SQS standard queues do for dynacron, on the shared file.

One table holds the messages of every queue, keyed by the queue's definition
suffix (``dispatch``, ``undelivered``, ``dead-letters``). The semantics follow SQS
where dynacron relies on them:

- a message is invisible until its delay ends;
- a receive makes it invisible for the visibility timeout and gives it a new
  receipt handle: the handle of an earlier receive deletes nothing;
- ``ApproximateReceiveCount`` counts receives; a message whose count already
  reached the queue's ``max_receive_count`` is moved to the queue's dead-letter
  queue instead of being received again. It keeps its id, body, attributes and
  ``SentTimestamp`` (retention there counts from the original send, as on SQS);
  its receive count starts again from 0, so the receives counted there are its
  receives there;
- a message older than the queue's retention is gone.

Every change is one ``Database.write()`` transaction, so two processes receiving at
once never get the same message while it is invisible. The clock decides "now" for
delays, visibility and retention; ``wait_seconds`` of a long poll is real time
(how long a caller is willing to block), not clock time.
"""

from __future__ import annotations

import json
import os
import secrets
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from dynacron.adapters.sqlite.database import Database
from dynacron.adapters.sqlite.signals import signal_for
from dynacron.definitions.resources import QUEUES, QueueDefinition
from dynacron.domain.clock import Clock

TABLE = "queue_messages"

SCHEMA = (
    f"""
    CREATE TABLE IF NOT EXISTS {TABLE} (
        id INTEGER PRIMARY KEY,
        queue TEXT NOT NULL,
        message_id TEXT NOT NULL,
        body TEXT NOT NULL,
        message_attributes TEXT NOT NULL,
        sent_at_ms INTEGER NOT NULL,
        visible_at_ms INTEGER NOT NULL,
        expires_at_ms INTEGER NOT NULL,
        receive_count INTEGER NOT NULL DEFAULT 0,
        first_received_at_ms INTEGER,
        receipt_handle TEXT,
        -- The process that received it last: a message held by a process that died
        -- can be made visible at once (release_abandoned) instead of after its timeout.
        receiver_pid INTEGER
    )
    """,
    # Receive picks the oldest visible messages of one queue; the rowid at the end
    # of every index entry breaks ties in send order.
    f"CREATE INDEX IF NOT EXISTS {TABLE}_visible ON {TABLE} (queue, visible_at_ms)",
)

# How often a long poll looks for another process's sends (a cheap PRAGMA, no query).
POLL_INTERVAL_SECONDS = 0.05

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MILLISECOND = timedelta(milliseconds=1)

_COLUMNS = (
    "id, message_id, body, message_attributes, sent_at_ms, receive_count,"
    " first_received_at_ms, expires_at_ms"
)


@dataclass(frozen=True)
class OutgoingMessage:
    """One entry of ``send_batch``."""

    body: str
    delay_seconds: float = 0
    attributes: dict[str, str] | None = None


@dataclass(frozen=True)
class ReceivedMessage:
    """A message as a receive returns it.

    ``attributes`` are SQS's system attributes, as strings as SQS gives them:
    ``SentTimestamp`` and ``ApproximateFirstReceiveTimestamp`` in epoch
    milliseconds, ``ApproximateReceiveCount``. ``message_attributes`` are the
    sender's string attributes.
    """

    message_id: str
    receipt_handle: str
    body: str
    attributes: dict[str, str] = field(default_factory=dict)
    message_attributes: dict[str, str] = field(default_factory=dict)

    def as_sqs_message(self) -> dict[str, Any]:
        """The message in the shape boto3's ``receive_message`` returns it."""
        return {
            "MessageId": self.message_id,
            "ReceiptHandle": self.receipt_handle,
            "Body": self.body,
            "Attributes": dict(self.attributes),
            "MessageAttributes": {
                name: {"DataType": "String", "StringValue": value}
                for name, value in self.message_attributes.items()
            },
        }


class SqliteQueues:
    """Every queue of ``definitions`` in one table of ``database``; queues are named
    by their definition's suffix."""

    def __init__(
        self,
        database: Database,
        clock: Clock,
        definitions: Iterable[QueueDefinition] = QUEUES,
        *,
        poll_interval_seconds: float = POLL_INTERVAL_SECONDS,
    ) -> None:
        self._database = database
        self._clock = clock
        self._definitions = {definition.suffix: definition for definition in definitions}
        for definition in self._definitions.values():
            target = definition.dead_letter
            if target is not None and self._definitions.get(target.suffix) != target:
                raise ValueError(
                    f"queue {definition.suffix!r} redrives to {target.suffix!r}, "
                    "which is not among the definitions"
                )
        self._poll_interval = poll_interval_seconds
        self._signal = signal_for(database.path)
        self.ensure_schema()

    def ensure_schema(self) -> None:
        """Create the table and its index if they are missing."""
        self._database.ensure_schema(SCHEMA)

    def definition(self, queue: str) -> QueueDefinition:
        try:
            return self._definitions[queue]
        except KeyError:
            raise KeyError(f"no queue named {queue!r}") from None

    def send(
        self,
        queue: str,
        body: str,
        *,
        delay_seconds: float = 0,
        attributes: dict[str, str] | None = None,
    ) -> str:
        """Add one message; returns its message id."""
        [message_id] = self.send_batch(
            queue, [OutgoingMessage(body, delay_seconds=delay_seconds, attributes=attributes)]
        )
        return message_id

    def send_batch(self, queue: str, entries: Sequence[OutgoingMessage]) -> list[str]:
        """Add several messages in one transaction; returns their message ids, in
        order. All are accepted or, if the call raises, none."""
        definition = self.definition(queue)
        if any(entry.delay_seconds < 0 for entry in entries):
            raise ValueError("delay_seconds must not be negative")
        if not entries:
            return []
        now_ms = self._now_ms()
        expires_at_ms = now_ms + definition.retention_seconds * 1000
        message_ids = [str(uuid.uuid4()) for _ in entries]
        rows = [
            (
                queue,
                message_id,
                entry.body,
                json.dumps(entry.attributes or {}),
                now_ms,
                now_ms + _to_ms(entry.delay_seconds),
                expires_at_ms,
            )
            for message_id, entry in zip(message_ids, entries, strict=True)
        ]
        self._database.run(
            lambda connection: connection.executemany(
                f"INSERT INTO {TABLE} (queue, message_id, body, message_attributes,"
                " sent_at_ms, visible_at_ms, expires_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?)",
                rows,
            )
        )
        self._signal.notify()
        return message_ids

    def receive(
        self,
        queue: str,
        *,
        max_messages: int = 10,
        visibility_timeout: float | None = None,
        wait_seconds: float = 0.0,
    ) -> list[ReceivedMessage]:
        """Up to ``max_messages`` visible messages, oldest first, each now invisible
        for ``visibility_timeout`` (the queue's own when None).

        With ``wait_seconds`` it waits (real time) until a message is visible:
        at once for a send in this process, within a poll interval for a send from
        another process or a message whose delay or visibility timeout ends.
        """
        definition = self.definition(queue)
        if max_messages < 1:
            raise ValueError("max_messages must be at least 1")
        timeout = (
            definition.visibility_timeout_seconds
            if visibility_timeout is None
            else visibility_timeout
        )
        if timeout < 0:
            raise ValueError("visibility_timeout must not be negative")
        deadline = time.monotonic() + max(0.0, wait_seconds)
        while True:
            # Read before looking, so a send committed after the look still wakes us.
            generation = self._signal.generation
            data_version = self._database.data_version()
            next_visible_ms = self._next_visible_ms(queue)
            if next_visible_ms is not None and next_visible_ms <= self._now_ms():
                messages = self._receive_now(definition, max_messages, _to_ms(timeout))
                if messages:
                    return messages
                continue  # expired, redriven or taken by another process: look again
            if not self._wait_for_news(generation, data_version, next_visible_ms, deadline):
                return []

    def delete(self, queue: str, receipt_handles: Iterable[str]) -> int:
        """Delete the messages these receipt handles name; returns how many were
        deleted. A handle from before the message's latest receive deletes nothing."""
        self.definition(queue)
        keys = [key for key in map(_parse_handle, receipt_handles) if key is not None]
        if not keys:
            return 0
        cursor = self._database.run(
            lambda connection: connection.executemany(
                f"DELETE FROM {TABLE} WHERE id = ? AND receipt_handle = ? AND queue = ?",
                [(row_id, handle, queue) for row_id, handle in keys],
            )
        )
        return max(0, cursor.rowcount)

    def change_visibility(self, queue: str, receipt_handle: str, seconds: float) -> bool:
        """Make a received message visible again ``seconds`` from now (0: at once).
        Returns False when the handle is not the message's latest (SQS would raise)."""
        return self.change_visibility_batch(queue, [receipt_handle], seconds) == 1

    def change_visibility_batch(
        self, queue: str, receipt_handles: Iterable[str], seconds: float
    ) -> int:
        """``change_visibility`` for each handle, in one transaction; returns how many
        messages changed (a handle that is not its message's latest changes none)."""
        self.definition(queue)
        if seconds < 0:
            raise ValueError("seconds must not be negative")
        keys = [key for key in map(_parse_handle, receipt_handles) if key is not None]
        if not keys:
            return 0
        visible_at_ms = self._now_ms() + _to_ms(seconds)
        with self._database.write() as connection:
            changed = sum(
                connection.execute(
                    f"UPDATE {TABLE} SET visible_at_ms = ?"
                    " WHERE id = ? AND receipt_handle = ? AND queue = ?",
                    (visible_at_ms, *key, queue),
                ).rowcount
                for key in keys
            )
        if changed:
            self._signal.notify()
        return changed

    def depth(self, queue: str) -> tuple[int, int]:
        """``(visible, in_flight)``, as SQS's ``ApproximateNumberOfMessages`` and
        ``ApproximateNumberOfMessagesNotVisible`` count: a message still delayed is
        in neither."""
        self.definition(queue)
        now_ms = self._now_ms()
        row = (
            self._database.connection()
            .execute(
                "SELECT COALESCE(SUM(visible_at_ms <= ?), 0),"
                " COALESCE(SUM(visible_at_ms > ? AND receive_count > 0), 0)"
                f" FROM {TABLE} WHERE queue = ? AND expires_at_ms > ?",
                (now_ms, now_ms, queue, now_ms),
            )
            .fetchone()
        )
        return int(row[0]), int(row[1])

    def release_abandoned(self, queue: str, is_alive: Callable[[int], bool]) -> int:
        """Make visible at once every in-flight message of ``queue`` whose receiver
        ``is_alive`` says is gone; returns how many. Its receive count stays (a
        message that kills its receivers still reaches the dead-letter queue), and
        the dead receiver's handle deletes nothing."""
        self.definition(queue)
        now_ms = self._now_ms()
        receivers = [
            int(row[0])
            for row in self._database.connection().execute(
                f"SELECT DISTINCT receiver_pid FROM {TABLE} WHERE queue = ?"
                " AND visible_at_ms > ? AND receipt_handle IS NOT NULL"
                " AND receiver_pid IS NOT NULL",
                (queue, now_ms),
            )
        ]
        gone = [pid for pid in receivers if not is_alive(pid)]
        if not gone:
            return 0
        with self._database.write() as connection:
            cursor = connection.executemany(
                f"UPDATE {TABLE} SET visible_at_ms = ?, receipt_handle = NULL,"
                " receiver_pid = NULL WHERE queue = ? AND receiver_pid = ? AND visible_at_ms > ?",
                [(now_ms, queue, pid, now_ms) for pid in gone],
            )
            released = max(0, cursor.rowcount)
        self._signal.notify()
        return released

    def remove_by_attribute(self, queue: str, name: str, value: str) -> int:
        """Delete every message of ``queue`` whose message attribute ``name`` is
        ``value``, received or not; returns how many."""
        self.definition(queue)
        with self._database.write() as connection:
            cursor = connection.execute(
                f"DELETE FROM {TABLE} WHERE queue = ? AND json_extract(message_attributes, ?) = ?",
                (queue, "$." + json.dumps(name), value),
            )
            return max(0, cursor.rowcount)

    def _receive_now(
        self, definition: QueueDefinition, max_messages: int, timeout_ms: int
    ) -> list[ReceivedMessage]:
        """One transaction: pick the oldest visible messages, drop the expired, move
        the over-received to the dead-letter queue and mark the rest received."""
        queue = definition.suffix
        now_ms = self._now_ms()
        seen: set[int] = set()
        taken: list[ReceivedMessage] = []
        moved = False
        with self._database.write() as connection:
            while len(taken) < max_messages:
                # With a visibility timeout of 0 a taken message stays visible: skip it.
                rows = [
                    row
                    for row in connection.execute(
                        f"SELECT {_COLUMNS} FROM {TABLE} WHERE queue = ? AND visible_at_ms <= ?"
                        " ORDER BY visible_at_ms, id LIMIT ?",
                        (queue, now_ms, max_messages - len(taken) + len(seen)),
                    )
                    if row["id"] not in seen
                ]
                if not rows:
                    break
                expired, over_received, receivable = _sort_out(rows, definition, now_ms)
                if expired:
                    connection.executemany(
                        f"DELETE FROM {TABLE} WHERE id = ?", [(row["id"],) for row in expired]
                    )
                if over_received:
                    moved = True
                    self._move_to_dead_letter(connection, definition, over_received)
                updates = []
                for row in receivable:
                    seen.add(row["id"])
                    handle = f"{row['id']}.{secrets.token_hex(12)}"
                    first_ms = row["first_received_at_ms"] or now_ms
                    count = row["receive_count"] + 1
                    updates.append(
                        (count, first_ms, handle, now_ms + timeout_ms, os.getpid(), row["id"])
                    )
                    taken.append(
                        ReceivedMessage(
                            message_id=row["message_id"],
                            receipt_handle=handle,
                            body=row["body"],
                            attributes={
                                "SentTimestamp": str(row["sent_at_ms"]),
                                "ApproximateReceiveCount": str(count),
                                "ApproximateFirstReceiveTimestamp": str(first_ms),
                            },
                            message_attributes=json.loads(row["message_attributes"]),
                        )
                    )
                connection.executemany(
                    f"UPDATE {TABLE} SET receive_count = ?, first_received_at_ms = ?,"
                    " receipt_handle = ?, visible_at_ms = ?, receiver_pid = ? WHERE id = ?",
                    updates,
                )
        if moved:
            self._signal.notify()
        return taken

    def _move_to_dead_letter(
        self,
        connection: sqlite3.Connection,
        definition: QueueDefinition,
        rows: list[sqlite3.Row],
    ) -> None:
        target = definition.dead_letter
        assert target is not None  # only queues with a redrive policy over-receive
        connection.executemany(
            f"UPDATE {TABLE} SET queue = ?, visible_at_ms = ?, expires_at_ms = sent_at_ms + ?,"
            " receive_count = 0, first_received_at_ms = NULL, receipt_handle = NULL"
            " WHERE id = ?",
            [
                (target.suffix, self._now_ms(), target.retention_seconds * 1000, row["id"])
                for row in rows
            ],
        )

    def _next_visible_ms(self, queue: str) -> int | None:
        row = (
            self._database.connection()
            .execute(f"SELECT MIN(visible_at_ms) FROM {TABLE} WHERE queue = ?", (queue,))
            .fetchone()
        )
        return None if row[0] is None else int(row[0])

    def _wait_for_news(
        self, generation: int, data_version: int, next_visible_ms: int | None, deadline: float
    ) -> bool:
        """Block until something may have become receivable; False once the deadline
        has passed with no news."""
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            if self._signal.wait(generation, min(remaining, self._poll_interval)):
                return True
            if self._database.data_version() != data_version:
                return True
            if next_visible_ms is not None and next_visible_ms <= self._now_ms():
                return True

    def _now_ms(self) -> int:
        return (self._clock.now() - _EPOCH) // _MILLISECOND


def _sort_out(
    rows: list[sqlite3.Row], definition: QueueDefinition, now_ms: int
) -> tuple[list[sqlite3.Row], list[sqlite3.Row], list[sqlite3.Row]]:
    """Split candidates into (expired, to move to the dead-letter queue, to receive)."""
    expired: list[sqlite3.Row] = []
    over_received: list[sqlite3.Row] = []
    receivable: list[sqlite3.Row] = []
    limit = definition.max_receive_count if definition.dead_letter is not None else None
    for row in rows:
        if row["expires_at_ms"] <= now_ms:
            expired.append(row)
        elif limit is not None and row["receive_count"] >= limit:
            over_received.append(row)
        else:
            receivable.append(row)
    return expired, over_received, receivable


def _parse_handle(receipt_handle: str) -> tuple[int, str] | None:
    """``(row id, handle)``; None for a handle this queue never gave out."""
    row_id, dot, _ = receipt_handle.partition(".")
    if not dot or not row_id.isdigit():
        return None
    return int(row_id), receipt_handle


def _to_ms(seconds: float) -> int:
    return round(seconds * 1000)
