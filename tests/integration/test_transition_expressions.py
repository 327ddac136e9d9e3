"""Every domain transition, compiled to one DynamoDB write, does in DynamoDB (moto)
what the transition says it does: it succeeds exactly where ``holds`` is true, and
leaves exactly ``applied_to``'s record. Two stores, one set of rules: the SQLite
store checks ``holds`` and writes ``applied_to`` itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from dynacron.adapters.aws.execution_items import call_from_item, execution_from_item
from dynacron.adapters.aws.expressions import Placeholders, write_request
from dynacron.adapters.aws.items import conditional_write, from_item, to_item
from dynacron.adapters.aws.task_items import retry_from_map, retry_to_map
from dynacron.adapters.messages import upstream_from_map, upstream_to_map
from dynacron.definitions.resources import EXECUTIONS, create_table_request
from dynacron.domain.conditions import AllOf, AnyOf, Equals, Missing, Transition
from dynacron.domain.executions import call_records, dead_letters
from dynacron.domain.executions import transitions as t
from dynacron.domain.executions.execution import (
    Dispatch,
    ExecutionStatus,
    HandlerCallRecord,
    ResultSummary,
    Upstream,
)
from dynacron.domain.executions.record import Keeping, retry_record, upstream_record
from dynacron.domain.executions.retry import RetryPolicy
from dynacron.domain.instants import format_instant
from dynacron.domain.tasks.task import execution_id_for
from dynacron.local.aws import REGION

NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
TABLE = "executions-under-test"
TASK_ID = "task-1"
EXECUTION_ID = execution_id_for(TASK_ID, NOW)
RETENTION = timedelta(days=7)
SHARD = "3"
KEY = to_item({"task_id": TASK_ID, "execution_id": EXECUTION_ID})
CALL_NOW_MS = int(NOW.timestamp() * 1000)


def record(**changes: Any) -> dict[str, Any]:
    """A RUNNING attempt 2 held by ``held``, its lease ended at NOW."""
    base = {
        "task_id": TASK_ID,
        "execution_id": EXECUTION_ID,
        "scheduled_at": format_instant(NOW - timedelta(days=1)),
        "status": "RUNNING",
        "attempt": 2,
        "first_attempt": 1,
        "lease_token": "held",
        "lease_until": format_instant(NOW),
        "callback_digest": "digest",
        "tenant_id": "acme",
        "retry": {"max_attempts": 3, "base_delay_seconds": 5, "max_delay_seconds": 600},
        "expires_at": int((NOW + RETENTION).timestamp()),
    }
    return {k: v for k, v in (base | changes).items() if v is not None}


RECORDS: dict[str, dict[str, Any] | None] = {
    "none": None,
    "running": record(),
    "running-other-token": record(lease_token="other"),
    "running-lease-live": record(lease_until=format_instant(NOW + timedelta(minutes=5))),
    # Ends exactly at take_over's cutoff: not before it.
    "running-lease-at-cutoff": record(lease_until=format_instant(NOW + timedelta(seconds=1))),
    "running-watched-accepted": record(lease_shard=SHARD, accepted_at=format_instant(NOW)),
    "queued": record(status="QUEUED", next_attempt_at=format_instant(NOW), lease_shard=SHARD),
    "queued-attempt-3": record(status="QUEUED", attempt=3, lease_shard=SHARD),
    "succeeded": record(status="SUCCEEDED", lease_token=None, lease_until=None),
    "dead-letter": record(
        status="FAILED",
        dead_letter="dead-letter#acme",
        dead_lettered_at=format_instant(NOW),
        completed_at=format_instant(NOW),
        error="boom",
    ),
    "dead-letter-other-tenant": record(status="FAILED", dead_letter="dead-letter#other"),
    "call-in-progress": record(
        call_status="INPROGRESS", call_expires_at=2_000_000_000, call_in_progress_until=77
    ),
    "call-in-progress-live": record(
        call_status="INPROGRESS",
        call_expires_at=2_000_000_000,
        call_in_progress_until=CALL_NOW_MS + 60_000,
    ),
    # Times out exactly now, by the call clock: not yet replaceable.
    "call-in-progress-at-now": record(
        call_status="INPROGRESS", call_expires_at=2_000_000_000, call_in_progress_until=CALL_NOW_MS
    ),
    "call-completed-expiring-now": record(
        call_status="COMPLETED", call_expires_at=CALL_NOW_MS // 1000
    ),
    "call-in-progress-no-deadline": record(call_status="INPROGRESS", call_expires_at=1),
    "call-completed": record(
        call_status="COMPLETED",
        call_expires_at=2_000_000_000,
        result={"status_code": 200, "excerpt": "ok"},
    ),
}

DISPATCH = Dispatch(
    EXECUTION_ID,
    TASK_ID,
    NOW - timedelta(days=1),
    attempt=2,
    upstream=Upstream("up_1", ResultSummary(200, None)),
)
IN_PROGRESS = HandlerCallRecord(HandlerCallRecord.IN_PROGRESS, 2_000_000_000, CALL_NOW_MS + 1)
COMPLETED = HandlerCallRecord(
    HandlerCallRecord.COMPLETED, 2_000_000_000, None, ResultSummary(201, "done")
)
LEASE: dict[str, Any] = {"keeping": Keeping(SHARD, RETENTION)}
BEGIN: dict[str, Any] = {
    "now": NOW,
    "lease_until": NOW + timedelta(seconds=30),
    "lease_token": "began",
    "callback_digest": "new-digest",
    "keeping": Keeping(SHARD, RETENTION),
}

TRANSITIONS: dict[str, Callable[[], Transition]] = {
    "begin_new": lambda: t.begin_new(
        DISPATCH, retry=RetryPolicy(), tenant_id="acme", call=IN_PROGRESS, **BEGIN
    ),
    "begin_queued": lambda: t.begin_queued(DISPATCH, **BEGIN),
    "begin_queued_with_call": lambda: t.begin_queued(
        DISPATCH, call=IN_PROGRESS, call_now_ms=CALL_NOW_MS, **BEGIN
    ),
    "enqueue": lambda: t.enqueue(
        DISPATCH,
        retry=RetryPolicy(),
        lease_until=NOW,
        lease_token="q",
        tenant_id="acme",
        **LEASE,
    ),
    "renew": lambda: t.renew("held", NOW + timedelta(minutes=1), **LEASE),
    "renew_accepted": lambda: t.renew("held", NOW + timedelta(minutes=1), NOW, **LEASE),
    "finish": lambda: t.finish(
        "held", ExecutionStatus.SUCCEEDED, NOW, result=ResultSummary(200, "x"), **LEASE
    ),
    "finish_follow_up": lambda: t.finish(
        "held",
        ExecutionStatus.SUCCEEDED,
        NOW,
        follow_up_token="f",
        follow_up_until=NOW + timedelta(minutes=1),
        error="note",
        call=COMPLETED,
        **LEASE,
    ),
    "requeue": lambda: t.requeue(
        "held",
        expected=ExecutionStatus.RUNNING,
        attempt=3,
        not_before=NOW + timedelta(hours=1),
        lease_until=NOW + timedelta(hours=1, minutes=5),
        new_token="r",
        error="500",
        **LEASE,
    ),
    "dead_letter": lambda: dead_letters.dead_letter(
        "held",
        now=NOW,
        error="gave up",
        lease_until=NOW + timedelta(minutes=1),
        new_token="d",
        tenant_id="acme",
        **LEASE,
    ),
    "record_undelivered": lambda: dead_letters.record_undelivered(
        DISPATCH,
        now=NOW,
        error="undelivered",
        retry=RetryPolicy(),
        tenant_id="acme",
        lease_until=NOW,
        lease_token="u",
        **LEASE,
    ),
    "dead_letter_undelivered": lambda: dead_letters.dead_letter_undelivered(
        "held",
        attempt=2,
        now=NOW,
        error="lost",
        lease_until=NOW,
        new_token="d",
        tenant_id="acme",
        **LEASE,
    ),
    "set_aside": lambda: t.set_aside("raised", NOW),
    "release": lambda: t.release("held"),
    "save_call": lambda: call_records.save_call("held", IN_PROGRESS, CALL_NOW_MS),
    "keep_call": lambda: call_records.keep_call(COMPLETED),
    "clear_call": lambda: call_records.clear_call(77),
    "clear_call_without_deadline": lambda: call_records.clear_call(None),
    "take_over": lambda: t.take_over(
        "held",
        cutoff=NOW + timedelta(seconds=1),
        new_token="reaper",
        lease_until=NOW + timedelta(minutes=5),
        **LEASE,
    ),
    "hand_to_reaper": lambda: t.hand_to_reaper("held", keeping=Keeping(SHARD, RETENTION)),
    "redrive": lambda: dead_letters.redrive(
        "acme", now=NOW, lease_until=NOW + timedelta(minutes=5), new_token="again", **LEASE
    ),
}


def plain(value: Any) -> Any:
    """DynamoDB's numbers read back as Decimal; the domain writes ints."""
    if isinstance(value, Decimal):
        return int(value)
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


@pytest.fixture(scope="module")
def table() -> Iterator[Any]:
    """One moto executions table for the whole matrix (each case rewrites its item)."""
    import boto3
    from moto import mock_aws

    with pytest.MonkeyPatch.context() as env:
        for name in ("AWS_ENDPOINT_URL", "AWS_PROFILE", "HTTPS_PROXY", "HTTP_PROXY"):
            env.delenv(name, raising=False)
        env.setenv("AWS_ACCESS_KEY_ID", "testing")
        env.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        with mock_aws():
            client = boto3.client("dynamodb", region_name=REGION)
            client.create_table(**create_table_request(EXECUTIONS, TABLE))
            yield client


def stored(client: Any) -> dict[str, Any] | None:
    item = client.get_item(TableName=TABLE, Key=KEY, ConsistentRead=True).get("Item")
    return plain(from_item(item)) if item else None


@pytest.mark.parametrize("record_name", list(RECORDS))
@pytest.mark.parametrize("transition_name", list(TRANSITIONS))
def test_dynamodb_carries_out_exactly_what_the_transition_says(
    table: Any, transition_name: str, record_name: str
) -> None:
    # Given the record (or none) in DynamoDB
    client = table
    client.delete_item(TableName=TABLE, Key=KEY)
    before = RECORDS[record_name]
    if before is not None:
        client.put_item(TableName=TABLE, Item=to_item(before))
    transition = TRANSITIONS[transition_name]()

    # When the transition is written as one conditional write
    request = write_request(transition, KEY)
    write = client.put_item if transition.creates else client.update_item
    wrote = conditional_write(write, TABLE, **request)

    # Then it wrote exactly where the pure rule holds, and left what it says
    assert wrote == transition.holds(before)
    assert stored(client) == (transition.applied_to(before) if wrote else before)


def test_every_transition_applies_to_some_sample_and_is_refused_by_another() -> None:
    # The matrix above would prove little for a transition that always or never holds.
    for name, make in TRANSITIONS.items():
        outcomes = {make().holds(r) for r in RECORDS.values()}
        assert outcomes == {True, False}, name


def test_nested_conditions_keep_their_grouping_and_names_are_shared() -> None:
    placeholders = Placeholders()
    condition = AllOf(
        Equals("status", "RUNNING"),
        AnyOf(Missing("call_status"), AllOf(Equals("status", "X"), Equals("odd-name", 1))),
    )
    text = placeholders.condition(condition)
    assert text == (
        "#status = :v0 AND (attribute_not_exists(#call_status) OR (#status = :v1 AND #n2 = :v2))"
    )
    assert placeholders.names == {
        "#status": "status",
        "#call_status": "call_status",
        "#n2": "odd-name",
    }
    with pytest.raises(ValueError, match="None"):
        placeholders.value(None)


def test_the_domain_writes_the_maps_the_codecs_read() -> None:
    # The records a transition writes are read back by the AWS codec (and messages
    # carry the same upstream map): one format, however many writers.
    policy = RetryPolicy(max_attempts=7, base_delay_seconds=2, max_delay_seconds=90)
    assert retry_record(policy) == retry_to_map(policy)
    assert retry_from_map(retry_record(policy)) == policy
    upstream = Upstream("up_9", ResultSummary(204, "fine"))
    assert upstream_record(upstream) == upstream_to_map(upstream)
    assert upstream_from_map(upstream_record(Upstream("up_9"))) == Upstream("up_9")
    created = t.begin_new(DISPATCH, retry=policy, tenant_id="acme", call=IN_PROGRESS, **BEGIN)
    execution = execution_from_item(to_item(created.applied_to(None)))
    assert (execution.retry, execution.upstream) == (policy, DISPATCH.upstream)
    assert execution.lease_token == "began"
    assert not execution.lease_indexed
    assert call_from_item(to_item(created.applied_to(None))) == IN_PROGRESS
