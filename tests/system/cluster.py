"""dynacron's components as separate processes around one embedded AWS, so that a
test can SIGKILL any of them while the store and the others carry on."""

from __future__ import annotations

import json
import os
import re
import signal
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from dynacron.adapters.powertools.metrics import MetricTotals
from dynacron.entry.composition import Dynacron
from dynacron.entry.settings import LOOPBACK_NETWORKS, Settings
from dynacron.local.aws import aws_clients, provision
from tests.support import Service, free_port

READY = "dynacron local"
# Short leases and handler timeouts, so that a killed worker's executions are
# reaped, and the idempotency records of its calls expire, within seconds.
FAST_RECOVERY = (
    "--lease-seconds", "2",
    "--clock-skew-seconds", "0.5",
    "--visibility-timeout", "4",
    "--http-timeout-seconds", "1",
)  # fmt: skip


class Cluster:
    def __init__(self, workdir: Path, **settings: Any) -> None:
        self.workdir = workdir
        self.aws = Service(["-m", "dynacron.cli.main", "aws"], "embedded AWS listening on")
        match = re.search(r"http://[\d.:]+", self.aws.ready_line)
        assert match is not None
        self.endpoint = match.group(0)
        dynamodb, sqs = aws_clients(self.endpoint)
        self.settings: Settings = provision(
            dynamodb, sqs, delivery_allow_networks=LOOPBACK_NETWORKS, **settings
        )
        # This process registers tasks and reads executions; it runs no loops.
        self.app = Dynacron(self.settings, dynamodb=dynamodb, sqs=sqs, emit_metrics=MetricTotals())
        self.processes: dict[str, Service] = {}
        self.options: dict[str, list[str]] = {}
        self.kills = 0
        self.restarts = 0

    def start(self, name: str, components: str, *options: str) -> Service:
        """Start (or restart) component process ``name``; returns once it is running."""
        self.options[name] = [components, *options]
        args = ["-m", "dynacron.cli.main", "local", "--aws-endpoint", self.endpoint, "--only"]
        args += [components, "--metrics-file", str(self.workdir / f"{name}.emf"), *options]
        if "api" in components:
            args += ["--port", str(free_port())]
        service = Service(args, READY)
        self.processes[name] = service
        return service

    def start_all(self, specs: dict[str, list[str]]) -> None:
        """Start several processes at once (each ``name: [components, *options]``)."""
        with ThreadPoolExecutor(max_workers=len(specs)) as pool:
            for started in [pool.submit(self.start, n, *spec) for n, spec in specs.items()]:
                started.result()

    def restart(self, name: str, *extra: str) -> Service:
        self.restarts += 1
        components, *options = self.options[name]
        return self.start(name, components, *options, *extra)

    def kill(self, name: str) -> None:
        """SIGKILL: no cleanup, no flush, leases and messages left as they were."""
        process = self.processes[name].process
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
            self.kills += 1
        process.wait(timeout=10)

    def dead(self) -> list[str]:
        return [name for name, s in self.processes.items() if s.process.poll() is not None]

    def metric_total(self, name: str) -> float:
        totals = MetricTotals()
        for path in self.workdir.glob("*.emf"):
            for line in path.read_text().splitlines():
                if line.strip():
                    totals(json.loads(line))
        return totals.total(name)

    def statuses(self, execution_ids: list[str]) -> list[str]:
        """Each execution's status ("MISSING" if none), read with one paginated scan."""
        client = self.app.executions._client
        found: dict[str, str] = {}
        kwargs: dict[str, Any] = {
            "TableName": self.settings.executions_table,
            "ConsistentRead": True,
            "ProjectionExpression": "execution_id, #status",
            "ExpressionAttributeNames": {"#status": "status"},
        }
        while True:
            page = client.scan(**kwargs)
            for item in page.get("Items", []):
                if "status" in item:  # not the schedule census's items (decision 0046)
                    found[item["execution_id"]["S"]] = item["status"]["S"]
            if "LastEvaluatedKey" not in page:
                break
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        return [found.get(i, "MISSING") for i in execution_ids]

    def succeeded(self, execution_ids: list[str]) -> int:
        return self.statuses(execution_ids).count("SUCCEEDED")

    def stop(self) -> None:
        for service in self.processes.values():
            service.stop()
        self.aws.stop()
