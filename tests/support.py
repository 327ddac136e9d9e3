"""Test helpers: fakes of a Lambda context, a recording queue and tick, faults.

The loopback sink (``Sink``) and the helpers that start a process, wait and call the
API live in ``bench`` (``bench.loopback``, ``bench.processes``), which the
benchmarks share with the tests; they are re-exported here for the tests' imports.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bench.loopback import Answer, Delivery, Sink
from bench.processes import ROOT, Service, api_call, free_port, wait_until
from dynacron.domain.executions.execution import Dispatch
from dynacron.entry.composition import Dynacron
from dynacron.ports import DispatchQueue
from dynacron.ports.faults import Boundary
from dynacron.services.tick import Ticker

__all__ = [
    "ROOT",
    "Answer",
    "Delivery",
    "FakeLambdaContext",
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
