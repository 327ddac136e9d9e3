"""Concurrent ticks against the embedded AWS that local mode uses.

moto's DynamoDB backend takes no lock, so without local mode's serialisation two
conditional writes racing from different threads can both succeed. This test
runs eight claimers over the same due items through the real HTTP endpoint.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from dynacron.adapters.aws.cursors import DynamoCursorStore
from dynacron.adapters.aws.executions import DynamoExecutionStore
from dynacron.adapters.aws.queue import SqsDispatchQueue
from dynacron.adapters.aws.task_items import task_to_item
from dynacron.adapters.aws.tasks import DynamoTaskStore
from dynacron.domain.clock import SettableClock
from dynacron.domain.schedules.expressions import OneTimeSchedule
from dynacron.domain.tasks.task import Task, TaskStatus
from dynacron.local.aws import aws_clients, provision
from dynacron.services.page_claimer import TickReport
from dynacron.services.tick import Ticker
from tests.support import Service

DUE = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
CLAIMERS = 8
TASKS = 200  # the contract suite races 1,000 over the adapters themselves


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    service = Service(["-m", "dynacron.local.aws", "--port", "0"], "listening on")
    yield service.ready_line.split()[-1]
    service.stop()


def test_eight_concurrent_claimers_claim_each_due_item_exactly_once(endpoint: str) -> None:
    dynamodb, sqs = aws_clients(endpoint)
    settings = provision(
        dynamodb,
        sqs,
        prefix=f"race-{uuid.uuid4().hex[:8]}",
        clock=SettableClock(DUE),
        shard_count=1,
    )
    # Given 400 one-time tasks due at the same instant, all in one shard
    for _start in range(0, TASKS, 25):
        items = []
        for _ in range(25):
            task = Task(
                task_id=uuid.uuid4().hex,
                name="race",
                schedule=OneTimeSchedule(at=DUE),
                handler_url="http://127.0.0.1:9/",
                payload={},
                status=TaskStatus.ACTIVE,
                next_run_at=DUE,
                created_at=DUE,
                updated_at=DUE,
            )
            placement = settings.sharding.place(task.task_id, DUE, DUE)
            items.append({"PutRequest": {"Item": task_to_item(task, placement)}})
        dynamodb.batch_write_item(RequestItems={settings.tasks_table: items})

    # When eight ticks race over the shard until nothing is due
    reports: list[TickReport] = []
    lock = threading.Lock()
    barrier = threading.Barrier(CLAIMERS)

    def claimer() -> None:
        client_dynamodb, client_sqs = aws_clients(endpoint)
        ticker = Ticker(
            tasks=DynamoTaskStore(client_dynamodb, settings.tasks_table),
            executions=DynamoExecutionStore(
                client_dynamodb, settings.executions_table, timedelta(days=1)
            ),
            queue=SqsDispatchQueue(client_sqs, settings.dispatch_queue_url),
            cursors=DynamoCursorStore(client_dynamodb, settings.coordination_table),
            settings=settings.tick_settings,
            clock=SettableClock(DUE + timedelta(seconds=1)),
        )
        barrier.wait()
        while True:
            report = ticker.tick_shard(0)
            with lock:
                reports.append(report)
            if report.candidates == 0:
                return

    threads = [threading.Thread(target=claimer) for _ in range(CLAIMERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)

    # Then exactly as many claims as tasks were counted, and every execution was sent
    assert sum(r.claimed for r in reports) == TASKS
    contested = sum(r.lost_races for r in reports)
    execution_ids: set[str] = set()
    messages = 0
    while batch := sqs.receive_message(
        QueueUrl=settings.dispatch_queue_url, MaxNumberOfMessages=10, VisibilityTimeout=600
    ).get("Messages", []):
        messages += len(batch)
        execution_ids.update(m["Body"] for m in batch)
    assert len({body for body in execution_ids}) == TASKS
    # A claimer that lost a race had already sent its copy: duplicates, never gaps.
    assert messages == TASKS + contested
