"""Private networks (decision 0050): which ranges an operator may name, what a
tenant's grant may be, and which addresses a policy with private ranges allows."""

from __future__ import annotations

import ipaddress

import pytest

from dynacron.domain.coordination.tenants import TenantQuota
from dynacron.domain.errors import InvalidRequest
from dynacron.domain.tasks.urls import (
    PRIVATE_NETWORKS_FIELD,
    UrlPolicy,
    check_tenant_grant,
    parse_private_networks,
    tenant_private_networks,
)

STACK = ("10.0.0.0/8", "fd12:3456::/32")
GRANTED = UrlPolicy(private_networks=("10.1.0.0/16", "fd12:3456:1::/48"))


@pytest.mark.parametrize(
    "address",
    ["10.1.0.1", "10.1.255.254", "fd12:3456:1::5", "8.8.8.8", "2606:4700::1111"],
)
def test_a_granted_range_and_public_addresses_are_allowed(address: str) -> None:
    assert GRANTED.allows(ipaddress.ip_address(address))


@pytest.mark.parametrize(
    "address",
    [
        "10.2.0.1",  # private, outside the grant
        "192.168.0.1",
        "127.0.0.1",
        "169.254.169.254",  # instance metadata
        "169.254.170.2",  # ECS task credentials
        "fe80::1",
        "fd00:ec2::254",  # the metadata service's IPv6 address
        "::ffff:10.1.0.1",  # the granted range, mapped into IPv6: never
    ],
)
def test_everything_else_stays_refused(address: str) -> None:
    assert not GRANTED.allows(ipaddress.ip_address(address))


def test_the_metadata_address_is_refused_even_inside_a_granted_range() -> None:
    covering = UrlPolicy(private_networks=("fd00::/8",))
    assert covering.allows(ipaddress.ip_address("fd00:ec2::253"))
    assert not covering.allows(ipaddress.ip_address("fd00:ec2::254"))
    # And in tests' and local mode's allow-list as well.
    everything = UrlPolicy(allow_networks=("0.0.0.0/0",))
    assert not everything.allows(ipaddress.ip_address("169.254.169.254"))


def test_a_literal_private_address_passes_the_host_check_only_when_granted() -> None:
    GRANTED.check_host("10.1.2.3")
    with pytest.raises(InvalidRequest, match="not allowed"):
        UrlPolicy().check_host("10.1.2.3")


def test_ranges_are_parsed_canonically_and_deduplicated() -> None:
    assert parse_private_networks([" 10.1.0.0/16", "", "FD12:3456::/32", "10.1.0.0/16"]) == (
        "10.1.0.0/16",
        "fd12:3456::/32",
    )


@pytest.mark.parametrize(
    ("cidr", "why"),
    [
        ("8.8.8.0/24", "not a private range"),
        ("127.0.0.0/8", "not a private range"),
        ("169.254.0.0/16", "not a private range"),
        ("0.0.0.0/0", "not a private range"),
        ("fe80::/10", "not a private range"),
        ("10.0.0.1/8", "not a CIDR range"),  # host bits set
        ("10.0.0.0/33", "not a CIDR range"),
        ("ten", "not a CIDR range"),
    ],
)
def test_a_range_that_is_not_private_is_refused_naming_the_field(cidr: str, why: str) -> None:
    with pytest.raises(InvalidRequest, match=why) as raised:
        parse_private_networks([cidr])
    assert raised.value.field == PRIVATE_NETWORKS_FIELD


def test_a_grant_must_lie_inside_the_stacks_ranges() -> None:
    assert check_tenant_grant(("10.1.0.0/16",), STACK, {}) == ("10.1.0.0/16",)
    with pytest.raises(InvalidRequest, match="not inside the stack's"):
        check_tenant_grant(("192.168.0.0/24",), STACK, {})
    with pytest.raises(InvalidRequest, match="not inside the stack's"):
        check_tenant_grant(("10.1.0.0/16",), (), {})


def test_a_grant_never_overlaps_another_tenants() -> None:
    others = {"bob": ("10.1.128.0/17",)}
    with pytest.raises(InvalidRequest, match="granted to tenant 'bob'"):
        check_tenant_grant(("10.1.0.0/16",), STACK, others)  # holds bob's
    with pytest.raises(InvalidRequest, match="granted to tenant 'bob'"):
        check_tenant_grant(("10.1.200.0/24",), STACK, others)  # inside bob's
    assert check_tenant_grant(("10.2.0.0/16",), STACK, others) == ("10.2.0.0/16",)


def test_at_delivery_a_grant_is_narrowed_to_the_stacks_ranges_of_now() -> None:
    grant = ("10.1.0.0/16", "172.16.0.0/24")
    assert tenant_private_networks(grant, ("10.0.0.0/8",)) == ("10.1.0.0/16",)
    assert tenant_private_networks(grant, ()) == ()
    quota = TenantQuota(private_networks=grant).effective(10, 1.0, ("172.16.0.0/12",))
    assert quota.private_networks == ("172.16.0.0/24",)
