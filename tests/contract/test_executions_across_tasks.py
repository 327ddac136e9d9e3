"""The ExecutionStore contract for a tenant's executions across its tasks (GET /executions):
which are listed, for whom, in what order, filtered and paged alike on every store."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from dynacron.domain.errors import InvalidRequest
from dynacron.domain.executions.attention import Attention, AttentionQuery
from dynacron.domain.executions.execution import Dispatch, ExecutionStatus
from dynacron.ports import AdapterSet, ExecutionStore
from tests.contract import changes
from tests.contract.builders import START, a_dispatch, a_task
from tests.contract.test_executions import LEASE, SECOND, begin, dead_letter_of

ANY = AttentionQuery()


def listed(
    store: ExecutionStore, tenant_id: str, query: AttentionQuery = ANY, limit: int = 2
) -> list[str]:
    """Every execution id the listing names, page after page."""
    ids: list[str] = []
    token: str | None = None
    for _ in range(50):
        page = store.needing_attention(tenant_id, query, limit, token)
        assert len(page.items) <= limit
        ids += [e.execution_id for e in page.items]
        token = page.next_token
        if token is None:
            return ids
    raise AssertionError("the listing never ended")


def failed_once(store: ExecutionStore, dispatch: Dispatch, failed_at: datetime) -> str:
    """Begin ``dispatch`` and fail its attempt at ``failed_at``: QUEUED for a retry."""
    tenant = dispatch.tenant_id or "default"
    assert begin(store, dispatch, "first", now=failed_at - SECOND).began
    assert changes.requeue(
        store,
        dispatch.execution_id,
        "first",
        expected=ExecutionStatus.RUNNING,
        attempt=dispatch.attempt + 1,
        not_before=failed_at + 10 * SECOND,
        lease_until=failed_at + LEASE,
        new_token="retry",
        error="HTTP 500",
        attention=Attention(tenant, failed_at),
    )
    return dispatch.execution_id


def accepted(store: ExecutionStore, dispatch: Dispatch, at: datetime) -> str:
    """Begin ``dispatch`` and have its handler answer 202 at ``at``: a long job running."""
    tenant = dispatch.tenant_id or "default"
    assert begin(store, dispatch, "long", now=at - SECOND).began
    assert changes.renew(
        store,
        dispatch.execution_id,
        "long",
        at + timedelta(hours=1),
        accepted_at=at,
        attention=Attention(tenant, at),
    )
    return dispatch.execution_id


def test_only_executions_an_operator_looks_for_are_listed(adapters: AdapterSet) -> None:
    store = adapters.executions
    # Given a first attempt that succeeded, one skipped, one still running (not a
    # long job) and one postponed before it ever failed
    succeeded = a_dispatch("fine", tenant_id="acme")
    assert begin(store, succeeded, "ok").began
    assert changes.finish(store, succeeded.execution_id, "ok", ExecutionStatus.SUCCEEDED, START)
    task = a_task("skipper", tenant_id="acme")
    assert changes.record_skipped(
        store, task, "skipper_20261130T120000.000Z", START, "overlap", START
    )
    assert begin(store, a_dispatch("busy", tenant_id="acme"), "busy").began
    postponed = a_dispatch("waits", tenant_id="acme")
    assert begin(store, postponed, "p").began
    assert changes.requeue(
        store,
        postponed.execution_id,
        "p",
        expected=ExecutionStatus.RUNNING,
        attempt=1,
        not_before=START + LEASE,
        lease_until=START + 2 * LEASE,
        new_token="p2",
    )
    # And a dead letter, a failed attempt waiting for its retry, a long job running
    dead = a_dispatch("dead", tenant_id="acme")
    dead_letter_of(store, dead, START + 3 * SECOND)
    retrying = failed_once(store, a_dispatch("flaky", tenant_id="acme"), START + 2 * SECOND)
    long_job = accepted(store, a_dispatch("long", tenant_id="acme"), START + SECOND)

    # Then only the last three are listed, newest first, each with when it was listed
    assert listed(store, "acme") == [dead.execution_id, retrying, long_job]
    page = store.needing_attention("acme", ANY, 10, None)
    assert [(e.status, e.attention_at) for e in page.items] == [
        (ExecutionStatus.FAILED, START + 3 * SECOND),
        (ExecutionStatus.QUEUED, START + 2 * SECOND),
        (ExecutionStatus.RUNNING, START + SECOND),
    ]
    assert page.next_token is None
    assert page.items[0] == store.get(dead.execution_id)


def test_a_tenant_never_sees_another_tenants_executions(adapters: AdapterSet) -> None:
    store = adapters.executions
    # Given a dead letter of each of two tenants, and three more of acme's
    mine = [a_dispatch(f"mine-{n}", tenant_id="acme") for n in range(4)]
    for n, dispatch in enumerate(mine):
        dead_letter_of(store, dispatch, START + n * SECOND)
    theirs = a_dispatch("theirs", tenant_id="other")
    dead_letter_of(store, theirs, START + 10 * SECOND)

    # Then each lists its own only
    assert listed(store, "acme") == [d.execution_id for d in reversed(mine)]
    assert listed(store, "other") == [theirs.execution_id]
    assert listed(store, "nobody") == []

    # And a token of acme's listing is refused to the other tenant, not followed
    token = store.needing_attention("acme", ANY, 2, None).next_token
    assert token is not None
    with pytest.raises(InvalidRequest) as refused:
        store.needing_attention("other", ANY, 2, token)
    assert refused.value.field == "next_token"


def test_filtered_by_status(adapters: AdapterSet) -> None:
    store = adapters.executions
    dead = a_dispatch("dead", tenant_id="acme")
    dead_letter_of(store, dead, START)
    retrying = failed_once(store, a_dispatch("flaky", tenant_id="acme"), START + SECOND)
    long_job = accepted(store, a_dispatch("long", tenant_id="acme"), START + 2 * SECOND)

    def of(status: ExecutionStatus) -> list[str]:
        return listed(store, "acme", AttentionQuery(status=status))

    assert of(ExecutionStatus.FAILED) == [dead.execution_id]
    assert of(ExecutionStatus.QUEUED) == [retrying]
    assert of(ExecutionStatus.RUNNING) == [long_job]


def test_a_retry_is_listed_until_it_succeeds_and_a_redrive_until_it_runs_well(
    adapters: AdapterSet,
) -> None:
    store = adapters.executions
    # Given an attempt that failed, and a dead letter
    flaky = a_dispatch("flaky", tenant_id="acme")
    retrying = failed_once(store, flaky, START)
    dead = a_dispatch("dead", tenant_id="acme")
    dead_letter_of(store, dead, START + SECOND)

    # When the retry begins it is listed RUNNING; when it succeeds, no more
    retry = Dispatch(retrying, flaky.task_id, flaky.scheduled_at, 2, tenant_id="acme")
    assert begin(store, retry, "second", now=START + 20 * SECOND).began
    running = AttentionQuery(status=ExecutionStatus.RUNNING)
    assert listed(store, "acme", running) == [retrying]
    assert changes.finish(store, retrying, "second", ExecutionStatus.SUCCEEDED, START + 21 * SECOND)
    assert listed(store, "acme") == [dead.execution_id]

    # When the dead letter is redriven it is listed QUEUED, from the redrive
    redriven_at = START + timedelta(hours=1)
    redriven = changes.redrive(
        store,
        "acme",
        dead.execution_id,
        now=redriven_at,
        lease_until=redriven_at + LEASE,
        new_token="r",
    )
    assert redriven is not None
    page = store.needing_attention("acme", ANY, 10, None)
    assert [(e.execution_id, e.status, e.attention_at) for e in page.items] == [
        (dead.execution_id, ExecutionStatus.QUEUED, redriven_at)
    ]


def test_filtered_by_time_range_both_ends_inclusive(adapters: AdapterSet) -> None:
    store = adapters.executions
    ids = []
    for n in range(5):
        dispatch = a_dispatch(f"job-{n}", tenant_id="acme")
        dead_letter_of(store, dispatch, START + timedelta(minutes=n))
        ids.append(dispatch.execution_id)

    def between(since: int | None, until: int | None) -> list[str]:
        query = AttentionQuery(
            since=START + timedelta(minutes=since) if since is not None else None,
            until=START + timedelta(minutes=until) if until is not None else None,
        )
        return listed(store, "acme", query)

    assert between(1, 3) == [ids[3], ids[2], ids[1]]
    assert between(3, None) == [ids[4], ids[3]]
    assert between(None, 1) == [ids[1], ids[0]]
    assert between(10, None) == []
    # A status and a range together
    failed_in_range = AttentionQuery(
        status=ExecutionStatus.FAILED, since=START + timedelta(minutes=4)
    )
    assert listed(store, "acme", failed_in_range) == [ids[4]]


def test_paged_newest_first_and_a_token_is_good_for_its_query_only(
    adapters: AdapterSet,
) -> None:
    store = adapters.executions
    # Given seven dead letters of one tenant, a minute apart, two at the same instant
    ids = []
    for n in range(6):
        dispatch = a_dispatch(f"job-{n}", tenant_id="acme")
        dead_letter_of(store, dispatch, START + timedelta(minutes=n))
        ids.append(dispatch.execution_id)
    twin = a_dispatch("job-twin", tenant_id="acme")
    dead_letter_of(store, twin, START + timedelta(minutes=5))

    # When listed three at a time, every one comes exactly once, newest first
    every = listed(store, "acme", limit=3)
    assert sorted(every) == sorted([*ids, twin.execution_id])
    assert len(every) == len(set(every))
    assert set(every[:2]) == {ids[5], twin.execution_id}
    assert every[2:] == list(reversed(ids[:5]))

    # And a token is refused by another query, and when it is not a token at all
    token = store.needing_attention("acme", ANY, 3, None).next_token
    assert token is not None
    for query, bad in [
        (AttentionQuery(status=ExecutionStatus.FAILED), token),
        (AttentionQuery(since=START), token),
        (ANY, "not-a-token"),
        (ANY, token[:-4]),
    ]:
        with pytest.raises(InvalidRequest):
            store.needing_attention("acme", query, 3, bad)
