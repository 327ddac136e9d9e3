"""Limits: each refused with a 4xx problem that names the limit."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import pytest

from dynacron.domain.clock import SettableClock
from dynacron.entry.composition import Dynacron
from tests.integration.api_client import call

HOOK = "http://127.0.0.1:9/hook"


@pytest.fixture
def limited(system: Dynacron, aws: tuple[Any, Any], clock: SettableClock) -> Dynacron:
    dynamodb, sqs = aws
    settings = dataclasses.replace(
        system.settings,
        max_tasks_per_tenant=2,
        min_interval_seconds=60,
        tenant_rate_per_second=1.0,
        tenant_rate_burst=50,
    )
    return Dynacron(settings, dynamodb=dynamodb, sqs=sqs, clock=clock)


def test_tasks_per_tenant_are_capped_and_deleting_frees_room(limited: Dynacron) -> None:
    ids = [
        call(limited, "POST", "/tasks", {"rate": "1 hour", "handler_url": HOOK})[1]["task_id"]
        for _ in range(2)
    ]
    status, problem = call(limited, "POST", "/tasks", {"rate": "1 hour", "handler_url": HOOK})
    assert status == 422
    assert problem["limit"] == "max_tasks_per_tenant"
    assert "2" in problem["detail"]
    # another tenant has its own quota
    other = "arn:aws:iam::000000000000:user/carol"
    assert (
        call(limited, "POST", "/tasks", {"rate": "1 hour", "handler_url": HOOK}, principal=other)[0]
        == 201
    )
    assert call(limited, "DELETE", f"/tasks/{ids[0]}")[0] == 204
    assert call(limited, "POST", "/tasks", {"rate": "1 hour", "handler_url": HOOK})[0] == 201
    assert call(limited, "GET", "/tenant")[1]["task_count"] == 2


@pytest.mark.parametrize(
    "schedule", [{"rate": "30 seconds"}, {"cron": "*/10 * * * * *"}, {"cron": "0,30 * * * * *"}]
)
def test_schedules_firing_more_often_than_the_minimum_are_refused(
    limited: Dynacron, schedule: dict[str, str]
) -> None:
    status, problem = call(limited, "POST", "/tasks", schedule | {"handler_url": HOOK})
    assert status == 422
    assert problem["limit"] == "min_interval_seconds"
    assert call(limited, "POST", "/tasks", {"cron": "* * * * *", "handler_url": HOOK})[0] == 201


def test_payload_name_and_url_lengths_are_limited(limited: Dynacron) -> None:
    max_bytes = limited.settings.max_payload_bytes
    status, problem = call(
        limited,
        "POST",
        "/tasks",
        {"rate": "1 hour", "handler_url": HOOK, "payload": {"x": "a" * max_bytes}},
    )
    assert (status, problem["limit"]) == (413, "max_payload_bytes")
    status, problem = call(
        limited, "POST", "/tasks", {"rate": "1 hour", "handler_url": HOOK, "name": "n" * 201}
    )
    assert status == 422
    assert problem["errors"][0]["field"] == "name"
    status, problem = call(
        limited, "POST", "/tasks", {"rate": "1 hour", "handler_url": HOOK + "x" * 2048}
    )
    assert status == 422
    assert problem["errors"][0]["field"] == "handler_url"


def test_a_tenant_over_its_rate_gets_429_with_retry_after(
    limited: Dynacron, clock: SettableClock
) -> None:
    statuses = [call(limited, "GET", "/tasks")[0] for _ in range(51)]
    assert statuses[:50] == [200] * 50
    assert statuses[50] == 429
    problem = call(limited, "GET", "/tasks")[1]
    assert problem["limit"] == "tenant_rate_per_second"
    # another tenant is not slowed down by the first
    assert call(limited, "GET", "/tasks", principal="arn:aws:iam::000000000000:user/dan")[0] == 200
    clock.advance(timedelta(seconds=2))
    assert call(limited, "GET", "/tasks")[0] == 200


def test_a_batch_is_one_request_against_the_tenant_s_rate(limited: Dynacron) -> None:
    # Given a tenant whose rate admits a burst of 50 requests
    batch = {"tasks": [{"name": f"t{n}", "handler_url": HOOK} for n in range(10)]}
    # When it sends 50 batches of 10 items (each item refused: no schedule)
    answers = [call(limited, "POST", "/tasks/batch", batch) for _ in range(50)]
    # Then each batch took one token, not 10: all 50 were answered item by item
    assert [status for status, _ in answers] == [200] * 50
    assert {item["status"] for item in answers[-1][1]["items"]} == {422}
    # And the next request is over the rate (decision 0040: a batch is one request)
    assert call(limited, "POST", "/tasks/batch", batch)[0] == 429
