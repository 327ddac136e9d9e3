"""One SQLite database file shared by the threads and processes of local mode.

WAL lets readers go on while one writer commits; every change is made inside
``write()`` (``BEGIN IMMEDIATE``): the write lock is taken before the first read,
so a read-check-write is atomic across processes, the way a conditional write is
on DynamoDB. Each thread gets its own connection.

``durability``, what a commit survives:

- ``full``: every commit syncs the WAL (``synchronous=FULL``): it survives a
  process crash and a power loss, at the price of an ``fsync`` per commit.
- ``acknowledged``: the commits made inside ``acknowledging()`` (local mode: every
  write of the API, each of which answers a caller) are synced before the block
  ends, by one ``fsync`` of the WAL for all of them (a batch create commits two
  hundred times: a sync each took 0.2 to 2 ms, 40 to 400 ms a batch, the most of
  its time); the others (the scheduler's own claims, begins, ends and sends) are
  synced at checkpoints (``synchronous=NORMAL``). A process crash loses nothing; a
  power loss may undo the scheduler's last commits, never one the API
  acknowledged: the WAL is one sequence, so syncing it syncs every commit in it
  (and a checkpoint syncs the WAL before it copies it out), and what survives
  is always the whole state of some earlier moment, which the scheduler recovers
  from as from a crash at that moment (an execution whose end was undone runs
  again, under the same idempotency key). PostgreSQL's ``synchronous_commit =
  off`` makes the same trade.
- ``normal``: no commit is synced but at checkpoints: a power loss may undo the
  last commits of any kind (never corrupt the file).
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, TypeVar, cast

from dynacron.ports import StoreUnavailable

try:
    import fcntl
except ImportError:  # Windows: SQLite's own lock alone
    fcntl = None  # type: ignore[assignment]

T = TypeVar("T")
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
        # the transaction before it takes, and joins it if it can. Other processes
        # still meet the busy timeout.
        self._group = _Group()
        self._writers = _WriterLock(self.path)

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

        Changes that threads of this process make at the same time share a
        transaction (group commit): each runs alone, in order, within a savepoint of
        its own, so a change that raises is rolled back alone, and each returns only
        once the whole transaction has committed. Every change still reads what the
        ones before it wrote, and none sees a change that is not committed in the end.

        The file locked past the busy timeout, or failing (disk full, I/O), raises
        ``SqliteUnavailable``: the ports' ``StoreUnavailable``, retried later.
        """
        if getattr(self._local, "writing", False):
            # A write inside a write would be part of the same transaction.
            raise SqliteUnavailable("cannot start a transaction within a transaction")
        change = _Change(self._synchronous())
        self._local.writing = True
        try:
            if self._group.join(change):
                yield from self._lead(change)
            else:
                yield from self._follow(change)
        finally:
            self._local.writing = False

    def run(self, change: Callable[[sqlite3.Connection], T]) -> T:
        """``change(connection)`` as one atomic change, as ``write`` makes one; returns
        what it returns. Given as a function, it is made by whichever thread leads
        the transaction it joins, with no hand-over to this thread and back: the
        per-fire changes of the stores are made this way. ``change`` must use only the
        connection it is given."""
        if getattr(self._local, "writing", False):
            raise SqliteUnavailable("cannot start a transaction within a transaction")
        pending = _Change(self._synchronous(), change)
        self._local.writing = True
        try:
            if self._group.join(pending) or pending.wait_for_lead():
                self._drive(self._lead(pending), pending)
            else:
                pending.raise_failure()
        finally:
            self._local.writing = False
        return cast("T", pending.result)

    @staticmethod
    def _drive(leading: Generator[sqlite3.Connection], pending: _Change) -> None:
        """Lead a transaction (``_lead``) for a change given as a function."""
        assert pending.make is not None
        connection = next(leading)
        try:
            with _unavailable_on_failure():
                pending.result = pending.make(connection)
        except BaseException as error:
            leading.throw(error)  # made or not, the transaction goes on; raises
        for _ in leading:
            pass

    def _lead(self, change: _Change) -> Generator[sqlite3.Connection]:
        """Open a transaction, make this change and those waiting for one, commit."""
        connection = self.connection()
        try:
            if self._local.synchronous != change.synchronous:
                connection.execute(f"PRAGMA synchronous = {change.synchronous}")
                self._local.synchronous = change.synchronous
            self._writers.acquire(self.busy_timeout_ms / 1000)
        except BaseException:
            self._group.hand_over()
            raise
        try:
            with _unavailable_on_failure():
                connection.execute("BEGIN IMMEDIATE")
        except BaseException:
            self._writers.release()
            self._group.hand_over()
            raise
        changes = [change]
        failure: BaseException | None = None
        try:
            change.error = yield from _within_savepoint(connection)
            # Unless SQLite rolled the whole transaction back (disk full, I/O): then
            # no change joins it, and it fails.
            while connection.in_transaction and (
                follower := self._group.next_for(change, len(changes))
            ):
                changes.append(follower)
                if follower.make is not None:
                    follower.error = _call_within_savepoint(connection, follower)
                else:
                    follower.run_on(connection)
            if not connection.in_transaction:
                raise SqliteUnavailable("the transaction was rolled back by SQLite")
            with _unavailable_on_failure():
                connection.execute("COMMIT")
        except BaseException as error:
            failure = (
                error if isinstance(error, SqliteUnavailable) else SqliteUnavailable(str(error))
            )
            if connection.in_transaction:
                connection.execute("ROLLBACK")
        finally:
            self._writers.release()
            for follower in changes[1:]:
                follower.settle(failure)
            self._group.hand_over()
        change.raise_failure(failure)

    def _follow(self, change: _Change) -> Generator[sqlite3.Connection]:
        """Wait for a leader's transaction, make this change in it, wait for the commit."""
        connection = change.wait_for_turn()
        if connection is None:
            # The leader handed the lead on: this change opens the next transaction.
            yield from self._lead(change)
            return
        change.error = yield from _within_savepoint(connection)
        change.made()
        change.raise_failure(change.wait_for_commit())

    @contextmanager
    def acknowledging(self) -> Iterator[None]:
        """The writes of this thread inside are answers to a caller: with
        ``acknowledged`` durability they are synced before the (outermost) block
        ends, all at once (``_sync_log``), not one by one at commit."""
        if getattr(self._local, "acknowledging", False):
            yield
            return
        self._local.acknowledging = True
        self._local.wrote = False
        try:
            yield
        finally:
            self._local.acknowledging = False
            if self._local.wrote and self.durability == "acknowledged":
                self._sync_log()

    def _sync_log(self) -> None:
        """``fsync`` the WAL: every commit in it so far survives a power loss."""
        try:
            descriptor = os.open(f"{self.path}-wal", os.O_RDONLY)
        except FileNotFoundError:
            return  # no WAL: the last connection checkpointed it, syncing, and closed
        except OSError as error:
            raise SqliteUnavailable(f"cannot sync the write-ahead log: {error}") from error
        try:
            os.fsync(descriptor)
        except OSError as error:
            raise SqliteUnavailable(f"cannot sync the write-ahead log: {error}") from error
        finally:
            os.close(descriptor)

    def _synchronous(self) -> str:
        if getattr(self._local, "acknowledging", False):
            self._local.wrote = True
        return "FULL" if self.durability == "full" else "NORMAL"

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
        self._writers.close()


# Changes at most in one transaction: a long stream of writers still commits often.
GROUP_LIMIT = 64


class _Savepoint:
    """One change in a savepoint of its own: kept if it ends; if it raises, its
    statements rolled back and what it raised kept as ``error`` (a failure of
    SQLite's as ``SqliteUnavailable``), not raised. A failure to roll back is raised:
    the transaction cannot go on. A class, not a generator: it wraps every change."""

    __slots__ = ("_connection", "error")

    def __init__(self, connection: sqlite3.Connection) -> None:
        self._connection = connection
        self.error: BaseException | None = None

    def __enter__(self) -> None:
        self._connection.execute("SAVEPOINT change")

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, _: object
    ) -> bool:
        connection = self._connection
        if error is None:
            connection.execute("RELEASE change")
            return False
        if isinstance(error, sqlite3.OperationalError):
            unavailable = SqliteUnavailable(str(error))
            unavailable.__cause__ = error
            error = unavailable
        if connection.in_transaction:
            connection.execute("ROLLBACK TO change")
            connection.execute("RELEASE change")
        self.error = error
        return True


def _call_within_savepoint(connection: sqlite3.Connection, change: _Change) -> BaseException | None:
    """(The leader) make a change given as a function in a savepoint of its own; returns
    the exception it raised (its statements rolled back), or None (kept)."""
    assert change.make is not None
    savepoint = _Savepoint(connection)
    with savepoint:
        change.result = change.make(connection)
    return savepoint.error


def _within_savepoint(
    connection: sqlite3.Connection,
) -> Generator[sqlite3.Connection, None, BaseException | None]:
    """Yield ``connection`` to one change inside a savepoint; returns the exception the
    change raised (its statements rolled back), or None (kept)."""
    savepoint = _Savepoint(connection)
    with savepoint:
        yield connection
    return savepoint.error


class _WriterLock:
    """The file's writers across processes take turns here before ``BEGIN IMMEDIATE``.

    SQLite's own busy handler sleeps 1, 2, 5, 10 ... up to 100 ms between tries, so
    a writer of one process waiting for another's transaction woke up to 100 ms
    late while the other process went on committing: with workers in processes of
    their own, most of a burst's time went there. This lock (``flock`` on a file
    beside the database) is tried every ``POLL_SECONDS`` at most, so a writer starts
    within a few milliseconds of the lock's release. SQLite's lock still guards
    the file against any writer that does not take this one. A process that dies
    holding it releases it (the kernel closes its files). Where ``flock`` is
    missing (Windows), SQLite's lock alone decides.
    """

    POLL_SECONDS = (0.0005, 0.001, 0.002)

    def __init__(self, database: Path) -> None:
        self._path = database.with_name(database.name + "-writer")
        self._file: int | None = None

    def acquire(self, timeout: float) -> None:
        if fcntl is None:
            return
        if self._file is None:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            self._file = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o600)
        deadline = time.monotonic() + timeout
        tries = 0
        while True:
            try:
                fcntl.flock(self._file, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise SqliteUnavailable("database is locked") from None
            time.sleep(self.POLL_SECONDS[min(tries, len(self.POLL_SECONDS) - 1)])
            tries += 1

    def release(self) -> None:
        if fcntl is not None and self._file is not None:
            fcntl.flock(self._file, fcntl.LOCK_UN)

    def close(self) -> None:
        if self._file is not None:
            os.close(self._file)
            self._file = None


def _one_shot() -> threading.Lock:
    """A signal given once: ``release()`` gives it, ``acquire()`` waits for it (cheaper
    to make than an ``Event``, and a write makes three)."""
    signal = threading.Lock()
    signal.acquire()
    return signal


class _Change:
    """One thread's change, as the transaction it joins runs it."""

    def __init__(
        self, synchronous: str, make: Callable[[sqlite3.Connection], Any] | None = None
    ) -> None:
        self.synchronous = synchronous
        # A change given as a function (``Database.run``), made by the leader itself,
        # and what it returned; None: a ``write`` block, made by its own thread.
        self.make = make
        self.result: Any = None
        self._leading = False
        self.error: BaseException | None = None
        self._turn = _one_shot()
        self._connection: sqlite3.Connection | None = None
        self._done = _one_shot()
        self._committed = _one_shot()
        self._failure: BaseException | None = None

    def wait_for_turn(self) -> sqlite3.Connection | None:
        """The leader's connection when it is this change's turn; None: lead the next."""
        self._turn.acquire()
        return self._connection

    def lead(self) -> None:
        if self.make is None:
            self._turn.release()
        else:
            self._leading = True
            self._committed.release()

    def wait_for_lead(self) -> bool:
        """(A change given as a function) True: lead the next transaction; False: it
        was made in a leader's, which is over (``raise_failure`` tells how it went)."""
        self._committed.acquire()
        return self._leading

    def raise_failure(self, failure: BaseException | None = None) -> None:
        """Raise why the transaction failed, else what the change raised, if anything."""
        failure = failure or self._failure
        if failure is not None:
            raise failure
        if self.error is not None:
            raise self.error

    def run_on(self, connection: sqlite3.Connection) -> None:
        """(The leader) let this change run on ``connection``, and wait until it is made."""
        self._connection = connection
        self._turn.release()
        self._done.acquire()

    def made(self) -> None:
        """(The follower) its change is made: the leader goes on."""
        self._done.release()

    def settle(self, failure: BaseException | None) -> None:
        """(The leader) the transaction committed (``failure`` None) or did not."""
        self._failure = failure
        self._committed.release()

    def wait_for_commit(self) -> BaseException | None:
        self._committed.acquire()
        return self._failure


class _Group:
    """The transaction open in this process, and the changes waiting to join one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open = False
        self._waiting: deque[_Change] = deque()

    def join(self, change: _Change) -> bool:
        """True: no transaction is open, ``change`` leads one; False: it waits."""
        with self._lock:
            if not self._open:
                self._open = True
                return True
            self._waiting.append(change)
            return False

    def next_for(self, leader: _Change, size: int) -> _Change | None:
        """The next waiting change that can join the leader's transaction: one that
        syncs its commit alike, while the transaction is below ``GROUP_LIMIT``."""
        if size >= GROUP_LIMIT:
            return None
        with self._lock:
            for change in self._waiting:
                if change.synchronous == leader.synchronous:
                    self._waiting.remove(change)
                    return change
        return None

    def hand_over(self) -> None:
        """The transaction ended: the longest waiting change leads the next one."""
        with self._lock:
            if not self._waiting:
                self._open = False
                return
            successor = self._waiting.popleft()
        successor.lead()
