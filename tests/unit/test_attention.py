"""Executions listed across a tenant's tasks: which transitions list them, which take
them off, and how a listing's query is read from what a caller sent."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from dynacron.domain.errors import InvalidRequest
from dynacron.domain.executions import dead_letters
from dynacron.domain.executions import transitions as t
from dynacron.domain.executions.attention import Attention, AttentionQuery, attention_query
from dynacron.domain.executions.execution import Dispatch, Execution, ExecutionStatus
from dynacron.domain.executions.record import ATTENTION, Keeping
from dynacron.domain.executions.retry import RetryPolicy

NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
LATER = NOW + timedelta(minutes=5)
RETENTION = timedelta(days=7)
KEEPING = Keeping("1", RETENTION)
DISPATCH = Dispatch(execution_id="task-1_20261130T120000.000Z", task_id="task-1", scheduled_at=NOW)
LISTED = {"attention_tenant": "acme", "attention_at": "2026-11-30T12:00:00.000Z"}


def test_a_first_attempt_that_succeeds_is_never_listed() -> None:
    # Given the two writes of a fire that succeeds at once
    begun = t.begin_new(
        DISPATCH,
        now=NOW,
        lease_until=LATER,
        lease_token="held",
        callback_digest="d",
        retry=RetryPolicy(),
        tenant_id="acme",
        keeping=KEEPING,
    )
    finished = t.finish("held", ExecutionStatus.SUCCEEDED, NOW, keeping=KEEPING)
    record = finished.applied_to(begun.applied_to(None))
    # Then neither lists it
    assert not ATTENTION & set(record)


def test_each_failure_lists_it_for_its_tenant_from_when_it_failed() -> None:
    common = {"lease_until": LATER, "new_token": "n", "tenant_id": "acme", "keeping": KEEPING}
    failures = [
        dead_letters.dead_letter("held", now=NOW, error="e", **common),
        dead_letters.dead_letter_undelivered("seen", attempt=1, now=NOW, error="e", **common),
        dead_letters.record_undelivered(
            DISPATCH,
            now=NOW,
            error="e",
            retry=RetryPolicy(),
            tenant_id="acme",
            lease_until=LATER,
            lease_token="n",
            keeping=KEEPING,
        ),
        dead_letters.redrive("acme", now=NOW, lease_until=LATER, new_token="n", keeping=KEEPING),
    ]
    for failure in failures:
        assert {name: failure.sets[name] for name in ATTENTION} == LISTED


def test_a_retry_and_a_long_job_are_listed_only_when_asked() -> None:
    attention = Attention("acme", NOW)
    terms = {"keeping": KEEPING}
    requeue = {
        "expected": ExecutionStatus.RUNNING,
        "attempt": 2,
        "not_before": LATER,
        "lease_until": LATER,
        "new_token": "n",
    }
    # A failed attempt waiting for its retry, and a 202, are listed
    assert (
        set(t.requeue("held", **requeue, error="500", attention=attention, **terms).sets)
        >= ATTENTION
    )
    assert set(t.renew("held", LATER, NOW, attention=attention, **terms).sets) >= ATTENTION
    # A postponed attempt and a heartbeat leave the listing as it is
    postponed = t.requeue("held", **requeue, **terms)
    heartbeat = t.renew("held", LATER, **terms)
    for transition in (postponed, heartbeat):
        assert not ATTENTION & (set(transition.sets) | transition.removes)


def test_an_end_takes_it_off_the_listing() -> None:
    for status in (ExecutionStatus.SUCCEEDED, ExecutionStatus.SKIPPED):
        end = t.finish("held", status, NOW, keeping=KEEPING)
        record = end.applied_to({"status": "RUNNING", "lease_token": "held", **LISTED})
        assert end.removes >= ATTENTION
        assert not ATTENTION & set(record)


def test_a_query_is_read_from_what_a_caller_sent() -> None:
    query = attention_query("FAILED", "2026-11-30T13:00:00+01:00", "2026-11-30T12:30:00Z")
    assert query == AttentionQuery(ExecutionStatus.FAILED, NOW, NOW + timedelta(minutes=30))
    assert query.bounds == ("2026-11-30T12:00:00.000Z", "2026-11-30T12:30:00.000Z")
    assert attention_query() == AttentionQuery()


@pytest.mark.parametrize(
    ("status", "since", "until", "field", "says"),
    [
        ("SUCCEEDED", None, None, "status", "GET /tasks/{task_id}/executions"),
        ("SKIPPED", None, None, "status", "not indexed"),
        ("failed", None, None, "status", "FAILED, QUEUED or RUNNING"),
        (None, "2026-11-30T12:00:00", None, "since", "with an offset"),
        (None, None, "yesterday", "until", "ISO 8601"),
        (None, "0001-01-01T00:00:00Z", None, "since", "from 1970"),
        (None, "2026-11-30T13:00:00Z", "2026-11-30T12:00:00Z", "since", "after until"),
    ],
)
def test_a_query_that_cannot_be_answered_is_refused_naming_the_field(
    status: str | None, since: str | None, until: str | None, field: str, says: str
) -> None:
    with pytest.raises(InvalidRequest) as refused:
        attention_query(status, since, until)
    assert refused.value.field == field
    assert says in refused.value.message


def test_a_listing_admits_only_what_is_still_listed_as_asked() -> None:
    def execution(
        status: ExecutionStatus, tenant: str = "acme", at: datetime | None = NOW
    ) -> Execution:
        return Execution("x_1", "x", NOW, status, 1, tenant_id=tenant, attention_at=at)

    failed_since_now = AttentionQuery(ExecutionStatus.FAILED, since=NOW)
    assert failed_since_now.admits("acme", execution(ExecutionStatus.FAILED))
    assert not failed_since_now.admits("other", execution(ExecutionStatus.FAILED))
    assert not failed_since_now.admits("acme", execution(ExecutionStatus.QUEUED))
    assert not failed_since_now.admits("acme", execution(ExecutionStatus.FAILED, at=None))
    assert not failed_since_now.admits(
        "acme", execution(ExecutionStatus.FAILED, at=NOW - timedelta(seconds=1))
    )
    assert not AttentionQuery().admits("acme", execution(ExecutionStatus.SUCCEEDED))
