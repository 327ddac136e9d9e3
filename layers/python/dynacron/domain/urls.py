"""Which handler URLs dynacron may call.

A scheduler that POSTs to URLs its users give it must not become a way into the
network it runs in. The policy is checked at registration and again at delivery,
against the addresses the host name resolves to.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from urllib.parse import urlsplit

from dynacron.domain.errors import InvalidRequest

MAX_URL_LENGTH = 2048
IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True)
class UrlPolicy:
    """``allow_networks`` empty: only public addresses. Otherwise: only those networks."""

    allow_networks: tuple[str, ...] = ()

    def check_url(self, url: str) -> tuple[str, int]:
        """Validate the form of ``url``; returns its host and port."""
        if len(url) > MAX_URL_LENGTH:
            raise InvalidRequest("handler_url", f"is longer than {MAX_URL_LENGTH} characters")
        parts = urlsplit(url)
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
        try:
            return ipaddress.ip_address(host)
        except ValueError:
            return None

    def allows(self, address: IpAddress) -> bool:
        if self.allow_networks:
            return any(address in ipaddress.ip_network(net) for net in self.allow_networks)
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
