"""How the deployed functions' AWS clients are configured."""

from __future__ import annotations

from typing import Protocol

from botocore.config import Config

# An asynchronous invoke answers 202 as soon as Lambda has queued the event; a
# tick that cannot hand a page out within seconds claims it itself.
CLAIM_INVOKE_CONFIG = Config(
    connect_timeout=2, read_timeout=5, retries={"max_attempts": 2, "mode": "standard"}
)


class CallConcurrency(Protocol):
    """How many calls a tick, and a worker invocation, issue at once (``Settings`` has them)."""

    @property
    def tick_concurrency(self) -> int: ...

    @property
    def worker_concurrency(self) -> int: ...


def aws_client_config(settings: CallConcurrency) -> Config:
    """A pooled connection for every tick thread, and every record a worker runs at once.

    botocore pools 10 connections by default; the tick issues up to
    ``tick_concurrency`` calls at once, a worker one per record in flight and one
    for the heartbeats, and each call beyond the pool would open a new TLS
    connection and drop it afterwards.
    """
    return Config(
        max_pool_connections=max(10, settings.tick_concurrency, settings.worker_concurrency + 1)
    )
