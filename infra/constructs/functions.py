"""What every dynacron function shares: runtime, architecture, layers, settings, logs, role."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from aws_cdk import Duration, RemovalPolicy, Stack
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from dynacron.definitions import metric_names
from dynacron.definitions.environment import (
    BUCKET_SECONDS_VAR,
    EXECUTION_RETENTION_DAYS_VAR,
    PRIVATE_NETWORKS_VAR,
    SHARD_COUNT_VAR,
)
from dynacron.definitions.resources import CENSUS_KEY_PREFIX, DEPENDENTS_INDEX, IndexDefinition
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


@dataclass(frozen=True)
class VpcPlacement:
    """Where a function runs in a VPC: ``subnets`` (private ones, routed to the
    networks it must reach), and ``security_groups`` (none: CDK makes one that
    allows all outbound traffic)."""

    vpc: ec2.IVpc
    subnets: ec2.SubnetSelection
    security_groups: Sequence[ec2.ISecurityGroup] = ()

    @classmethod
    def from_context(cls, scope: Construct, config: SchedulerConfig) -> VpcPlacement | None:
        """The worker's placement from ids in context (``worker_vpc_id``, ...): no
        lookup, so synthesis needs no account."""
        if config.worker_vpc_id is None:
            return None
        vpc = ec2.Vpc.from_vpc_attributes(
            scope,
            "WorkerVpc",
            vpc_id=config.worker_vpc_id,
            availability_zones=Stack.of(scope).availability_zones,
        )
        subnets = [
            ec2.Subnet.from_subnet_id(scope, f"WorkerSubnet{i}", subnet_id)
            for i, subnet_id in enumerate(config.worker_subnets)
        ]
        groups = [
            ec2.SecurityGroup.from_security_group_id(scope, f"WorkerSecurityGroup{i}", group_id)
            for i, group_id in enumerate(config.worker_security_groups)
        ]
        return cls(vpc, ec2.SubnetSelection(subnets=subnets), groups)


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
        key: kms.IKey | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self._config = config
        # The operator's key for the log groups too (decision 0059), else CloudWatch's.
        self.key = key
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
        if config.private_networks:
            # The API checks a URL against a tenant's grant at registration, the
            # worker again at delivery (decision 0050).
            self.environment[PRIVATE_NETWORKS_VAR] = ",".join(config.private_network_ranges)

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
        placement: VpcPlacement | None = None,
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
            encryption_key=self.key,
        )
        role = iam.Role(
            scope,
            f"{construct_id}Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"dynacron {entry}: {description}",
        )
        log_group.grant_write(role)
        if placement is not None:
            # Lambda makes and removes the function's network interfaces in the VPC
            # with its role: AWS's managed policy for exactly that (CDK adds it only
            # to a role it makes itself).
            role.add_managed_policy(
                iam.ManagedPolicy.from_aws_managed_policy_name(
                    "service-role/AWSLambdaVPCAccessExecutionRole"
                )
            )
            acknowledge(
                role,
                "AwsSolutions::AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/"
                "service-role/AWSLambdaVPCAccessExecutionRole]",
                "AWSLambdaVPCAccessExecutionRole: the network interfaces Lambda needs "
                "to place the worker in the operator's VPC (decision 0050), nothing else.",
            )
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
            vpc=placement.vpc if placement else None,
            vpc_subnets=placement.subnets if placement else None,
            security_groups=list(placement.security_groups) if placement else None,
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
    allow_census_deletes(function, executions)
    allow(function, ["sqs:SendMessage"], [dispatch_queue_arn])


def allow_census_deletes(function: lambda_.Function, executions: dynamodb.Table) -> None:
    """A task set aside, paused, deleted or rescheduled leaves its census entry
    (decision 0046), which is deleted once it counts no task: census entries only."""
    function.add_to_role_policy(
        iam.PolicyStatement(
            actions=["dynamodb:DeleteItem"],
            resources=[executions.table_arn],
            conditions={
                "ForAllValues:StringLike": {"dynamodb:LeadingKeys": [f"{CENSUS_KEY_PREFIX}*"]}
            },
        )
    )
