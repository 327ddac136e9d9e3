"""A target as a person names it: "SQS queue jobs", "Step Functions state machine
nightly", not its ARN. The CLI's tables show it where a task's URL would be; the
console has the same rules in ``console/static/handlers.js``."""

from __future__ import annotations

# service -> (what it is, the ARN resource's prefix before the name)
_KINDS = {
    "lambda": ("Lambda function", "function:"),
    "sqs": ("SQS queue", ""),
    "sns": ("SNS topic", ""),
    "events": ("EventBridge bus", "event-bus/"),
    "states": ("Step Functions state machine", "stateMachine:"),
    "ecs": ("ECS cluster", "cluster/"),
}


def describe_target(arn: str, task_definition_arn: str | None = None) -> str:
    """What ``arn`` names, by service and resource name; the ARN itself when it is
    not one of the services a target may name. An ECS target names its task
    definition (family and revision) and cluster."""
    parts = arn.split(":", 5)
    if len(parts) < 6 or parts[2] not in _KINDS:
        return arn
    kind, prefix = _KINDS[parts[2]]
    resource = parts[5]
    name = resource[len(prefix) :] if prefix and resource.startswith(prefix) else resource
    if parts[2] == "ecs" and task_definition_arn:
        family = task_definition_arn.rsplit("task-definition/", 1)[-1]
        return f"ECS task {family} on cluster {name}"
    return f"{kind} {name}"
