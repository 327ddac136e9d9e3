"""dynacron: a serverless, distributed task scheduler for AWS."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dynacron.adapters.delivery.registry import ExecutionContext, PermanentFailure, handler
from dynacron.version import __version__

__all__ = ["Client", "ExecutionContext", "PermanentFailure", "__version__", "handler"]

if TYPE_CHECKING:
    from dynacron.client.api_client import Client


def __getattr__(name: str) -> Any:
    # Imported on first use: the Lambda functions never pay for the client.
    if name == "Client":
        from dynacron.client.api_client import Client

        return Client
    raise AttributeError(f"module 'dynacron' has no attribute {name!r}")
