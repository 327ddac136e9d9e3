"""The tick: a schedule that starts one looping tick invocation per shard every minute.

EventBridge rules fire at most once a minute, so sub-minute precision comes from
the invocation itself: it ticks its shard every second, holding the shard's
lease, until the next minute's invocation relieves it (docs/decisions/0005-tick-design.md).
"""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from constructs import Construct

from dynacron.config import (
    CATCHUP_MAX_RUNS_VAR,
    TICK_BACKLOG_SECONDS_VAR,
    TICK_HEARTBEAT_SECONDS_VAR,
    TICK_MAX_CLAIMS_PER_TASK_VAR,
)
from dynacron.resources import COORDINATION, DISPATCH_QUEUE, DUE_INDEX, EXECUTIONS, TASKS
from infra.constructs.foundation import Foundation
from infra.constructs.functions import ITEM_READ_WRITE, allow, index_arn

# A minute of ticking, plus room for a late successor and the loop's own margin
# (the loop stops 15 s before this timeout to release its lease cleanly).
TICK_TIMEOUT = Duration.minutes(2)
# EventBridge allows five targets per rule.
TARGETS_PER_RULE = 5


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
            description="ticks one shard each second for about a minute",
        )
        # The fairness settings only the tick reads.
        for name, value in (
            (TICK_MAX_CLAIMS_PER_TASK_VAR, config.tick_max_claims_per_task),
            (TICK_BACKLOG_SECONDS_VAR, config.tick_backlog_seconds),
            (CATCHUP_MAX_RUNS_VAR, config.catchup_max_runs),
            (TICK_HEARTBEAT_SECONDS_VAR, config.tick_heartbeat_seconds),
        ):
            self.function.add_environment(name, str(value))
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
        # GetQueueAttributes: the queue's depth paces dispatch (see services/tick.py).
        allow(
            self.function,
            ["sqs:GetQueueAttributes", "sqs:SendMessage"],
            [queues.queue(DISPATCH_QUEUE).queue_arn],
        )
        self.rules = self._schedule(config.shard_count)

    def _schedule(self, shard_count: int) -> list[events.Rule]:
        rules = []
        for first in range(0, shard_count, TARGETS_PER_RULE):
            shards = range(first, min(first + TARGETS_PER_RULE, shard_count))
            rules.append(
                events.Rule(
                    self,
                    f"EveryMinuteFromShard{first}",
                    description=f"tick shards {shards.start}-{shards.stop - 1} every minute",
                    schedule=events.Schedule.rate(Duration.minutes(1)),
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
