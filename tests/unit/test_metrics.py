from __future__ import annotations

import pytest

from dynacron.adapters.powertools.metrics import (
    FLUSH_AT_VALUES,
    EmfDocument,
    MetricTotals,
    ReliabilityMetrics,
)
from dynacron.definitions import metric_names


def test_metrics_become_one_emf_document_per_flush(capsys: pytest.CaptureFixture[str]) -> None:
    documents: list[EmfDocument] = []
    metrics = ReliabilityMetrics(documents.append)
    metrics.retry_scheduled()
    metrics.retry_scheduled()
    metrics.dead_lettered()
    metrics.scheduling_lag(1.5)
    metrics.scheduling_lag(-0.2)  # a clock slightly ahead is not negative lateness
    metrics.flush()
    metrics.flush()  # nothing new: nothing emitted
    (document,) = documents
    # The first directive; a dead letter's ExecutionsFinished has one of its own
    # (its outcome dimension): tests/unit/test_emf_documents.py
    directive = document["_aws"]["CloudWatchMetrics"][0]
    assert directive["Namespace"] == metric_names.NAMESPACE
    assert directive["Dimensions"] == [[metric_names.SERVICE_DIMENSION]]
    assert document[metric_names.SERVICE_DIMENSION] == metric_names.SERVICE
    assert document[metric_names.RETRIES] == [1.0, 1.0]
    assert document[metric_names.DEAD_LETTERS] == [1.0]
    assert document[metric_names.SCHEDULING_LAG] == [1.5, 0.0]
    units = {m["Name"]: m["Unit"] for m in directive["Metrics"]}
    assert units[metric_names.SCHEDULING_LAG] == "Seconds"
    assert capsys.readouterr().out == ""  # nothing printed behind our back


def test_many_values_are_flushed_before_powertools_would_print_them(
    capsys: pytest.CaptureFixture[str],
) -> None:
    totals = MetricTotals()
    metrics = ReliabilityMetrics(totals)
    for _ in range(250):
        metrics.duplicate_suppressed()
    metrics.lease_reaped()
    metrics.flush()
    assert totals.total(metric_names.DUPLICATES_SUPPRESSED) == 250
    assert totals.count(metric_names.DUPLICATES_SUPPRESSED) == 250
    assert totals.total(metric_names.LEASES_REAPED) == 1
    assert capsys.readouterr().out == ""
    assert FLUSH_AT_VALUES < 100
