"""Issue 25's done-when for local mode: against the embedded AWS emulator on
loopback (`dynacron aws`), `dynacron local --aws-endpoint` calls an SQS and an SNS
target, each execution SUCCEEDED; a Step Functions target tracked to completion
ends SUCCEEDED with its duration (local mode describes its running tracked runs,
as the emulator emits no state-change events: decision 0049); and a schedule
created in EventBridge Scheduler is imported by `dynacron tasks import-eventbridge`
and listed. One emulator and one local mode for the module."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest

from dynacron.local.aws import REGION
from tests.support import Service, api_call
from tests.system.local_process import LocalMode, register

pytestmark = pytest.mark.system

ACCOUNT = "123456789012"  # moto's default: the resources and the role in one account
ROLE = f"arn:aws:iam::{ACCOUNT}:role/dynacron-target/jobs"
CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}


@dataclass
class Emulated:
    endpoint: str
    api: str

    def client(self, service: str) -> Any:
        return boto3.client(service, region_name=REGION, endpoint_url=self.endpoint, **CREDENTIALS)


@pytest.fixture(scope="module")
def emulated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulated]:
    aws = Service(["-m", "dynacron.cli.main", "aws"], "embedded AWS listening on")
    local: LocalMode | None = None
    try:
        match = re.search(r"http://[\d.:]+", aws.ready_line)
        assert match is not None
        local = LocalMode(tmp_path_factory.mktemp("data"), "--aws-endpoint", match.group(0))
        local.start()
        yield Emulated(match.group(0), local.api)
    finally:
        if local is not None:
            local.stop()
        aws.stop()


def ended(api: str, execution_id: str, within: float = 60.0) -> dict[str, Any]:
    """The execution once it has ended (or as it is when ``within`` runs out)."""
    deadline = time.monotonic() + within
    while True:
        execution: dict[str, Any] = api_call(api, "GET", f"/executions/{execution_id}").json()
        if execution["status"] in ("SUCCEEDED", "FAILED") or time.monotonic() > deadline:
            return execution
        time.sleep(0.2)


def run_now(api: str, body: dict[str, Any]) -> str:
    """Register ``body`` and trigger it: the triggered execution's id."""
    task = register(api, {"rate": "1 day", **body})
    triggered = api_call(api, "POST", f"/tasks/{task['task_id']}/trigger")
    assert triggered.status_code == 202, triggered.text
    execution_id: str = triggered.json()["execution_id"]
    return execution_id


def test_sqs_and_sns_targets_receive_their_occurrences(emulated: Emulated) -> None:
    # Given a queue, and a topic whose subscriber is a second queue
    sqs, sns = emulated.client("sqs"), emulated.client("sns")

    def queue(name: str) -> tuple[str, str]:
        url = sqs.create_queue(QueueName=name)["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
        return url, arn["Attributes"]["QueueArn"]

    jobs_url, jobs_arn = queue("jobs")
    fanout_url, fanout_arn = queue("fanout")
    topic = sns.create_topic(Name="hourly")["TopicArn"]
    sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=fanout_arn)
    # When a task on each runs
    to_queue = run_now(
        emulated.api,
        {"target": {"arn": jobs_arn, "role_arn": ROLE, "input": "run <dynacron.execution-id>"}},
    )
    to_topic = run_now(emulated.api, {"target": {"arn": topic, "role_arn": ROLE}})
    # Then each execution SUCCEEDED, and its message arrived
    for execution_id in (to_queue, to_topic):
        execution = ended(emulated.api, execution_id)
        assert execution["status"] == "SUCCEEDED", execution["error"]
        assert execution["result_excerpt"].startswith("MessageId "), execution
    (message,) = sqs.receive_message(QueueUrl=jobs_url, WaitTimeSeconds=1)["Messages"]
    assert message["Body"] == f"run {to_queue}"
    (published,) = sqs.receive_message(QueueUrl=fanout_url, WaitTimeSeconds=1)["Messages"]
    envelope = json.loads(json.loads(published["Body"])["Message"])
    assert envelope["execution_id"] == to_topic


def test_a_tracked_state_machine_run_ends_its_execution_with_its_duration(
    emulated: Emulated,
) -> None:
    # Given a state machine that waits a second, then passes its input on
    definition = {
        "StartAt": "Work",
        "States": {
            "Work": {"Type": "Wait", "Seconds": 1, "Next": "Done"},
            "Done": {"Type": "Pass", "End": True},
        },
    }
    machine = emulated.client("stepfunctions").create_state_machine(
        name="nightly", definition=json.dumps(definition), roleArn=ROLE
    )["stateMachineArn"]
    # When a task tracked to completion runs it
    execution_id = run_now(
        emulated.api,
        {
            "target": {
                "arn": machine,
                "role_arn": ROLE,
                "input": '{"run": "<dynacron.execution-id>"}',
                "track": "completion",
            }
        },
    )
    # Then the execution ends SUCCEEDED when the run does (not an hour later, by
    # the reaper), with the run's output and duration
    execution = ended(emulated.api, execution_id)
    assert execution["status"] == "SUCCEEDED", execution
    excerpt = execution["result_excerpt"]
    assert "the state machine execution SUCCEEDED" in excerpt, excerpt
    assert execution_id in excerpt, excerpt  # its output: the input passed on
    took = re.search(r"after ([\d.]+)s$", excerpt)
    assert took is not None, excerpt
    assert float(took.group(1)) >= 1, excerpt


def test_a_schedule_in_eventbridge_scheduler_is_imported_and_listed(emulated: Emulated) -> None:
    credentials = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
        "AWS_ENDPOINT_URL": emulated.endpoint,
    }
    # Given a schedule in EventBridge Scheduler, on the emulator
    queue = f"arn:aws:sqs:{REGION}:{ACCOUNT}:exports"
    emulated.client("scheduler").create_schedule(
        Name="hourly-export",
        ScheduleExpression="rate(1 hour)",
        FlexibleTimeWindow={"Mode": "OFF"},
        Target={"Arn": queue, "RoleArn": ROLE},
    )
    # When the CLI imports the schedules (AWS_ENDPOINT_URL names the emulator)
    command = [sys.executable, "-m", "dynacron.cli.main", "tasks", "--url", emulated.api]
    command += ["--json", "import-eventbridge"]
    done = subprocess.run(
        command,
        env={**os.environ, **credentials},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (report,) = json.loads(done.stdout)
    assert report["result"] == "created"
    # Then the task is listed, calling the same queue
    listed = api_call(emulated.api, "GET", "/tasks").json()["items"]
    (task,) = [t for t in listed if t["task_id"] == report["task_id"]]
    assert task["name"] == "hourly-export"
    assert task["target"]["arn"] == queue
    assert (task["schedule"]["kind"], task["schedule"]["expression"]) == ("rate", "1 hour")
    # And a second import creates nothing
    again = subprocess.run(
        command, env={**os.environ, **credentials}, capture_output=True, text=True, timeout=120
    )
    assert json.loads(again.stdout)[0]["result"] == "already imported", again.stderr
    listed = api_call(emulated.api, "GET", "/tasks").json()["items"]
    assert [t["name"] for t in listed].count("hourly-export") == 1
