"""Test helpers: fakes of a Lambda context, a recording queue and tick, faults.

The loopback sink (``Sink``) and the helpers that start a process, wait and call the
API live in ``bench`` (``bench.loopback``, ``bench.processes``), which the
benchmarks share with the tests; they are re-exported here for the tests' imports.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from bench.loopback import Answer, Delivery, Sink
from bench.processes import ROOT, Service, api_call, free_port, wait_until
from dynacron.domain.clock import SettableClock
from dynacron.domain.executions.execution import Dispatch
from dynacron.entry.composition import Dynacron
from dynacron.ports import DispatchQueue
from dynacron.ports.faults import Boundary
from dynacron.services.tick import Ticker
from dynacron.services.tick_loop import ShardTickLoop

__all__ = [
    "ROOT",
    "Answer",
    "ConcurrentLoops",
    "Delivery",
    "FakeLambdaContext",
    "InvocationKilled",
    "LoopRun",
    "RaiseAt",
    "RecordingQueue",
    "Service",
    "Sink",
    "api_call",
    "free_port",
    "recording_ticker",
    "wait_until",
]


@dataclass
class FakeLambdaContext:
    """The parts of a Lambda context the tick loop reads, with a fixed time left."""

    aws_request_id: str
    remaining_millis: int = 30_000

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_millis


class RecordingQueue:
    """A system's own dispatch queue (either set), remembering what it accepted, in order."""

    def __init__(self, queue: DispatchQueue) -> None:
        self._queue = queue
        self.accepted: list[Dispatch] = []

    def send(self, dispatches: list[Dispatch]) -> list[Dispatch]:
        accepted = self._queue.send(dispatches)
        self.accepted += accepted
        return accepted

    def depth(self) -> int:
        return self._queue.depth()

    def send_later(self, dispatch: Dispatch, delay_seconds: float) -> None:
        self._queue.send_later(dispatch, delay_seconds)

    def hold(self, receipt_handles: Sequence[str], seconds: float) -> int:
        return self._queue.hold(receipt_handles, seconds)


def recording_ticker(system: Dynacron, **settings: Any) -> tuple[Ticker, RecordingQueue]:
    """The real tick over a recording queue; ``settings`` override the system's."""
    queue = RecordingQueue(system.queue)
    ticker = Ticker(
        tasks=system.tasks,
        executions=system.executions,
        queue=queue,
        cursors=system.cursors,
        settings=dataclasses.replace(system.settings, **settings).tick_settings,
        clock=system.clock,
    )
    return ticker, queue


class RaiseAt:
    """A fault that raises a plain exception (a bug stand-in) at a boundary, ``times`` times."""

    def __init__(self, boundary: Boundary, times: int) -> None:
        self._boundary = boundary
        self.left = times

    def reached(self, boundary: Boundary) -> None:
        if boundary is self._boundary and self.left > 0:
            self.left -= 1
            raise RuntimeError("a bug in the tick")


class InvocationKilled(BaseException):
    """Lambda ending an invocation mid-call (a crash, out of memory, its timeout):
    not an ``Exception``, so nothing in the loop catches it."""


@dataclass
class LoopRun:
    """What ``ConcurrentLoops`` saw: when each loop ticked, how many held at once, and
    the spans in which a loop held the shard with no other waiting to take over."""

    tick_times: list[tuple[datetime, ShardTickLoop]] = dataclasses.field(default_factory=list)
    most_holders: int = 0
    without_standby: list[tuple[datetime, datetime]] = dataclasses.field(default_factory=list)
    killed: list[ShardTickLoop] = dataclasses.field(default_factory=list)


class ConcurrentLoops:
    """Tick invocations of one shard running at once, on one settable clock, as
    concurrent Lambdas would: each loop steps when its pause is over, the earliest
    first. A loop whose step raises ``InvocationKilled`` (or that ``kill`` names) is
    dead: never stepped again, its lease left as it was."""

    def __init__(self, clock: SettableClock) -> None:
        self.clock = clock
        self.run = LoopRun()
        self.stepping: ShardTickLoop | None = None
        self._due: dict[ShardTickLoop, datetime] = {}
        self._live: list[ShardTickLoop] = []

    def start(self, loop: ShardTickLoop) -> None:
        self._due[loop] = self.clock.now()
        self._live.append(loop)

    def kill(self, loop: ShardTickLoop) -> None:
        self._due.pop(loop, None)
        self._live.remove(loop)
        self.run.killed.append(loop)

    def until(self, when: datetime) -> LoopRun:
        """Step the live loops in time order until ``when``; the clock ends there."""
        while self._due:
            loop, due = min(self._due.items(), key=lambda item: item[1])
            if due > when:
                break
            self._watch_standby(due)
            ticks = loop.report.ticks
            self.stepping = loop
            try:
                pause = loop.step()
            except InvocationKilled:
                self.kill(loop)
                continue
            finally:
                self.stepping = None
            if loop.report.ticks > ticks:
                self.run.tick_times.append((due, loop))
            if pause is None:
                del self._due[loop]
                self._live.remove(loop)
            else:
                self._due[loop] = self.clock.now() + timedelta(seconds=pause)
            holders = sum(1 for live in self._live if live.holding)
            self.run.most_holders = max(self.run.most_holders, holders)
        self._watch_standby(when)
        return self.run

    def _watch_standby(self, until: datetime) -> None:
        """Move the clock on to ``until``, noting the span if nobody stood by."""
        now = self.clock.now()
        if until <= now:
            return
        holding = any(loop.holding for loop in self._live)
        if holding and all(loop.holding for loop in self._live):
            self.run.without_standby.append((now, until))
        self.clock.set(until)


def answer(sock: socket.socket) -> tuple[int, dict[str, Any]]:
    """The status and JSON body of the next HTTP response read from a raw socket."""
    response = http.client.HTTPResponse(sock)
    response.begin()
    body = response.read()
    return response.status, json.loads(body) if body else {}


def closed_by_server(sock: socket.socket, within: float = 10.0) -> bool:
    """Whether the server closes the connection within ``within`` seconds."""
    sock.settimeout(within)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
