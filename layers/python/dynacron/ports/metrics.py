"""What services record about the promises dynacron keeps.

``adapters.powertools.metrics.ReliabilityMetrics`` records them as CloudWatch
Embedded Metric Format; ``NO_METRICS`` records nothing (a service built without
metrics, in tests).
"""

from __future__ import annotations

from typing import Protocol


class Metrics(Protocol):
    """Counters and timings; every method is safe to call from several threads."""

    def retry_scheduled(self) -> None:
        """A failed attempt's next one was queued after its backoff (``Retries``)."""
        ...

    def attempt_failed(self) -> None:
        """An attempt ended failed, retried or not: a failure and an attempt, for the rate."""
        ...

    def dead_lettered(self) -> None:
        """An execution ended FAILED, listed as a dead letter (began or not)."""
        ...

    def execution_ended(self, status: str) -> None:
        """An execution ended ``status`` (SUCCEEDED or SKIPPED; FAILED is ``dead_lettered``)."""
        ...

    def handler_duration(self, seconds: float) -> None:
        """A handler call took ``seconds``, succeeded or failed; below zero counts as zero."""
        ...

    def queue_latency(self, seconds: float) -> None:
        """A worker started a dispatch ``seconds`` after it was sent, or due if later."""
        ...

    def tick_heartbeat(self, shard: int) -> None:
        """The looping tick ticked ``shard``: its alarm breaches when these stop."""
        ...

    def lease_reaped(self) -> None:
        """A lease that ran out was taken over: by the reaper, a worker or the undelivered
        handler."""
        ...

    def duplicate_suppressed(self) -> None:
        """A message or call was not acted on: a duplicate, a replayed success, or a
        call still in progress elsewhere."""
        ...

    def scheduling_lag(self, seconds: float) -> None:
        """A first attempt's handler started ``seconds`` after its scheduled time."""
        ...

    def limit_wait(self, reason: str, seconds: float) -> None:
        """An execution sent on to wait for a limit (``reason``), ``seconds`` late."""
        ...

    def breaker_changed(self, state: str) -> None:
        """A host's breaker moved to ``state`` (OPEN, HALF_OPEN or CLOSED)."""
        ...

    def host_paused(self) -> None:
        """A handler answered 429/503 with Retry-After: its host waits, for every worker."""
        ...

    def queue_depth(self, messages: int) -> None:
        """The tick saw ``messages`` in the dispatch queue, visible and in flight."""
        ...

    def dispatch_paced(self) -> None:
        """A tick claimed nothing because the queue held enough: what is due waits."""
        ...

    def task_set_aside(self) -> None:
        """A task was set aside (ERROR) because claiming it, or an execution's end, raised."""
        ...

    def lease_set_aside(self) -> None:
        """An expired lease whose handling raised was taken out of the reaper's index."""
        ...

    def tick_failed(self) -> None:
        """A step of the looping tick raised; the loop backs off and goes on."""
        ...

    def python_handlers_overrunning(self, count: int) -> None:
        """``count`` Python handler calls of this process are running past their
        timeout (sent each time the number changes)."""
        ...

    def clock_stepped(self) -> None:
        """The wall clock stepped, forward or back, against a monotonic clock."""
        ...

    def flush(self) -> None:
        """Hand on what was recorded since the last flush (end of an invocation or step)."""
        ...


class _NoMetrics:
    """Records nothing."""

    def retry_scheduled(self) -> None:
        pass

    def attempt_failed(self) -> None:
        pass

    def dead_lettered(self) -> None:
        pass

    def execution_ended(self, status: str) -> None:
        pass

    def handler_duration(self, seconds: float) -> None:
        pass

    def queue_latency(self, seconds: float) -> None:
        pass

    def tick_heartbeat(self, shard: int) -> None:
        pass

    def lease_reaped(self) -> None:
        pass

    def duplicate_suppressed(self) -> None:
        pass

    def scheduling_lag(self, seconds: float) -> None:
        pass

    def limit_wait(self, reason: str, seconds: float) -> None:
        pass

    def breaker_changed(self, state: str) -> None:
        pass

    def host_paused(self) -> None:
        pass

    def queue_depth(self, messages: int) -> None:
        pass

    def dispatch_paced(self) -> None:
        pass

    def task_set_aside(self) -> None:
        pass

    def lease_set_aside(self) -> None:
        pass

    def tick_failed(self) -> None:
        pass

    def python_handlers_overrunning(self, count: int) -> None:
        pass

    def clock_stepped(self) -> None:
        pass

    def flush(self) -> None:
        pass


NO_METRICS: Metrics = _NoMetrics()
