"""What services record about the promises dynacron keeps.

``adapters.powertools.metrics.ReliabilityMetrics`` records them as CloudWatch
Embedded Metric Format; ``NO_METRICS`` records nothing (a service built without
metrics, in tests).
"""

from __future__ import annotations

from typing import Protocol


class Metrics(Protocol):
    """Counters and timings; every method is safe to call from several threads."""

    def retry_scheduled(self) -> None: ...

    def attempt_failed(self) -> None: ...

    def dead_lettered(self) -> None:
        """An execution ended FAILED, listed as a dead letter (began or not)."""
        ...

    def execution_ended(self, status: str) -> None:
        """An execution ended ``status`` (SUCCEEDED or SKIPPED; FAILED is ``dead_lettered``)."""
        ...

    def handler_duration(self, seconds: float) -> None: ...

    def queue_latency(self, seconds: float) -> None: ...

    def tick_heartbeat(self, shard: int) -> None:
        """The looping tick ticked ``shard``: its alarm breaches when these stop."""
        ...

    def lease_reaped(self) -> None: ...

    def duplicate_suppressed(self) -> None: ...

    def scheduling_lag(self, seconds: float) -> None: ...

    def limit_wait(self, reason: str, seconds: float) -> None:
        """An execution sent on to wait for a limit (``reason``), ``seconds`` late."""
        ...

    def breaker_changed(self, state: str) -> None: ...

    def host_paused(self) -> None: ...

    def queue_depth(self, messages: int) -> None: ...

    def dispatch_paced(self) -> None: ...

    def task_set_aside(self) -> None: ...

    def lease_set_aside(self) -> None: ...

    def tick_failed(self) -> None: ...

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

    def flush(self) -> None:
        pass


NO_METRICS: Metrics = _NoMetrics()
