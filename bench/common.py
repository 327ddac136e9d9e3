"""Shared by every benchmark: the run's context, percentiles, results files, in-process AWS."""

from __future__ import annotations

import json
import os
import platform
import statistics
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from dynacron.domain.clock import Clock
from dynacron.entry.settings import LOOPBACK_NETWORKS, Settings

RESULTS = Path(__file__).resolve().parent / "results"
QUICK = os.environ.get("BENCH_QUICK", "") not in ("", "0")


def context() -> dict[str, Any]:
    """Machine, versions, date and load: what a reader needs to weigh the figures."""
    versions = {}
    for package in ("dynacron", "boto3", "moto", "aws-lambda-powertools", "apscheduler"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        "machine": {
            "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
        },
        "versions": versions,
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "quick": QUICK,
    }


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile; ``fraction`` in [0, 1]."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * len(ordered)) - 1))]


def distribution(values: list[float]) -> dict[str, float]:
    if not values:
        return {"count": 0}
    return {
        "count": len(values),
        "p50": round(statistics.median(values), 4),
        "p95": round(percentile(values, 0.95), 4),
        "p99": round(percentile(values, 0.99), 4),
        "max": round(max(values), 4),
    }


def write_result(name: str, result: dict[str, Any], directory: Path | None = None) -> Path:
    """``result`` with the run's context, as ``name``.json in ``directory`` (by default
    ``bench/results``, whose files are the committed figures)."""
    directory = directory or RESULTS
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.json"
    body = {"benchmark": name, **context(), **result}
    path.write_text(json.dumps(body, indent=2) + "\n")
    return path


@contextmanager
def in_process_aws(clock: Clock, shard_count: int) -> Iterator[tuple[Any, Any, Settings]]:
    """moto in this process (no server), provisioned: DynamoDB and SQS clients, settings."""
    import boto3
    from moto import mock_aws

    from dynacron.local.aws import REGION, provision, serialise_in_process_dynamodb

    for name in ("AWS_ENDPOINT_URL", "AWS_PROFILE", "HTTPS_PROXY", "HTTP_PROXY"):
        os.environ.pop(name, None)
    os.environ.update(
        AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION=REGION
    )
    serialise_in_process_dynamodb()
    with mock_aws():
        dynamodb = boto3.client("dynamodb", region_name=REGION)
        sqs = boto3.client("sqs", region_name=REGION)
        settings = provision(
            dynamodb,
            sqs,
            clock=clock,
            shard_count=shard_count,
            delivery_allow_networks=LOOPBACK_NETWORKS,
        )
        yield dynamodb, sqs, settings
