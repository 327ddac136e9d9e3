"""An operator's private-network grants (decision 0050): set with `dynacron tenants
set-limits --private-networks`, kept on the tenant's record in DynamoDB (moto) and
in local mode's SQLite file, checked against the stack's ranges and every other
tenant's grant, and shown by `GET /tenant`."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from typer.testing import CliRunner

from dynacron.cli.main import app
from dynacron.definitions.environment import PRIVATE_NETWORKS_VAR
from dynacron.domain.coordination.tenants import TenantQuota
from dynacron.entry.composition import Dynacron
from tests.integration.api_client import ALICE, call
from tests.integration.conftest import Build

BOB = "arn:aws:iam::000000000000:user/bob"
STACK = "10.0.0.0/8,fd12:3456::/32"


@pytest.fixture(params=["dynamodb", "sqlite"])
def operator(request: pytest.FixtureRequest, tmp_path: Any) -> tuple[Dynacron, Callable[..., Any]]:
    """A system on one store, and the CLI pointed at that store."""
    if request.param == "sqlite":
        embedded: Build = request.getfixturevalue("embedded")
        system = embedded()
        store = ["--data-dir", str(tmp_path / "embedded-0")]
    else:
        system = request.getfixturevalue("system")
        store = ["--coordination-table", system.settings.coordination_table]
    runner = CliRunner()

    def cli(*args: str) -> Any:
        return runner.invoke(app, ["tenants", *args, *store], env={PRIVATE_NETWORKS_VAR: STACK})

    return system, cli


def test_a_grant_is_kept_shown_and_removed(operator: tuple[Dynacron, Callable[..., Any]]) -> None:
    system, cli = operator
    # When an operator grants alice two ranges inside the stack's
    result = cli("set-limits", ALICE, "--private-networks", "10.1.0.0/16, fd12:3456:1::/48")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["private_networks"] == ["10.1.0.0/16", "fd12:3456:1::/48"]
    # Then the store keeps them beside her other limits, which stay as they were
    assert system.tenants.quota(ALICE) == TenantQuota(
        private_networks=("10.1.0.0/16", "fd12:3456:1::/48")
    )
    assert cli("set-limits", ALICE, "--max-tasks", "3").exit_code == 0
    assert system.tenants.quota(ALICE).private_networks == ("10.1.0.0/16", "fd12:3456:1::/48")
    assert system.tenants.private_grants() == {ALICE: ("10.1.0.0/16", "fd12:3456:1::/48")}
    # And an empty list removes them, keeping the task limit
    assert cli("set-limits", ALICE, "--private-networks", "").exit_code == 0
    assert system.tenants.quota(ALICE) == TenantQuota(max_tasks=3)
    assert system.tenants.private_grants() == {}


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("10.1.128.0/24", "overlaps 10.1.0.0/16, granted to tenant"),
        ("10.0.0.0/8", "overlaps 10.1.0.0/16, granted to tenant"),
        ("192.168.0.0/24", "is not inside the stack's private networks"),
        ("8.8.8.0/24", "is not a private range"),
        ("10.2.0.1/16", "is not a CIDR range"),
    ],
)
def test_a_grant_that_is_not_the_operator_s_to_give_is_refused(
    operator: tuple[Dynacron, Callable[..., Any]], given: str, said: str
) -> None:
    system, cli = operator
    assert cli("set-limits", ALICE, "--private-networks", "10.1.0.0/16").exit_code == 0
    # When bob is given a range that overlaps alice's, or lies outside the stack's
    result = cli("set-limits", BOB, "--private-networks", given)
    # Then it is refused, saying why, and nothing is written
    assert result.exit_code == 2
    assert said in " ".join(result.output.split()), result.output
    assert system.tenants.quota(BOB) == TenantQuota()
    # While alice may change her own grant over her own range
    assert cli("set-limits", ALICE, "--private-networks", "10.1.0.0/17").exit_code == 0


def test_get_tenant_shows_only_the_grant_inside_the_stack_s_ranges(build: Build) -> None:
    system = build(delivery_private_networks=("10.0.0.0/8",))
    system.tenants.set_quota(ALICE, TenantQuota(private_networks=("10.1.0.0/16", "172.16.0.0/24")))
    status, tenant = call(system, "GET", "/tenant")
    assert status == 200, tenant
    assert tenant["private_networks"] == ["10.1.0.0/16"]
    status, bob = call(system, "GET", "/tenant", principal=BOB)
    assert bob["private_networks"] == []
