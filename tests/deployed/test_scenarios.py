"""End-to-end scenarios through the deployed entry points, with the template's
environment and each function's own role."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from dynacron.domain.clock import SettableClock
from tests.deployed.harness import Deployment
from tests.integration.api_client import ALICE
from tests.support import Sink

BOB = "arn:aws:iam::000000000000:user/bob"


def test_a_rate_task_runs_every_minute(deployed: Deployment, clock: SettableClock, sink: Sink) -> None:
    status, task = deployed.api(
        "POST", "/tasks", {"rate": "1 minute", "handler_url": sink.url}, principal=ALICE
    )
    assert status == 201, task
    deployed.run_due()
    assert len(sink.snapshot()) >= 1
