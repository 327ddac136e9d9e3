"""CloudWatch metric names, in one place: the code emits them, the CDK alarms watch them.

The runtime emits them with Powertools Metrics (EMF), which adds a ``service``
dimension; an alarm matches a metric only with exactly the same dimensions, so
the dimension is named here too.
"""

from __future__ import annotations

NAMESPACE = "dynacron"
SERVICE_DIMENSION = "service"
SERVICE = "dynacron"

# Seconds from an execution's scheduled time to its handler's start.
SCHEDULING_LAG = "SchedulingLag"
RETRIES = "Retries"
FAILURES = "Failures"
DEAD_LETTERS = "DeadLetters"
# Executions whose lease ran out (their worker died or stalled) made runnable again.
LEASES_REAPED = "LeasesReaped"
DUPLICATES_SUPPRESSED = "DuplicatesSuppressed"
# Limits (issue 7): executions sent on to wait, by why, and the waiting they cost.
WAITING_ON_CONCURRENCY = "WaitingOnConcurrency"
WAITING_ON_RATE = "WaitingOnRate"
WAITING_ON_BREAKER = "WaitingOnBreaker"
WAITING_ON_PAUSE = "WaitingOnPause"
# Seconds an execution was sent on to wait by a limit, breaker or pause.
LIMIT_LATENESS = "LimitLateness"
BREAKER_OPENED = "BreakerOpened"
BREAKER_HALF_OPENED = "BreakerHalfOpened"
BREAKER_CLOSED = "BreakerClosed"
# A 429/503 Retry-After paused a host for every worker.
HOSTS_PAUSED = "HostsPaused"
# Messages in the dispatch queue (visible and in flight), seen by the tick.
QUEUE_DEPTH = "QueueDepth"
# Ticks that stopped enqueueing because the queue held enough.
DISPATCH_PACED = "DispatchPaced"
# Tasks set aside (ERROR) because claiming them, or handling an execution's end, raised.
TASKS_SET_ASIDE = "TasksSetAside"
# Expired leases whose handling raised, taken out of the lease index by the reaper.
LEASES_SET_ASIDE = "LeasesSetAside"
# Ticks of the looping tick that raised; the loop backs off and goes on.
TICK_FAILURES = "TickFailures"
# Steps of the wall clock (forward or back) seen against a monotonic clock
# (decision 0037): cursors rewound, leases measured as if it had not stepped.
CLOCK_STEPS = "ClockSteps"

# Totals, so that failures and retries have a denominator (issue 13). An attempt
# counts once it ends, succeeded or failed: ``Failures / Attempts`` is the failure rate.
ATTEMPTS = "Attempts"
# Executions that reached a final status (SUCCEEDED, FAILED, SKIPPED), by outcome.
EXECUTIONS_FINISHED = "ExecutionsFinished"
OUTCOME_DIMENSION = "outcome"
# Seconds a handler call took (the HTTP delivery or the Python handler).
HANDLER_DURATION = "HandlerDuration"
# Seconds from a dispatch message's send (or its due time, if later) to a worker
# starting it: how long executions wait in the queue for a worker.
QUEUE_LATENCY = "QueueLatency"
# Python handler calls still running past their timeout in one worker process (a
# gauge, sent when a call overruns and when an overrunning one returns): each holds
# a thread and, with ``python_handler_concurrency``, one of the process's turns.
PYTHON_HANDLERS_OVERRUNNING = "PythonHandlersOverrunning"
# One for each tick of the looping tick, by shard: a shard without one is not ticked.
TICK_HEARTBEAT = "TickHeartbeat"
SHARD_DIMENSION = "shard"
