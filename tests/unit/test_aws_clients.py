"""The deployed functions' boto3 clients: enough pooled connections for the tick's
threads and the worker's records in flight."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import boto3
import pytest

from dynacron.adapters.aws.clients import aws_client_config
from dynacron.definitions.resources import QUEUES, TABLES
from dynacron.entry.composition import Dynacron
from dynacron.entry.settings import Settings

SETTINGS = Settings(
    tasks_table="tasks",
    executions_table="executions",
    coordination_table="coordination",
    dispatch_queue_url="https://queue.invalid/dispatch",
    dead_letter_queue_url="https://queue.invalid/dead-letter",
)


def test_the_pool_holds_a_connection_per_tick_thread() -> None:
    for threads, pooled in ((1, 10), (16, 16), (64, 64)):
        config = aws_client_config(
            dataclasses.replace(SETTINGS, tick_concurrency=threads, worker_concurrency=1)
        )
        assert config.max_pool_connections == pooled


def test_the_pool_holds_a_connection_per_record_in_flight_and_the_heartbeats() -> None:
    for records, pooled in ((1, 16), (32, 33), (100, 101)):
        config = aws_client_config(
            dataclasses.replace(SETTINGS, tick_concurrency=16, worker_concurrency=records)
        )
        assert config.max_pool_connections == pooled


def test_lambda_clients_are_made_with_that_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("DYNACRON_"):
            monkeypatch.delenv(name)
    for table in TABLES:
        monkeypatch.setenv(table.env_var, table.logical_id)
    for queue in QUEUES:
        monkeypatch.setenv(queue.env_var, f"https://queue.invalid/{queue.logical_id}")
    made: dict[str, Any] = {}
    real_client = boto3.client

    def client(service: str, **kwargs: Any) -> Any:
        made[service] = kwargs["config"]
        return real_client(service, region_name="us-east-1", **kwargs)

    monkeypatch.setattr("dynacron.entry.composition.boto3.client", client)

    Dynacron.from_environment()

    wanted = max(Settings.tick_concurrency, Settings.worker_concurrency + 1)
    assert made["dynamodb"].max_pool_connections >= wanted
    assert made["sqs"].max_pool_connections >= wanted
