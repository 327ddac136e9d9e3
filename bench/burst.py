"""Burst: many one-time tasks due in the same second, through local mode.

An embedded AWS runs in its own process; the tasks are written into it with
BatchWriteItem (registering 10,000 over HTTP would take longer than the burst),
then ``dynacron local`` starts against it and the loopback sink records every
delivery. Reports the time from the due second to the last delivery, lateness
(delivery minus scheduled time) and counts that show none was lost.

Run: .venv/bin/python -m bench.burst [--tasks 10000]
"""

from __future__ import annotations

import argparse
import time
import uuid
from datetime import UTC, datetime
from typing import Any

from bench.common import QUICK, distribution, write_result
from dynacron.adapters.aws.items import chunks
from dynacron.adapters.aws.task_items import task_to_item
from dynacron.adapters.aws.tenants import DynamoTenantStore
from dynacron.domain.instants import parse_instant
from dynacron.domain.schedules import OneTimeSchedule
from dynacron.domain.tasks import Task, TaskStatus
from dynacron.domain.tenants import DEFAULT_TENANT
from dynacron.local.aws import aws_clients, provision
from dynacron.services.tasks import new_signing_secret
from tests.support import Service, Sink, free_port, wait_until

WRITE_BATCH = 25


def write_due_tasks(dynamodb: Any, settings: Any, count: int, due: datetime, url: str) -> None:
    now = datetime.now(UTC)
    items = []
    for _ in range(count):
        task_id = uuid.uuid4().hex
        task = Task(
            task_id=task_id,
            name="burst",
            schedule=OneTimeSchedule(at=due),
            handler_url=url,
            payload={},
            status=TaskStatus.ACTIVE,
            next_run_at=due,
            created_at=now,
            updated_at=now,
        )
        items.append(task_to_item(task, settings.sharding.place(task_id, due, now)))
    for batch in chunks(items, WRITE_BATCH):
        request = {settings.tasks_table: [{"PutRequest": {"Item": i}} for i in batch]}
        while request:
            request = dynamodb.batch_write_item(RequestItems=request).get("UnprocessedItems")
    # Registering through the API gives the tenant its signing secret; written
    # directly, the tasks need it given (a worker refuses to send unsigned).
    DynamoTenantStore(dynamodb, settings.coordination_table).ensure_secret(
        DEFAULT_TENANT, new_signing_secret()
    )


def run_burst(count: int, workers: int = 8) -> dict[str, Any]:
    """``count`` tasks due at one whole second, fired by local mode; timings from the sink."""
    sink = Sink().start()
    aws = Service(["-m", "dynacron.local.aws", "--port", "0"], "listening on")
    local: Service | None = None
    try:
        endpoint = aws.ready_line.split()[-1]
        dynamodb, sqs = aws_clients(endpoint)
        settings = provision(dynamodb, sqs, "dynacron")
        # Due at a whole second far enough ahead to write everything and start.
        due = datetime.fromtimestamp(int(time.time()) + 20 + count // 250, UTC)
        began = time.time()
        write_due_tasks(dynamodb, settings, count, due, f"{sink.url}/burst")
        write_seconds = time.time() - began
        port = free_port()
        local = Service(
            [
                *("-m", "dynacron.cli", "local", "--port", str(port)),
                *("--workers", str(workers), "--aws-endpoint", endpoint),
            ],
            "is running",
        )
        if time.time() > due.timestamp() - 2:
            raise SystemExit(f"writing {count} tasks took {write_seconds:.0f}s: raise the margin")
        wait_until(
            lambda: len(sink.snapshot()) >= count,
            timeout=due.timestamp() - time.time() + 60 + count / 10,
            interval=0.5,
        )
        deliveries = sink.snapshot()
    finally:
        if local is not None:
            local.stop()
        aws.stop()
        sink.stop()
    lateness = [
        d.received_at - parse_instant(d.body["scheduled_at"]).timestamp() for d in deliveries
    ]
    unique = {d.body["execution_id"] for d in deliveries}
    arrivals = sorted(d.received_at - due.timestamp() for d in deliveries)
    return {
        "tasks": count,
        "workers": workers,
        "due_at": due.isoformat().replace("+00:00", "Z"),
        "written_seconds": round(write_seconds, 1),
        "delivered": len(deliveries),
        "unique_executions": len(unique),
        "lost": count - len(unique),
        "duplicates": len(deliveries) - len(unique),
        "drain_seconds": round(max(arrivals), 3) if arrivals else None,
        "fires_per_second": round(len(unique) / max(arrivals), 1) if arrivals else None,
        "lateness_seconds": distribution(lateness),
        # Deliveries over time, for the plot: seconds after the due second.
        "arrivals": [round(a, 3) for a in arrivals],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=2000 if QUICK else 10_000)
    args = parser.parse_args()
    result = run_burst(args.tasks)
    print({k: v for k, v in result.items() if k != "arrivals"})
    write_result("burst", result)


if __name__ == "__main__":
    main()
