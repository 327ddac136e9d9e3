"""Elastic tick capacity: how fast a small looping tick hands pages out (decision 0025).

A looping tick of 128 MB (7 % of a vCPU) hands each page of due tasks to a claim
invocation instead of claiming it. What it then spends per page is one Query of
the due index and one asynchronous ``Invoke``, and their CPU at its share. Two
measurements, the tick's real code throughout:

1. **Hand-out CPU per page, unlimited**: the real tick against the AWS double
   (``bench/aws_double.py``, 10 ms per DynamoDB/SQS call) with a real boto3
   Lambda client whose ``Invoke`` is answered 202 at botocore's ``before-send``,
   20 ms after it was sent. This process's CPU (every thread, ``getrusage``),
   less the double's own model CPU, over the pages handed out.
2. **Pages handed out per second under the CPU quota of 128 MB** (a cgroup, as
   ``bench.capacity`` does; the quota raised by the double's own share, measured
   unlimited first), one tick of ``--tasks`` due tasks.

The burst figure: a 128 MB tick handing out that many pages a second, each
claimed by an invocation of 1,769 MB at the claims/s section 7 measured there
(over HTTP), with ``claim_reserved_concurrency`` invocations at most.

Run: .venv/bin/python -m bench.fanout
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import boto3
from botocore.awsrequest import AWSResponse

from bench.aws_double import REGION, AwsDouble, _Body
from bench.capacity import cgroup_directory, limit_cpu, process_cpu_seconds
from bench.common import QUICK, RESULTS, write_result
from bench.throughput import NOW, due_items, warm
from dynacron.adapters.aws.cursors import DynamoCursorStore
from dynacron.adapters.aws.due_page_hand_out import LambdaDuePageHandOut
from dynacron.domain.clock import SettableClock
from dynacron.domain.coordination import transitions
from dynacron.entry.composition import Dynacron
from dynacron.planning import capacity_model

TICK_MEMORY_MB = 128
DOUBLE_LATENCY_MS = 10
INVOKE_LATENCY_MS = 20
CLAIM_FUNCTION = "arn:aws:lambda:us-east-1:123456789012:function:dynacron-claim"


class InvokeAnswers:
    """Lambda's answer to an asynchronous Invoke (202, queued), after a round trip."""

    def __init__(self, latency_seconds: float) -> None:
        self.latency_seconds = latency_seconds
        self.pages: list[dict[str, Any]] = []

    def __call__(self, request: Any, **_: Any) -> AWSResponse:
        sent_at = time.perf_counter()
        self.pages.append(json.loads(request.body))
        headers = {"x-amzn-RequestId": "bench", "Content-Length": "0"}
        response = AWSResponse(request.url, 202, headers, _Body(b""))
        remaining = self.latency_seconds - (time.perf_counter() - sent_at)
        if remaining > 0:
            time.sleep(remaining)
        return response


def hand_out_child(tasks: int, cgroup: str | None) -> dict[str, Any]:
    """In the child: fill the double, join the cgroup (if any), tick once handing every
    page out; what it cost."""
    double = AwsDouble(latency_seconds=0.0)
    pages = -(-tasks // capacity_model.PAGE_SIZE)
    settings = double.settings(
        shard_count=1,
        tick_max_claims=tasks,
        tick_fanout_max_pages=pages,
        claim_function=CLAIM_FUNCTION,
    )
    dynamodb, sqs = double.clients()
    DynamoCursorStore(dynamodb, settings.coordination_table).apply(
        0, transitions.advance_cursor(settings.sharding.bucket(NOW))
    )
    for item in due_items(tasks, settings, seed=2):
        double.put(settings.tasks_table, item)
    answers = InvokeAnswers(INVOKE_LATENCY_MS / 1000)
    client = boto3.client(
        "lambda", region_name=REGION, aws_access_key_id="double", aws_secret_access_key="double"
    )
    client.meta.events.register("before-send.lambda", answers)
    app = Dynacron(
        settings,
        dynamodb=dynamodb,
        sqs=sqs,
        clock=SettableClock(NOW),
        page_claims=LambdaDuePageHandOut(client, CLAIM_FUNCTION),
    )
    warm(app)
    double.latency_seconds = DOUBLE_LATENCY_MS / 1000
    if cgroup:
        Path(cgroup, "cgroup.procs").write_text(str(os.getpid()))
    began, cpu, model = time.perf_counter(), process_cpu_seconds(), double.model_cpu_seconds
    report = app.ticker.tick_shard(0)
    seconds = time.perf_counter() - began
    cpu = process_cpu_seconds() - cpu
    model = double.model_cpu_seconds - model
    assert report.handed_out == tasks, f"{report.handed_out} of {tasks} handed out"
    assert len(answers.pages) == report.pages_handed_out == pages
    return {
        "tasks": tasks,
        "pages": pages,
        "seconds": seconds,
        "cpu_seconds": cpu,
        "model_cpu_seconds": model,
    }


def run_child(tasks: int, cgroup: Path | None) -> dict[str, Any]:
    command = [sys.executable, "-m", "bench.fanout", "--child", str(tasks)]
    if cgroup is not None:
        command += ["--cgroup", str(cgroup)]
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=1000 if QUICK else 3000)
    parser.add_argument("--repeats", type=int, default=1 if QUICK else 3)
    parser.add_argument("--child", type=int, metavar="TASKS")
    parser.add_argument("--cgroup")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(hand_out_child(args.child, args.cgroup)))
        return
    unlimited = sorted(
        (run_child(args.tasks, None) for _ in range(args.repeats)),
        key=lambda r: (r["cpu_seconds"] - r["model_cpu_seconds"]) / r["pages"],
    )
    median = unlimited[len(unlimited) // 2]
    cpu_ms_per_page = 1000 * (median["cpu_seconds"] - median["model_cpu_seconds"]) / median["pages"]
    model_share = median["model_cpu_seconds"] / median["cpu_seconds"]
    print(f"  unlimited: {median} -> {cpu_ms_per_page:.2f} ms of CPU a page", flush=True)
    limited: dict[str, Any] | None = None
    directory, version = cgroup_directory()
    if directory is not None:
        share = capacity_model.cpu_share(TICK_MEMORY_MB)
        try:
            # The double's model runs in the tick's process: its share on top.
            limit_cpu(directory, version, share / (1 - model_share))
            runs = sorted(
                (run_child(args.tasks, directory) for _ in range(args.repeats)),
                key=lambda r: r["pages"] / r["seconds"],
            )
        finally:
            if directory.exists():
                directory.rmdir()
        limited = {**runs[len(runs) // 2], "memory_mb": TICK_MEMORY_MB, "cpu_share": share}
        limited["pages_per_second"] = round(limited["pages"] / limited["seconds"], 2)
        print(f"  limited to {TICK_MEMORY_MB} MB: {limited}", flush=True)
    section7 = json.loads((RESULTS / "capacity.json").read_text())
    over_http = {
        row["memory_mb"]: row.get("claims_per_second")
        for row in (section7.get("limited_over_http") or {}).get("rows", [])
    }
    write_result(
        "fanout",
        {
            "tick_memory_mb": TICK_MEMORY_MB,
            "double_latency_ms": DOUBLE_LATENCY_MS,
            "invoke_latency_ms": INVOKE_LATENCY_MS,
            "unlimited": unlimited,
            "hand_out_cpu_ms_per_page": round(cpu_ms_per_page, 3),
            "double_model_cpu_share": round(model_share, 3),
            "limited": limited or {"skipped": version},
            "claim_invocation_claims_per_second": over_http.get(capacity_model.FULL_VCPU_MEMORY_MB),
            "model": {
                "hand_out_pages_per_second": round(
                    capacity_model.ElasticModel().pages_per_second(TICK_MEMORY_MB), 2
                ),
                "claims_per_second_per_invocation": round(
                    capacity_model.ElasticModel().claims_per_invocation_second(), 1
                ),
            },
        },
    )


if __name__ == "__main__":
    main()
