"""The AWS quotas a deployment's peak exceeds, and what to ask AWS for.

The defaults, per account and Region, from AWS's documentation:

- DynamoDB ("Quotas in Amazon DynamoDB", Amazon DynamoDB Developer Guide):
  table-level throughput of 40,000 read and 40,000 write units a second, what a
  provisioned table or any one of its global secondary indexes may be given, and
  what an on-demand table may consume ("DynamoDB maximum throughput for on-demand
  tables"); account-level throughput of 80,000 read and 80,000 write capacity
  units, the sum of every provisioned table and index. Both adjustable.
- Lambda ("Lambda quotas", "Lambda scaling behavior", AWS Lambda Developer
  Guide): 1,000 concurrent executions in an account (adjustable); each function
  gains at most 1,000 execution environments every 10 seconds (not adjustable).
- Lambda with SQS ("Configuring scaling behavior for SQS event source
  mappings"; AWS CloudFormation, "AWS::Lambda::EventSourceMapping
  ScalingConfig"): a mapping's maximum concurrency is 2 to 1,000, and it adds
  at most 300 concurrent invocations a minute; above 1,000, AWS Support or
  more queues, each with its own mapping.
- SQS ("Amazon SQS standard queue quotas", Amazon SQS Developer Guide): about
  120,000 messages in flight (received, not yet deleted) per standard queue;
  adjustable by a support request, or more queues.
- API Gateway ("Amazon API Gateway quotas", API Gateway Developer Guide): 10,000
  requests a second across an account's APIs in a Region (2,500 in some newer
  Regions), adjustable.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Quota:
    name: str
    default: int
    unit: str
    # What to do above it: {request} is the figure to ask for, {parts} how many of
    # the default it takes (queues, say).
    advice: str


DYNAMODB_TABLE_THROUGHPUT = Quota(
    "DynamoDB table-level read and write throughput (each table and index)",
    40_000,
    "units a second",
    "ask for {request:,}",
)
DYNAMODB_ACCOUNT_THROUGHPUT = Quota(
    "DynamoDB account-level read and write throughput (all provisioned tables and indexes)",
    80_000,
    "units a second",
    "ask for {request:,}",
)
LAMBDA_CONCURRENCY = Quota(
    "Lambda concurrent executions (the account)", 1_000, "at once", "ask for {request:,}"
)
LAMBDA_SCALING_RATE = Quota(
    "Lambda scaling rate (each function)",
    1_000,
    "new environments every 10 s",
    "not adjustable: from idle, the workers take at least {parts} periods of 10 s to peak",
)
SQS_MAPPING_CONCURRENCY = Quota(
    "SQS event source mapping maximum concurrency",
    1_000,
    "worker invocations at once",
    "{parts} dispatch queues, each with its own mapping (shards grouped onto queues; "
    "not built), or ask AWS Support for {request:,}",
)
SQS_IN_FLIGHT = Quota(
    "SQS messages in flight (a standard queue)",
    120_000,
    "messages",
    "ask for {request:,}, or {parts} dispatch queues",
)
API_GATEWAY_THROTTLE = Quota(
    "API Gateway throttle (the account, in a Region)",
    10_000,
    "requests a second",
    "ask for {request:,} (and raise the stage's api_rate_limit)",
)


@dataclass(frozen=True)
class QuotaNeed:
    """A quota the plan needs beyond its default."""

    quota: Quota
    needed: float

    @property
    def exceeded(self) -> bool:
        return self.needed > self.quota.default

    @property
    def request(self) -> int:
        """What to ask for: the need, rounded up to a thousand."""
        return 1000 * math.ceil(self.needed / 1000)

    def __str__(self) -> str:
        quota = self.quota
        parts = math.ceil(self.needed / quota.default)
        return (
            f"{quota.name}: {self.needed:,.0f} {quota.unit} needed, {quota.default:,} by "
            f"default; " + quota.advice.format(request=self.request, parts=parts)
        )


@dataclass(frozen=True)
class Demand:
    """What a deployment takes at its peak, in the terms AWS's quotas count."""

    # The most units a second one table or index may take (provisioned: the most
    # auto scaling may give it; on demand: its busiest, with room for a burst).
    table_units: float
    # Provisioned only: every table and index at its burst maximum at once, reads
    # or writes, whichever is more; None on demand (the quota counts provisioned units).
    account_units: float | None
    lambda_concurrency: float
    worker_invocations: float
    in_flight_messages: float
    api_requests_per_second: float


def quota_figures(demand: Demand) -> tuple[QuotaNeed, ...]:
    """What ``demand`` takes of every quota, within its default or not, in the order
    a person would ask for them (the account-level DynamoDB quota only when
    provisioned: it counts provisioned units)."""
    needs = [
        (DYNAMODB_TABLE_THROUGHPUT, demand.table_units),
        (DYNAMODB_ACCOUNT_THROUGHPUT, demand.account_units),
        (LAMBDA_CONCURRENCY, demand.lambda_concurrency),
        (LAMBDA_SCALING_RATE, demand.worker_invocations),
        (SQS_MAPPING_CONCURRENCY, demand.worker_invocations),
        (SQS_IN_FLIGHT, demand.in_flight_messages),
        (API_GATEWAY_THROTTLE, demand.api_requests_per_second),
    ]
    return tuple(QuotaNeed(quota, needed) for quota, needed in needs if needed is not None)


def quota_needs(demand: Demand) -> tuple[QuotaNeed, ...]:
    """Every quota ``demand`` exceeds, in the order a person would ask for them."""
    return tuple(need for need in quota_figures(demand) if need.exceeded)
