"""Reliability metrics, as CloudWatch Embedded Metric Format built by Powertools.

Each component records into its own ``ReliabilityMetrics`` and flushes at the end
of an invocation (the looping tick: after every step). Where the documents go is
injected: on Lambda they are printed (CloudWatch Logs turns EMF lines into
metrics); local mode and tests add them up in memory instead of printing them, so
a running scheduler does not flood stdout.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.metrics.provider.cloudwatch_emf.cloudwatch import (
    AmazonCloudWatchEMFProvider,
)

from dynacron.definitions import metric_names

# A metric with one more dimension than ``service``: (dimension name, value).
ExtraDimension = tuple[str, str]
EmfDocument = dict[str, Any]
_WAITING = {
    "concurrency": metric_names.WAITING_ON_CONCURRENCY,
    "rate": metric_names.WAITING_ON_RATE,
    "breaker": metric_names.WAITING_ON_BREAKER,
    "paused": metric_names.WAITING_ON_PAUSE,
}
_BREAKER = {
    "OPEN": metric_names.BREAKER_OPENED,
    "HALF_OPEN": metric_names.BREAKER_HALF_OPENED,
    "CLOSED": metric_names.BREAKER_CLOSED,
}
Emit = Callable[[EmfDocument], None]
# Powertools prints a document by itself at 100 values of one metric; flush first.
FLUSH_AT_VALUES = 90


def print_emf(document: EmfDocument) -> None:
    """Lambda: one EMF document per line on stdout."""
    print(json.dumps(document, separators=(",", ":")), flush=True)


class ReliabilityMetrics:
    """Counters and timings of the promises dynacron keeps; safe to use from threads."""

    def __init__(
        self,
        emit: Emit,
        namespace: str = metric_names.NAMESPACE,
        service: str = metric_names.SERVICE,
    ) -> None:
        self._emit = emit
        self._lock = threading.Lock()
        self._namespace = namespace
        self._service = service
        self._provider = self._new_provider({})
        # EMF gives every metric of a document the document's dimensions: a metric
        # with a dimension of its own (a shard, an outcome) goes in a document of
        # its own, one provider per dimension value.
        self._dimensioned: dict[ExtraDimension, AmazonCloudWatchEMFProvider] = {}
        # Values recorded since the last flush, by provider (None: the main one) and
        # metric: handed to Powertools at a flush, one validated ``add_metric`` per
        # metric rather than per value (each value cost some 40 µs, five a fire).
        self._pending: dict[ExtraDimension | None, dict[str, tuple[MetricUnit, list[float]]]] = {}

    def _new_provider(self, dimensions: dict[str, str]) -> AmazonCloudWatchEMFProvider:
        # A provider of our own: ``Metrics()`` would share its metric set with every
        # other instance in the process.
        return AmazonCloudWatchEMFProvider(
            namespace=self._namespace,
            service=self._service,
            metric_set={},
            dimension_set={},
            metadata_set={},
            default_dimensions=dimensions,
        )

    def retry_scheduled(self) -> None:
        self._add(metric_names.RETRIES, MetricUnit.Count, 1)

    def attempt_failed(self) -> None:
        self._add(metric_names.FAILURES, MetricUnit.Count, 1)
        self._add(metric_names.ATTEMPTS, MetricUnit.Count, 1)

    def dead_lettered(self) -> None:
        """An execution ended FAILED, listed as a dead letter (began or not)."""
        self._add(metric_names.DEAD_LETTERS, MetricUnit.Count, 1)
        self._finished("FAILED")

    def execution_ended(self, status: str) -> None:
        """An execution ended ``status`` (SUCCEEDED or SKIPPED; FAILED is
        ``dead_lettered``). A success also ends an attempt."""
        if status == "SUCCEEDED":
            self._add(metric_names.ATTEMPTS, MetricUnit.Count, 1)
        self._finished(status)

    def handler_duration(self, seconds: float) -> None:
        self._add(metric_names.HANDLER_DURATION, MetricUnit.Seconds, max(0.0, seconds))

    def queue_latency(self, seconds: float) -> None:
        self._add(metric_names.QUEUE_LATENCY, MetricUnit.Seconds, max(0.0, seconds))

    def tick_heartbeat(self, shard: int) -> None:
        """The looping tick ticked ``shard``: its alarm breaches when these stop."""
        self._add(
            metric_names.TICK_HEARTBEAT,
            MetricUnit.Count,
            1,
            (metric_names.SHARD_DIMENSION, str(shard)),
        )

    def lease_reaped(self) -> None:
        self._add(metric_names.LEASES_REAPED, MetricUnit.Count, 1)

    def duplicate_suppressed(self) -> None:
        self._add(metric_names.DUPLICATES_SUPPRESSED, MetricUnit.Count, 1)

    def scheduling_lag(self, seconds: float) -> None:
        self._add(metric_names.SCHEDULING_LAG, MetricUnit.Seconds, max(0.0, seconds))

    def limit_wait(self, reason: str, seconds: float) -> None:
        """An execution sent on to wait for a limit (``reason``), ``seconds`` late."""
        self._add(_WAITING[reason], MetricUnit.Count, 1)
        self._add(metric_names.LIMIT_LATENESS, MetricUnit.Seconds, max(0.0, seconds))

    def breaker_changed(self, state: str) -> None:
        self._add(_BREAKER[state], MetricUnit.Count, 1)

    def host_paused(self) -> None:
        self._add(metric_names.HOSTS_PAUSED, MetricUnit.Count, 1)

    def queue_depth(self, messages: int) -> None:
        self._add(metric_names.QUEUE_DEPTH, MetricUnit.Count, messages)

    def dispatch_paced(self) -> None:
        self._add(metric_names.DISPATCH_PACED, MetricUnit.Count, 1)

    def task_set_aside(self) -> None:
        self._add(metric_names.TASKS_SET_ASIDE, MetricUnit.Count, 1)

    def lease_set_aside(self) -> None:
        self._add(metric_names.LEASES_SET_ASIDE, MetricUnit.Count, 1)

    def tick_failed(self) -> None:
        self._add(metric_names.TICK_FAILURES, MetricUnit.Count, 1)

    def python_handlers_overrunning(self, count: int) -> None:
        self._add(metric_names.PYTHON_HANDLERS_OVERRUNNING, MetricUnit.Count, max(0, count))

    def clock_stepped(self) -> None:
        self._add(metric_names.CLOCK_STEPS, MetricUnit.Count, 1)

    def flush(self) -> None:
        """Hand what was recorded since the last flush to ``emit``, as one EMF
        document: a metric with a dimension of its own rides in it as a directive
        of its own. A second value of one dimension (two outcomes) cannot share a
        document with the first, and goes in one more."""
        with self._lock:
            documents: list[EmfDocument] = []
            for dimension in list(self._pending):
                self._hand_over(dimension)
            for provider in (self._provider, *self._dimensioned.values()):
                document = self._take(provider)
                if document is not None:
                    _merge_into(documents, document)
        for document in documents:
            self._emit(document)

    def _finished(self, status: str) -> None:
        self._add(
            metric_names.EXECUTIONS_FINISHED,
            MetricUnit.Count,
            1,
            (metric_names.OUTCOME_DIMENSION, status),
        )

    def _add(
        self,
        name: str,
        unit: MetricUnit,
        value: float,
        dimension: ExtraDimension | None = None,
    ) -> None:
        with self._lock:
            metrics = self._pending.setdefault(dimension, {})
            values = metrics.setdefault(name, (unit, []))[1]
            values.append(value)
            document = None
            if len(values) >= FLUSH_AT_VALUES:
                document = self._take(self._hand_over(dimension))
        if document is not None:
            self._emit(document)

    def _hand_over(self, dimension: ExtraDimension | None) -> AmazonCloudWatchEMFProvider:
        """(Holding the lock) give the pending values of ``dimension`` to its provider."""
        provider = self._provider
        if dimension is not None:
            provider = self._dimensioned.get(dimension) or self._dimensioned.setdefault(
                dimension, self._new_provider(dict([dimension]))
            )
        for name, (unit, values) in self._pending.pop(dimension, {}).items():
            provider.add_metric(name=name, unit=unit, value=values[0])
            provider.metric_set[name]["Value"].extend(float(value) for value in values[1:])
        return provider

    @staticmethod
    def _take(provider: AmazonCloudWatchEMFProvider) -> EmfDocument | None:
        if not provider.metric_set:
            return None
        document = dict(provider.serialize_metric_set())
        provider.clear_metrics()
        return document


def _merge_into(documents: list[EmfDocument], document: EmfDocument) -> None:
    """Add ``document``'s directives and values to the first of ``documents`` that
    holds none of its members, or append it. One line per flush: each line printed
    by a looping tick every second is ingested by CloudWatch Logs, and billed."""
    members = document.keys() - {"_aws", metric_names.SERVICE_DIMENSION}
    for host in documents:
        if members.isdisjoint(host):
            host["_aws"]["CloudWatchMetrics"] += document["_aws"]["CloudWatchMetrics"]
            host.update((member, document[member]) for member in members)
            return
    documents.append(document)


class MetricTotals:
    """An ``Emit`` that adds EMF documents up by metric name (local mode and tests)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._totals: dict[str, float] = {}
        self._counts: dict[str, int] = {}

    def __call__(self, document: EmfDocument) -> None:
        with self._lock:
            for directive in document["_aws"]["CloudWatchMetrics"]:
                for metric in directive["Metrics"]:
                    name = metric["Name"]
                    values = document[name]
                    values = values if isinstance(values, list) else [values]
                    self._totals[name] = self._totals.get(name, 0.0) + sum(values)
                    self._counts[name] = self._counts.get(name, 0) + len(values)

    def total(self, name: str) -> float:
        with self._lock:
            return self._totals.get(name, 0.0)

    def count(self, name: str) -> int:
        """How many values were recorded (for timings such as scheduling lag)."""
        with self._lock:
            return self._counts.get(name, 0)

    def snapshot(self) -> dict[str, float]:
        with self._lock:
            return dict(self._totals)
