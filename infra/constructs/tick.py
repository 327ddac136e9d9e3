"""The tick: a schedule that starts one looping tick invocation per shard every minute.

EventBridge rules fire at most once a minute, so sub-minute precision comes from
the invocation itself: it waits a minute as its shard's standby, then ticks the
shard every second holding its lease, and hands it to the next minute's invocation
(docs/decisions/0005-tick-design.md, 0036-tick-failover-in-seconds.md).

The looping tick is small (128 MB by default) and hands each large page of due
tasks to the claim function, invoked asynchronously, which claims it with a whole
vCPU and is billed only while there is such work (decision 0025).
"""

from __future__ import annotations

import math

from aws_cdk import Duration
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from dynacron.definitions.environment import (
    CATCHUP_MAX_RUNS_VAR,
    CLAIM_FUNCTION_VAR,
    TICK_BACKLOG_SECONDS_VAR,
    TICK_HEARTBEAT_SECONDS_VAR,
    TICK_MAX_CLAIMS_PER_TASK_VAR,
)
from dynacron.definitions.resources import (
    CENSUS_KEY_PREFIX,
    COORDINATION,
    CURSOR_KEY_PREFIX,
    DISPATCH_QUEUE,
    DUE_INDEX,
    EXECUTIONS,
    TASKS,
)
from dynacron.definitions.tick_timing import LoopTiming
from infra.constructs.foundation import Foundation
from infra.constructs.functions import ITEM_READ_WRITE, allow, allow_census_deletes, index_arn

# A minute as the shard's standby, a minute as its holder, the overlap with the
# invocation after next and the loop's own margin (decision 0036): 150 s.
TICK_TIMEOUT = Duration.seconds(math.ceil(LoopTiming().invocation_seconds))
# EventBridge's finest rate: one invocation per shard per minute.
SCHEDULE_PERIOD = Duration.minutes(round(LoopTiming().schedule_period_seconds / 60))
# EventBridge allows five targets per rule.
TARGETS_PER_RULE = 5
# One page of at most 100 claims takes about 0.3 s at 1,769 MB; the claim stops
# starting rounds 5 s before this (dynacron.entry.events.CLAIM_MARGIN).
CLAIM_TIMEOUT = Duration.seconds(30)


class Tick(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        foundation: Foundation,
    ) -> None:
        super().__init__(scope, construct_id)
        config, storage, queues = foundation.config, foundation.storage, foundation.queues
        self.function = foundation.kit.function(
            self,
            "Function",
            entry="tick",
            memory_mb=config.tick_memory_mb,
            timeout=TICK_TIMEOUT,
            description="stands by for one shard, then ticks it each second for a minute",
        )
        self.claim_function = self._claim_function(foundation)
        # The fairness settings only the tick (and its claims) read.
        for name, value in (
            (TICK_MAX_CLAIMS_PER_TASK_VAR, config.tick_max_claims_per_task),
            (TICK_BACKLOG_SECONDS_VAR, config.tick_backlog_seconds),
            (CATCHUP_MAX_RUNS_VAR, config.catchup_max_runs),
            (TICK_HEARTBEAT_SECONDS_VAR, config.tick_heartbeat_seconds),
        ):
            self.function.add_environment(name, str(value))
            if name != TICK_BACKLOG_SECONDS_VAR:
                self.claim_function.add_environment(name, str(value))
        # The looping tick hands large pages to the claim function, and may invoke
        # nothing else.
        self.function.add_environment(CLAIM_FUNCTION_VAR, self.claim_function.function_arn)
        allow(self.function, ["lambda:InvokeFunction"], [self.claim_function.function_arn])
        tasks, coordination = storage.table(TASKS), storage.table(COORDINATION)
        allow(self.function, ["dynamodb:Query"], [index_arn(tasks, DUE_INDEX)])
        allow(self.function, ["dynamodb:BatchGetItem", "dynamodb:UpdateItem"], [tasks.table_arn])
        # Occurrences passed over by the overlap policy are recorded as SKIPPED executions.
        allow(self.function, ["dynamodb:PutItem"], [storage.table(EXECUTIONS).table_arn])
        allow(
            self.function,
            ITEM_READ_WRITE,
            [coordination.table_arn],
        )
        allow_census_set_aside(self.function, tasks, storage.table(EXECUTIONS))
        # GetQueueAttributes: the queue's depth paces dispatch (see services/tick.py).
        allow(
            self.function,
            ["sqs:GetQueueAttributes", "sqs:SendMessage"],
            [queues.queue(DISPATCH_QUEUE).queue_arn],
        )
        self.rules = self._schedule(config.shard_count)

    def _claim_function(self, foundation: Foundation) -> lambda_.Function:
        """The claim function: one page of due tasks a looping tick handed out.

        It re-reads, sends and claims (the tick's page path), so it has the tick's
        grants for that and nothing else: no due-index query, no lease or cursor
        write, no queue depth. Reserved concurrency caps a burst of it.
        """
        config, storage, queues = foundation.config, foundation.storage, foundation.queues
        function = foundation.kit.function(
            self,
            "ClaimFunction",
            entry="claim",
            memory_mb=config.claim_memory_mb,
            timeout=CLAIM_TIMEOUT,
            description="claims one page of due tasks a looping tick handed out",
        )
        cfn = function.node.default_child
        assert isinstance(cfn, lambda_.CfnFunction)
        cfn.reserved_concurrent_executions = config.claim_reserved_concurrency
        tasks, coordination = storage.table(TASKS), storage.table(COORDINATION)
        allow(function, ["dynamodb:BatchGetItem", "dynamodb:UpdateItem"], [tasks.table_arn])
        # Occurrences passed over by the overlap policy are recorded as SKIPPED executions.
        allow(function, ["dynamodb:PutItem"], [storage.table(EXECUTIONS).table_arn])
        # A shard's tick history (for misfires), from its cursor item; it writes no
        # coordination item at all.
        function.add_to_role_policy(
            iam.PolicyStatement(
                actions=["dynamodb:GetItem"],
                resources=[coordination.table_arn],
                conditions={
                    "ForAllValues:StringLike": {"dynamodb:LeadingKeys": [f"{CURSOR_KEY_PREFIX}*"]}
                },
            )
        )
        allow(function, ["sqs:SendMessage"], [queues.queue(DISPATCH_QUEUE).queue_arn])
        allow_census_set_aside(function, tasks, storage.table(EXECUTIONS))
        # No retries and no destination: a page whose claim failed is still due, and
        # the looping tick hands it out (or claims it) again within seconds; a retry
        # minutes later would only re-read tasks claimed meanwhile. The ClaimErrors
        # alarm says when claims fail.
        function.configure_async_invoke(retry_attempts=0, max_event_age=Duration.minutes(1))
        return function

    def _schedule(self, shard_count: int) -> list[events.Rule]:
        rules = []
        for first in range(0, shard_count, TARGETS_PER_RULE):
            shards = range(first, min(first + TARGETS_PER_RULE, shard_count))
            rules.append(
                events.Rule(
                    self,
                    f"EveryMinuteFromShard{first}",
                    description=f"tick shards {shards.start}-{shards.stop - 1} every minute",
                    schedule=events.Schedule.rate(SCHEDULE_PERIOD),
                    targets=[self._target(shard) for shard in shards],
                )
            )
        # A retried or late invocation is useless once the next minute's has
        # started: the next one covers the shard.
        self.function.configure_async_invoke(retry_attempts=0, max_event_age=Duration.minutes(1))
        return rules

    def _target(self, shard: int) -> targets.LambdaFunction:
        return targets.LambdaFunction(
            self.function,
            event=events.RuleTargetInput.from_object({"shard": shard, "loop": True}),
            retry_attempts=2,
            max_event_age=Duration.minutes(1),
        )


def allow_census_set_aside(
    function: lambda_.Function, tasks: dynamodb.Table, executions: dynamodb.Table
) -> None:
    """A task set aside leaves its tenant's schedule census (decision 0046): its census
    key read from the task, and the census entry (in the executions table, under
    ``census#``) updated in the set-aside's transaction, and deleted after it once it
    counts no task. Its change record (decision 0054, ``changes#``) is a put in that
    transaction: the executions table's PutItem the tick holds for SKIPPED records. A
    fire touches none of them."""
    allow(function, ["dynamodb:GetItem"], [tasks.table_arn])
    allow_census_deletes(function, executions)
    function.add_to_role_policy(
        iam.PolicyStatement(
            actions=["dynamodb:UpdateItem"],
            resources=[executions.table_arn],
            conditions={
                "ForAllValues:StringLike": {"dynamodb:LeadingKeys": [f"{CENSUS_KEY_PREFIX}*"]}
            },
        )
    )
