"""The scale benchmark's AWS double enforces DynamoDB's partition throughput, and the
real tick, claim and worker retry what it throttles and lose nothing (bench/scale.py)."""

from __future__ import annotations

from typing import Any

import pytest

from bench.aws_double import AwsModel, ServiceError
from bench.aws_limits import PARTITION_WRITE_UNITS, Throughput
from bench.client_double import BotocoreCpu
from bench.scale import Deployment, Scenario, measure_botocore_cpu, run


def test_a_partition_over_its_write_units_in_a_second_is_throttled_as_dynamodb_answers() -> None:
    # Given the double at one frozen instant, and one task's partition written to its limit
    now = 1_800_000_000.0
    model = AwsModel(now=lambda: now, throughput=Throughput(now=lambda: now))
    table = model.settings().tasks_table
    item = {"task_id": {"S": "hot"}, "name": {"S": "x"}}
    for _ in range(int(PARTITION_WRITE_UNITS)):
        model.answer("dynamodb.PutItem", {"TableName": table, "Item": item})

    # When one more write reaches it within the same second
    with pytest.raises(ServiceError) as refused:
        model.answer("dynamodb.PutItem", {"TableName": table, "Item": item})

    # Then DynamoDB's error code and throttling reason come back, and another partition still writes
    assert refused.value.code == "ProvisionedThroughputExceededException"
    assert refused.value.status == 400
    (reason,) = refused.value.fields["ThrottlingReasons"]
    assert reason["reason"] == "TableWriteKeyRangeThroughputExceeded"
    model.answer("dynamodb.PutItem", {"TableName": table, "Item": {"task_id": {"S": "cold"}}})

    # And a second later the partition has its units back
    now += 1.0
    model.answer("dynamodb.PutItem", {"TableName": table, "Item": item})


def test_the_real_code_retries_throttled_writes_and_loses_no_fire() -> None:
    # Given 300 tasks due over 3 seconds, on partitions allowing 15 write units a second
    scenario = Scenario(
        registered=300,
        fires_per_second=100,
        steady_seconds=3.0,
        burst=100,
        burst_after_seconds=2.0,
        tenants=3,
        worker_in_flight=4,
        drain_seconds=120.0,
        partition_write_units=15.0,
    )

    # When the real tick, claim and worker run them in virtual time
    result = run(scenario, Deployment.for_rate(100, 0.2), BotocoreCpu())

    # Then writes were throttled with DynamoDB's reasons and retried by botocore
    throttled = result["throttled_requests"]
    assert throttled["total"] > 0
    assert throttled["attempts_retried_by_botocore"] > 0
    assert {p["reason"] for p in throttled["by_partition"]} & {
        "IndexWriteKeyRangeThroughputExceeded",
        "TableWriteKeyRangeThroughputExceeded",
    }
    # And every due occurrence reached its handler and ended SUCCEEDED, none lost
    assert result["due"] == 400
    assert result["statuses"] == {"SUCCEEDED": 400}
    assert result["lost"] == 0
    assert result["fired"] == 400
    # And no record failed in the worker (a harness error would show here first)
    assert result["worker_records_failed"] == {}


def test_a_visibility_change_counts_from_the_call_and_needs_the_latest_receipt_handle() -> None:
    # Given a message received with the queue's visibility timeout
    now = 1_800_000_000.0
    model = AwsModel(now=lambda: now)
    url = model.settings().dispatch_queue_url
    model.answer("sqs.SendMessage", {"QueueUrl": url, "MessageBody": "m"})
    (first,) = model.answer("sqs.ReceiveMessage", {"QueueUrl": url, "VisibilityTimeout": 30})[
        "Messages"
    ]

    # When, 20 s on, it is held for 15 s from then
    now += 20.0
    held = model.answer(
        "sqs.ChangeMessageVisibilityBatch",
        {
            "QueueUrl": url,
            "Entries": [
                {"Id": "a", "ReceiptHandle": first["ReceiptHandle"], "VisibilityTimeout": 15},
                {"Id": "b", "ReceiptHandle": "no-such-handle", "VisibilityTimeout": 15},
            ],
        },
    )

    # Then the known handle is held and the unknown one fails on its own entry
    assert held["Successful"] == [{"Id": "a"}]
    assert [(f["Id"], f["Code"]) for f in held["Failed"]] == [("b", "ReceiptHandleIsInvalid")]
    # And the message stays invisible past its first timeout (30 s), until 35 s
    now += 14.0
    assert model.answer("sqs.ReceiveMessage", {"QueueUrl": url}) == {}
    now += 2.0
    (again,) = model.answer("sqs.ReceiveMessage", {"QueueUrl": url, "VisibilityTimeout": 30})[
        "Messages"
    ]
    assert again["Attributes"]["ApproximateReceiveCount"] == "2"

    # And the first receipt's handle no longer holds it; the latest does
    stale = model.answer(
        "sqs.ChangeMessageVisibilityBatch",
        {
            "QueueUrl": url,
            "Entries": [
                {"Id": "old", "ReceiptHandle": first["ReceiptHandle"], "VisibilityTimeout": 60},
                {"Id": "new", "ReceiptHandle": again["ReceiptHandle"], "VisibilityTimeout": 0},
            ],
        },
    )
    assert [f["Id"] for f in stale["Failed"]] == ["old"]
    assert stale["Successful"] == [{"Id": "new"}]
    # And a timeout of 0 makes the message visible at once
    assert len(model.answer("sqs.ReceiveMessage", {"QueueUrl": url})["Messages"]) == 1
    assert model.calls["sqs.ChangeMessageVisibilityBatch"] == 2


def test_the_workers_hold_their_messages_in_virtual_time() -> None:
    # Given a small run of the real worker, whose message holds are on
    scenario = Scenario(
        registered=100,
        fires_per_second=50,
        steady_seconds=1.0,
        burst=20,
        burst_after_seconds=1.0,
        tenants=2,
        worker_in_flight=4,
        drain_seconds=60.0,
    )

    # When it runs in virtual time
    result = run(scenario, Deployment.for_rate(50, 0.2), BotocoreCpu())

    # Then every batch held its messages through the double (no thread of the
    # machine's, no failed hold), and nothing was lost
    assert result["calls"].get("sqs.ChangeMessageVisibilityBatch", 0) > 0
    assert result["warnings"] == {}
    assert result["lost"] == 0


def test_a_deleted_or_held_message_does_not_announce_a_showing() -> None:
    # Given two messages received, one then deleted and the other held longer
    now = 1_800_000_000.0
    model = AwsModel(now=lambda: now)
    url = model.settings().dispatch_queue_url
    for body in ("a", "b"):
        model.answer("sqs.SendMessage", {"QueueUrl": url, "MessageBody": body})
    first, second = model.answer(
        "sqs.ReceiveMessage", {"QueueUrl": url, "MaxNumberOfMessages": 2, "VisibilityTimeout": 30}
    )["Messages"]
    model.answer("sqs.DeleteMessage", {"QueueUrl": url, "ReceiptHandle": first["ReceiptHandle"]})
    model.answer(
        "sqs.ChangeMessageVisibility",
        {"QueueUrl": url, "ReceiptHandle": second["ReceiptHandle"], "VisibilityTimeout": 90},
    )

    # Then the next message to show is the held one, when its hold ends (a poller
    # waiting for it is not woken at 30 s for nothing)
    assert model.queues[url].next_showing() == now + 90


def _batch_get(keys: int) -> dict[str, Any]:
    return {"RequestItems": {"tasks": {"Keys": [{"task_id": {"S": f"t{n}"}} for n in range(keys)]}}}


def test_a_batch_get_is_charged_botocore_cpu_by_the_keys_it_reads() -> None:
    # Given BatchGetItem measured at one key and at a full batch
    cpu = BotocoreCpu({"BatchGetItem": 0.0100, "BatchGetItem/1": 0.0010, "GetItem": 0.0005})

    # When calls of 1, 10 and 100 keys are charged
    charged = [cpu("BatchGetItem", _batch_get(keys)) for keys in (1, 10, 100)]

    # Then each is charged on the line between the two sizes, a wave of 10 far below
    # the full batch's, and an operation not measured what the whole calls cost
    assert charged == pytest.approx([0.0010, 0.0010 + 0.0090 * 9 / 99, 0.0100])
    assert cpu("PutItem", {}) == pytest.approx((0.0100 + 0.0005) / 2)


def test_the_run_measures_a_batch_gets_cpu_at_both_sizes() -> None:
    # When botocore's CPU is measured as the scale run measures it
    measured = measure_botocore_cpu(times=20).measured

    # Then a one-key BatchGetItem costs a fraction of a full one
    assert 0 < measured["BatchGetItem/1"] < measured["BatchGetItem"] / 3
