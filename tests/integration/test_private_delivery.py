"""Private networks end to end (decision 0050): a tenant's grant lets its handler
URLs reach a private range, at registration and at delivery, and nothing else.

Loopback stands in for the private range, under a test setting only: Settings
built here name ``127.0.0.0/8`` as the stack's private networks, which the
environment's parse refuses (tests/unit/test_private_networks.py). No real private
address is ever called; the refused ones are refused before any connection.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from dynacron.adapters.delivery.http import HttpDelivery
from dynacron.api.requests import TaskCreate
from dynacron.domain.coordination.tenants import TenantQuota
from dynacron.domain.executions.execution import Dispatch
from dynacron.domain.tasks.task import execution_id_for
from dynacron.domain.tasks.urls import UrlPolicy
from dynacron.entry.composition import Dynacron
from tests.integration.api_client import ALICE, call
from tests.integration.test_safe_delivery import (
    CLOCK,
    DISPATCH,
    TOKEN,
    FakeDns,
    Redirector,
    error_of,
    task_for,
)
from tests.support import Sink

BOB = "arn:aws:iam::000000000000:user/bob"
LOOPBACK_AS_PRIVATE = ("127.0.0.0/8",)
ALICE_GRANT = TenantQuota(private_networks=("127.0.0.0/16",))


def with_private_loopback(system: Dynacron, aws: tuple[Any, Any]) -> Dynacron:
    """Dynacron as deployed (public addresses only), with loopback as the stack's
    private range: reached only by a tenant granted a part of it."""
    dynamodb, sqs = aws
    settings = dataclasses.replace(
        system.settings, delivery_allow_networks=(), delivery_private_networks=LOOPBACK_AS_PRIVATE
    )
    return Dynacron(settings, dynamodb=dynamodb, sqs=sqs, clock=system.clock, resolver=FakeDns({}))


@pytest.fixture
def redirector() -> Iterator[Redirector]:
    server = Redirector(307, "/")
    yield server
    server.server.shutdown()


def test_registration_allows_a_private_url_only_to_the_tenant_granted_its_range(
    system: Dynacron, aws: tuple[Any, Any], sink: Sink
) -> None:
    private = with_private_loopback(system, aws)
    url = f"{sink.url}/hook"
    # Given no grant: refused, naming the field
    status, problem = call(private, "POST", "/tasks", {"rate": "1 hour", "handler_url": url})
    assert status == 422, problem
    assert problem["errors"][0]["field"] == "handler_url"
    # When an operator grants Alice a range inside the stack's
    private.tenants.set_quota(ALICE, ALICE_GRANT)
    status, created = call(private, "POST", "/tasks", {"rate": "1 hour", "handler_url": url})
    assert status == 201, created
    # Then GET /tenant shows her grant
    status, tenant = call(private, "GET", "/tenant")
    assert tenant["private_networks"] == ["127.0.0.0/16"]
    # And Bob, granted nothing, is still refused the same URL
    status, problem = call(
        private, "POST", "/tasks", {"rate": "1 hour", "handler_url": url}, principal=BOB
    )
    assert status == 422, problem
    # And a grant outside the stack's ranges reaches nothing
    private.tenants.set_quota(ALICE, TenantQuota(private_networks=("10.1.0.0/16",)))
    status, _ = call(private, "POST", "/tasks", {"rate": "1 hour", "handler_url": url})
    assert status == 422
    assert sink.snapshot() == []


def test_the_worker_checks_the_grant_again_at_delivery(
    system: Dynacron, aws: tuple[Any, Any], sink: Sink
) -> None:
    # Given Alice's task registered under her grant
    private = with_private_loopback(system, aws)
    private.tenants.set_quota(ALICE, ALICE_GRANT)
    task = private.task_service.register(
        ALICE, TaskCreate(rate="1 hour", handler_url=f"{sink.url}/hook").to_spec()
    )
    assert task.next_run_at is not None
    dispatch = Dispatch(
        execution_id_for(task.task_id, task.next_run_at), task.task_id, task.next_run_at
    )
    # When the operator withdraws the grant (a worker that has not read it yet)
    private.tenants.set_quota(ALICE, TenantQuota())
    withdrawn = with_private_loopback(system, aws)
    withdrawn.runner.run(dispatch)
    # Then nothing is sent, and the execution failed saying why, not to be retried
    assert sink.snapshot() == []
    (execution,) = withdrawn.task_service.executions(ALICE, task.task_id, 10, None).items
    assert execution.status.value == "FAILED", execution
    assert "is not allowed" in (execution.error or ""), execution.error
    # And a worker that reads the grant delivers the task
    private.tenants.set_quota(ALICE, ALICE_GRANT)
    granted = with_private_loopback(system, aws)
    later = task.next_run_at + timedelta(hours=1)
    assert granted.runner.run(Dispatch(execution_id_for(task.task_id, later), task.task_id, later))
    assert len(sink.snapshot()) == 1


def test_only_the_granted_tenant_reaches_the_range_and_redirects_are_checked_under_it(
    system: Dynacron, sink: Sink, redirector: Redirector
) -> None:
    delivery = HttpDelivery(
        UrlPolicy(),
        2.0,
        CLOCK,
        secrets_of=lambda _: ["s"],
        resolver=FakeDns({"metadata.test": ["169.254.169.254"]}),
        follow_cross_host=True,
        private_networks_of=lambda tenant: ("127.0.0.0/8",) if tenant == ALICE else (),
    )
    alices = task_for(system.settings, f"{sink.url}/hook")
    bobs = dataclasses.replace(alices, tenant_id=BOB)
    # Alice's delivery reaches the range; Bob's, to the same URL, is refused for good
    assert delivery.deliver(alices, DISPATCH, TOKEN).ok
    refused = delivery.deliver(bobs, DISPATCH, TOKEN)
    assert "not allowed" in error_of(refused)
    assert refused.failure is not None
    assert not refused.failure.retryable
    assert len(sink.snapshot()) == 1
    # A redirect out of the range to the metadata service is refused, by address or name
    for location in ("http://169.254.169.254/latest/meta-data/", "http://metadata.test/"):
        redirector.location = location
        result = delivery.deliver(task_for(system.settings, redirector.url + "/h"), DISPATCH, TOKEN)
        assert not result.ok
        assert "not allowed" in error_of(result)
    # And one to a private address outside the grant too
    redirector.location = "http://10.0.0.1/hook"
    result = delivery.deliver(task_for(system.settings, redirector.url + "/h"), DISPATCH, TOKEN)
    assert "not allowed" in error_of(result)


def test_a_batch_reads_the_tenant_s_private_ranges_once(
    system: Dynacron, aws: tuple[Any, Any]
) -> None:
    # Given alice granted a private range, and the DynamoDB reads of her record counted
    private = with_private_loopback(system, aws)
    private.tenants.set_quota(ALICE, ALICE_GRANT)
    dynamodb, _ = aws
    reads: list[str] = []

    def count(params: dict[str, Any], **_: Any) -> None:
        if params.get("TableName") == private.settings.coordination_table:
            reads.append(json.dumps(params.get("Key")))

    dynamodb.meta.events.register("provide-client-params.dynamodb.GetItem", count)
    try:
        # When she creates 20 tasks calling the range in one batch, 2 URLs among them
        urls = ["http://127.0.0.1:9/a", "http://127.0.0.1:9/b"]
        batch = {"tasks": [{"rate": "1 hour", "handler_url": urls[i % 2]} for i in range(20)]}
        status, answer = call(private, "POST", "/tasks/batch", batch)
    finally:
        dynamodb.meta.events.unregister("provide-client-params.dynamodb.GetItem", count)
    # Then every item is created, and her record read twice in all (quota and ranges),
    # not once per item
    assert status == 200, answer
    assert answer["created"] == 20
    assert len(reads) <= 2, reads


def test_a_batch_naming_calendars_and_notify_urls_reads_each_record_once(
    system: Dynacron, aws: tuple[Any, Any]
) -> None:
    # Given alice granted a private range and a calendar, and her records' reads counted
    private = with_private_loopback(system, aws)
    private.tenants.set_quota(ALICE, ALICE_GRANT)
    assert call(private, "PUT", "/calendars/holidays", {"dates": ["2027-01-01"]})[0] == 200
    dynamodb, _ = aws
    reads: list[str] = []

    def count(params: dict[str, Any], **_: Any) -> None:
        if params.get("TableName") == private.settings.coordination_table:
            reads.append(json.dumps(params.get("Key")))

    dynamodb.meta.events.register("provide-client-params.dynamodb.GetItem", count)
    try:
        # When she creates 20 tasks held to the calendar, told of failures in the range
        item = {
            "cron": "0 12 * * *",
            "handler_url": "http://127.0.0.1:9/a",
            "exclude_calendars": ["holidays"],
            "notify": {"on_failure": {"url": "http://127.0.0.1:9/failed"}},
        }
        status, answer = call(private, "POST", "/tasks/batch", {"tasks": [item] * 20})
    finally:
        dynamodb.meta.events.unregister("provide-client-params.dynamodb.GetItem", count)
    # Then every item is created, and her records read three times in all (quota,
    # ranges, calendars), not once per item
    assert status == 200, answer
    assert answer["created"] == 20, answer
    assert len(reads) <= 3, reads
