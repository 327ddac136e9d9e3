"""Deployment settings, read from CDK context: ``-c shard_count=8`` or cdk.json's "context"."""

from __future__ import annotations

import dataclasses
import ipaddress
import re
import types
import typing
from dataclasses import dataclass
from typing import Any, Literal

from constructs import Node

from dynacron.definitions.environment import (
    DEFAULT_BUCKET_SECONDS,
    DEFAULT_CATCHUP_MAX_RUNS,
    DEFAULT_EXECUTION_RETENTION_DAYS,
    DEFAULT_MISFIRE_GRACE_SECONDS,
    DEFAULT_SHARD_COUNT,
    DEFAULT_TICK_BACKLOG_SECONDS,
    DEFAULT_TICK_HEARTBEAT_SECONDS,
    DEFAULT_TICK_MAX_CLAIMS_PER_TASK,
    DEFAULT_WORKER_CONCURRENCY,
)

Billing = Literal["on-demand", "provisioned"]
BILLING_MODES: tuple[Billing, ...] = ("on-demand", "provisioned")
LOG_RETENTION_DAYS = (1, 3, 7, 14, 30, 90, 180, 365)
PRIVATE_RANGES = tuple(
    ipaddress.ip_network(net)
    for net in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fc00::/7")
)

# A key by its ARN: grants name it, and an alias would name no key in a policy.
KMS_KEY_ARN = re.compile(r"arn:aws(-[a-z]+)*:kms:[a-z0-9-]+:[0-9]{12}:key/[A-Za-z0-9-]+")


@dataclass(frozen=True)
class SchedulerConfig:
    """Every knob of a deployment; each field is also the name of its context key."""

    stage: str = "dev"
    # Runtime settings the functions receive: the defaults are the runtime's own.
    shard_count: int = DEFAULT_SHARD_COUNT
    bucket_seconds: int = DEFAULT_BUCKET_SECONDS
    api_memory_mb: int = 256
    # The looping tick idles small and hands large pages to the claim function
    # (decision 0025): 4 shards x 128 MB idle, claim invocations of one vCPU
    # (1,769 MB) under load; ``dynacron plan --fires-per-second 500 --current-shards 4``.
    tick_memory_mb: int = 128
    claim_memory_mb: int = 1769
    # At most this many claim invocations at once: a burst cannot take the
    # account's concurrency from the workers. A page takes about 0.3 s at 1,769 MB,
    # so 20 claim some 6,000 fires/s; the rest of a burst waits a second or two.
    claim_reserved_concurrency: int = 20
    # A worker runs ``worker_concurrency`` handler calls at once (decision 0034):
    # 1,024 MB (0.58 vCPU) keeps 32 calls of 0.2 s fed, measured (make bench BENCH=overlap).
    worker_memory_mb: int = 1024
    reaper_memory_mb: int = 128
    worker_concurrency: int = DEFAULT_WORKER_CONCURRENCY
    # Up to 100 messages an invocation, gathered for at most 1 s (SQS allows more
    # than 10 only with a window): under load a batch fills in milliseconds; a
    # lone due message waits at most the window (decision 0034).
    worker_batch_size: int = 100
    worker_batch_window_seconds: int = 1
    # 500 fires/s of handlers answering in 0.2 s (p99 0.8 s), many calls at once an
    # invocation, each invocation as long as its slowest call
    # (``dynacron plan --fires-per-second 500``).
    worker_max_concurrency: int = 49
    # The tick's fairness settings (services/tick.py), set on the tick only: the runtime's own.
    tick_max_claims_per_task: int = DEFAULT_TICK_MAX_CLAIMS_PER_TASK
    tick_backlog_seconds: float = DEFAULT_TICK_BACKLOG_SECONDS
    catchup_max_runs: int = DEFAULT_CATCHUP_MAX_RUNS
    tick_heartbeat_seconds: int = DEFAULT_TICK_HEARTBEAT_SECONDS
    api_rate_limit: float = 50.0
    api_burst_limit: int = 100
    # Each token-authorised callback method's own throttle (decision 0023).
    callback_rate_limit: float = 100.0
    callback_burst_limit: int = 200
    # A WAF web ACL on the stage (infra/constructs/firewall.py): requests per source
    # IP a minute, on the callback paths and on every other path; beyond, WAF
    # answers 429. One address cannot use up a throttle every tenant shares (issue 23).
    # ``api_firewall=false`` drops the web ACL ($7 a month idle).
    api_firewall: bool = True
    callback_ip_rate_limit: int = 1200
    api_ip_rate_limit: int = 1200
    billing: Billing = "on-demand"
    provisioned_min_capacity: int = 1
    provisioned_max_capacity: int = 100
    point_in_time_recovery: bool = True
    # Unset: protected in the "prod" stage only.
    deletion_protection: bool | None = None
    log_retention_days: int = 30
    # Days an execution's record is kept after it ends (the executions table's TTL):
    # at high rates the history at rest is a large part of the bill (dynacron plan).
    execution_retention_days: int = DEFAULT_EXECUTION_RETENTION_DAYS
    alarm_email: str | None = None
    oldest_message_alarm_seconds: int = 300
    scheduling_lag_alarm_seconds: float = 10.0
    expired_leases_alarm_threshold: int = 0
    # Seconds of waiting that limits, breakers and pauses add in 5 minutes, in all.
    limit_lateness_alarm_seconds: float = 3600.0
    # Alarm when more than this share of attempts fail in 5 minutes, once at least
    # ``failure_rate_alarm_min_attempts`` ended in them.
    failure_rate_alarm_percent: float = 10.0
    failure_rate_alarm_min_attempts: int = 20
    # Alarm when p99 queue latency (a due message's wait for a worker) exceeds this.
    queue_latency_alarm_seconds: float = 30.0
    # The roles AWS targets may name (decision 0047), which the worker may assume:
    # comma-separated role names with their path in this account ("dynacron-target/*":
    # roles under the path /dynacron-target/), or whole role ARN patterns for other
    # accounts. Empty: no target can be called. Each role's trust policy still decides
    # (it names the worker's role and the tenant's external id).
    target_roles: str = "dynacron-target/*"
    # Private networks (decision 0050): comma-separated CIDRs tenants may be granted
    # (``dynacron tenants set-limits --private-networks``). Needs the worker in your
    # VPC: ``worker_vpc_id`` and ``worker_subnet_ids`` (private subnets that route to
    # those networks), with ``worker_security_group_ids`` (else one allowing all
    # outbound is made); or the construct's ``worker_vpc`` prop. Ids, not a lookup:
    # synthesis needs no account.
    private_networks: str = ""
    worker_vpc_id: str | None = None
    worker_subnet_ids: str = ""
    worker_security_group_ids: str = ""
    # Your own key (decision 0059): the ARN of a customer-managed KMS key that
    # encrypts the tables, queues and log groups, imported by ARN (no lookup). Its
    # key policy is the operator's: docs/decisions/0059 says what it must allow.
    # Unset: AWS-owned keys for the tables and queues, CloudWatch's for the logs.
    kms_key_arn: str | None = None
    # Upgrading a stack made before decision 0053 (write-sharded tenant and name
    # indexes): CloudFormation adds or deletes one index a deploy, so the tasks table
    # trades its two old indexes for the new ones over deploys with this at 1, 2, 3,
    # then 0 (the end state, and a new stack's): docs/deploy.md, "Upgrading".
    task_index_upgrade: int = 0

    def __post_init__(self) -> None:
        checks = {
            "shard_count": 1 <= self.shard_count <= 100,
            "bucket_seconds": self.bucket_seconds >= 60,
            "worker_batch_size": 1 <= self.worker_batch_size <= 10_000,
            "worker_batch_window_seconds": 0 <= self.worker_batch_window_seconds <= 300,
            # The limits of an SQS event source mapping's maximum concurrency.
            "worker_max_concurrency": 2 <= self.worker_max_concurrency <= 1000,
            "worker_concurrency": 1 <= self.worker_concurrency <= 1000,
            # Lambda's memory limits.
            "tick_memory_mb": 128 <= self.tick_memory_mb <= 10_240,
            "claim_memory_mb": 128 <= self.claim_memory_mb <= 10_240,
            "worker_memory_mb": 128 <= self.worker_memory_mb <= 10_240,
            "claim_reserved_concurrency": 1 <= self.claim_reserved_concurrency <= 1000,
            "tick_max_claims_per_task": self.tick_max_claims_per_task >= 1,
            "tick_backlog_seconds": self.tick_backlog_seconds >= 0,
            "catchup_max_runs": self.catchup_max_runs >= 1,
            "tick_heartbeat_seconds": 1
            <= self.tick_heartbeat_seconds
            < DEFAULT_MISFIRE_GRACE_SECONDS,
            "billing": self.billing in BILLING_MODES,
            # WAF's bounds of a rate-based rule's limit.
            "callback_ip_rate_limit": 10 <= self.callback_ip_rate_limit <= 2_000_000_000,
            "api_ip_rate_limit": 10 <= self.api_ip_rate_limit <= 2_000_000_000,
            "log_retention_days": self.log_retention_days in LOG_RETENTION_DAYS,
            "execution_retention_days": 1 <= self.execution_retention_days <= 3650,
            "provisioned_max_capacity": 1
            <= self.provisioned_min_capacity
            <= self.provisioned_max_capacity,
            "failure_rate_alarm_percent": 0 <= self.failure_rate_alarm_percent < 100,
            "failure_rate_alarm_min_attempts": self.failure_rate_alarm_min_attempts >= 1,
            "task_index_upgrade": 0 <= self.task_index_upgrade <= 3,
        }
        wrong = [name for name, ok in checks.items() if not ok]
        if wrong:
            raise ValueError(f"invalid dynacron context: {', '.join(wrong)} ({self!r})")
        self.private_network_ranges  # noqa: B018  (raises on a range that is not private)
        if self.worker_vpc_id is not None and not _ids(self.worker_subnet_ids):
            raise ValueError("worker_vpc_id needs worker_subnet_ids (comma-separated)")
        if self.kms_key_arn is not None and not KMS_KEY_ARN.fullmatch(self.kms_key_arn):
            raise ValueError(
                f"context kms_key_arn: {self.kms_key_arn!r} is not a KMS key's ARN "
                "(arn:aws:kms:REGION:ACCOUNT:key/KEY-ID; an alias cannot be granted)"
            )
        if self.worker_batch_size > 10 and self.worker_batch_window_seconds < 1:
            raise ValueError("worker_batch_size above 10 needs worker_batch_window_seconds >= 1")

    @property
    def protect_data(self) -> bool:
        """Deletion protection and retained tables: explicit, else only in production."""
        if self.deletion_protection is not None:
            return self.deletion_protection
        return self.stage == "prod"

    @property
    def private_network_ranges(self) -> tuple[str, ...]:
        """``private_networks`` as CIDRs, each inside a private range: the runtime
        refuses any other at start (``domain.tasks.urls.parse_private_networks``;
        infra reads no runtime code, and tests/infra/test_private_networks.py keeps
        the two in agreement)."""
        ranges: list[str] = []
        for text in _ids(self.private_networks):
            try:
                network = ipaddress.ip_network(text)
            except ValueError as error:
                raise ValueError(f"context private_networks: {text!r}: {error}") from None
            if not any(
                network.version == outer.version and network.subnet_of(outer)  # type: ignore[arg-type]
                for outer in PRIVATE_RANGES
            ):
                raise ValueError(
                    f"context private_networks: {text} is not inside a private range "
                    f"({', '.join(map(str, PRIVATE_RANGES))})"
                )
            ranges.append(str(network))
        return tuple(ranges)

    @property
    def worker_subnets(self) -> list[str]:
        return _ids(self.worker_subnet_ids)

    @property
    def worker_security_groups(self) -> list[str]:
        return _ids(self.worker_security_group_ids)

    @classmethod
    def from_context(cls, node: Node) -> SchedulerConfig:
        hints = typing.get_type_hints(cls)
        values: dict[str, Any] = {}
        for field in dataclasses.fields(cls):
            raw = node.try_get_context(field.name)
            if raw is not None:
                values[field.name] = _coerce(field.name, raw, hints[field.name])
        return cls(**values)


def _ids(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _coerce(name: str, raw: Any, hint: Any) -> Any:
    """Context from cdk.json arrives typed; from ``-c key=value`` always as text."""
    kind = hint
    if typing.get_origin(hint) is Literal:
        kind = str
    elif typing.get_origin(hint) in (typing.Union, types.UnionType):
        (kind,) = [k for k in typing.get_args(hint) if k is not type(None)]
    if kind is str:
        return str(raw)
    if kind is bool:
        if isinstance(raw, bool):
            return raw
        if str(raw).lower() in ("true", "false"):
            return str(raw).lower() == "true"
        raise ValueError(f"context {name} must be true or false, not {raw!r}")
    try:
        return kind(raw)
    except (TypeError, ValueError):
        raise ValueError(f"context {name} must be a {kind.__name__}, not {raw!r}") from None
