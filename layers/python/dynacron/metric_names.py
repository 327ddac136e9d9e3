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
