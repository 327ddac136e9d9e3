"""One contract suite over every adapter set (as APScheduler 4's ``test_datastores.py``).

Every test in ``tests/contract`` takes the ``adapters`` fixture and talks to the
ports of ``dynacron.ports`` only, never to the client underneath. The fixture is
parametrised over ``ADAPTER_SETS``: a new backend is plugged in by adding its
factory there, and is done when the suite passes on it.

A factory takes the test's ``tmp_path`` (for a backend that keeps files), the
test's ``SettableClock`` (for a backend whose own notion of now can be injected:
the AWS set cannot, so queue tests never depend on time passing) and an
``ExitStack`` that closes whatever it opened when the test ends.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from datetime import timedelta
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from dynacron.adapters.aws import aws_adapters
from dynacron.adapters.sqlite import sqlite_adapters
from dynacron.adapters.sqlite.database import Database
from dynacron.definitions.resources import (
    COORDINATION,
    DEAD_LETTER_QUEUE,
    DISPATCH_QUEUE,
    EXECUTIONS,
    TABLES,
    TASKS,
    create_table_request,
)
from dynacron.domain.clock import SettableClock
from dynacron.entry.settings import Settings
from dynacron.ports import AdapterSet
from tests.contract.builders import START

AdapterFactory = Callable[[Path, SettableClock, ExitStack], AdapterSet]

# Executions are kept this long after they stop mattering (TTL on AWS).
EXECUTION_RETENTION = timedelta(days=7)
REGION = "us-east-1"
PREFIX = "contract"
_session: Any = None


class SerialisedClient:
    """A boto3 client whose calls run one at a time.

    DynamoDB makes each conditional write atomic; moto's in-process backend takes
    no lock, so two racing writes could both pass one condition. Serialising the
    calls gives moto DynamoDB's atomicity (local mode's ``AtomicDynamoDB`` does the
    same for its server) without changing what any call does.
    """

    def __init__(self, client: Any) -> None:
        self._client = client
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._client, name)
        if not callable(attribute):
            return attribute

        def serialised(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                return attribute(*args, **kwargs)

        return serialised


def make_aws_set(tmp_path: Path, clock: SettableClock, cleanup: ExitStack) -> AdapterSet:
    """The AWS set on in-process moto, its tables and queues from ``dynacron.definitions``."""
    import boto3
    from moto import mock_aws

    from dynacron.local.aws import serialise_in_process_dynamodb, speed_up_moto_transactions

    environment = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
    }
    cleanup.enter_context(mock.patch.dict(os.environ, environment))
    for name in ("AWS_ENDPOINT_URL", "AWS_PROFILE", "HTTPS_PROXY", "HTTP_PROXY"):
        os.environ.pop(name, None)  # restored by the patch above when the test ends
    speed_up_moto_transactions()
    serialise_in_process_dynamodb()
    cleanup.enter_context(mock_aws())
    global _session
    if _session is None:
        # One session for every test: a new one loads botocore's service models again.
        _session = boto3.session.Session(region_name=REGION)
    dynamodb = _session.client("dynamodb")
    sqs = _session.client("sqs")
    for table in TABLES:
        dynamodb.create_table(**create_table_request(table, table.default_name(PREFIX)))
    queue_urls = {
        queue.logical_id: sqs.create_queue(
            QueueName=queue.default_name(PREFIX),
            Attributes={"VisibilityTimeout": str(queue.visibility_timeout_seconds)},
        )["QueueUrl"]
        for queue in (DISPATCH_QUEUE, DEAD_LETTER_QUEUE)
    }
    settings = Settings(
        tasks_table=TASKS.default_name(PREFIX),
        executions_table=EXECUTIONS.default_name(PREFIX),
        coordination_table=COORDINATION.default_name(PREFIX),
        dispatch_queue_url=queue_urls[DISPATCH_QUEUE.logical_id],
        dead_letter_queue_url=queue_urls[DEAD_LETTER_QUEUE.logical_id],
    )
    return aws_adapters(
        settings,
        dynamodb=SerialisedClient(dynamodb),
        sqs=sqs,
        execution_retention=EXECUTION_RETENTION,
    )


def make_sqlite_set(tmp_path: Path, clock: SettableClock, cleanup: ExitStack) -> AdapterSet:
    """The embedded set on a fresh database file, its queues on ``clock``."""
    database = Database(tmp_path / "dynacron.db")
    cleanup.callback(database.close)
    return sqlite_adapters(database, clock, execution_retention=EXECUTION_RETENTION)


# Every adapter set the contract runs over: name -> factory.
ADAPTER_SETS: dict[str, AdapterFactory] = {"aws": make_aws_set, "sqlite": make_sqlite_set}


@pytest.fixture
def clock() -> SettableClock:
    return SettableClock(START)


@pytest.fixture(params=sorted(ADAPTER_SETS))
def adapters(
    request: pytest.FixtureRequest, tmp_path: Path, clock: SettableClock
) -> Iterator[AdapterSet]:
    """A fresh, empty adapter set of each kind in ``ADAPTER_SETS``."""
    with ExitStack() as cleanup:
        yield ADAPTER_SETS[request.param](tmp_path, clock, cleanup)
