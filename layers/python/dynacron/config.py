"""Runtime settings, passed explicitly; ``from_env`` is the one place that reads them.

Nothing reads the environment at import time: the Lambda handlers call
``Settings.from_env`` on their first invocation, local mode builds Settings itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from dynacron.domain.tasks import Sharding
from dynacron.resources import COORDINATION, DISPATCH_QUEUE, EXECUTIONS, TASKS

SHARD_COUNT_VAR = "DYNACRON_SHARD_COUNT"
BUCKET_SECONDS_VAR = "DYNACRON_BUCKET_SECONDS"
ALLOW_NETWORKS_VAR = "DYNACRON_DELIVERY_ALLOW_NETWORKS"
HTTP_TIMEOUT_VAR = "DYNACRON_HTTP_TIMEOUT_SECONDS"
LOOPBACK_NETWORKS = ("127.0.0.0/8", "::1/128")


@dataclass(frozen=True)
class Settings:
    tasks_table: str
    executions_table: str
    coordination_table: str
    dispatch_queue_url: str
    shard_count: int = 4
    # Width of a due-index time bucket. Wide buckets mean few queries per tick;
    # the sort key bounds each query to what is due, so width never costs reads.
    bucket_seconds: int = 3600
    # Networks a handler URL may resolve into. Empty means "public addresses only"
    # (the deployed default); local mode sets loopback only.
    delivery_allow_networks: tuple[str, ...] = ()
    http_timeout_seconds: float = 10.0
    max_payload_bytes: int = 32 * 1024
    # How far back a shard with no cursor yet starts looking for due items.
    initial_lookback_seconds: int = 7 * 24 * 3600
    # An old bucket is only left behind once it ended this long ago, so that
    # an index write still propagating (GSIs are eventually consistent) or a
    # writer whose clock lags is not skipped.
    cursor_grace_seconds: int = 120
    tick_page_size: int = 100
    tick_max_claims: int = 2000
    # Claims (and sends) of one page are issued from this many threads: each is
    # a round trip of ~10 ms to DynamoDB, so one at a time caps a shard near
    # 100 claims/s. Distinct tasks, distinct items: no claim waits on another.
    tick_concurrency: int = 16
    # An occurrence claimed later than this was missed; each task's catch-up
    # policy decides what happens to it.
    misfire_grace_seconds: int = 60

    @property
    def sharding(self) -> Sharding:
        return Sharding(shard_count=self.shard_count, bucket_seconds=self.bucket_seconds)

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Settings:
        networks = environ.get(ALLOW_NETWORKS_VAR, "")
        return cls(
            tasks_table=environ[TASKS.env_var],
            executions_table=environ[EXECUTIONS.env_var],
            coordination_table=environ[COORDINATION.env_var],
            dispatch_queue_url=environ[DISPATCH_QUEUE.env_var],
            shard_count=int(environ.get(SHARD_COUNT_VAR, cls.shard_count)),
            bucket_seconds=int(environ.get(BUCKET_SECONDS_VAR, cls.bucket_seconds)),
            delivery_allow_networks=tuple(n.strip() for n in networks.split(",") if n.strip()),
            http_timeout_seconds=float(environ.get(HTTP_TIMEOUT_VAR, cls.http_timeout_seconds)),
        )

    def to_env(self) -> dict[str, str]:
        """The environment that makes ``from_env`` return these settings."""
        return {
            TASKS.env_var: self.tasks_table,
            EXECUTIONS.env_var: self.executions_table,
            COORDINATION.env_var: self.coordination_table,
            DISPATCH_QUEUE.env_var: self.dispatch_queue_url,
            SHARD_COUNT_VAR: str(self.shard_count),
            BUCKET_SECONDS_VAR: str(self.bucket_seconds),
            ALLOW_NETWORKS_VAR: ",".join(self.delivery_allow_networks),
            HTTP_TIMEOUT_VAR: str(self.http_timeout_seconds),
        }
