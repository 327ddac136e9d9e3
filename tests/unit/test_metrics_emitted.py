"""EMF documents for metrics with a dimension of their own (a shard, an outcome),
and the queue latency the worker measures (issue 13)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from dynacron import metric_names
from dynacron.domain.executions import queue_latency
from dynacron.metrics import FLUSH_AT_VALUES, EmfDocument, MetricTotals, ReliabilityMetrics

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def extra_dimensions(document: EmfDocument) -> dict[str, str]:
    (directive,) = document["_aws"]["CloudWatchMetrics"]
    (dimension_set,) = directive["Dimensions"]
    return {name: document[name] for name in dimension_set if name != "service"}


def test_each_shards_heartbeat_is_a_document_of_its_own_with_the_shard_dimension() -> None:
    documents: list[EmfDocument] = []
    metrics = ReliabilityMetrics(documents.append)
    metrics.tick_heartbeat(0)
    metrics.tick_heartbeat(3)
    metrics.tick_heartbeat(3)
    metrics.queue_depth(7)
    metrics.flush()
    by_dimensions = {tuple(sorted(extra_dimensions(d).items())): d for d in documents}
    assert set(by_dimensions) == {(), (("shard", "0"),), (("shard", "3"),)}
    assert by_dimensions[(("shard", "3"),)][metric_names.TICK_HEARTBEAT] == [1.0, 1.0]
    assert by_dimensions[(("shard", "0"),)][metric_names.TICK_HEARTBEAT] == [1.0]
    # The service-wide document keeps the service dimension alone: the alarms on
    # its metrics match only those exact dimensions
    plain = by_dimensions[()]
    assert metric_names.TICK_HEARTBEAT not in plain
    assert plain[metric_names.QUEUE_DEPTH] == [7.0]
    for document in documents:
        assert document[metric_names.SERVICE_DIMENSION] == metric_names.SERVICE
    # Nothing new: nothing more is emitted, and the shard documents start afresh
    metrics.flush()
    assert len(documents) == 3
    metrics.tick_heartbeat(3)
    metrics.flush()
    assert extra_dimensions(documents[-1]) == {"shard": "3"}
    assert documents[-1][metric_names.TICK_HEARTBEAT] == [1.0]


def test_executions_finish_by_outcome_and_every_ended_attempt_is_counted() -> None:
    totals = MetricTotals()
    documents: list[EmfDocument] = []

    def emit(document: EmfDocument) -> None:
        documents.append(document)
        totals(document)

    metrics = ReliabilityMetrics(emit)
    metrics.execution_ended("SUCCEEDED")
    metrics.execution_ended("SKIPPED")  # no attempt ran: the handler was not called
    metrics.attempt_failed()
    metrics.dead_lettered()
    metrics.flush()
    assert totals.total(metric_names.ATTEMPTS) == 2
    assert totals.total(metric_names.FAILURES) == 1
    finished = {
        extra_dimensions(d)["outcome"]: d[metric_names.EXECUTIONS_FINISHED]
        for d in documents
        if metric_names.EXECUTIONS_FINISHED in d
    }
    assert finished == {"SUCCEEDED": [1.0], "SKIPPED": [1.0], "FAILED": [1.0]}


def test_durations_and_latencies_are_seconds_never_negative() -> None:
    documents: list[EmfDocument] = []
    metrics = ReliabilityMetrics(documents.append)
    metrics.handler_duration(0.25)
    metrics.queue_latency(-0.1)  # the worker's clock a little behind SQS's
    metrics.flush()
    (document,) = documents
    (directive,) = document["_aws"]["CloudWatchMetrics"]
    units = {m["Name"]: m["Unit"] for m in directive["Metrics"]}
    assert units == {
        metric_names.HANDLER_DURATION: "Seconds",
        metric_names.QUEUE_LATENCY: "Seconds",
    }
    assert document[metric_names.HANDLER_DURATION] == [0.25]
    assert document[metric_names.QUEUE_LATENCY] == [0.0]


def test_a_shard_document_is_flushed_before_powertools_would_print_it() -> None:
    totals = MetricTotals()
    metrics = ReliabilityMetrics(totals)
    for _ in range(FLUSH_AT_VALUES + 5):
        metrics.tick_heartbeat(1)
    assert totals.total(metric_names.TICK_HEARTBEAT) == FLUSH_AT_VALUES
    metrics.flush()
    assert totals.total(metric_names.TICK_HEARTBEAT) == FLUSH_AT_VALUES + 5


def test_queue_latency_counts_from_the_send_or_the_due_time_whichever_is_later() -> None:
    second = timedelta(seconds=1)
    # Sent when due (the tick), started 2 s later
    assert queue_latency(T0, T0, T0 + 2 * second) == 2 * second
    # Sent after it was due (a late tick): the tick's lateness is not the queue's
    assert queue_latency(T0 + 5 * second, T0, T0 + 6 * second) == second
    # Sent to wait for its due time (a retry): the wait it asked for is not latency
    assert queue_latency(T0, T0 + 60 * second, T0 + 61 * second) == second
    # Received before it is due: sent on, not started
    assert queue_latency(T0, T0 + 60 * second, T0 + 30 * second) is None
