"""Completion tracking (decision 0049): the Step Functions and ECS state-change
events of runs that ended, routed to a small function that ends their executions;
and the reaper allowed to describe a run whose event was lost, as its task's role."""

from __future__ import annotations

from typing import Any

from aws_cdk import Duration
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from dynacron.definitions.completion_events import (
    ECS_ENDED,
    ECS_EVENT,
    ECS_SOURCE,
    RUN_NAME_PREFIX,
    STEP_FUNCTIONS_ENDED,
    STEP_FUNCTIONS_EVENT,
    STEP_FUNCTIONS_SOURCE,
)
from dynacron.definitions.resources import DEAD_LETTER_QUEUE, DISPATCH_QUEUE, EXECUTIONS, TASKS
from infra.constructs.foundation import Foundation
from infra.constructs.functions import allow, allow_follow_ups
from infra.constructs.worker import allow_target_roles

COMPLETIONS_TIMEOUT = Duration.seconds(30)
# EventBridge retries a failed invocation (DynamoDB unreachable) for this long.
EVENT_MAX_AGE = Duration.hours(24)

# Only the ends of dynacron's runs: a run starting or provisioning, and every run of
# the account that dynacron did not start, invoke nothing.
STEP_FUNCTIONS_ENDS: dict[str, Any] = {
    "source": [STEP_FUNCTIONS_SOURCE],
    "detail_type": [STEP_FUNCTIONS_EVENT],
    "detail": {"status": list(STEP_FUNCTIONS_ENDED), "name": [{"prefix": RUN_NAME_PREFIX}]},
}
ECS_TASK_ENDS: dict[str, Any] = {
    "source": [ECS_SOURCE],
    "detail_type": [ECS_EVENT],
    "detail": {"lastStatus": [ECS_ENDED], "startedBy": [{"prefix": RUN_NAME_PREFIX}]},
}


class CompletionTracking(Construct):
    """Two rules on the account's default event bus, one function they invoke."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        foundation: Foundation,
        reaper: lambda_.Function,
    ) -> None:
        super().__init__(scope, construct_id)
        config, kit, storage = foundation.config, foundation.kit, foundation.storage
        queues = foundation.queues
        self.function = kit.function(
            self,
            "Function",
            entry="completions",
            memory_mb=256,
            timeout=COMPLETIONS_TIMEOUT,
            description="ends tracked executions when their Step Functions or ECS runs end",
        )
        # Ends an execution as a callback does: reads it and its task, finishes it or
        # queues its next attempt (allow_follow_ups' grants), or copies it to the
        # dead-letter queue. No role is assumed: the event says all it needs.
        allow_follow_ups(
            self.function,
            storage.table(TASKS),
            storage.table(EXECUTIONS),
            queues.queue(DISPATCH_QUEUE).queue_arn,
        )
        allow(self.function, ["sqs:SendMessage"], [queues.queue(DEAD_LETTER_QUEUE).queue_arn])
        target = targets.LambdaFunction(
            self.function, retry_attempts=185, max_event_age=EVENT_MAX_AGE
        )
        self.rules = [
            events.Rule(
                self,
                "StateMachineEnds",
                description="tracked Step Functions executions that ended (decision 0049)",
                event_pattern=events.EventPattern(**STEP_FUNCTIONS_ENDS),
                targets=[target],
            ),
            events.Rule(
                self,
                "EcsTaskEnds",
                description="tracked ECS tasks that stopped (decision 0049)",
                event_pattern=events.EventPattern(**ECS_TASK_ENDS),
                targets=[target],
            ),
        ]
        # A lost event: the reaper describes the run, as the task's role, once the
        # tracked lease is overdue (an hour): the same roles the worker may assume.
        allow_target_roles(reaper, config.target_roles)
