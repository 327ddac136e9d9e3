from __future__ import annotations

import ipaddress

import pytest

from dynacron.domain.errors import InvalidRequest
from dynacron.domain.tasks.urls import UrlPolicy
from dynacron.entry.settings import LOOPBACK_NETWORKS

LOCAL = UrlPolicy(LOOPBACK_NETWORKS)
DEPLOYED = UrlPolicy()


@pytest.mark.parametrize(
    "url", ["ftp://127.0.0.1/x", "127.0.0.1:8080/hook", "http://", "http://u:p@127.0.0.1/"]
)
def test_malformed_urls_are_refused(url: str) -> None:
    with pytest.raises(InvalidRequest) as raised:
        LOCAL.check_url(url)
    assert raised.value.field == "handler_url"


def test_overlong_url_is_refused() -> None:
    with pytest.raises(InvalidRequest, match="longer than"):
        LOCAL.check_url("http://127.0.0.1/" + "a" * 3000)


@pytest.mark.parametrize("host", ["127.0.0.1", "127.3.4.5", "::1", "localhost"])
def test_local_mode_allows_loopback(host: str) -> None:
    LOCAL.check_host(host)


@pytest.mark.parametrize("host", ["10.0.0.1", "169.254.169.254", "192.168.1.1", "8.8.8.8"])
def test_local_mode_refuses_other_addresses(host: str) -> None:
    with pytest.raises(InvalidRequest, match="not allowed"):
        LOCAL.check_host(host)


def test_local_mode_refuses_names_without_resolving_them() -> None:
    with pytest.raises(InvalidRequest, match="not allowed here"):
        LOCAL.check_host("hooks.invalid")


@pytest.mark.parametrize(
    "address", ["127.0.0.1", "10.0.0.1", "169.254.169.254", "::1", "fd00::1", "224.0.0.1"]
)
def test_deployed_policy_refuses_non_public_addresses(address: str) -> None:
    assert not DEPLOYED.allows(ipaddress.ip_address(address))


def test_deployed_policy_allows_public_addresses() -> None:
    assert DEPLOYED.allows(ipaddress.ip_address("93.184.216.34"))
