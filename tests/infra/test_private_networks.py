"""The worker in the operator's VPC, and the private ranges every function is told
of (decision 0050): from context ids, with no lookup and no account."""

from __future__ import annotations

from typing import Any

import pytest

from dynacron.definitions.environment import PRIVATE_NETWORKS_VAR
from dynacron.domain.errors import InvalidRequest
from dynacron.domain.tasks.urls import parse_private_networks
from infra.config import SchedulerConfig
from tests.infra.conftest import USER_SECURITY_GROUP, USER_SUBNETS, resources_of


def _functions(template: dict[str, Any], part: str) -> list[dict[str, Any]]:
    return [
        props
        for logical_id, props in resources_of(template, "AWS::Lambda::Function").items()
        if part in logical_id
    ]


def test_the_worker_runs_in_the_subnets_and_security_group_given(
    user_template: dict[str, Any],
) -> None:
    (worker,) = _functions(user_template, "WorkerFunction")
    vpc = worker["VpcConfig"]
    assert sorted(vpc["SubnetIds"]) == sorted(USER_SUBNETS)
    assert vpc["SecurityGroupIds"] == [USER_SECURITY_GROUP]
    # Told of the ranges, canonical, as the API is (registration checks a grant too).
    (api,) = _functions(user_template, "ApiFunction")
    for function in (worker, api):
        variables = function["Environment"]["Variables"]
        assert variables[PRIVATE_NETWORKS_VAR] == "10.20.0.0/16,fd12:3456::/48"


def test_only_the_worker_is_placed_in_the_vpc(user_template: dict[str, Any]) -> None:
    placed = [
        logical_id
        for logical_id, props in resources_of(user_template, "AWS::Lambda::Function").items()
        if "VpcConfig" in props
    ]
    (only,) = placed
    assert only.startswith("SchedulerWorkerFunction"), placed


def test_the_default_stack_has_no_vpc_and_no_private_networks(template: dict[str, Any]) -> None:
    for props in resources_of(template, "AWS::Lambda::Function").values():
        assert "VpcConfig" not in props
        assert PRIVATE_NETWORKS_VAR not in props.get("Environment", {}).get("Variables", {})


@pytest.mark.parametrize(
    ("context", "refused"),
    [
        ({"private_networks": "8.8.8.0/24"}, "not inside a private range"),
        ({"private_networks": "10.0.0.0/33"}, "private_networks"),
        ({"private_networks": "127.0.0.0/8"}, "not inside a private range"),
        ({"private_networks": "169.254.0.0/16"}, "not inside a private range"),
        ({"worker_vpc_id": "vpc-1"}, "worker_subnet_ids"),
    ],
)
def test_context_that_cannot_be_deployed_is_refused(context: dict[str, str], refused: str) -> None:
    with pytest.raises(ValueError, match=refused):
        SchedulerConfig(**context)  # type: ignore[arg-type]


def test_the_worker_role_may_manage_its_network_interfaces(user_template: dict[str, Any]) -> None:
    # Without it Lambda refuses to create the function in the VPC.
    (role,) = [
        props
        for logical_id, props in resources_of(user_template, "AWS::IAM::Role").items()
        if "WorkerFunctionRole" in logical_id
    ]
    (policy,) = role["ManagedPolicyArns"]
    assert "service-role/AWSLambdaVPCAccessExecutionRole" in str(policy)


@pytest.mark.parametrize(
    "cidr", ["10.0.0.0/8", "100.64.0.0/10", "fc00::/7", "8.8.8.0/24", "127.0.0.0/8", "fe80::/64"]
)
def test_the_cdk_context_and_the_runtime_agree_on_what_is_private(cidr: str) -> None:
    try:
        parse_private_networks([cidr])
        runtime_accepts = True
    except InvalidRequest:
        runtime_accepts = False
    try:
        SchedulerConfig(private_networks=cidr)
        context_accepts = True
    except ValueError:
        context_accepts = False
    assert runtime_accepts == context_accepts
