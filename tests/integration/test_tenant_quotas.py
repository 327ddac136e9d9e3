"""Limits per tenant: an operator's task limit and request rate for one tenant,
falling back to the deployment's defaults, shown by ``GET /tenant``; on DynamoDB
(moto) and on SQLite (local mode's store), set as ``dynacron tenants set-limits``
sets them."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from typer.testing import CliRunner

from dynacron.cli.main import app
from dynacron.domain.clock import SettableClock
from dynacron.domain.coordination.quotas import RATE_REFRESH
from dynacron.domain.coordination.tenants import MAX_TENANT_TASKS, TenantQuota
from dynacron.entry.composition import Dynacron
from tests.integration.api_client import ALICE, call
from tests.integration.conftest import Build

HOOK = "http://127.0.0.1:9/hook"
BOB = "arn:aws:iam::000000000000:user/bob"
TASK = {"rate": "1 hour", "handler_url": HOOK}


def tenant(system: Dynacron, principal: str = ALICE) -> dict[str, Any]:
    status, shown = call(system, "GET", "/tenant", principal=principal)
    assert status == 200, shown
    return dict(shown)


def test_a_tenant_s_own_task_limit_holds_for_it_alone(build: Build) -> None:
    system = build(max_tasks_per_tenant=5, tenant_rate_per_second=0)
    alice = tenant(system)["tenant_id"]
    bob = tenant(system, BOB)["tenant_id"]
    # Given an operator's limit of 2 tasks for alice (the default is 5)
    system.task_service.set_quota(alice, TenantQuota(max_tasks=2))
    # Then alice may hold 2, and her third is refused naming the limit
    for _ in range(2):
        assert call(system, "POST", "/tasks", TASK)[0] == 201
    status, problem = call(system, "POST", "/tasks", TASK)
    assert (status, problem["limit"]) == (422, "max_tasks_per_tenant")
    assert "already has 2 tasks" in problem["detail"]
    # And a batch too
    status, answer = call(system, "POST", "/tasks/batch", {"tasks": [TASK, TASK]})
    assert (status, answer["created"]) == (200, 0)
    # While bob keeps the default
    status, answer = call(system, "POST", "/tasks/batch", {"tasks": [TASK] * 6}, principal=BOB)
    assert answer["created"] == 5
    # And GET /tenant shows each one's count and the limits it is held to
    shown = tenant(system)
    assert (shown["task_count"], shown["max_tasks"], shown["own_limits"]) == (2, 2, ["max_tasks"])
    shown = tenant(system, BOB)
    assert (shown["task_count"], shown["max_tasks"], shown["own_limits"]) == (5, 5, [])
    # Raised for bob, he may go on; lowered under alice's count, she keeps her tasks
    system.task_service.set_quota(bob, TenantQuota(max_tasks=7))
    assert call(system, "POST", "/tasks", TASK, principal=BOB)[0] == 201
    system.task_service.set_quota(alice, TenantQuota(max_tasks=1))
    assert tenant(system)["task_count"] == 2
    assert call(system, "POST", "/tasks", TASK)[0] == 422
    # Back to the default, alice may hold 5 again
    system.task_service.set_quota(alice, TenantQuota())
    assert call(system, "POST", "/tasks", TASK)[0] == 201
    assert (tenant(system)["max_tasks"], tenant(system)["own_limits"]) == (5, [])


def test_an_operator_may_let_one_tenant_reach_ten_million(build: Build) -> None:
    system = build(max_tasks_per_tenant=1, tenant_rate_per_second=0)
    alice = tenant(system)["tenant_id"]
    assert call(system, "POST", "/tasks", TASK)[0] == 201
    assert call(system, "POST", "/tasks", TASK)[0] == 422
    system.task_service.set_quota(alice, TenantQuota(max_tasks=MAX_TENANT_TASKS))
    status, answer = call(system, "POST", "/tasks/batch", {"tasks": [TASK] * 20})
    assert (status, answer["created"]) == (200, 20)
    assert tenant(system)["max_tasks"] == 10_000_000
    with pytest.raises(ValueError, match="10,000,000"):
        TenantQuota(max_tasks=MAX_TENANT_TASKS + 1)


def test_a_tenant_s_own_rate_holds_for_it_alone(build: Build, clock: SettableClock) -> None:
    system = build(tenant_rate_per_second=1.0, tenant_rate_burst=3)
    alice = tenant(system)["tenant_id"]
    # Given a rate of 100 a second for alice (the default is 1)
    system.task_service.set_quota(alice, TenantQuota(rate_per_second=100))
    # (once an instance's read of her rate is older than RATE_REFRESH)
    clock.advance(RATE_REFRESH)

    def paced(principal: str) -> list[int]:
        """12 requests 50 ms apart: 20 a second."""
        answers = []
        for _ in range(12):
            answers.append(call(system, "GET", "/tasks", principal=principal)[0])
            clock.advance(timedelta(milliseconds=50))
        return answers

    # Then alice may send 20 a second, and bob is throttled after his burst
    assert set(paced(ALICE)) == {200}
    assert paced(BOB)[3:] == [429] * 9
    shown = tenant(system)
    assert (shown["rate_per_second"], shown["own_limits"]) == (100, ["rate_per_second"])
    clock.advance(RATE_REFRESH)
    assert tenant(system, BOB)["rate_per_second"] == 1
    # And 0 is no limit at all
    system.task_service.set_quota(alice, TenantQuota(rate_per_second=0))
    clock.advance(RATE_REFRESH)
    assert {call(system, "GET", "/tasks")[0] for _ in range(20)} == {200}


def test_the_cli_sets_and_shows_a_tenant_s_limits_in_the_store(
    request: pytest.FixtureRequest, clock: SettableClock, tmp_path: Any
) -> None:
    # Local mode's store: the CLI writes the SQLite file of --data-dir
    embedded: Build = request.getfixturevalue("embedded")
    system = embedded(max_tasks_per_tenant=5, tenant_rate_per_second=0)
    alice = tenant(system)["tenant_id"]
    data_dir = str(tmp_path / "embedded-0")
    runner = CliRunner()

    def cli(*args: str) -> dict[str, Any]:
        result = runner.invoke(app, ["tenants", *args, "--data-dir", data_dir])
        assert result.exit_code == 0, result.output
        return dict(json.loads(result.stdout))

    shown = cli("set-limits", alice, "--max-tasks", "1", "--rate", "50")
    assert shown == {
        "tenant_id": alice,
        "task_count": 0,
        "max_tasks": 1,
        "rate_per_second": 50.0,
        "private_networks": [],
    }
    assert call(system, "POST", "/tasks", TASK)[0] == 201
    assert call(system, "POST", "/tasks", TASK)[0] == 422
    assert (tenant(system)["max_tasks"], tenant(system)["rate_per_second"]) == (1, 50.0)
    # A limit not given is kept; --default-... removes one
    assert cli("set-limits", alice, "--default-max-tasks")["max_tasks"] is None
    assert cli("show", alice) == {
        "tenant_id": alice,
        "task_count": 1,
        "max_tasks": None,
        "rate_per_second": 50.0,
        "private_networks": [],
    }
    assert call(system, "POST", "/tasks", TASK)[0] == 201
    # Refused: both a limit and its default, or no store named
    assert (
        runner.invoke(
            app,
            [
                "tenants",
                "set-limits",
                alice,
                "--rate",
                "1",
                "--default-rate",
                "--data-dir",
                data_dir,
            ],
        ).exit_code
        == 2
    )
    assert runner.invoke(app, ["tenants", "show", alice]).exit_code == 2
    assert (
        runner.invoke(
            app, ["tenants", "set-limits", alice, "--max-tasks", "10000001", "--data-dir", data_dir]
        ).exit_code
        == 2
    )


def test_the_cli_sets_a_tenant_s_limits_in_the_coordination_table(
    system: Dynacron,
) -> None:
    # Deployed: the CLI writes the coordination table with the operator's credentials
    alice = tenant(system)["tenant_id"]
    table = system.settings.coordination_table
    result = CliRunner().invoke(
        app,
        ["tenants", "set-limits", alice, "--max-tasks", "1", "--coordination-table", table],
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["max_tasks"] == 1
    assert call(system, "POST", "/tasks", TASK)[0] == 201
    assert call(system, "POST", "/tasks", TASK)[0] == 422
    assert tenant(system)["own_limits"] == ["max_tasks"]
