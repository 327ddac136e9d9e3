"""Runtime settings, passed explicitly; ``from_env`` is the one place that reads them.

Nothing reads the environment at import time: the Lambda handlers call
``Settings.from_env`` on their first invocation, local mode builds Settings itself.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass

from dynacron.domain.tasks import DEFAULT_TENANT, Sharding
from dynacron.resources import COORDINATION, DISPATCH_QUEUE, EXECUTIONS, TASKS

SHARD_COUNT_VAR = "DYNACRON_SHARD_COUNT"
BUCKET_SECONDS_VAR = "DYNACRON_BUCKET_SECONDS"
ALLOW_NETWORKS_VAR = "DYNACRON_DELIVERY_ALLOW_NETWORKS"
HTTP_TIMEOUT_VAR = "DYNACRON_HTTP_TIMEOUT_SECONDS"
API_KEYS_VAR = "DYNACRON_API_KEYS"
MIN_INTERVAL_VAR = "DYNACRON_MIN_INTERVAL_SECONDS"
MAX_TASKS_VAR = "DYNACRON_MAX_TASKS_PER_TENANT"
RATE_LIMIT_VAR = "DYNACRON_TENANT_RATE_PER_SECOND"
RATE_BURST_VAR = "DYNACRON_TENANT_RATE_BURST"
LOOPBACK_NETWORKS = ("127.0.0.0/8", "::1/128")
__all__ = ["DEFAULT_TENANT", "LOOPBACK_NETWORKS", "Settings", "parse_api_keys"]


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
    # An occurrence claimed later than this was missed; each task's catch-up
    # policy decides what happens to it.
    misfire_grace_seconds: int = 60
    # API keys mapped to tenants, as (key, tenant) pairs; a key given with a
    # request wins over the caller's IAM principal.
    api_keys: tuple[tuple[str, str], ...] = ()
    # The tenant of a caller with no identity at all (local mode without keys);
    # None means such a caller is refused with 401.
    default_tenant: str | None = None
    max_tasks_per_tenant: int = 10_000
    # A schedule may not fire more often than this (1: every second, the tick's resolution).
    min_interval_seconds: int = 1
    # Per tenant and per API process; 0 switches the limiter off.
    tenant_rate_per_second: float = 20.0
    tenant_rate_burst: int = 100
    # Follow a handler's redirect to another host (each hop is still checked).
    follow_cross_host_redirects: bool = False

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
            api_keys=parse_api_keys(environ.get(API_KEYS_VAR, "")),
            min_interval_seconds=int(environ.get(MIN_INTERVAL_VAR, cls.min_interval_seconds)),
            max_tasks_per_tenant=int(environ.get(MAX_TASKS_VAR, cls.max_tasks_per_tenant)),
            tenant_rate_per_second=float(environ.get(RATE_LIMIT_VAR, cls.tenant_rate_per_second)),
            tenant_rate_burst=int(environ.get(RATE_BURST_VAR, cls.tenant_rate_burst)),
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
            API_KEYS_VAR: ",".join(f"{key}={tenant}" for key, tenant in self.api_keys),
            MIN_INTERVAL_VAR: str(self.min_interval_seconds),
            MAX_TASKS_VAR: str(self.max_tasks_per_tenant),
            RATE_LIMIT_VAR: str(self.tenant_rate_per_second),
            RATE_BURST_VAR: str(self.tenant_rate_burst),
        }


def parse_api_keys(text: str) -> tuple[tuple[str, str], ...]:
    """``"KEY=TENANT,KEY2"`` -> pairs; a key without ``=TENANT`` is its own tenant name."""
    pairs = []
    for entry in (e.strip() for e in text.split(",")):
        if entry:
            key, _, tenant = entry.partition("=")
            # Never the key itself as a tenant name: tenant names are stored and shown.
            pairs.append((key, tenant or "key-" + hashlib.sha256(key.encode()).hexdigest()[:12]))
    return tuple(pairs)
