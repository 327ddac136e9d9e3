"""Local mode calls AWS targets on its AWS emulator, never on AWS: the emulator
store points targets at its own loopback endpoint; the SQLite store refuses them,
saying what to run instead."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from dynacron.domain.clock import SettableClock
from dynacron.domain.executions.execution import Dispatch
from dynacron.domain.tasks.task import execution_id_for
from dynacron.entry.composition import Dynacron, target_delivery
from dynacron.local.aws import LOCAL_CREDENTIALS, REGION, moto_sqs_sped_up
from dynacron.local.stores import LocalStore, StoreOptions, open_store
from tests.integration.api_client import call


@pytest.fixture
def emulator(monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalStore]:
    # No credentials and no endpoint of the environment's may reach AWS from here.
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    # The embedded emulator speeds moto's SQS up process-wide: put it back after, or
    # later tests in this process judge visibility by the wall clock.
    with moto_sqs_sped_up():
        store = open_store(StoreOptions(kind="emulator"))
        yield store
        store.close()


def test_the_emulator_store_delivers_an_sqs_target_on_its_own_endpoint(
    emulator: LocalStore, clock: SettableClock
) -> None:
    settings = emulator.open(clock, default_tenant="local")
    endpoint = settings.target_endpoint_url
    assert endpoint is not None
    assert endpoint.startswith("http://127.0.0.1:")
    system = Dynacron(settings, adapters=emulator.adapters(settings, clock), clock=clock)
    sqs = boto3.client("sqs", region_name=REGION, endpoint_url=endpoint, **LOCAL_CREDENTIALS)
    url = sqs.create_queue(QueueName="local-jobs")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]
    status, task = call(
        system,
        "POST",
        "/tasks",
        {
            "rate": "1 minute",
            "target": {
                "arn": arn["QueueArn"],
                "role_arn": "arn:aws:iam::123456789012:role/dynacron-target/local",
                "input": "run <dynacron.execution-id>",
            },
        },
    )
    assert status == 201, task

    stored = system.tasks.get(task["task_id"])
    assert stored is not None
    due = clock.now().replace(microsecond=0)
    dispatch = Dispatch(
        task_id=stored.task_id,
        execution_id=execution_id_for(stored.task_id, due),
        scheduled_at=due,
        attempt=1,
    )
    delivery = target_delivery(settings, clock)
    assert delivery is not None
    result = delivery.deliver(stored, dispatch, "token")

    assert result.ok, result.failure
    (message,) = sqs.receive_message(QueueUrl=url)["Messages"]
    assert message["Body"] == f"run {dispatch.execution_id}"


def test_the_sqlite_store_refuses_targets_saying_what_to_run(
    tmp_path: Path, clock: SettableClock
) -> None:
    store = open_store(StoreOptions(kind="sqlite", data_dir=tmp_path))
    try:
        settings = store.open(clock, default_tenant="local")
        system = Dynacron(settings, adapters=store.adapters(settings, clock), clock=clock)
        body: dict[str, Any] = {
            "rate": "1 minute",
            "target": {
                "arn": f"arn:aws:sqs:{REGION}:123456789012:jobs",
                "role_arn": "arn:aws:iam::123456789012:role/dynacron-target/local",
            },
        }
        status, problem = call(system, "POST", "/tasks", body)
    finally:
        store.close()
    assert status == 422
    assert "--store emulator" in json.dumps(problem)
