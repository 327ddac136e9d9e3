from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from moto import mock_aws

from dynacron.domain.clock import SettableClock
from dynacron.entry.composition import Dynacron
from dynacron.entry.settings import LOOPBACK_NETWORKS, Settings
from dynacron.local.aws import (
    REGION,
    provision,
    serialise_in_process_dynamodb,
    speed_up_moto_transactions,
)
from dynacron.local.stores import SqliteStore, StoreOptions
from tests.pipeline import Pipeline
from tests.support import Sink

START = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)


def sleep_moving(clock: SettableClock) -> Callable[[float], None]:
    """A sleep that moves ``clock`` on instead of waiting."""

    def sleep(seconds: float) -> None:
        clock.advance(timedelta(seconds=seconds))

    return sleep


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--soak-executions",
        type=int,
        default=int(os.environ.get("DYNACRON_SOAK_EXECUTIONS", "250")),
        help="executions in the crash soak (default 250, or $DYNACRON_SOAK_EXECUTIONS)",
    )
    parser.addoption(
        "--soak-seed",
        type=int,
        default=int(os.environ.get("DYNACRON_SOAK_SEED", "20261130")),
        help="seed of the crash soak's faults and kills",
    )


@pytest.fixture
def clock() -> SettableClock:
    return SettableClock(START)


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, Any]]:
    """In-process moto: DynamoDB and SQS clients."""
    import boto3

    for name in ("AWS_ENDPOINT_URL", "AWS_PROFILE", "HTTPS_PROXY", "HTTP_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    speed_up_moto_transactions()
    serialise_in_process_dynamodb()
    with mock_aws():
        yield boto3.client("dynamodb", region_name=REGION), boto3.client("sqs", region_name=REGION)


@pytest.fixture
def settings(aws: tuple[Any, Any], clock: SettableClock) -> Settings:
    dynamodb, sqs = aws
    return provision(
        dynamodb, sqs, clock=clock, shard_count=2, delivery_allow_networks=LOOPBACK_NETWORKS
    )


@pytest.fixture
def system(aws: tuple[Any, Any], settings: Settings, clock: SettableClock) -> Dynacron:
    dynamodb, sqs = aws
    # Whatever waits (the deployed tick loop) moves the clock instead of sleeping.
    return Dynacron(settings, dynamodb=dynamodb, sqs=sqs, clock=clock, sleep=sleep_moving(clock))


@pytest.fixture
def embedded(tmp_path: Path, clock: SettableClock) -> Iterator[Callable[..., Dynacron]]:
    """Builds systems on the embedded SQLite set, on the test's clock: for service
    tests that need no AWS behaviour (several times faster than moto). Keyword
    arguments are settings (``shard_count=1``, ...)."""
    stores: list[SqliteStore] = []

    def build(**settings: Any) -> Dynacron:
        store = SqliteStore(StoreOptions(data_dir=tmp_path / f"embedded-{len(stores)}"))
        stores.append(store)
        settings.setdefault("delivery_allow_networks", LOOPBACK_NETWORKS)
        opened = store.open(clock, **settings)
        return Dynacron(
            opened,
            adapters=store.adapters(opened, clock),
            clock=clock,
            sleep=sleep_moving(clock),
        )

    yield build
    for store in stores:
        store.close()


@pytest.fixture
def sink() -> Iterator[Sink]:
    server = Sink().start()
    yield server
    server.stop()


def build_pipeline(
    aws: tuple[Any, Any],
    clock: SettableClock,
    *,
    http_timeout_seconds: float = 2.0,
    prefix: str = "dynacron",
    **overrides: Any,
) -> Pipeline:
    """``prefix`` names the tables and queues (two pipelines can share one moto);
    ``overrides`` replace settings."""
    dynamodb, sqs = aws
    settings = provision(
        dynamodb,
        sqs,
        prefix,
        shard_count=2,
        delivery_allow_networks=LOOPBACK_NETWORKS,
        http_timeout_seconds=http_timeout_seconds,
        # A fresh shard walks back this far; a week (the default) is many empty buckets.
        initial_lookback_seconds=2 * 3600,
        **overrides,
    )
    return Pipeline(aws, settings, clock)


@pytest.fixture
def pipeline(
    aws: tuple[Any, Any], clock: SettableClock, request: pytest.FixtureRequest
) -> Pipeline:
    """Tick, workers and reaper driven by hand; handler calls time out after 2 s (room
    for a loaded machine's loopback calls), so the in-progress idempotency record of
    a crashed call expires within a few seconds of wall time. Modules that crash one
    call at a time ask for less with ``@pytest.mark.handler_timeout(seconds)``."""
    marker = request.node.get_closest_marker("handler_timeout")
    if marker is None:
        return build_pipeline(aws, clock)
    return build_pipeline(aws, clock, http_timeout_seconds=float(marker.args[0]))
