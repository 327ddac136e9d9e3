"""Runtime settings, passed explicitly; ``from_env`` is the one place that reads them.

Nothing reads the environment at import time: the Lambda entry points call
``Settings.from_env`` on their first invocation, local mode builds Settings itself.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import TypeVar

from dynacron.definitions.environment import (
    ALLOW_NETWORKS_VAR,
    API_KEYS_VAR,
    API_URL_VAR,
    BREAKER_COOL_DOWN_VAR,
    BREAKER_FAILURE_THRESHOLD_VAR,
    BUCKET_SECONDS_VAR,
    CALLBACK_LEASE_VAR,
    CATCHUP_MAX_RUNS_VAR,
    CLAIM_FUNCTION_VAR,
    CLOCK_SKEW_VAR,
    DEFAULT_BUCKET_SECONDS,
    DEFAULT_CATCHUP_MAX_RUNS,
    DEFAULT_EXECUTION_RETENTION_DAYS,
    DEFAULT_MISFIRE_GRACE_SECONDS,
    DEFAULT_SHARD_COUNT,
    DEFAULT_TICK_BACKLOG_SECONDS,
    DEFAULT_TICK_HEARTBEAT_SECONDS,
    DEFAULT_TICK_MAX_CLAIMS_PER_TASK,
    DEFAULT_WORKER_CONCURRENCY,
    EXECUTION_RETENTION_DAYS_VAR,
    FORECAST_MAX_OCCURRENCES_VAR,
    FORECAST_MAX_TASKS_VAR,
    HANDLER_MODULES_VAR,
    HTTP_TIMEOUT_VAR,
    LEASE_SECONDS_VAR,
    MAX_QUEUED_DISPATCHES_VAR,
    MAX_RETRY_AFTER_VAR,
    MAX_TASKS_VAR,
    MESSAGE_HOLDS_VAR,
    MIN_INTERVAL_VAR,
    PICKUP_GRACE_VAR,
    PRIVATE_NETWORKS_VAR,
    RATE_BURST_VAR,
    RATE_LIMIT_VAR,
    SHARD_COUNT_VAR,
    TARGET_ROLES_VAR,
    TICK_BACKLOG_SECONDS_VAR,
    TICK_HEARTBEAT_SECONDS_VAR,
    TICK_MAX_CLAIMS_PER_TASK_VAR,
    WORKER_CONCURRENCY_VAR,
    WORKER_MARGIN_VAR,
)
from dynacron.definitions.resources import (
    COORDINATION,
    DEAD_LETTER_QUEUE,
    DISPATCH_QUEUE,
    EXECUTIONS,
    TASKS,
    WORKER_TIMEOUT_SECONDS,
)
from dynacron.domain.coordination.limits import BreakerPolicy
from dynacron.domain.coordination.tenants import DEFAULT_TENANT
from dynacron.domain.errors import InvalidRequest
from dynacron.domain.executions.execution import LeaseTerms
from dynacron.domain.tasks.targets import TargetPolicy, partition_of
from dynacron.domain.tasks.task import Sharding
from dynacron.domain.tasks.urls import parse_private_networks
from dynacron.services.tasks import TaskSettings
from dynacron.services.tick_settings import TickSettings

LOOPBACK_NETWORKS = ("127.0.0.0/8", "::1/128")
LAMBDA_REGION = "AWS_REGION"
TARGETS_REFUSED = (
    "this deployment calls no AWS targets: it knows no AWS region to call them in "
    "(local mode calls them only on an AWS emulator: start it with --store emulator "
    "or --aws-endpoint URL)"
)
# The variables' names are defined with the rest of what infra/ reads; importing
# them from here still works.
__all__ = [
    "API_URL_VAR",
    "CATCHUP_MAX_RUNS_VAR",
    "CLAIM_FUNCTION_VAR",
    "DEFAULT_TENANT",
    "HANDLER_MODULES_VAR",
    "LOOPBACK_NETWORKS",
    "TICK_BACKLOG_SECONDS_VAR",
    "TICK_HEARTBEAT_SECONDS_VAR",
    "TICK_MAX_CLAIMS_PER_TASK_VAR",
    "Settings",
    "parse_api_keys",
]


@dataclass(frozen=True)
class Settings:
    tasks_table: str
    executions_table: str
    coordination_table: str
    dispatch_queue_url: str
    dead_letter_queue_url: str
    shard_count: int = DEFAULT_SHARD_COUNT
    # Width of a due-index time bucket (why wide: definitions.environment).
    bucket_seconds: int = DEFAULT_BUCKET_SECONDS
    # Networks a handler URL may resolve into. Empty means "public addresses only"
    # (the deployed default); local mode sets loopback only.
    delivery_allow_networks: tuple[str, ...] = ()
    # Private ranges an operator lets tenants be granted (the workers run in their
    # VPC): the ceiling of every tenant's ``private_networks`` (decision 0050).
    delivery_private_networks: tuple[str, ...] = ()
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
    # An occurrence claimed later than this is late; it was missed (and its
    # task's catch-up policy decides) only if no tick of its shard ran while it
    # was on time, or the task was paused. Lateness from load runs late.
    misfire_grace_seconds: int = DEFAULT_MISFIRE_GRACE_SECONDS
    # A tick records that its shard ran at most this often (one write on the
    # cursor item); keep it well under the misfire grace.
    tick_heartbeat_seconds: int = DEFAULT_TICK_HEARTBEAT_SECONDS
    # One task gets at most this many claims in one tick; the rest of its
    # backlog waits for the next tick, so it cannot fill the claim budget.
    tick_max_claims_per_task: int = DEFAULT_TICK_MAX_CLAIMS_PER_TASK
    # After what is on time, the backlog is worked for at most this long per
    # tick (after its first page), so the next tick starts on time.
    tick_backlog_seconds: float = DEFAULT_TICK_BACKLOG_SECONDS
    # run_all runs at most this many missed occurrences of one downtime (the
    # latest); older ones are skipped, and one SKIPPED execution says so.
    catchup_max_runs: int = DEFAULT_CATCHUP_MAX_RUNS
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
    # A running execution's lease: renewed by the worker's heartbeat every third
    # of it, so a worker that dies is noticed within one lease.
    lease_seconds: float = 30.0
    # Machines disagree about the time by up to this much: the reaper waits this
    # long past a lease's end, and a holder renews this long before it.
    clock_skew_seconds: float = 5.0
    # How long a handler that answered 202 Accepted has to call heartbeat or complete.
    callback_lease_seconds: float = 600.0
    # How long a queued attempt may wait in SQS past its due time before the
    # reaper sends it again (the first message may have been lost in a crash).
    pickup_grace_seconds: float = 300.0
    # How long a handler's recorded success answers for its execution_id.
    idempotency_ttl_seconds: int = 24 * 3600
    # One worker invocation's time limit (the Lambda timeout in AWS).
    worker_timeout_seconds: int = WORKER_TIMEOUT_SECONDS
    reaper_page_size: int = 100
    reaper_max_per_run: int = 1000
    # Where handlers reach the API for heartbeat and complete calls (optional).
    api_base_url: str | None = None
    # Modules to import at start so their ``@dynacron.handler`` functions register.
    handler_modules: tuple[str, ...] = ()
    # A host's breaker opens after this many consecutive failures, for the cool-down.
    breaker_failure_threshold: int = 5
    breaker_cool_down_seconds: float = 10.0
    # The tick enqueues nothing more while the dispatch queue holds this many messages.
    max_queued_dispatches: int = 20_000
    # GET /forecast reads at most this many tasks and computes this many executions
    # (a per-second cron costs 50-100 µs an occurrence on a whole vCPU, and the API
    # function has some 0.15 vCPU at 256 MB: 30,000 stay inside its 29 s).
    forecast_max_tasks: int = 20_000
    forecast_max_occurrences: int = 30_000
    # A handler's Retry-After pauses its host (for its tenant) and delays its retry
    # by at most this long, and at most the task's retry.max_delay_seconds.
    max_retry_after_seconds: int = 3600
    # A worker takes the next record of its batch only while a whole handler call
    # (http_timeout_seconds) and this margin, to begin and record it, fit in what
    # is left of its invocation; the rest go back to the queue unbegun.
    worker_margin_seconds: float = 5.0
    # A worker invocation runs this many records of its batch at once, each as it
    # would run alone (its lease, heartbeat, time budget, limits and handler-call
    # record); the next record starts as one ends (decision 0034).
    worker_concurrency: int = DEFAULT_WORKER_CONCURRENCY
    # A worker lowers each received message's visibility to a little more than a
    # running lease, and renews it while the record runs, so the messages of a
    # worker that dies come back within a minute, not the queue's six worker
    # timeouts (decision 0038). Off where the queue itself knows a dead receiver
    # (local mode's SQLite queue releases a dead process's messages).
    message_holds: bool = True
    # Days an execution's record is kept after it stops mattering (its last end,
    # lease or next attempt): DynamoDB's TTL deletes it then. At 10,000 fires/s
    # every day kept is 0.86 billion records stored (``dynacron plan`` prices it).
    execution_retention_days: int = DEFAULT_EXECUTION_RETENTION_DAYS
    # Python handlers run in the worker's own process: at most this many at once,
    # whatever the worker's concurrency (a call waiting for its turn spends its
    # deadline, as an HTTP call waiting for a pooled connection does).
    python_handler_concurrency: int = 4
    # Elastic capacity (decision 0025): with a claim function, a tick hands a page
    # of at least ``tick_fanout_min_tasks`` due tasks (a 128 MB tick claims about
    # 20 a second) to a claim invocation, at most ``tick_fanout_max_pages`` pages a
    # tick (a large page beyond waits for the next tick), and claims smaller pages
    # itself, unless it handed one out already: the rest of a large find goes out
    # too while the cap has room (decision 0051). A task handed out is not handed out or
    # claimed by the tick again for ``tick_fanout_fresh_seconds``; after that, if
    # still due (the invocation failed or never ran), the tick finds it again.
    claim_function: str | None = None
    tick_fanout_min_tasks: int = 20
    tick_fanout_max_pages: int = 10
    tick_fanout_fresh_seconds: float = 10.0
    # AWS targets (decision 0047) are called in this region (the stack's), at this
    # endpoint if given (local mode's emulator); without a region none is accepted.
    target_region: str | None = None
    target_endpoint_url: str | None = None
    # The role ARN patterns the worker may assume (the stack's grant); None: any.
    target_roles: tuple[str, ...] | None = None

    @property
    def target_policy(self) -> TargetPolicy:
        """Where targets may point: the stack's partition and region, or nowhere."""
        if not self.target_region:
            return TargetPolicy(refusal=TARGETS_REFUSED)
        return TargetPolicy(
            partition_of(self.target_region), self.target_region, role_patterns=self.target_roles
        )

    @property
    def breaker_policy(self) -> BreakerPolicy:
        return BreakerPolicy(
            failure_threshold=self.breaker_failure_threshold,
            cool_down=timedelta(seconds=self.breaker_cool_down_seconds),
            probe_lease=timedelta(seconds=self.http_timeout_seconds + 2 * self.clock_skew_seconds),
        )

    @property
    def sharding(self) -> Sharding:
        return Sharding(shard_count=self.shard_count, bucket_seconds=self.bucket_seconds)

    @property
    def tick_settings(self) -> TickSettings:
        """What the tick reads."""
        return TickSettings(
            sharding=self.sharding,
            misfire_grace_seconds=self.misfire_grace_seconds,
            tick_heartbeat_seconds=self.tick_heartbeat_seconds,
            initial_lookback_seconds=self.initial_lookback_seconds,
            cursor_grace_seconds=self.cursor_grace_seconds,
            tick_page_size=self.tick_page_size,
            tick_max_claims=self.tick_max_claims,
            tick_max_claims_per_task=self.tick_max_claims_per_task,
            tick_backlog_seconds=self.tick_backlog_seconds,
            tick_concurrency=self.tick_concurrency,
            catchup_max_runs=self.catchup_max_runs,
            max_queued_dispatches=self.max_queued_dispatches,
            tick_fanout_min_tasks=self.tick_fanout_min_tasks,
            tick_fanout_max_pages=self.tick_fanout_max_pages,
            tick_fanout_fresh_seconds=self.tick_fanout_fresh_seconds,
        )

    @property
    def task_settings(self) -> TaskSettings:
        """What registering and changing tasks read."""
        return TaskSettings(
            sharding=self.sharding,
            max_tasks_per_tenant=self.max_tasks_per_tenant,
            tenant_rate_per_second=self.tenant_rate_per_second,
            min_interval_seconds=self.min_interval_seconds,
            max_payload_bytes=self.max_payload_bytes,
            private_networks=self.delivery_private_networks,
        )

    @property
    def lease_terms(self) -> LeaseTerms:
        return LeaseTerms(
            running=timedelta(seconds=self.lease_seconds),
            awaiting_callback=timedelta(seconds=self.callback_lease_seconds),
            pickup_grace=timedelta(seconds=self.pickup_grace_seconds),
            clock_skew=timedelta(seconds=self.clock_skew_seconds),
        )

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Settings:
        return cls(
            tasks_table=environ[TASKS.env_var],
            executions_table=environ[EXECUTIONS.env_var],
            coordination_table=environ[COORDINATION.env_var],
            dispatch_queue_url=environ[DISPATCH_QUEUE.env_var],
            dead_letter_queue_url=environ[DEAD_LETTER_QUEUE.env_var],
            shard_count=int(environ.get(SHARD_COUNT_VAR, cls.shard_count)),
            bucket_seconds=int(environ.get(BUCKET_SECONDS_VAR, cls.bucket_seconds)),
            delivery_allow_networks=_split(environ.get(ALLOW_NETWORKS_VAR, "")),
            delivery_private_networks=_private_networks(environ),
            http_timeout_seconds=float(environ.get(HTTP_TIMEOUT_VAR, cls.http_timeout_seconds)),
            api_keys=parse_api_keys(environ.get(API_KEYS_VAR, "")),
            min_interval_seconds=_at_least(1, environ, MIN_INTERVAL_VAR, cls.min_interval_seconds),
            max_tasks_per_tenant=_at_least(1, environ, MAX_TASKS_VAR, cls.max_tasks_per_tenant),
            tenant_rate_per_second=_at_least(
                0.0, environ, RATE_LIMIT_VAR, cls.tenant_rate_per_second
            ),
            tenant_rate_burst=_at_least(1, environ, RATE_BURST_VAR, cls.tenant_rate_burst),
            lease_seconds=float(environ.get(LEASE_SECONDS_VAR, cls.lease_seconds)),
            clock_skew_seconds=float(environ.get(CLOCK_SKEW_VAR, cls.clock_skew_seconds)),
            callback_lease_seconds=float(
                environ.get(CALLBACK_LEASE_VAR, cls.callback_lease_seconds)
            ),
            pickup_grace_seconds=float(environ.get(PICKUP_GRACE_VAR, cls.pickup_grace_seconds)),
            api_base_url=environ.get(API_URL_VAR) or None,
            handler_modules=_split(environ.get(HANDLER_MODULES_VAR, "")),
            breaker_failure_threshold=_at_least(
                1, environ, BREAKER_FAILURE_THRESHOLD_VAR, cls.breaker_failure_threshold
            ),
            breaker_cool_down_seconds=_at_least(
                0.0, environ, BREAKER_COOL_DOWN_VAR, cls.breaker_cool_down_seconds
            ),
            max_queued_dispatches=_at_least(
                1, environ, MAX_QUEUED_DISPATCHES_VAR, cls.max_queued_dispatches
            ),
            forecast_max_tasks=_at_least(
                1, environ, FORECAST_MAX_TASKS_VAR, cls.forecast_max_tasks
            ),
            forecast_max_occurrences=_at_least(
                1, environ, FORECAST_MAX_OCCURRENCES_VAR, cls.forecast_max_occurrences
            ),
            max_retry_after_seconds=_at_least(
                0, environ, MAX_RETRY_AFTER_VAR, cls.max_retry_after_seconds
            ),
            worker_margin_seconds=_at_least(
                0.0, environ, WORKER_MARGIN_VAR, cls.worker_margin_seconds
            ),
            worker_concurrency=_at_least(
                1, environ, WORKER_CONCURRENCY_VAR, cls.worker_concurrency
            ),
            message_holds=_switch(environ, MESSAGE_HOLDS_VAR, cls.message_holds),
            execution_retention_days=_at_least(
                1, environ, EXECUTION_RETENTION_DAYS_VAR, cls.execution_retention_days
            ),
            tick_max_claims_per_task=_at_least(
                1, environ, TICK_MAX_CLAIMS_PER_TASK_VAR, cls.tick_max_claims_per_task
            ),
            tick_backlog_seconds=_at_least(
                0.0, environ, TICK_BACKLOG_SECONDS_VAR, cls.tick_backlog_seconds
            ),
            catchup_max_runs=_at_least(1, environ, CATCHUP_MAX_RUNS_VAR, cls.catchup_max_runs),
            tick_heartbeat_seconds=_tick_heartbeat(environ, cls.misfire_grace_seconds),
            claim_function=environ.get(CLAIM_FUNCTION_VAR) or None,
            # Lambda sets it: the function's own region.
            target_region=environ.get(LAMBDA_REGION) or None,
            target_roles=(
                _split(environ[TARGET_ROLES_VAR]) if TARGET_ROLES_VAR in environ else None
            ),
        )

    def to_env(self) -> dict[str, str]:
        """The environment that makes ``from_env`` return these settings."""
        return {
            TASKS.env_var: self.tasks_table,
            EXECUTIONS.env_var: self.executions_table,
            COORDINATION.env_var: self.coordination_table,
            DISPATCH_QUEUE.env_var: self.dispatch_queue_url,
            DEAD_LETTER_QUEUE.env_var: self.dead_letter_queue_url,
            SHARD_COUNT_VAR: str(self.shard_count),
            BUCKET_SECONDS_VAR: str(self.bucket_seconds),
            ALLOW_NETWORKS_VAR: ",".join(self.delivery_allow_networks),
            PRIVATE_NETWORKS_VAR: ",".join(self.delivery_private_networks),
            HTTP_TIMEOUT_VAR: str(self.http_timeout_seconds),
            API_KEYS_VAR: ",".join(f"{key}={tenant}" for key, tenant in self.api_keys),
            MIN_INTERVAL_VAR: str(self.min_interval_seconds),
            MAX_TASKS_VAR: str(self.max_tasks_per_tenant),
            RATE_LIMIT_VAR: str(self.tenant_rate_per_second),
            RATE_BURST_VAR: str(self.tenant_rate_burst),
            LEASE_SECONDS_VAR: str(self.lease_seconds),
            CLOCK_SKEW_VAR: str(self.clock_skew_seconds),
            CALLBACK_LEASE_VAR: str(self.callback_lease_seconds),
            PICKUP_GRACE_VAR: str(self.pickup_grace_seconds),
            API_URL_VAR: self.api_base_url or "",
            HANDLER_MODULES_VAR: ",".join(self.handler_modules),
            BREAKER_FAILURE_THRESHOLD_VAR: str(self.breaker_failure_threshold),
            BREAKER_COOL_DOWN_VAR: str(self.breaker_cool_down_seconds),
            MAX_QUEUED_DISPATCHES_VAR: str(self.max_queued_dispatches),
            FORECAST_MAX_TASKS_VAR: str(self.forecast_max_tasks),
            FORECAST_MAX_OCCURRENCES_VAR: str(self.forecast_max_occurrences),
            MAX_RETRY_AFTER_VAR: str(self.max_retry_after_seconds),
            WORKER_MARGIN_VAR: str(self.worker_margin_seconds),
            WORKER_CONCURRENCY_VAR: str(self.worker_concurrency),
            MESSAGE_HOLDS_VAR: "on" if self.message_holds else "off",
            EXECUTION_RETENTION_DAYS_VAR: str(self.execution_retention_days),
            TICK_MAX_CLAIMS_PER_TASK_VAR: str(self.tick_max_claims_per_task),
            TICK_BACKLOG_SECONDS_VAR: str(self.tick_backlog_seconds),
            CATCHUP_MAX_RUNS_VAR: str(self.catchup_max_runs),
            TICK_HEARTBEAT_SECONDS_VAR: str(self.tick_heartbeat_seconds),
            CLAIM_FUNCTION_VAR: self.claim_function or "",
        } | (
            {TARGET_ROLES_VAR: ",".join(self.target_roles)} if self.target_roles is not None else {}
        )


Number = TypeVar("Number", int, float)


def _at_least(minimum: Number, environ: Mapping[str, str], var: str, default: Number) -> Number:
    """``var`` as a number of ``default``'s type, at least ``minimum``; errors name ``var``."""
    raw = environ.get(var)
    if raw is None or raw == "":
        return default
    try:
        value = type(default)(raw)
    except ValueError:
        raise ValueError(f"{var} must be a number, not {raw!r}") from None
    if value < minimum:
        raise ValueError(f"{var} must be at least {minimum}, not {raw!r}")
    return value


def _switch(environ: Mapping[str, str], var: str, default: bool) -> bool:
    """``var`` as "on" or "off" (unset or empty: ``default``); errors name ``var``."""
    raw = environ.get(var, "").strip().lower()
    if raw == "":
        return default
    if raw not in ("on", "off"):
        raise ValueError(f"{var} must be on or off, not {raw!r}")
    return raw == "on"


def _tick_heartbeat(environ: Mapping[str, str], misfire_grace_seconds: int) -> int:
    heartbeat = _at_least(1, environ, TICK_HEARTBEAT_SECONDS_VAR, DEFAULT_TICK_HEARTBEAT_SECONDS)
    if heartbeat >= misfire_grace_seconds:
        # A gap longer than the grace is an outage: a heartbeat that rare would
        # turn every quiet moment into one.
        raise ValueError(
            f"{TICK_HEARTBEAT_SECONDS_VAR} must be under the misfire grace "
            f"({misfire_grace_seconds} s), not {heartbeat}"
        )
    return heartbeat


def _split(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def parse_api_keys(text: str) -> tuple[tuple[str, str], ...]:
    """``"KEY=TENANT,KEY2"`` -> pairs; a key without ``=TENANT`` gets a tenant named
    after its hash (never the key itself: tenant names are stored and shown)."""
    pairs = []
    for entry in _split(text):
        key, _, tenant = entry.partition("=")
        pairs.append((key, tenant or "key-" + hashlib.sha256(key.encode()).hexdigest()[:12]))
    return tuple(pairs)


def _private_networks(environ: Mapping[str, str]) -> tuple[str, ...]:
    """``PRIVATE_NETWORKS_VAR``: private CIDRs only (loopback too is refused: in a
    Lambda function it is the runtime's own API)."""
    try:
        return parse_private_networks(
            _split(environ.get(PRIVATE_NETWORKS_VAR, "")), field=PRIVATE_NETWORKS_VAR
        )
    except InvalidRequest as refused:
        raise ValueError(str(refused)) from None
