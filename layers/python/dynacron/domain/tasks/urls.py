"""Which handler URLs dynacron may call.

A scheduler that POSTs to URLs its users give it must not become a way into the
network it runs in. The policy is checked at registration and again at delivery,
against the addresses the host name resolves to.

"Public" means global unicast, and none of the IPv6 ranges that carry or
translate an IPv4 address (NAT64, 6to4, Teredo, IPv4-compatible and -mapped):
a gateway on the way would turn ``64:ff9b::a00:1`` into ``10.0.0.1``, and Python's
``is_global`` calls several of them global. A URL is ASCII: an internationalised
host name is written in its ``xn--`` form.
"""

from __future__ import annotations

import functools
import ipaddress
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


@dataclass(frozen=True)
class UrlPolicy:
    """``allow_networks`` empty: only public addresses. Otherwise: only those networks."""

    allow_networks: tuple[str, ...] = ()

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
        are given; otherwise a global unicast address outside ``TRANSLATION_NETWORKS``."""
        if self.allow_networks:
            return any(address in net for net in _networks(self.allow_networks))
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


@functools.lru_cache(maxsize=16)
def _networks(
    allow_networks: tuple[str, ...],
) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    """``allow_networks`` parsed, once per policy rather than at every delivery."""
    return tuple(ipaddress.ip_network(net) for net in allow_networks)
