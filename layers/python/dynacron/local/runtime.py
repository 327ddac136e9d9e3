"""Local mode: the real Lambda entry points, driven the way AWS drives them, on one machine.

The data lives in a store (``local.stores``): a SQLite file by default, kept
across restarts, or the AWS emulator. On it run

- the API entry point behind a local API Gateway stand-in (REST proxy events);
- a tick of every shard each second, at the top of the second, as deployed;
- worker threads that long-poll the dispatch queue, call the worker entry point with SQS batch
  events (which runs their records at once, as deployed) and delete only the records it
  did not report as failed;
- the reaper, every second (every minute when deployed), which also settles the
  dispatch messages SQS moved to the undelivered queue (deployed, a function fed
  by that queue does: decision 0022), and every few seconds describes the running
  tracked Step Functions and ECS runs on the emulator, which emits no state-change
  events (deployed, the events end them: decision 0049).

Each of these can run alone (``components``), in its own process, on a shared
data directory or AWS endpoint, so that a test can kill one with SIGKILL while
the store and the other components carry on.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

from aws_lambda_powertools import Logger

from dynacron.adapters.delivery.registry import default_registry
from dynacron.adapters.powertools.metrics import EmfDocument, MetricTotals
from dynacron.adapters.sqlite.database import Durability
from dynacron.definitions.environment import DEFAULT_EXECUTION_RETENTION_DAYS
from dynacron.definitions.resources import DISPATCH_QUEUE, UNDELIVERED_QUEUE
from dynacron.domain.clock import Clock, SystemClock
from dynacron.domain.executions.execution import DeliveryResult, Dispatch
from dynacron.domain.tasks.task import Task
from dynacron.entry.composition import Dynacron
from dynacron.entry.settings import DEFAULT_TENANT, LOOPBACK_NETWORKS, Settings
from dynacron.local.aws import REGION
from dynacron.local.chaos import ChaosSettings, CrashAt, SeededChance
from dynacron.local.chaos import kill_this_process as _kill
from dynacron.local.gateway import ApiGateway, LocalContext
from dynacron.local.stores import (
    LocalStore,
    Message,
    SqliteStore,
    StoreKind,
    StoreOptions,
    open_store,
)
from dynacron.local.worker_processes import WorkerProcesses
from dynacron.ports.delivery import Delivery
from dynacron.ports.faults import NO_FAULTS, Faults

logger = Logger(service="dynacron-local")

COMPONENTS = ("api", "tick", "worker", "reaper")
# How often the reaper's loop describes the running tracked runs (emulator only).
TRACKED_RUNS_EVERY_SECONDS = 2.0


@dataclass(frozen=True)
class LocalOptions:
    host: str = "127.0.0.1"
    port: int = 8080
    shards: int = 4
    # Worker invocations at once, each a thread that polls the queue and runs what
    # it received ``worker_concurrency`` (32) records at a time: 64 calls in flight.
    workers: int = 2
    # Seconds between ticks of every shard; None: 0.05 on SQLite, where a tick
    # is an indexed query in this process, 1.0 on the emulator (as deployed).
    tick_interval: float | None = None
    reaper_interval: float = 1.0
    # Ended executions are kept this many days after they stop mattering, as
    # deployed; the reaper loop deletes older ones every ``history_sweep_seconds``.
    retention_days: int = DEFAULT_EXECUTION_RETENTION_DAYS
    history_sweep_seconds: float = 60.0
    # Where the data lives (see ``local.stores``): SQLite in ``data_dir`` (None: a
    # temporary directory, gone at stop), or the AWS emulator (implied by an
    # ``aws_endpoint``: one already running, shared by several processes).
    store: StoreKind = "sqlite"
    data_dir: Path | None = None
    # What a commit survives (``adapters.sqlite.database``): by default what the
    # API acknowledges survives a power loss, and the rest a crash.
    durability: Durability = "acknowledged"
    aws_endpoint: str | None = None
    prefix: str = "dynacron"
    allow_networks: tuple[str, ...] = LOOPBACK_NETWORKS
    # (key, tenant) pairs; empty: no key needed, every caller is the default tenant.
    api_keys: tuple[tuple[str, str], ...] = ()
    # One person's scripts and tests: far above the deployed default.
    tenant_rate_per_second: float = 500.0
    tenant_rate_burst: int = 5000
    components: tuple[str, ...] = COMPONENTS
    # Override the queue's visibility timeout on receive (seconds), e.g. to see
    # the messages of a killed worker again sooner in tests.
    visibility_timeout: int | None = None
    # Messages per worker invocation (the event source mapping's batch size): two
    # rounds of the worker's concurrency.
    batch_size: int = 64
    # Run the workers in this many processes of their own (``workers`` threads
    # each), so that they use more than one core; 0: as threads of this process.
    worker_processes: int = 0
    # Further Settings fields (lease_seconds, clock_skew_seconds, ...).
    settings_overrides: dict[str, Any] = field(default_factory=dict)
    # Append every EMF document here (one JSON per line) instead of keeping totals only.
    metrics_file: Path | None = None
    chaos: ChaosSettings | None = None
    # Where handlers call back when this process runs no API (a worker-only process
    # next to an API in another one); with the API here, its own loopback URL.
    api_url: str | None = None


@dataclass
class Activity:
    """Counters for the live activity line; safe to update from any thread."""

    dispatched: int = 0
    succeeded: int = 0
    failed: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, **counts: int) -> None:
        with self._lock:
            for name, count in counts.items():
                setattr(self, name, getattr(self, name) + count)

    def snapshot(self) -> tuple[int, int, int]:
        with self._lock:
            return self.dispatched, self.succeeded, self.failed


class CountingDelivery:
    def __init__(self, inner: Delivery, activity: Activity) -> None:
        self._inner = inner
        self._activity = activity

    def deliver(self, task: Task, dispatch: Dispatch, callback_token: str) -> DeliveryResult:
        result = self._inner.deliver(task, dispatch, callback_token)
        self._activity.add(succeeded=int(result.ok), failed=int(not result.ok))
        return result


class MetricsSink:
    """Where local mode's EMF documents go: running totals, and optionally a file."""

    def __init__(self, path: Path | None) -> None:
        self.totals = MetricTotals()
        self._path = path
        self._lock = threading.Lock()

    def __call__(self, document: EmfDocument) -> None:
        self.totals(document)
        if self._path is not None:
            with self._lock, self._path.open("a") as out:
                out.write(json.dumps(document) + "\n")


class LocalRuntime:
    def __init__(
        self,
        options: LocalOptions,
        clock: Clock | None = None,
        emit_metrics: Callable[[EmfDocument], None] | None = None,
    ) -> None:
        unknown = set(options.components) - set(COMPONENTS)
        if unknown:
            raise ValueError(f"unknown components {sorted(unknown)}; choose from {COMPONENTS}")
        self.options = options
        self.activity = Activity()
        self.metrics = MetricsSink(options.metrics_file)
        self._emit_metrics = emit_metrics or self.metrics
        self.worker_processes: WorkerProcesses | None = None
        self._clock = clock or SystemClock()
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._gateway: ApiGateway | None = None
        self.store: LocalStore | None = None
        self.recovered = 0
        self.app: Dynacron | None = None

    @property
    def api_url(self) -> str | None:
        """The API's URL: this process's gateway, else the one the options name."""
        if self._gateway is None:
            return self.options.api_url
        host, port = self._gateway.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> LocalRuntime:
        options = self.options
        self.store = store = open_store(
            StoreOptions(
                kind=options.store,
                data_dir=options.data_dir,
                durability=options.durability,
                aws_endpoint=options.aws_endpoint,
                prefix=options.prefix,
                visibility_timeout=options.visibility_timeout,
                chaos=options.chaos,
                retention=timedelta(days=options.retention_days),
            )
        )
        if "api" in options.components:
            # Bound first, so that deliveries can tell handlers where to call back.
            self._gateway = ApiGateway((options.host, options.port), self._route_api)
        settings = store.open(
            self._clock,
            shard_count=options.shards,
            delivery_allow_networks=options.allow_networks,
            api_base_url=self.api_url,
            **options.settings_overrides,
        )
        settings = dataclasses.replace(
            settings,
            api_keys=self.options.api_keys,
            # Without keys, one person on one machine: everything is one tenant.
            default_tenant=None if self.options.api_keys else DEFAULT_TENANT,
            tenant_rate_per_second=self.options.tenant_rate_per_second,
            tenant_rate_burst=self.options.tenant_rate_burst,
        )
        faults: Faults = NO_FAULTS
        if options.chaos is not None:
            faults = CrashAt(
                options.chaos.boundaries,
                times=1,
                rate=options.chaos.crash_rate,
                chance=SeededChance(options.chaos.seed + 1),
                crash=_kill,
            )
        adapters = store.adapters(settings, self._clock)
        self.app = app = Dynacron(
            settings,
            adapters=adapters,
            clock=self._clock,
            handlers=default_registry,
            # The default delivery (its Python handlers' overruns counted), counted.
            wrap_delivery=lambda inner: CountingDelivery(inner, self.activity),
            emit_metrics=self._emit_metrics,
            faults=faults,
        )
        if "worker" in options.components or "reaper" in options.components:
            # What a killed process had received runs again now, not after the
            # visibility timeout (the store knows its receivers; SQS does not).
            self.recovered = store.recover(starting=True)
        if self._gateway is not None:
            gateway = self._gateway
            # A short poll interval, so that stop() returns promptly.
            self._spawn("api", lambda: gateway.serve_forever(poll_interval=0.05))
        if "tick" in options.components:
            self._spawn("tick", lambda: self._tick_loop(app))
        if "reaper" in options.components:
            self._spawn("reaper", lambda: self._reaper_loop(app, store))
        if "worker" in options.components and options.worker_processes:
            children = dataclasses.replace(options, api_url=self.api_url)
            self.worker_processes = WorkerProcesses(
                children, options.worker_processes, self.activity, self.metrics
            ).start()
        elif "worker" in options.components:
            for number in range(options.workers):
                self._spawn(f"worker-{number}", lambda: self._worker_loop(app, store))
        return self

    @property
    def settings(self) -> Settings:
        assert self.app is not None, "start() first"
        return self.app.settings

    def stop(self) -> None:
        self._stopping.set()
        if self.worker_processes is not None:
            self.worker_processes.stop()
        if self._gateway is not None:
            self._gateway.shutdown()
            self._gateway.server_close()
        for thread in self._threads:
            thread.join(timeout=10)
        if self.store is not None:
            self.store.close()

    def wait(self, on_activity: Callable[[Activity], None] | None = None) -> None:
        """Block until stopped, calling ``on_activity`` every second."""
        while not self._stopping.wait(1.0):
            if on_activity is not None:
                on_activity(self.activity)

    @property
    def tick_interval(self) -> float:
        if self.options.tick_interval is not None:
            return self.options.tick_interval
        return 0.05 if isinstance(self.store, SqliteStore) else 1.0

    def _route_api(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        assert self.app is not None
        assert self.store is not None
        # Every answer of the API tells its caller that a change is kept.
        with self.store.acknowledging():
            return self.app.api(event, context)

    def _spawn(self, name: str, target: Callable[[], None]) -> None:
        thread = threading.Thread(target=target, name=f"dynacron-{name}", daemon=True)
        thread.start()
        self._threads.append(thread)

    def _tick_loop(self, app: Dynacron) -> None:
        interval = self.tick_interval
        while not self._stopping.is_set():
            for shard in range(self.options.shards):
                try:
                    result = app.tick({"shard": shard}, LocalContext("dynacron-tick"))
                    self.activity.add(dispatched=result["claimed"])
                except Exception:
                    logger.exception("tick failed; the next tick retries", extra={"shard": shard})
            # Tick at the top of each interval, as the deployed per-second loop does,
            # so an occurrence due on a whole second is found a few ms after it.
            self._stopping.wait(interval - time.time() % interval + 0.005)

    def _reaper_loop(self, app: Dynacron, store: LocalStore) -> None:
        swept_at: datetime | None = None
        looked_at = 0.0
        while not self._stopping.wait(self.options.reaper_interval):
            swept_at = self._sweep_history(store, swept_at)
            if time.monotonic() - looked_at >= TRACKED_RUNS_EVERY_SECONDS:
                looked_at = time.monotonic()
                try:
                    # The emulator emits no state-change events (decision 0049).
                    app.completion_tracker.look_at_running()
                except Exception:
                    logger.exception("looking at tracked runs failed; the next run retries")
            try:
                app.reaper({}, LocalContext("dynacron-reaper"))
            except Exception:
                logger.exception("reaper failed; the next run retries")
            try:
                settle_undelivered(app, store)
            except Exception:
                logger.exception("settling undelivered dispatches failed; the next run retries")
            try:
                # Again on every run: a killed instance's worker processes may outlive
                # its start-up check by seconds, holding messages until they end.
                store.recover()
            except Exception:
                logger.exception("releasing dead receivers' messages failed; the next run retries")

    def _sweep_history(self, store: LocalStore, swept_at: datetime | None) -> datetime | None:
        """Delete ended executions past their retention, at most every
        ``history_sweep_seconds``; returns when it last swept."""
        now = self._clock.now()
        due = timedelta(seconds=self.options.history_sweep_seconds)
        if swept_at is not None and now - swept_at < due:
            return swept_at
        try:
            deleted = store.delete_expired_history(now)
        except Exception:
            logger.exception("deleting expired history failed; the next sweep retries")
            return swept_at
        if deleted:
            logger.info("deleted expired executions", extra={"deleted": deleted})
        return now

    def _worker_loop(self, app: Dynacron, store: LocalStore) -> None:
        queue = DISPATCH_QUEUE.suffix
        queue_arn = store.queue_arn(queue)
        while not self._stopping.is_set():
            try:
                messages = store.receive(queue, self.options.batch_size, wait_seconds=1)
            except Exception:
                if not self._stopping.is_set():
                    logger.exception("receive failed")
                    self._stopping.wait(1.0)
                continue
            if not messages:
                continue
            context = LocalContext(
                "dynacron-worker", timeout_seconds=app.settings.worker_timeout_seconds
            )
            try:
                result = app.worker(sqs_event(messages, queue_arn), context)
            except Exception:
                # As on Lambda: the whole batch becomes visible again later.
                logger.exception("worker invocation failed")
                continue
            failed = {f["itemIdentifier"] for f in result.get("batchItemFailures", [])}
            done = [m for m in messages if m["MessageId"] not in failed]
            if done:
                try:
                    store.delete(queue, done)
                except Exception:
                    # Undeleted messages come back and are dropped as duplicates.
                    logger.exception("delete failed")


class QueueReader(Protocol):
    def receive(self, queue: str, max_messages: int, wait_seconds: float) -> list[Message]: ...

    def delete(self, queue: str, messages: list[Message]) -> None: ...

    def queue_arn(self, queue: str) -> str: ...


def settle_undelivered(app: Dynacron, store: QueueReader, batches: int = 10) -> int:
    """Feed the undelivered queue to ``app.undelivered`` as its event source mapping
    would: batches of 10, each record deleted unless reported back. Returns how many
    messages were received."""
    queue = UNDELIVERED_QUEUE.suffix
    received = 0
    for _ in range(batches):
        messages = store.receive(queue, 10, wait_seconds=0)
        if not messages:
            break
        received += len(messages)
        result = app.undelivered(
            sqs_event(messages, store.queue_arn(queue)), LocalContext("dynacron-undelivered")
        )
        failed = {f["itemIdentifier"] for f in result.get("batchItemFailures", [])}
        done = [m for m in messages if m["MessageId"] not in failed]
        if done:
            store.delete(queue, done)
    return received


def sqs_event(messages: list[dict[str, Any]], queue_arn: str) -> dict[str, Any]:
    """The event Lambda's SQS event source mapping would build for ``messages``."""
    return {
        "Records": [
            {
                "messageId": m["MessageId"],
                "receiptHandle": m["ReceiptHandle"],
                "body": m["Body"],
                "attributes": m.get("Attributes", {}),
                "messageAttributes": {},
                "md5OfBody": m.get("MD5OfBody", ""),
                "eventSource": "aws:sqs",
                "eventSourceARN": queue_arn,
                "awsRegion": REGION,
            }
            for m in messages
        ]
    }
