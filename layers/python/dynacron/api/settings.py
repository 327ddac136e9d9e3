"""What the API reads of the settings: ``entry.settings.Settings`` has all of it.

Stated here as Protocols so that the API depends on no composition: the arrows
point from ``entry`` to ``api``, never back.
"""

from __future__ import annotations

from typing import Protocol

from dynacron.api.openapi import CallerIdentities


class TenantLimits(Protocol):
    """The limits a tenant is told of in ``GET /tenant``."""

    @property
    def max_tasks_per_tenant(self) -> int: ...
    @property
    def max_payload_bytes(self) -> int: ...
    @property
    def min_interval_seconds(self) -> int: ...


class ApiSettings(CallerIdentities, TenantLimits, Protocol):
    """Who callers are, and the limits a tenant is told of."""
