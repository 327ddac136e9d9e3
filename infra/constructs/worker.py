"""The worker, fed by the dispatch queue, and the reaper, on a schedule."""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import ArnFormat, CfnOutput, Duration, Stack
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as event_sources
from constructs import Construct

from dynacron.definitions.environment import HANDLER_MODULES_VAR, WORKER_CONCURRENCY_VAR
from dynacron.definitions.resources import (
    COORDINATION,
    DEAD_LETTER_INDEX,
    DEAD_LETTER_QUEUE,
    DISPATCH_QUEUE,
    EXECUTIONS,
    HOST_KEY_PREFIX,
    LEASE_INDEX,
    LIMIT_KEY_PREFIXES,
    TASKS,
    TENANT_KEY_PREFIX,
    WORKER_TIMEOUT_SECONDS,
)
from infra.constructs.foundation import Foundation
from infra.constructs.functions import (
    HANDLER,
    ITEM_READ_WRITE,
    VpcPlacement,
    allow,
    allow_follow_ups,
    index_arn,
)
from infra.constructs.nag import acknowledge

REAPER_TIMEOUT = Duration.minutes(1)


class Worker(Construct):
    """Runs each dispatched execution: SQS batches with partial failures reported back,
    ``worker_concurrency`` records of a batch at once.

    ``worker_code``/``worker_handler`` replace the default entry point with one of
    your own that imports your Python handlers before dynacron's worker runs.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        foundation: Foundation,
        worker_code: lambda_.Code | None = None,
        worker_handler: str = HANDLER,
        handler_modules: Sequence[str] = (),
        placement: VpcPlacement | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        config, kit, storage = foundation.config, foundation.kit, foundation.storage
        queues = foundation.queues
        dispatch = queues.queue(DISPATCH_QUEUE)
        self.function = kit.function(
            self,
            "Function",
            entry="worker",
            memory_mb=config.worker_memory_mb,
            timeout=Duration.seconds(WORKER_TIMEOUT_SECONDS),
            description="calls the handler of each dispatched execution",
            code=worker_code,
            handler=worker_handler,
            placement=placement,
        )
        if handler_modules:
            self.function.add_environment(HANDLER_MODULES_VAR, ",".join(handler_modules))
        self.function.add_environment(WORKER_CONCURRENCY_VAR, str(config.worker_concurrency))
        self.function.add_event_source(
            event_sources.SqsEventSource(
                dispatch,
                batch_size=config.worker_batch_size,
                max_batching_window=Duration.seconds(config.worker_batch_window_seconds),
                max_concurrency=config.worker_max_concurrency,
                report_batch_item_failures=True,
            )
        )
        # Reads the task it runs and records the execution, with the Powertools
        # idempotency record of its handler call on the same item (decision 0016):
        # what allow_follow_ups below grants; the event source grants the receive.
        # A batch's host breakers are read in one BatchGetItem (decision 0034).
        self.function.add_to_role_policy(
            iam.PolicyStatement(
                actions=["dynamodb:BatchGetItem"],
                resources=[storage.table(COORDINATION).table_arn],
                conditions={
                    "ForAllValues:StringLike": {"dynamodb:LeadingKeys": [f"{HOST_KEY_PREFIX}*"]}
                },
            )
        )
        # Limits, breakers and pauses shared by every worker: only those records of
        # the coordination table, never the tick's leases and cursors.
        self.function.add_to_role_policy(
            iam.PolicyStatement(
                actions=sorted(ITEM_READ_WRITE),
                resources=[storage.table(COORDINATION).table_arn],
                conditions={
                    "ForAllValues:StringLike": {
                        "dynamodb:LeadingKeys": [f"{p}*" for p in LIMIT_KEY_PREFIXES]
                    }
                },
            )
        )
        # A retry, or an execution waiting on a limit, is sent with a delay (the
        # dispatch queue's send is allow_follow_ups'); an exhausted one is copied to
        # the dead-letter queue.
        dead_letters = queues.queue(DEAD_LETTER_QUEUE)
        allow(self.function, ["sqs:SendMessage"], [dead_letters.queue_arn])
        # Reads the tenant's signing secrets to sign each delivery; only those records.
        self.function.add_to_role_policy(
            iam.PolicyStatement(
                actions=["dynamodb:GetItem"],
                resources=[storage.table(COORDINATION).table_arn],
                conditions={
                    "ForAllValues:StringLike": {"dynamodb:LeadingKeys": [f"{TENANT_KEY_PREFIX}*"]}
                },
            )
        )
        allow_follow_ups(
            self.function, storage.table(TASKS), storage.table(EXECUTIONS), dispatch.queue_arn
        )
        # The tenant of a task deleted before its execution began, for a message sent
        # before messages named it: read from the task's earlier executions.
        allow(self.function, ["dynamodb:Query"], [storage.table(EXECUTIONS).table_arn])
        self._allow_target_roles(config.target_roles)

        self.role_arn_output = CfnOutput(
            self,
            "RoleArn",
            value=self.function.role.role_arn if self.function.role else "",
            description="The worker's role: what an AWS target's role trusts (docs/targets.md)",
        )
        self.reaper = kit.function(
            self,
            "ReaperFunction",
            entry="reaper",
            memory_mb=config.reaper_memory_mb,
            timeout=REAPER_TIMEOUT,
            description="makes executions whose lease ran out runnable again",
        )
        executions = storage.table(EXECUTIONS)
        allow(
            self.reaper,
            ["dynamodb:Query"],
            # Not the attention index: only the API lists executions across tasks.
            [
                executions.table_arn,
                index_arn(executions, LEASE_INDEX),
                index_arn(executions, DEAD_LETTER_INDEX),
            ],
        )
        # Takes over an execution, reads its task and sends it again: allow_follow_ups'
        # grants; an exhausted one is copied to the dead-letter queue.
        allow(self.reaper, ["sqs:SendMessage"], [dead_letters.queue_arn])
        allow_follow_ups(self.reaper, storage.table(TASKS), executions, dispatch.queue_arn)
        self.reaper_rule = events.Rule(
            self,
            "ReapEveryMinute",
            description="find executions whose lease ran out",
            schedule=events.Schedule.rate(Duration.minutes(1)),
            targets=[targets.LambdaFunction(self.reaper, retry_attempts=0)],
        )
        self.reaper.configure_async_invoke(retry_attempts=0, max_event_age=Duration.minutes(1))

    def _allow_target_roles(self, patterns: str) -> None:
        """The worker acts as the role an AWS target names (decision 0047)."""
        allow_target_roles(self.function, patterns)


def target_role_arns(scope: Construct, patterns: str) -> list[str]:
    """The role ARN patterns ``target_roles`` names: a role name with its path is one
    of the stack's account (its partition and account as tokens), an ARN stays."""
    stack = Stack.of(scope)
    return [
        pattern
        if pattern.startswith("arn:")
        else stack.format_arn(
            service="iam",
            region="",
            resource="role",
            resource_name=pattern,
            arn_format=ArnFormat.SLASH_RESOURCE_NAME,
        )
        for pattern in (part.strip() for part in patterns.split(","))
        if pattern
    ]


def allow_target_roles(function: lambda_.Function, patterns: str) -> None:
    """``function`` may act as the role an AWS target names (decision 0047), only for
    roles the operator allows: by default those under the path /dynacron-target/
    of this account. Each role's trust policy decides the rest."""
    allowed = [pattern.strip() for pattern in patterns.split(",") if pattern.strip()]
    if not allowed:
        return
    resources = target_role_arns(function, patterns)
    function.add_to_role_policy(
        iam.PolicyStatement(actions=["sts:AssumeRole"], resources=resources)
    )
    role = function.role
    policy = role.node.try_find_child("DefaultPolicy") if role is not None else None
    for pattern in allowed:
        if "*" not in pattern:
            continue
        # cdk-nag names the finding after the resource, its tokens as <Name>.
        shown = (
            pattern
            if pattern.startswith("arn:")
            else f"arn:<AWS::Partition>:iam::<AWS::AccountId>:role/{pattern}"
        )
        acknowledge(
            policy or function,
            f"AwsSolutions::AwsSolutions-IAM5[Resource::{shown}]",
            "sts:AssumeRole on the roles the operator allows AWS targets to name "
            "(context target_roles): a pattern, as the roles are the tenants' own; each "
            "role's trust policy names this worker's role and the tenant's external id",
        )
