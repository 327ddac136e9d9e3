"""The environment variables the functions read their settings from, and the
defaults of those the CDK app sets itself.

``entry.settings.Settings.from_env`` reads these names; ``infra/`` sets them on
the functions. Both import them from here, so infra reads no runtime code and a
name cannot drift between the two. The tables' and queues' own variables are
named with their definitions (``resources.TASKS.env_var`` ...).
"""

from __future__ import annotations

SHARD_COUNT_VAR = "DYNACRON_SHARD_COUNT"
BUCKET_SECONDS_VAR = "DYNACRON_BUCKET_SECONDS"
ALLOW_NETWORKS_VAR = "DYNACRON_DELIVERY_ALLOW_NETWORKS"
# Private ranges (CIDRs, comma-separated) tenants may be granted: decision 0050.
PRIVATE_NETWORKS_VAR = "DYNACRON_PRIVATE_NETWORKS"
HTTP_TIMEOUT_VAR = "DYNACRON_HTTP_TIMEOUT_SECONDS"
API_KEYS_VAR = "DYNACRON_API_KEYS"
MIN_INTERVAL_VAR = "DYNACRON_MIN_INTERVAL_SECONDS"
MAX_TASKS_VAR = "DYNACRON_MAX_TASKS_PER_TENANT"
RATE_LIMIT_VAR = "DYNACRON_TENANT_RATE_PER_SECOND"
RATE_BURST_VAR = "DYNACRON_TENANT_RATE_BURST"
LEASE_SECONDS_VAR = "DYNACRON_LEASE_SECONDS"
CLOCK_SKEW_VAR = "DYNACRON_CLOCK_SKEW_SECONDS"
CALLBACK_LEASE_VAR = "DYNACRON_CALLBACK_LEASE_SECONDS"
PICKUP_GRACE_VAR = "DYNACRON_PICKUP_GRACE_SECONDS"
API_URL_VAR = "DYNACRON_API_URL"
HANDLER_MODULES_VAR = "DYNACRON_HANDLER_MODULES"
BREAKER_FAILURE_THRESHOLD_VAR = "DYNACRON_BREAKER_FAILURE_THRESHOLD"
BREAKER_COOL_DOWN_VAR = "DYNACRON_BREAKER_COOL_DOWN_SECONDS"
MAX_QUEUED_DISPATCHES_VAR = "DYNACRON_MAX_QUEUED_DISPATCHES"
FORECAST_MAX_TASKS_VAR = "DYNACRON_FORECAST_MAX_TASKS"
FORECAST_MAX_OCCURRENCES_VAR = "DYNACRON_FORECAST_MAX_OCCURRENCES"
MAX_RETRY_AFTER_VAR = "DYNACRON_MAX_RETRY_AFTER_SECONDS"
WORKER_MARGIN_VAR = "DYNACRON_WORKER_MARGIN_SECONDS"
# Handler calls one worker invocation has in flight at once (decision 0034).
WORKER_CONCURRENCY_VAR = "DYNACRON_WORKER_CONCURRENCY"
# "off": a worker leaves its messages at the queue's own visibility timeout
# instead of holding them a short while at a time (decision 0038).
MESSAGE_HOLDS_VAR = "DYNACRON_MESSAGE_HOLDS"
# Days an execution's record is kept after it stops mattering (its TTL).
EXECUTION_RETENTION_DAYS_VAR = "DYNACRON_EXECUTION_RETENTION_DAYS"
# The tick's fairness settings (read by the tick only).
TICK_MAX_CLAIMS_PER_TASK_VAR = "DYNACRON_TICK_MAX_CLAIMS_PER_TASK"
TICK_BACKLOG_SECONDS_VAR = "DYNACRON_TICK_BACKLOG_SECONDS"
CATCHUP_MAX_RUNS_VAR = "DYNACRON_CATCHUP_MAX_RUNS"
TICK_HEARTBEAT_SECONDS_VAR = "DYNACRON_TICK_HEARTBEAT_SECONDS"
# The claim function the looping tick hands large pages to (its ARN; decision 0025).
CLAIM_FUNCTION_VAR = "DYNACRON_CLAIM_FUNCTION"
# The role ARN patterns (comma-separated) the worker may assume for AWS targets,
# as the stack grants it from ``target_roles``: the API refuses a target naming
# another role (decision 0047). Unset: no grant to check against (local mode).
TARGET_ROLES_VAR = "DYNACRON_TARGET_ROLES"

# The runtime's defaults of what a deployment may set (infra/config.py): one
# value, whether the CDK app sets the variable or the function falls back on it.
DEFAULT_SHARD_COUNT = 4
# Width of a due-index time bucket. Wide buckets mean few queries per tick;
# the sort key bounds each query to what is due, so width never costs reads.
DEFAULT_BUCKET_SECONDS = 3600
# An occurrence claimed later than this is late (see Settings.misfire_grace_seconds).
DEFAULT_MISFIRE_GRACE_SECONDS = 60
# One task gets at most this many claims in one tick.
DEFAULT_TICK_MAX_CLAIMS_PER_TASK = 10
# After what is on time, the backlog is worked for at most this long per tick.
DEFAULT_TICK_BACKLOG_SECONDS = 0.8
# run_all runs at most this many missed occurrences of one downtime.
DEFAULT_CATCHUP_MAX_RUNS = 100
# A tick records that its shard ran at most this often; under the misfire grace.
DEFAULT_TICK_HEARTBEAT_SECONDS = 10
# How long an execution's record is kept after it stops mattering (its last end,
# lease or next attempt): DynamoDB's TTL deployed, ``dynacron local``'s sweep on SQLite.
DEFAULT_EXECUTION_RETENTION_DAYS = 90
# Handler calls one worker invocation has in flight at once: a batch of 100 runs
# in 4 rounds, and 32 calls of 0.2 s keep about half a vCPU busy (decision 0034).
DEFAULT_WORKER_CONCURRENCY = 32
