"""Workers in processes of their own, so that local mode uses more than one core.

Python runs one thread at a time per process (the GIL): with the API, the tick and
the workers in one process, local mode used one core of several. ``WorkerProcesses``
starts ``count`` child processes on the same data directory, each a local runtime
with the worker component only (as ``dynacron local --only worker`` runs), and
watches them:

- a child that dies (killed, crashed) is started again; the new one makes visible
  at once what the dead one had received (``LocalStore.recover``), as any worker
  process does at start-up;
- ``stop()`` asks each child to stop (SIGTERM), then kills what has not ended;
- a child whose parent is gone (killed with SIGKILL, so it could not stop them)
  is killed with it on Linux (``PR_SET_PDEATHSIG``), as if the whole of local mode
  had crashed, and elsewhere stops by itself within ``REPORT_SECONDS``: no
  process is left behind;
- Ctrl-C in a terminal reaches the whole process group: children ignore SIGINT
  and stop when their parent tells them to.

A child's deliveries and metric documents come back to the parent over a pipe of
its own, so the activity line and ``--metrics-file`` count every process.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import logging
import multiprocessing
import os
import signal
import sys
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import TYPE_CHECKING, Any

from dynacron.adapters.powertools.metrics import EmfDocument
from dynacron.local.tuning import settle_collector

if TYPE_CHECKING:
    from dynacron.local.runtime import Activity, LocalOptions

logger = logging.getLogger("dynacron-local")

PR_SET_PDEATHSIG = 1  # <sys/prctl.h>
# How often a child reports its deliveries to its parent (and checks it is alive).
REPORT_SECONDS = 0.5
STOP_SECONDS = 15.0
# Every restart after the first waits this long, so that a child that cannot start
# does not spin.
RESTART_PAUSE_SECONDS = 1.0

# Spawned, not forked: the parent runs threads (and holds SQLite connections)
# that a fork would copy in whatever state they were.
_CONTEXT = multiprocessing.get_context("spawn")


class WorkerProcesses:
    """``count`` worker processes on the parent's store, kept running until ``stop()``."""

    def __init__(
        self,
        options: LocalOptions,
        count: int,
        activity: Activity,
        emit: Callable[[EmfDocument], None],
    ) -> None:
        self._options = options
        self._count = count
        self._activity = activity
        self._emit = emit
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        # slot -> the child in it and its report channel (None once it said EOF).
        self._children: dict[int, tuple[BaseProcess, Connection | None]] = {}
        self._threads: list[threading.Thread] = []
        self.restarts = 0

    def start(self) -> WorkerProcesses:
        for slot in range(self._count):
            self._start_child(slot)
        for name, target in (("supervisor", self._supervise), ("reports", self._read_reports)):
            thread = threading.Thread(target=target, name=f"dynacron-workers-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        self._stopping.set()
        with self._lock:
            children = list(self._children.values())
        for process, _ in children:
            if process.pid is not None and process.exitcode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGTERM)
        for process, _ in children:
            process.join(STOP_SECONDS)
            if process.exitcode is None:
                process.kill()
                process.join(5)
        for thread in self._threads:
            thread.join(5)
        for _, channel in children:
            if channel is not None:
                channel.close()

    def _start_child(self, slot: int) -> None:
        receiving, sending = _CONTEXT.Pipe(duplex=False)
        process = _CONTEXT.Process(
            target=run_worker_process,
            args=(self._options, os.getpid(), sending),
            name=f"dynacron-worker-process-{slot}",
            daemon=False,
        )
        process.start()
        sending.close()  # the child's end: the parent reads EOF once the child is gone
        with self._lock:
            self._children[slot] = (process, receiving)

    def _supervise(self) -> None:
        """Start again a child that died while the parent is running."""
        while not self._stopping.wait(0.2):
            with self._lock:
                dead = [
                    (slot, process)
                    for slot, (process, _) in self._children.items()
                    if process.exitcode is not None  # reaped: its pid is free to ask about
                ]
            for slot, process in dead:
                if self._stopping.is_set():
                    return
                logger.warning(
                    "a worker process ended; starting another",
                    extra={"pid": process.pid, "exitcode": process.exitcode},
                )
                self._stopping.wait(RESTART_PAUSE_SECONDS if self.restarts else 0)
                if self._stopping.is_set():
                    return
                self.restarts += 1
                self._start_child(slot)

    def _read_reports(self) -> None:
        """Add what the children report to the parent's activity and metrics."""
        while not self._stopping.is_set():
            with self._lock:
                channels = [c for _, c in self._children.values() if c is not None]
            if not channels:
                self._stopping.wait(0.2)
            for channel in wait(channels, timeout=0.2):
                assert isinstance(channel, Connection)
                try:
                    kind, value = channel.recv()
                except (EOFError, OSError, ValueError):
                    # The child is gone (perhaps mid-report): its channel says no more.
                    self._forget(channel)
                    continue
                if kind == "activity":
                    self._activity.add(**value)
                else:
                    self._emit(value)

    def _forget(self, channel: Connection) -> None:
        with self._lock:
            for slot, (process, open_channel) in self._children.items():
                if open_channel is channel:
                    self._children[slot] = (process, None)
        channel.close()


def run_worker_process(options: LocalOptions, parent_pid: int, channel: Connection) -> None:
    """A child's life: a worker-only local runtime until told to stop or orphaned."""
    from dynacron.local.runtime import LocalRuntime

    _die_with_parent()
    if os.getppid() != parent_pid:
        return  # orphaned before it could ask to die with its parent
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops us on Ctrl-C
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    send_lock = threading.Lock()

    def send(kind: str, value: Any) -> None:
        with send_lock, contextlib.suppress(OSError):
            channel.send((kind, value))

    child = dataclasses.replace(
        options, components=("worker",), worker_processes=0, metrics_file=None
    )
    runtime = LocalRuntime(child, emit_metrics=lambda document: send("metrics", document))
    runtime.start()
    settle_collector()
    reported = (0, 0)

    def report() -> None:
        nonlocal reported
        _, succeeded, failed = runtime.activity.snapshot()
        if (succeeded, failed) != reported:
            send("activity", {"succeeded": succeeded - reported[0], "failed": failed - reported[1]})
            reported = (succeeded, failed)

    while not stop.wait(REPORT_SECONDS) and os.getppid() == parent_pid:
        report()
    runtime.stop()
    report()
    channel.close()


def _die_with_parent() -> None:
    """Linux: be killed when the parent dies (it cannot stop us after a SIGKILL)."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
