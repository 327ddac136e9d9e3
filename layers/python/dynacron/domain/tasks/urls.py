"""Which handler URLs dynacron may call.

A scheduler that POSTs to URLs its users give it must not become a way into the
network it runs in. The policy is checked at registration and again at delivery,
against the addresses the host name resolves to.

"Public" means global unicast, and none of the IPv6 ranges that carry or
translate an IPv4 address (NAT64, 6to4, Teredo, IPv4-compatible and -mapped):
a gateway on the way would turn ``64:ff9b::a00:1`` into ``10.0.0.1``, and Python's
``is_global`` calls several of them global. A URL is ASCII: an internationalised
host name is written in its ``xn--`` form.

Private networks (decision 0050): an operator whose workers run in their VPC may
name private ranges a handler URL may reach, for the stack (the ceiling) and per
tenant (a grant inside it, never overlapping another tenant's). Link-local
addresses and the instance metadata service stay refused whatever range covers
them, and every other check (pinned addresses, redirects re-checked) holds.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from dynacron.domain.errors import InvalidRequest

MAX_URL_LENGTH = 2048
IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
# IPv6 ranges that embed an IPv4 address or tunnel to one, or are deprecated
# site-local: never "public", whatever the address inside.
TRANSLATION_NETWORKS = tuple(
    ipaddress.IPv6Network(net)
    for net in (
        "::/96",  # IPv4-compatible (::a.b.c.d), RFC 4291 (deprecated)
        "::ffff:0:0/96",  # IPv4-mapped, RFC 4291
        "::ffff:0:0:0/96",  # IPv4-translated, RFC 2765
        "64:ff9b::/96",  # NAT64 well-known prefix, RFC 6052
        "64:ff9b:1::/48",  # NAT64 local-use prefix, RFC 8215
        "2001::/32",  # Teredo, RFC 4380
        "2002::/16",  # 6to4, RFC 3056
        "fec0::/10",  # site-local, RFC 3879 (deprecated)
    )
)
# Never a destination, whatever range an operator allows: link-local (where the
# instance metadata and ECS/Lambda credential endpoints live, 169.254.169.254 and
# 169.254.170.2) and the metadata service's IPv6 address, which sits in fc00::/7.
ALWAYS_REFUSED_NETWORKS: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = (
    ipaddress.IPv4Network("169.254.0.0/16"),
    ipaddress.IPv6Network("fe80::/10"),
    ipaddress.IPv6Network("fd00:ec2::254/128"),
)
PRIVATE_NETWORKS_FIELD = "private_networks"
# The most ranges a stack or a tenant may name (each is tested at every delivery).
MAX_PRIVATE_NETWORKS = 32


@dataclass(frozen=True)
class UrlPolicy:
    """``allow_networks`` empty: public addresses, and those in ``private_networks``.
    Otherwise (tests, local mode): only the ``allow_networks``. Either way never an
    address of ``ALWAYS_REFUSED_NETWORKS``."""

    allow_networks: tuple[str, ...] = ()
    private_networks: tuple[str, ...] = ()

    def check_url(self, url: str) -> tuple[str, int]:
        """Validate the form of ``url``; returns its host and port."""
        if len(url) > MAX_URL_LENGTH:
            raise InvalidRequest("handler_url", f"is longer than {MAX_URL_LENGTH} characters")
        if not url.isascii():
            raise InvalidRequest(
                "handler_url",
                "must be ASCII: percent-encode the path and write an international "
                "host name in its 'xn--' form",
            )
        if any(c.isspace() or not c.isprintable() for c in url):
            raise InvalidRequest("handler_url", "must not contain whitespace or control characters")
        try:
            parts = urlsplit(url)
        except ValueError:  # an unbalanced '[' in the host, for one
            raise InvalidRequest("handler_url", f"{url!r} is not a valid URL") from None
        if parts.scheme not in ("http", "https"):
            raise InvalidRequest("handler_url", f"must be an http:// or https:// URL, not {url!r}")
        if not parts.hostname:
            raise InvalidRequest("handler_url", f"{url!r} has no host")
        if parts.username or parts.password:
            raise InvalidRequest("handler_url", "must not carry credentials")
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            raise InvalidRequest("handler_url", f"{url!r} has an invalid port") from None
        return parts.hostname, port

    def literal_address(self, host: str) -> IpAddress | None:
        """``host`` as an IP address if it is one written out; None for a name."""
        try:
            return ipaddress.ip_address(host)
        except ValueError:
            return None

    def allows(self, address: IpAddress) -> bool:
        """Whether delivery may connect to ``address``: one of ``allow_networks`` if any
        are given; otherwise one of ``private_networks``, or a global unicast address
        outside ``TRANSLATION_NETWORKS``; never one of ``ALWAYS_REFUSED_NETWORKS``."""
        if any(address in net for net in ALWAYS_REFUSED_NETWORKS):
            return False
        if self.allow_networks:
            return any(address in net for net in _networks(self.allow_networks))
        if self.private_networks and any(
            address in net for net in _networks(self.private_networks)
        ):
            return True
        if isinstance(address, ipaddress.IPv6Address) and any(
            address in net for net in TRANSLATION_NETWORKS
        ):
            return False
        return address.is_global and not address.is_multicast

    def check_host(self, host: str) -> None:
        """Refuse a host that is, or may only be, outside the policy without resolving it."""
        address = self.literal_address(host)
        if address is not None:
            if not self.allows(address):
                raise InvalidRequest(
                    "handler_url", f"address {address} is not allowed for delivery"
                )
        elif self.allow_networks and host.lower() != "localhost":
            raise InvalidRequest(
                "handler_url",
                f"host {host!r} is not allowed here; this deployment delivers only to "
                f"{', '.join(self.allow_networks)} (use an IP address or 'localhost')",
            )


def parse_private_networks(
    cidrs: Iterable[str], *, field: str = PRIVATE_NETWORKS_FIELD
) -> tuple[str, ...]:
    """Ranges an operator names, checked and written canonically (``10.1.0.0/16``).

    Each must be a network address (no host bits) inside the private ranges (RFC
    1918, shared 100.64.0.0/10, IPv6 unique-local): a public range needs no grant,
    and loopback, link-local, multicast and unspecified are never a service's."""
    parsed: list[str] = []
    for text in (c.strip() for c in cidrs):
        if not text:
            continue
        try:
            network = ipaddress.ip_network(text)
        except ValueError as error:
            raise InvalidRequest(field, f"{text!r} is not a CIDR range: {error}") from None
        if not _is_private_range(network):
            raise InvalidRequest(
                field,
                f"{text} is not a private range (10.0.0.0/8, 172.16.0.0/12, "
                "192.168.0.0/16, 100.64.0.0/10 or fc00::/7, link-local and the "
                "metadata address excluded)",
            )
        if str(network) not in parsed:
            parsed.append(str(network))
    if len(parsed) > MAX_PRIVATE_NETWORKS:
        raise InvalidRequest(field, f"names more than {MAX_PRIVATE_NETWORKS} ranges")
    return tuple(parsed)


def check_tenant_grant(
    grant: tuple[str, ...],
    stack: tuple[str, ...],
    other_grants: Mapping[str, tuple[str, ...]],
) -> tuple[str, ...]:
    """``grant`` (already parsed) if each range lies inside one of the ``stack``'s and
    overlaps no other tenant's grant (``other_grants``: tenant -> its ranges)."""
    stack_networks = _networks(stack)
    for text in grant:
        network = ipaddress.ip_network(text)
        if not any(_within(network, outer) for outer in stack_networks):
            allowed = ", ".join(stack) or "none: the stack names no private networks"
            raise InvalidRequest(
                PRIVATE_NETWORKS_FIELD,
                f"{text} is not inside the stack's private networks ({allowed})",
            )
        for tenant_id, ranges in sorted(other_grants.items()):
            for other in _networks(ranges):
                if network.version == other.version and network.overlaps(other):
                    raise InvalidRequest(
                        PRIVATE_NETWORKS_FIELD,
                        f"{text} overlaps {other}, granted to tenant {tenant_id!r}",
                    )
    return grant


def tenant_private_networks(grant: tuple[str, ...], stack: tuple[str, ...]) -> tuple[str, ...]:
    """What a tenant reaches at delivery: its grant's ranges that still lie inside
    the stack's (a stack setting narrowed since the grant narrows it too)."""
    stack_networks = _networks(stack)
    return tuple(
        text
        for text in grant
        if any(_within(ipaddress.ip_network(text), outer) for outer in stack_networks)
    )


def _within(
    network: ipaddress.IPv4Network | ipaddress.IPv6Network,
    outer: ipaddress.IPv4Network | ipaddress.IPv6Network,
) -> bool:
    return network.version == outer.version and network.subnet_of(outer)  # type: ignore[arg-type]


_PRIVATE_RANGES = tuple(
    ipaddress.ip_network(net)
    for net in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fc00::/7")
)


def _is_private_range(network: ipaddress.IPv4Network | ipaddress.IPv6Network) -> bool:
    # A unique-local range may hold the metadata address: it is named all the same,
    # and that one address stays refused (``UrlPolicy.allows``).
    return any(_within(network, outer) for outer in _PRIVATE_RANGES)


@functools.lru_cache(maxsize=16)
def _networks(
    allow_networks: tuple[str, ...],
) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    """``allow_networks`` parsed, once per policy rather than at every delivery."""
    return tuple(ipaddress.ip_network(net) for net in allow_networks)
