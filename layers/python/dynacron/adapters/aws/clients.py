"""How the deployed functions' AWS clients are configured."""

from __future__ import annotations

from typing import Protocol

from botocore.config import Config

# An asynchronous invoke answers 202 as soon as Lambda has queued the event; a
# tick that cannot hand a page out within seconds claims it itself.
CLAIM_INVOKE_CONFIG = Config(
    connect_timeout=2, read_timeout=5, retries={"max_attempts": 2, "mode": "standard"}
)


class TickConcurrency(Protocol):
    """How many calls a tick issues at once (``Settings`` has it)."""

    @property
    def tick_concurrency(self) -> int: ...


def aws_client_config(settings: TickConcurrency) -> Config:
    """A pooled connection for every tick thread.

    botocore pools 10 connections by default; the tick issues up to
    ``tick_concurrency`` calls at once, and each call beyond the pool would open
    a new TLS connection and drop it afterwards.
    """
    return Config(max_pool_connections=max(10, settings.tick_concurrency))
