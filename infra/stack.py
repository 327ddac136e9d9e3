"""The dynacron stack: the scheduler on its own, with its endpoints as outputs."""

from __future__ import annotations

from typing import Any

from aws_cdk import CfnOutput, Stack
from constructs import Construct

from dynacron.definitions.resources import COORDINATION, EXECUTIONS, TASKS
from infra.config import SchedulerConfig
from infra.constructs.scheduler import DynacronScheduler
from infra.layer import LayerAssets


class DynacronStack(Stack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: SchedulerConfig,
        layers: LayerAssets,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        scheduler = DynacronScheduler(self, "Scheduler", config=config, layers=layers)
        CfnOutput(self, "ApiUrl", value=scheduler.api.rest_api.url)
        CfnOutput(self, "AlarmTopicArn", value=scheduler.monitoring.topic.topic_arn)
        CfnOutput(self, "DashboardName", value=scheduler.monitoring.dashboard.dashboard_name)
        # What an operator passes to `dynacron tenants set-limits --coordination-table`.
        CfnOutput(
            self,
            "CoordinationTable",
            value=scheduler.storage.table(COORDINATION).table_name,
            description="dynacron tenants set-limits/show --coordination-table",
        )
        # What an operator passes to `dynacron admin backfill-name-keys --tasks-table`.
        CfnOutput(
            self,
            "TasksTable",
            value=scheduler.storage.table(TASKS).table_name,
            description="dynacron admin backfill-name-keys --tasks-table",
        )
        # Where the schedule census lives: `dynacron admin backfill-census`.
        CfnOutput(
            self,
            "ExecutionsTable",
            value=scheduler.storage.table(EXECUTIONS).table_name,
            description="dynacron admin backfill-census --executions-table",
        )
