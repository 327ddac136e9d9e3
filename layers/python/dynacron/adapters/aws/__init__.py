"""The AWS adapter set: DynamoDB tables, SQS queues, a Lambda invoke; clients injected."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Protocol

from dynacron.adapters.aws.calendars import DynamoCalendarStore
from dynacron.adapters.aws.create_keys import DynamoCreateKeys
from dynacron.adapters.aws.cursors import DynamoCursorStore
from dynacron.adapters.aws.executions import DynamoExecutionStore
from dynacron.adapters.aws.leases import DynamoShardLeases
from dynacron.adapters.aws.limits import DynamoLimitStore
from dynacron.adapters.aws.queue import SqsDeadLetterQueue, SqsDispatchQueue
from dynacron.adapters.aws.tasks import DynamoTaskStore
from dynacron.adapters.aws.tenants import DynamoTenantStore
from dynacron.ports import AdapterSet

if TYPE_CHECKING:
    from types_boto3_dynamodb.client import DynamoDBClient
    from types_boto3_sqs.client import SQSClient


class AwsResourceNames(Protocol):
    """The tables and queues the AWS set works on (``Settings`` has them)."""

    @property
    def tasks_table(self) -> str: ...
    @property
    def executions_table(self) -> str: ...
    @property
    def coordination_table(self) -> str: ...
    @property
    def dispatch_queue_url(self) -> str: ...
    @property
    def dead_letter_queue_url(self) -> str: ...


def aws_adapters(
    settings: AwsResourceNames,
    *,
    dynamodb: DynamoDBClient,
    sqs: SQSClient,
    execution_retention: timedelta,
) -> AdapterSet:
    """Every port on the tables and queues ``settings`` name, through the given clients."""
    return AdapterSet(
        tasks=DynamoTaskStore(
            dynamodb,
            settings.tasks_table,
            settings.coordination_table,
            census_table=settings.executions_table,
        ),
        executions=DynamoExecutionStore(dynamodb, settings.executions_table, execution_retention),
        cursors=DynamoCursorStore(dynamodb, settings.coordination_table),
        tenants=DynamoTenantStore(dynamodb, settings.coordination_table),
        create_keys=DynamoCreateKeys(dynamodb, settings.coordination_table),
        leases=DynamoShardLeases(dynamodb, settings.coordination_table),
        limits=DynamoLimitStore(dynamodb, settings.coordination_table),
        queue=SqsDispatchQueue(sqs, settings.dispatch_queue_url),
        dead_letter_queue=SqsDeadLetterQueue(sqs, settings.dead_letter_queue_url),
        calendars=DynamoCalendarStore(dynamodb, settings.coordination_table),
    )
