"""Who is calling: the tenant of a request, derived once at the edge from its identity."""

from __future__ import annotations

import hmac
from collections.abc import Sequence
from typing import Any

from dynacron.domain.errors import Unauthenticated

API_KEY_HEADER = "x-api-key"


def tenant_of_principal(arn: str) -> str:
    """An IAM principal as a tenant: an assumed role's sessions are all one tenant.

    ``arn:aws:sts::123456789012:assumed-role/Deployer/session-7`` is the role
    ``arn:aws:iam::123456789012:role/Deployer``; a user's ARN is itself.
    """
    prefix, _, resource = arn.partition(":assumed-role/")
    parts = prefix.split(":")
    if resource and len(parts) == 5 and parts[0] == "arn" and parts[2] == "sts":
        role = resource.split("/")[0]
        return f"arn:{parts[1]}:iam::{parts[4]}:role/{role}"
    return arn


def caller_of(event: dict[str, Any], tenant: str, *, api_keys: bool) -> str:
    """Who a change is recorded as made by (decision 0054): the API key's ``tenant``
    where keys are configured (``api_keys``) and the request carries one, else the
    IAM principal as it signed (an assumed role's session too), else ``tenant``
    (local mode's default). A key header where none are configured is ignored, as
    ``tenant_of`` ignores it: it names no one."""
    headers = {k.lower(): v for k, v in (event.get("headers") or {}).items()}
    if api_keys and headers.get(API_KEY_HEADER):
        return tenant
    identity = (event.get("requestContext") or {}).get("identity") or {}
    principal = identity.get("userArn") or identity.get("caller")
    return str(principal) if principal else tenant


def tenant_of(
    event: dict[str, Any],
    api_keys: Sequence[tuple[str, str]],
    default_tenant: str | None,
) -> str:
    """The caller's tenant: an API key's, else the IAM principal's, else the default.

    Raises ``Unauthenticated`` for an unknown key, or for no identity where
    there is no default tenant.
    """
    headers = {k.lower(): v for k, v in (event.get("headers") or {}).items()}
    key = headers.get(API_KEY_HEADER)
    if key and api_keys:
        for known, tenant in api_keys:
            # Compared in constant time: a key is a password.
            if hmac.compare_digest(known.encode(), key.encode()):
                return tenant
        raise Unauthenticated("the API key is not known here")
    identity = (event.get("requestContext") or {}).get("identity") or {}
    principal = identity.get("userArn") or identity.get("caller")
    if principal:
        return tenant_of_principal(str(principal))
    if default_tenant is not None and not api_keys:
        return default_tenant
    raise Unauthenticated(
        f"send an '{API_KEY_HEADER}' header" if api_keys else "sign the request with IAM (SigV4)"
    )
