"""What every dynacron function shares: runtime, architecture, layers, settings, logs, role."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from dynacron.definitions import metric_names
from dynacron.definitions.environment import (
    BUCKET_SECONDS_VAR,
    EXECUTION_RETENTION_DAYS_VAR,
    SHARD_COUNT_VAR,
)
from dynacron.definitions.resources import DEPENDENTS_INDEX, IndexDefinition
from infra.config import SchedulerConfig
from infra.constructs.nag import acknowledge
from infra.layer import FUNCTIONS, LayerAssets

RUNTIME = lambda_.Runtime.PYTHON_3_12
ARCHITECTURE = lambda_.Architecture.ARM_64
HANDLER = "handler.handler"
ITEM_READ_WRITE = (
    "dynamodb:GetItem",
    "dynamodb:PutItem",
    "dynamodb:UpdateItem",
    "dynamodb:DeleteItem",
)
RETENTION = {
    1: logs.RetentionDays.ONE_DAY,
    3: logs.RetentionDays.THREE_DAYS,
    7: logs.RetentionDays.ONE_WEEK,
    14: logs.RetentionDays.TWO_WEEKS,
    30: logs.RetentionDays.ONE_MONTH,
    90: logs.RetentionDays.THREE_MONTHS,
    180: logs.RetentionDays.SIX_MONTHS,
    365: logs.RetentionDays.ONE_YEAR,
}


class FunctionKit(Construct):
    """The shared layers and environment, and a factory for functions that use them."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: SchedulerConfig,
        layers: LayerAssets,
        resource_environment: Mapping[str, str],
    ) -> None:
        super().__init__(scope, construct_id)
        self._config = config
        self.layers: Sequence[lambda_.ILayerVersion] = [
            lambda_.LayerVersion(
                self,
                name,
                code=lambda_.Code.from_asset(str(path)),
                compatible_runtimes=[RUNTIME],
                compatible_architectures=[ARCHITECTURE],
                description=f"dynacron {name.lower()}",
            )
            for name, path in (("Dependencies", layers.dependencies), ("Package", layers.package))
        ]
        self.environment = {
            **resource_environment,
            SHARD_COUNT_VAR: str(config.shard_count),
            BUCKET_SECONDS_VAR: str(config.bucket_seconds),
            EXECUTION_RETENTION_DAYS_VAR: str(config.execution_retention_days),
            "POWERTOOLS_METRICS_NAMESPACE": metric_names.NAMESPACE,
            "POWERTOOLS_SERVICE_NAME": metric_names.SERVICE,
        }

    def function(
        self,
        scope: Construct,
        construct_id: str,
        *,
        entry: str,
        memory_mb: int,
        timeout: Duration,
        description: str,
        code: lambda_.Code | None = None,
        handler: str = HANDLER,
    ) -> lambda_.Function:
        """A function running ``functions/<entry>/handler.py`` (or ``code``) with the layers.

        Its role may only write its own log group; each concern grants the rest.
        """
        log_group = logs.LogGroup(
            scope,
            f"{construct_id}Logs",
            retention=RETENTION[self._config.log_retention_days],
            removal_policy=RemovalPolicy.RETAIN
            if self._config.protect_data
            else RemovalPolicy.DESTROY,
        )
        role = iam.Role(
            scope,
            f"{construct_id}Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"dynacron {entry}: {description}",
        )
        log_group.grant_write(role)
        function = lambda_.Function(
            scope,
            construct_id,
            runtime=RUNTIME,
            architecture=ARCHITECTURE,
            code=code or lambda_.Code.from_asset(str(Path(FUNCTIONS) / entry)),
            handler=handler,
            layers=list(self.layers),
            memory_size=memory_mb,
            timeout=timeout,
            environment=dict(self.environment),
            log_group=log_group,
            role=role,
            description=description,
        )
        acknowledge(
            function,
            "AwsSolutions-L1",
            "Python 3.12 on purpose: the layer's binary wheels are built for it and the "
            "tests run against it; moving to a newer runtime is a deliberate upgrade.",
        )
        return function


def allow(function: lambda_.Function, actions: Sequence[str], resources: Sequence[str]) -> None:
    """Let ``function`` do exactly ``actions`` on exactly ``resources``."""
    function.add_to_role_policy(
        iam.PolicyStatement(actions=sorted(actions), resources=list(resources))
    )


def index_arn(table: dynamodb.Table, index: IndexDefinition) -> str:
    """The ARN of one global secondary index of ``table``."""
    return f"{table.table_arn}/index/{index.name}"


def allow_follow_ups(
    function: lambda_.Function,
    tasks: dynamodb.Table,
    executions: dynamodb.Table,
    dispatch_queue_arn: str,
) -> None:
    """What ending an execution (``services/follow_ups.py``) and starting a run outside
    the tick (trigger, backfill, dependents, a buffered occurrence) need: read the
    task and its dependents, free its run slot (a versioned put), set aside a
    dependent that cannot be read (an update, decision 0021), record the new
    execution, send it."""
    allow(
        function,
        [
            "dynamodb:GetItem",
            "dynamodb:BatchGetItem",
            "dynamodb:PutItem",
            "dynamodb:UpdateItem",
        ],
        [tasks.table_arn],
    )
    allow(function, ["dynamodb:Query"], [index_arn(tasks, DEPENDENTS_INDEX)])
    allow(
        function,
        ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"],
        [executions.table_arn],
    )
    allow(function, ["sqs:SendMessage"], [dispatch_queue_arn])
