"""Where local mode keeps its data: a SQLite file (the default) or an AWS emulator.

Both give the runtime the same things: settings, every port (an ``AdapterSet``),
and the dispatch and undelivered queues as an event source mapping reads them
(messages in the shape SQS returns, deleted unless reported back).

- ``SqliteStore`` keeps everything in one file of a data directory: stopped,
  killed or rebooted, local mode finds its tasks and records there again. At
  start-up it makes visible at once the messages a dead process had received,
  so what was in flight at a crash runs again without waiting out the 360 s
  visibility timeout.
- ``EmulatorStore`` runs the AWS adapter set against moto (embedded, or a shared
  ``--aws-endpoint``): the AWS code paths, in memory, forgotten at exit.
"""

from __future__ import annotations

import math
import os
import shutil
import sqlite3
import tempfile
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Literal, Protocol

from dynacron.adapters.aws import aws_adapters
from dynacron.adapters.sqlite import sqlite_adapters
from dynacron.adapters.sqlite.database import BUSY_TIMEOUT_MS, Database, Durability
from dynacron.adapters.sqlite.queue import SqliteQueues
from dynacron.adapters.sqlite.retention import delete_expired_changes, delete_expired_executions
from dynacron.definitions.resources import DISPATCH_QUEUE, UNDELIVERED_QUEUE
from dynacron.domain.clock import Clock
from dynacron.domain.coordination import transitions
from dynacron.entry.composition import EXECUTION_RETENTION
from dynacron.entry.settings import Settings
from dynacron.local.aws import (
    REGION,
    EmbeddedAws,
    aws_clients,
    provision,
    undelivered_queue_url,
)
from dynacron.local.chaos import ChaosSettings, chaotic_clients
from dynacron.local.private_files import (
    UnusablePath,
    private_directory,
    private_file,
    refuse_shared,
)
from dynacron.ports import AdapterSet

StoreKind = Literal["sqlite", "emulator"]
STORES: tuple[StoreKind, ...] = ("sqlite", "emulator")
DATABASE_FILE = "dynacron.sqlite3"
# The most messages one SQS ReceiveMessage or DeleteMessageBatch takes.
SQS_BATCH = 10

Message = dict[str, Any]


class LocalStore(Protocol):
    """What the local runtime needs of a backend."""

    description: str
    """One line for the start-up banner: what holds the data, and where."""

    def open(self, clock: Clock, **settings: Any) -> Settings:
        """Create what is missing and return the settings to run on."""
        ...

    def adapters(self, settings: Settings, clock: Clock) -> AdapterSet: ...

    def receive(self, queue: str, max_messages: int, wait_seconds: float) -> list[Message]:
        """Up to ``max_messages`` of ``queue`` (a definition's suffix), as SQS returns them."""
        ...

    def delete(self, queue: str, messages: list[Message]) -> None: ...

    def queue_arn(self, queue: str) -> str: ...

    def recover(self, *, starting: bool = False) -> int:
        """Make visible what a dead process received; returns how many. ``starting``:
        asked before this process received anything, so what its pid holds is an
        earlier process's."""
        ...

    def acknowledging(self) -> AbstractContextManager[None]:
        """Around a change whose answer tells a caller it is kept (the API's)."""
        ...

    def delete_expired_history(self, now: datetime) -> int:
        """Delete ended executions past their retention, as DynamoDB's TTL does
        deployed; returns how many went."""
        ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class StoreOptions:
    kind: StoreKind = "sqlite"
    # SQLite: the directory of the database file. None: a temporary one, removed
    # at close (tests, throwaway runs).
    data_dir: Path | None = None
    durability: Durability = "acknowledged"
    # SQLite: how long a write waits for another process's before the store is
    # unavailable (the API answers 503 with Retry-After).
    busy_timeout_ms: int = BUSY_TIMEOUT_MS
    # Emulator: an endpoint already running (shared by several processes); None
    # starts an embedded one.
    aws_endpoint: str | None = None
    prefix: str = "dynacron"
    # Receive with this visibility timeout instead of the queue's (seconds).
    visibility_timeout: int | None = None
    chaos: ChaosSettings | None = None
    # How long an ended execution is kept (its records' ``expires_at``).
    retention: timedelta = EXECUTION_RETENTION


def open_store(options: StoreOptions) -> LocalStore:
    if options.aws_endpoint is not None or options.kind == "emulator":
        return EmulatorStore(options)
    if options.chaos is not None and options.chaos.client_faults:
        raise ValueError(
            "throttling, duplicate and failed sends are injected into AWS clients: "
            "use the emulator store for them"
        )
    return SqliteStore(options)


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive
    return True


class SqliteStore:
    def __init__(self, options: StoreOptions) -> None:
        self._options = options
        self._temporary = options.data_dir is None
        self.data_dir = (
            Path(tempfile.mkdtemp(prefix="dynacron-"))
            if options.data_dir is None
            else options.data_dir
        )
        self.path = self.data_dir / DATABASE_FILE
        self.database = Database(
            self.path, durability=options.durability, busy_timeout_ms=options.busy_timeout_ms
        )
        self._queues: SqliteQueues | None = None
        where = "a temporary directory" if self._temporary else str(self.data_dir)
        self.description = f"SQLite  {self.path if not self._temporary else where}"

    def open(self, clock: Clock, **settings: Any) -> Settings:
        self._prepare()
        self._queues = SqliteQueues(self.database, clock)
        return Settings(
            # Names for logs only: the SQLite set keeps its own tables.
            tasks_table="tasks",
            executions_table="executions",
            coordination_table="coordination",
            dispatch_queue_url=f"sqlite:{DISPATCH_QUEUE.suffix}",
            dead_letter_queue_url="sqlite:dead-letters",
            # The queue releases a dead process's messages itself (``recover``): a
            # worker need not hold them (decision 0038), which saves a write a batch.
            # One file takes one writer at a time: the tick claims a page in one
            # transaction from its own thread, not from a pool (decision 0043).
            **{"message_holds": False, "tick_concurrency": 1, **settings},
        )

    def _prepare(self) -> None:
        """The data directory and database this user's alone, and the database one of
        ours: else ``UnusablePath`` saying what to do."""
        private_directory(self.data_dir)
        private_file(self.path)
        journals = [self.path.with_name(self.path.name + suffix) for suffix in ("-wal", "-shm")]
        refuse_shared(journals, "600")
        try:
            tables = {
                row[0]
                for row in self.database.connection().execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table'"
                )
            }
        except sqlite3.OperationalError as error:  # read-only file system, I/O error, ...
            raise UnusablePath(
                f"cannot open {self.path} ({error}): give --data-dir a directory this "
                "user may write"
            ) from None
        except sqlite3.DatabaseError as error:
            raise UnusablePath(
                f"{self.path} is not a database dynacron can read ({error}): move it "
                "away (a new one is made) or give another --data-dir"
            ) from None
        if tables and "tasks" not in tables:
            raise UnusablePath(
                f"{self.path} is another application's database (tables "
                f"{', '.join(sorted(tables)[:5])}): give dynacron a --data-dir of its own"
            )

    def adapters(self, settings: Settings, clock: Clock) -> AdapterSet:
        adapters = sqlite_adapters(
            self.database, clock, execution_retention=self._options.retention
        )
        start_cursors(adapters, settings, clock)
        return adapters

    def receive(self, queue: str, max_messages: int, wait_seconds: float) -> list[Message]:
        return [
            message.as_sqs_message()
            for message in self._ready().receive(
                queue,
                max_messages=max_messages,
                visibility_timeout=(
                    self._options.visibility_timeout if queue == DISPATCH_QUEUE.suffix else None
                ),
                wait_seconds=wait_seconds,
            )
        ]

    def delete(self, queue: str, messages: list[Message]) -> None:
        self._ready().delete(queue, [m["ReceiptHandle"] for m in messages])

    def queue_arn(self, queue: str) -> str:
        return f"arn:aws:sqs:local:000000000000:{queue}"

    def acknowledging(self) -> AbstractContextManager[None]:
        return self.database.acknowledging()

    def delete_expired_history(self, now: datetime) -> int:
        changes = delete_expired_changes(self.database, now)
        return delete_expired_executions(self.database, now) + changes

    def recover(self, *, starting: bool = False) -> int:
        queues = self._ready()
        this = os.getpid()

        def alive(pid: int) -> bool:
            # At start-up this process has received nothing yet: what its pid holds
            # is an earlier process's. Later, what it holds is in its own hands.
            return (pid == this and not starting) or (pid != this and _process_alive(pid))

        return sum(
            queues.release_abandoned(queue.suffix, alive)
            for queue in (DISPATCH_QUEUE, UNDELIVERED_QUEUE)
        )

    def close(self) -> None:
        self.database.close()
        if self._temporary:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def _ready(self) -> SqliteQueues:
        assert self._queues is not None, "open() first"
        return self._queues


def start_cursors(adapters: AdapterSet, settings: Settings, clock: Clock) -> None:
    """A new store holds no task due before now: start each shard's cursor here
    instead of walking back through a week of empty buckets. A shard that has a
    cursor keeps it, so a restart walks the buckets it missed while down."""
    start = settings.sharding.bucket(clock.now())
    for shard in range(settings.shard_count):
        if adapters.cursors.get(shard) is None:
            adapters.cursors.apply(shard, transitions.advance_cursor(start))


class EmulatorStore:
    def __init__(self, options: StoreOptions) -> None:
        self._options = options
        self._embedded: EmbeddedAws | None = None
        if options.aws_endpoint is None:
            self._embedded = EmbeddedAws().start()
            self.endpoint = self._embedded.endpoint
        else:
            self.endpoint = options.aws_endpoint
        self.dynamodb, self.sqs = aws_clients(self.endpoint)
        if options.chaos is not None:
            self.dynamodb, self.sqs = chaotic_clients(self.dynamodb, self.sqs, options.chaos)
        where = "embedded" if self._embedded is not None else "shared"
        self.description = f"{where} AWS emulator  {self.endpoint}  (DynamoDB + SQS, in memory)"

    def open(self, clock: Clock, **settings: Any) -> Settings:
        # AWS targets are called on this emulator, never on AWS (decision 0047).
        targets = {"target_region": REGION, "target_endpoint_url": self.endpoint}
        opened = provision(
            self.dynamodb, self.sqs, self._options.prefix, clock, **{**targets, **settings}
        )
        urls = {
            DISPATCH_QUEUE.suffix: opened.dispatch_queue_url,
            UNDELIVERED_QUEUE.suffix: undelivered_queue_url(self.sqs, self._options.prefix),
        }
        visibility = self._options.visibility_timeout
        if visibility is None and opened.message_holds:
            # Received already held as the worker holds them (decision 0038): a process
            # killed between a receive and its worker's first hold leaves nothing for
            # the queue's six worker timeouts.
            visibility = math.ceil(opened.lease_terms.message_hold.total_seconds())
        self.queues = SqsQueues(self.sqs, urls, visibility)
        return opened

    def adapters(self, settings: Settings, clock: Clock) -> AdapterSet:
        return aws_adapters(
            settings,
            dynamodb=self.dynamodb,
            sqs=self.sqs,
            execution_retention=self._options.retention,
        )

    def receive(self, queue: str, max_messages: int, wait_seconds: float) -> list[Message]:
        return self.queues.receive(queue, max_messages, wait_seconds)

    def delete(self, queue: str, messages: list[Message]) -> None:
        self.queues.delete(queue, messages)

    def queue_arn(self, queue: str) -> str:
        return self.queues.queue_arn(queue)

    def acknowledging(self) -> AbstractContextManager[None]:
        # DynamoDB acknowledges a write once it is durable.
        return nullcontext()

    def delete_expired_history(self, now: datetime) -> int:
        # The tables declare their TTL as deployed; the emulator's memory is gone at exit.
        return 0

    def recover(self, *, starting: bool = False) -> int:
        return 0  # SQS has no receivers to ask about: the visibility timeout decides

    def close(self) -> None:
        if self._embedded is not None:
            self._embedded.stop()


class SqsQueues:
    """Queues named by their definition's suffix, read as an event source mapping
    reads them."""

    def __init__(self, sqs: Any, urls: dict[str, str], visibility_timeout: int | None = None):
        self._sqs = sqs
        self._urls = urls
        self._visibility_timeout = visibility_timeout
        self._arns: dict[str, str] = {}

    def receive(self, queue: str, max_messages: int, wait_seconds: float) -> list[Message]:
        """Up to ``max_messages``, as an event source mapping gathers a batch larger
        than SQS's 10 a receive: it waits for the first, then takes what is there."""
        messages: list[Message] = []
        wait = int(wait_seconds)
        while len(messages) < max_messages:
            receive: dict[str, Any] = {
                "QueueUrl": self._urls[queue],
                "MaxNumberOfMessages": min(SQS_BATCH, max_messages - len(messages)),
                "WaitTimeSeconds": wait,
                "MessageSystemAttributeNames": ["All"],
            }
            if self._visibility_timeout is not None and queue == DISPATCH_QUEUE.suffix:
                receive["VisibilityTimeout"] = self._visibility_timeout
            received = self._sqs.receive_message(**receive).get("Messages", [])
            if not received:
                break
            messages += received
            wait = 0
        return messages

    def delete(self, queue: str, messages: list[Message]) -> None:
        for start in range(0, len(messages), SQS_BATCH):
            self._sqs.delete_message_batch(
                QueueUrl=self._urls[queue],
                Entries=[
                    {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                    for i, m in enumerate(messages[start : start + SQS_BATCH])
                ],
            )

    def queue_arn(self, queue: str) -> str:
        if queue not in self._arns:
            self._arns[queue] = self._sqs.get_queue_attributes(
                QueueUrl=self._urls[queue], AttributeNames=["QueueArn"]
            )["Attributes"]["QueueArn"]
        return self._arns[queue]
