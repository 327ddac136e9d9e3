"""The done-when of issue 25 for moving over: a schedule created in EventBridge
Scheduler (the embedded AWS emulator on loopback, `dynacron aws`) is imported by
`dynacron tasks import-eventbridge` into a running `dynacron local`, and listed."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import boto3
import pytest

from dynacron.local.aws import REGION
from tests.support import Service, api_call
from tests.system.local_process import LocalMode

pytestmark = pytest.mark.system

ROLE = "arn:aws:iam::000000000000:role/dynacron-target/jobs"


def test_a_schedule_in_eventbridge_scheduler_is_imported_and_listed(tmp_path: Path) -> None:
    aws = Service(["-m", "dynacron.cli.main", "aws"], "embedded AWS listening on")
    local: LocalMode | None = None
    try:
        match = re.search(r"http://[\d.:]+", aws.ready_line)
        assert match is not None
        endpoint = match.group(0)
        credentials = {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": REGION,
            "AWS_ENDPOINT_URL": endpoint,
        }
        local = LocalMode(tmp_path / "data", "--aws-endpoint", endpoint)
        local.start()
        # Given a schedule in EventBridge Scheduler, on the emulator
        scheduler = boto3.client(
            "scheduler",
            region_name=REGION,
            endpoint_url=endpoint,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        queue = f"arn:aws:sqs:{REGION}:000000000000:jobs"
        scheduler.create_schedule(
            Name="hourly-export",
            ScheduleExpression="rate(1 hour)",
            FlexibleTimeWindow={"Mode": "OFF"},
            Target={"Arn": queue, "RoleArn": ROLE},
        )
        # When the CLI imports the schedules (AWS_ENDPOINT_URL names the emulator)
        command = [sys.executable, "-m", "dynacron.cli.main", "tasks", "--url", local.api]
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
        listed = api_call(local.api, "GET", "/tasks").json()["items"]
        (task,) = [t for t in listed if t["task_id"] == report["task_id"]]
        assert task["name"] == "hourly-export"
        assert task["target"]["arn"] == queue
        assert (task["schedule"]["kind"], task["schedule"]["expression"]) == ("rate", "1 hour")
        # And a second import creates nothing
        again = subprocess.run(
            command, env={**os.environ, **credentials}, capture_output=True, text=True, timeout=120
        )
        assert json.loads(again.stdout)[0]["result"] == "already imported", again.stderr
        assert len(api_call(local.api, "GET", "/tasks").json()["items"]) == 1
    finally:
        if local is not None:
            local.stop()
        aws.stop()
