"""Virtual time for the scale benchmark: a discrete-event simulation whose processes
run dynacron's real code.

Each process is a greenlet: the code it runs (a Lambda invocation's, or one of its
threads') is the real code, unchanged, and it gives the simulation control only
where real code would wait: an AWS call (``Process.request``), a sleep
(``Simulation.wait``), a pool of threads joined (``VirtualPool``). Every process
belongs to an ``Invocation``, whose CPU it shares with the invocation's other
processes: the CPU a process spends between two waits is measured on this machine
(``time.thread_time``), scaled by the invocation's slowdown (its memory's share of
a vCPU), and queued on the invocation's CPU after the work of its other threads.
So a process's clock (``Simulation.local_now``, what the real code's injected
clock reads) is the instant it was resumed plus the CPU it has spent since.

The events (an answer arriving, a sleep ending, a Lambda started) are kept in one
heap and run in order of their virtual instant; an AWS call is applied to the
model at its own instant, so two processes' calls interleave as the instants say,
and races (two claims of one task) stay possible.
"""

from __future__ import annotations

import gc
import heapq
import threading
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any, TypeVar

from greenlet import greenlet

T = TypeVar("T")
R = TypeVar("R")
Outcome = tuple[Any, BaseException | None]


class Invocation:
    """One Lambda invocation's CPU: ``slowdown`` virtual seconds per second of this
    machine's CPU, and when its CPU is next free (its threads take turns)."""

    def __init__(self, slowdown: float) -> None:
        self.slowdown = slowdown
        self.cpu_free_at = 0.0
        self.cpu_seconds = 0.0


class Process:
    """A greenlet running real code for an ``Invocation``, resumed by the simulation."""

    def __init__(self, simulation: Simulation, invocation: Invocation, run: Callable[[], Any]):
        self.simulation = simulation
        self.invocation = invocation
        self.base = 0.0
        self._cpu_at_base = 0.0
        self.done: list[Callable[[Outcome], None]] = []
        self._greenlet = greenlet(lambda _: self._main(run), parent=simulation.hub)

    def _main(self, run: Callable[[], Any]) -> Outcome:
        try:
            outcome: Outcome = (run(), None)
        except BaseException as error:  # handed to whoever waits for this process
            outcome = (None, error)
        self._spend()
        for notify in self.done:
            notify(outcome)
        return outcome

    def resume(self, outcome: Outcome = (None, None)) -> None:
        """Run the process from the hub until it waits again or ends."""
        simulation = self.simulation
        simulation.current = self
        self.base = max(simulation.now, self.invocation.cpu_free_at)
        self._cpu_at_base = time.thread_time()
        try:
            self._greenlet.switch(outcome)
        finally:
            simulation.current = None

    def local_now(self) -> float:
        """The process's instant: resumed at ``base``, plus its CPU since, slowed down."""
        return self.base + self.invocation.slowdown * (time.thread_time() - self._cpu_at_base)

    def rebase(self) -> None:
        """Leave out of this process's CPU what it spent since it was resumed or last
        rebased (the double's own work, done in the process's greenlet)."""
        self._cpu_at_base = time.thread_time()

    def _spend(self, until: float | None = None) -> float:
        """Take the invocation's CPU up to ``until`` (default: now); returns that instant."""
        at = self.local_now() if until is None else until
        self.invocation.cpu_seconds += at - self.base
        self.invocation.cpu_free_at = max(self.invocation.cpu_free_at, at)
        return at

    def suspend(self) -> Any:
        """Give control back to the simulation until resumed; returns what it was resumed with."""
        value, error = self.simulation.hub.switch()
        if error is not None:
            raise error
        return value

    def request(
        self, cpu_until: float, send_at: float, latency: float, apply: Callable[[], Any]
    ) -> Outcome:
        """A call sent at ``send_at``: ``apply`` runs at the service halfway through the
        round trip, and its outcome (a value or an exception) comes back after it."""
        self._spend(cpu_until)
        simulation = self.simulation
        answer_at = send_at + latency

        def at_service() -> None:
            try:
                outcome: Outcome = (apply(), None)
            except Exception as error:
                outcome = (None, error)
            simulation.at(answer_at, lambda: self.resume((outcome, None)))

        simulation.at(send_at + latency / 2, at_service)
        result: Outcome = self.suspend()
        return result


class Simulation:
    """The event heap, virtual time (seconds from ``start``) and the running process."""

    def __init__(self, start: datetime) -> None:
        self.start = start
        self.start_epoch = start.timestamp()
        self.now = 0.0
        self.current: Process | None = None
        self.hub = greenlet.getcurrent()
        self._events: list[tuple[float, int, Callable[[], None]]] = []
        self._sequence = 0
        self._gc_began = 0.0
        self.gc_seconds = 0.0
        gc.callbacks.append(self._collecting)

    def _collecting(self, phase: str, info: dict[str, Any]) -> None:
        """Python's cyclic collector, run while a process runs, walks the whole
        simulation's heap (the double's tables, every environment): not the
        simulated invocation's work, so its CPU is left out of the process's."""
        if phase == "start":
            self._gc_began = time.thread_time()
            return
        spent = time.thread_time() - self._gc_began
        self.gc_seconds += spent
        process = self.current
        if process is not None:
            process._cpu_at_base += spent

    def close(self) -> None:
        """Stop watching the collector (the simulation is done)."""
        if self._collecting in gc.callbacks:
            gc.callbacks.remove(self._collecting)

    def at(self, when: float, event: Callable[[], None]) -> None:
        self._sequence += 1
        heapq.heappush(self._events, (max(when, self.now), self._sequence, event))

    def after(self, delay: float, event: Callable[[], None]) -> None:
        self.at(self.now + delay, event)

    def local_now(self) -> float:
        """The running process's instant, or the simulation's between processes."""
        process = self.current
        return process.local_now() if process is not None else self.now

    def epoch(self) -> float:
        """``local_now`` in epoch seconds."""
        return self.start_epoch + self.local_now()

    def datetime(self) -> datetime:
        return datetime.fromtimestamp(self.epoch(), UTC)

    def spawn(
        self, invocation: Invocation, run: Callable[[], Any], at: float | None = None
    ) -> Process:
        """A process for ``invocation`` that starts ``run`` at ``at`` (default: now)."""
        process = Process(self, invocation, run)
        self.at(self.local_now() if at is None else at, process.resume)
        return process

    def running(self) -> Process:
        if self.current is None:
            raise RuntimeError("only a simulated process waits in virtual time")
        return self.current

    def wait(self, seconds: float) -> None:
        """The running process sleeps ``seconds`` of virtual time."""
        process = self.running()
        until = process._spend() + max(0.0, seconds)
        self.at(until, process.resume)
        process.suspend()

    def run(self, until: float) -> None:
        """Run every event up to ``until``."""
        events = self._events
        while events and events[0][0] <= until:
            when, _, event = heapq.heappop(events)
            self.now = when
            event()
        self.now = max(self.now, until)

    def pending(self) -> int:
        return len(self._events)


class VirtualClock:
    """The clock dynacron is given (``domain.clock.Clock``): the running process's instant."""

    def __init__(self, simulation: Simulation) -> None:
        self._simulation = simulation

    def now(self) -> datetime:
        return self._simulation.datetime()


class VirtualPool:
    """``ThreadPoolExecutor``'s ``map`` (what the tick's page claimer uses), with
    ``workers`` processes of the caller's invocation instead of threads."""

    def __init__(self, simulation: Simulation, workers: int) -> None:
        self._simulation = simulation
        self._workers = workers

    def map(self, call: Callable[[T], R], items: Iterable[T]) -> list[R]:
        simulation = self._simulation
        caller = simulation.running()
        work = list(enumerate(items))
        results: list[Outcome] = [(None, None)] * len(work)
        if not work:
            return []
        queue = iter(work)
        left = min(self._workers, len(work))
        start = caller._spend()

        def worker() -> None:
            for index, item in queue:
                try:
                    results[index] = (call(item), None)
                except Exception as error:
                    results[index] = (None, error)

        def finished(_: Outcome) -> None:
            nonlocal left
            left -= 1
            if left == 0:
                simulation.at(simulation.local_now(), caller.resume)

        for _ in range(left):
            simulation.spawn(caller.invocation, worker, at=start).done.append(finished)
        caller.suspend()
        for _, error in results:
            if error is not None:
                raise error
        return [value for value, _ in results]

    def shutdown(self, wait: bool = True) -> None:
        """Nothing to stop: the pool's processes end with their work."""


class VirtualEvent:
    """``threading.Event`` for processes of the simulation: ``wait`` sleeps in virtual
    time until ``set`` or the timeout, whichever comes first."""

    def __init__(self, simulation: Simulation) -> None:
        self._simulation = simulation
        self._set = False
        self._waiting: list[Callable[[bool], None]] = []

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        self._set = True
        waiting, self._waiting = self._waiting, []
        for wake in waiting:
            wake(True)

    def wait(self, timeout: float | None = None) -> bool:
        if self._set:
            return True
        simulation = self._simulation
        process = simulation.running()
        woken = False

        def wake(value: bool) -> None:
            nonlocal woken
            if not woken:
                woken = True
                simulation.at(simulation.local_now(), lambda: process.resume((value, None)))

        self._waiting.append(wake)
        if timeout is not None:
            simulation.at(process._spend() + max(0.0, timeout), lambda: wake(False))
        else:
            process._spend()
        return bool(process.suspend())


class VirtualThread:
    """``threading.Thread`` as a process of the starting process's invocation (it
    shares that invocation's CPU, as a thread shares its Lambda's)."""

    def __init__(
        self,
        simulation: Simulation,
        target: Callable[[], Any],
        name: str | None = None,
        daemon: bool | None = None,
    ) -> None:
        self._simulation = simulation
        self._target = target
        self.name = name
        self.daemon = daemon
        self._ended = VirtualEvent(simulation)

    def start(self) -> None:
        caller = self._simulation.running()
        at = caller._spend()
        process = self._simulation.spawn(caller.invocation, self._target, at=at)
        process.done.append(lambda _: self._ended.set())

    def join(self, timeout: float | None = None) -> None:
        self._ended.wait(timeout)

    def is_alive(self) -> bool:
        return not self._ended.is_set()


class VirtualThreading:
    """What code takes from the ``threading`` module, for processes of the
    simulation: its threads and events on virtual time; a lock is a real lock (a
    process never waits in virtual time while holding one)."""

    def __init__(self, simulation: Simulation) -> None:
        self._simulation = simulation
        self.Lock = threading.Lock

    def Event(self) -> VirtualEvent:
        return VirtualEvent(self._simulation)

    def Thread(self, target: Callable[[], Any], **kwargs: Any) -> VirtualThread:
        return VirtualThread(self._simulation, target, **kwargs)
