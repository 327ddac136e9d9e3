"""The Python client of dynacron's HTTP API (what ``dynacron.Client`` names)."""

from dynacron.client.api_client import ApiError, ApiUnreachable, Client, SigV4Auth

__all__ = ["ApiError", "ApiUnreachable", "Client", "SigV4Auth"]
