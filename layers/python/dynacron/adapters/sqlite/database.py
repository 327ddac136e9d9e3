"""One SQLite database file shared by the threads and processes of local mode.

WAL lets readers go on while one writer commits; every change is made inside
``write()`` (``BEGIN IMMEDIATE``): the write lock is taken before the first read,
so a read-check-write is atomic across processes, the way a conditional write is
on DynamoDB. Each thread gets its own connection.

``durability``, what a commit survives:

- ``full``: every commit syncs the WAL (``synchronous=FULL``): it survives a
  process crash and a power loss, at the price of an ``fsync`` per commit.
- ``acknowledged``: the commits made inside ``acknowledging()`` (local mode: every
  write of the API, each of which answers a caller) are synced; the others (the
  scheduler's own claims, begins, ends and sends) are synced at checkpoints
  (``synchronous=NORMAL``). A process crash loses nothing; a power loss may undo
  the scheduler's last commits, never one the API acknowledged: the WAL is one
  sequence, so syncing a commit syncs every commit before it, and what survives
  is always the whole state of some earlier moment, which the scheduler recovers
  from as from a crash at that moment (an execution whose end was undone runs
  again, under the same idempotency key). PostgreSQL's ``synchronous_commit =
  off`` makes the same trade.
- ``normal``: no commit is synced but at checkpoints: a power loss may undo the
  last commits of any kind (never corrupt the file).
"""

from __future__ import annotations

import sqlite3
import threading
import weakref
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

from dynacron.ports import StoreUnavailable

Durability = Literal["full", "acknowledged", "normal"]
DURABILITIES: tuple[Durability, ...] = ("full", "acknowledged", "normal")


class SqliteUnavailable(StoreUnavailable):
    """The database file could not be written: locked too long, full, or failing."""


@contextmanager
def _unavailable_on_failure() -> Iterator[None]:
    try:
        yield
    except sqlite3.OperationalError as error:
        raise SqliteUnavailable(str(error)) from error


class _Connection(sqlite3.Connection):
    """A connection that can be weakly referenced (the base type cannot)."""


# How long a writer waits for another process's transaction before giving up.
BUSY_TIMEOUT_MS = 30_000


class Database:
    def __init__(
        self,
        path: Path | str,
        durability: Durability = "full",
        busy_timeout_ms: int = BUSY_TIMEOUT_MS,
    ) -> None:
        self.path = Path(path)
        self.durability = durability
        self.busy_timeout_ms = busy_timeout_ms
        self._local = threading.local()
        self._schema_lock = threading.Lock()
        # Weakly: a connection belongs to its thread's ``threading.local`` and closes
        # when that thread ends (the local API serves each request on a thread of
        # its own: held here, each would keep its file descriptors open for good).
        self._connections: weakref.WeakSet[sqlite3.Connection] = weakref.WeakSet()
        self._connections_lock = threading.Lock()
        # Writers of this process queue here rather than in SQLite's busy handler,
        # which polls with sleeps of up to 100 ms: a thread waits exactly as long as
        # the transaction before it takes. Other processes still meet the busy
        # timeout. Reentrant, so a nested write fails in SQLite, not in a deadlock.
        self._write_lock = threading.RLock()

    def connection(self) -> sqlite3.Connection:
        """This thread's connection, in autocommit mode (transactions are explicit)."""
        connection: sqlite3.Connection | None = getattr(self._local, "connection", None)
        if connection is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            connection = sqlite3.connect(
                self.path,
                isolation_level=None,
                timeout=self.busy_timeout_ms / 1000,
                check_same_thread=False,
                factory=_Connection,
            )
            connection.row_factory = sqlite3.Row
            connection.execute(f"PRAGMA busy_timeout = {self.busy_timeout_ms}")
            connection.execute("PRAGMA journal_mode = WAL")
            connection.execute("PRAGMA synchronous = NORMAL")
            self._local.synchronous = "NORMAL"
            connection.execute("PRAGMA foreign_keys = ON")
            self._local.connection = connection
            with self._connections_lock:
                self._connections.add(connection)
        return connection

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """One atomic change: the write lock is held from the first statement to the commit.

        The file locked past the busy timeout, or failing (disk full, I/O), raises
        ``SqliteUnavailable``: the ports' ``StoreUnavailable``, retried later.
        """
        connection = self.connection()
        synchronous = self._synchronous()
        if self._local.synchronous != synchronous:
            connection.execute(f"PRAGMA synchronous = {synchronous}")
            self._local.synchronous = synchronous
        with self._write_lock:
            with _unavailable_on_failure():
                connection.execute("BEGIN IMMEDIATE")
            try:
                with _unavailable_on_failure():
                    yield connection
            except BaseException:
                # SQLite may have rolled back already (disk full, I/O error).
                if connection.in_transaction:
                    connection.execute("ROLLBACK")
                raise
            with _unavailable_on_failure():
                connection.execute("COMMIT")

    @contextmanager
    def acknowledging(self) -> Iterator[None]:
        """The writes of this thread inside are answers to a caller: with
        ``acknowledged`` durability they are synced at commit."""
        before = getattr(self._local, "acknowledging", False)
        self._local.acknowledging = True
        try:
            yield
        finally:
            self._local.acknowledging = before

    def _synchronous(self) -> str:
        if self.durability == "full":
            return "FULL"
        if self.durability == "acknowledged" and getattr(self._local, "acknowledging", False):
            return "FULL"
        return "NORMAL"

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """A consistent snapshot for several reads (one statement needs none)."""
        connection = self.connection()
        connection.execute("BEGIN")
        try:
            yield connection
        finally:
            connection.execute("COMMIT")

    def ensure_schema(self, statements: Iterable[str]) -> None:
        """Create what is missing (``CREATE ... IF NOT EXISTS``), in one transaction."""
        with self._schema_lock, self.write() as connection:
            for statement in statements:
                connection.execute(statement)

    def ensure_columns(self, table: str, columns: Iterable[tuple[str, str]]) -> None:
        """Add the ``(name, type)`` columns a file made by an earlier version lacks."""
        with self._schema_lock, self.write() as connection:
            present = {row[1] for row in connection.execute(f"PRAGMA table_info({table})")}
            for name, kind in columns:
                if name not in present:
                    connection.execute(f"ALTER TABLE {table} ADD COLUMN {name} {kind}")

    def data_version(self) -> int:
        """Changes when another connection commits: a cheap way to wait for news."""
        row = self.connection().execute("PRAGMA data_version").fetchone()
        return int(row[0])

    def close(self) -> None:
        with self._connections_lock:
            for connection in list(self._connections):
                connection.close()
            self._connections.clear()
        self._local = threading.local()
