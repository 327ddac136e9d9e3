"""EMF documents for metrics with a dimension of their own (a shard, an outcome),
and the queue latency the worker measures (issue 13)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from dynacron.adapters.powertools.metrics import (
    FLUSH_AT_VALUES,
    EmfDocument,
    MetricTotals,
    ReliabilityMetrics,
)
from dynacron.definitions import metric_names
from dynacron.domain.executions.execution import queue_latency

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def emitted(
    documents: list[EmfDocument],
) -> dict[tuple[str, frozenset[tuple[str, str]]], list[float]]:
    """(metric, its dimensions other than service) -> every value, as CloudWatch
    reads the documents: each directive names its metrics and their dimensions."""
    found: dict[tuple[str, frozenset[tuple[str, str]]], list[float]] = {}
    for document in documents:
        assert document[metric_names.SERVICE_DIMENSION] == metric_names.SERVICE
        for directive in document["_aws"]["CloudWatchMetrics"]:
            assert directive["Namespace"] == metric_names.NAMESPACE
            (dimension_set,) = directive["Dimensions"]
            assert metric_names.SERVICE_DIMENSION in dimension_set
            extra = frozenset(
                (name, document[name])
                for name in dimension_set
                if name != metric_names.SERVICE_DIMENSION
            )
            for metric in directive["Metrics"]:
                found.setdefault((metric["Name"], extra), []).extend(document[metric["Name"]])
    return found


def units(documents: list[EmfDocument]) -> dict[str, str]:
    return {
        metric["Name"]: metric["Unit"]
        for document in documents
        for directive in document["_aws"]["CloudWatchMetrics"]
        for metric in directive["Metrics"]
    }


def shard(number: int) -> frozenset[tuple[str, str]]:
    return frozenset({(metric_names.SHARD_DIMENSION, str(number))})


NONE: frozenset[tuple[str, str]] = frozenset()


def test_a_shards_heartbeat_rides_in_the_flushs_one_document_with_its_own_dimension() -> None:
    documents: list[EmfDocument] = []
    metrics = ReliabilityMetrics(documents.append)
    # Given what one step of the looping tick records
    metrics.queue_depth(7)
    metrics.tick_heartbeat(3)
    # When it is flushed
    metrics.flush()
    # Then one line carries both, each metric with exactly its own dimensions
    (document,) = documents
    assert emitted(documents) == {
        (metric_names.QUEUE_DEPTH, NONE): [7.0],
        (metric_names.TICK_HEARTBEAT, shard(3)): [1.0],
    }
    assert len(document["_aws"]["CloudWatchMetrics"]) == 2
    # And nothing new emits nothing; a heartbeat alone is a document too
    metrics.flush()
    metrics.tick_heartbeat(3)
    metrics.flush()
    assert len(documents) == 2
    assert emitted(documents[1:]) == {(metric_names.TICK_HEARTBEAT, shard(3)): [1.0]}


def test_two_values_of_one_dimension_cannot_share_a_document() -> None:
    documents: list[EmfDocument] = []
    metrics = ReliabilityMetrics(documents.append)
    metrics.tick_heartbeat(0)
    metrics.tick_heartbeat(3)
    metrics.tick_heartbeat(3)
    metrics.queue_depth(7)
    metrics.flush()
    # A document holds one value of "shard": two shards need two documents
    assert len(documents) == 2
    assert emitted(documents) == {
        (metric_names.QUEUE_DEPTH, NONE): [7.0],
        (metric_names.TICK_HEARTBEAT, shard(0)): [1.0],
        (metric_names.TICK_HEARTBEAT, shard(3)): [1.0, 1.0],
    }


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
    assert totals.total(metric_names.EXECUTIONS_FINISHED) == 3
    finished = {
        dict(dimensions)[metric_names.OUTCOME_DIMENSION]: values
        for (name, dimensions), values in emitted(documents).items()
        if name == metric_names.EXECUTIONS_FINISHED
    }
    assert finished == {"SUCCEEDED": [1.0], "SKIPPED": [1.0], "FAILED": [1.0]}


def test_durations_and_latencies_are_seconds_never_negative() -> None:
    documents: list[EmfDocument] = []
    metrics = ReliabilityMetrics(documents.append)
    metrics.handler_duration(0.25)
    metrics.queue_latency(-0.1)  # the worker's clock a little behind SQS's
    metrics.flush()
    assert units(documents) == {
        metric_names.HANDLER_DURATION: "Seconds",
        metric_names.QUEUE_LATENCY: "Seconds",
    }
    assert emitted(documents) == {
        (metric_names.HANDLER_DURATION, NONE): [0.25],
        (metric_names.QUEUE_LATENCY, NONE): [0.0],
    }


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
