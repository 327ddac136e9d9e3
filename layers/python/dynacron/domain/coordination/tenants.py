"""Tenants: whose a task, an execution or a dead letter is."""

from __future__ import annotations

# The tenant of a caller without identity in local mode, and of records stored
# before tenants existed.
DEFAULT_TENANT = "default"
