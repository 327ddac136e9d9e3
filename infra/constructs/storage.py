"""The DynamoDB tables, each built from its definition in ``dynacron.definitions.resources``."""

from __future__ import annotations

from aws_cdk import RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_kms as kms
from constructs import Construct

from dynacron.definitions.resources import (
    NAME_INDEX,
    TABLES,
    TASKS,
    UNSHARDED_NAME_INDEX,
    UNSHARDED_TENANT_INDEX,
    IndexDefinition,
    Key,
    TableDefinition,
)
from infra.config import SchedulerConfig

# DynamoDB auto scaling keeps consumed capacity near this share of what is provisioned.
TARGET_UTILIZATION_PERCENT = 70


class Storage(Construct):
    """Tasks, executions and coordination tables.

    On-demand by default (idle costs nothing but storage); provisioned with auto
    scaling as an option for steady, predictable load. Point-in-time recovery on,
    TTL on the definitions that expire records, deletion protection by stage.
    Encrypted with AWS's own key, or with the operator's ``key`` (decision 0059).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: SchedulerConfig,
        key: kms.IKey | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self._config = config
        self._key = key
        self.tables = {definition.logical_id: self._table(definition) for definition in TABLES}

    def table(self, definition: TableDefinition) -> dynamodb.Table:
        return self.tables[definition.logical_id]

    def _table(self, definition: TableDefinition) -> dynamodb.Table:
        config = self._config
        provisioned = config.billing == "provisioned"
        capacity = config.provisioned_min_capacity if provisioned else None
        table = dynamodb.Table(
            self,
            definition.logical_id,
            partition_key=_attribute(definition.partition_key),
            sort_key=_attribute(definition.sort_key) if definition.sort_key else None,
            billing_mode=dynamodb.BillingMode.PROVISIONED
            if provisioned
            else dynamodb.BillingMode.PAY_PER_REQUEST,
            read_capacity=capacity,
            write_capacity=capacity,
            time_to_live_attribute=definition.ttl_attribute,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=config.point_in_time_recovery
            ),
            deletion_protection=config.protect_data,
            removal_policy=RemovalPolicy.RETAIN if config.protect_data else RemovalPolicy.DESTROY,
            encryption=dynamodb.TableEncryption.CUSTOMER_MANAGED if self._key else None,
            encryption_key=self._key,
        )
        for index in self._indexes(definition):
            table.add_global_secondary_index(
                index_name=index.name,
                partition_key=_attribute(index.partition_key),
                sort_key=_attribute(index.sort_key) if index.sort_key else None,
                projection_type=dynamodb.ProjectionType(index.projection),
                non_key_attributes=list(index.non_key_attributes) or None,
                read_capacity=capacity,
                write_capacity=capacity,
            )
        if provisioned:
            self._auto_scale(table, definition)
        return table

    def _indexes(self, definition: TableDefinition) -> tuple[IndexDefinition, ...]:
        """The table's indexes; the tasks table's at a step of the upgrade to the
        write-sharded ones (decision 0053), one index added or deleted a step."""
        if definition is not TASKS:
            return definition.indexes
        return tasks_indexes(self._config.task_index_upgrade)

    def _auto_scale(self, table: dynamodb.Table, definition: TableDefinition) -> None:
        bounds = {
            "min_capacity": self._config.provisioned_min_capacity,
            "max_capacity": self._config.provisioned_max_capacity,
        }
        scalables = [
            table.auto_scale_read_capacity(**bounds),
            table.auto_scale_write_capacity(**bounds),
        ]
        for index in self._indexes(definition):
            scalables += [
                table.auto_scale_global_secondary_index_read_capacity(index.name, **bounds),
                table.auto_scale_global_secondary_index_write_capacity(index.name, **bounds),
            ]
        for scalable in scalables:
            scalable.scale_on_utilization(target_utilization_percent=TARGET_UTILIZATION_PERCENT)


def _attribute(key: Key) -> dynamodb.Attribute:
    kind = dynamodb.AttributeType.NUMBER if key.type == "N" else dynamodb.AttributeType.STRING
    return dynamodb.Attribute(name=key.name, type=kind)


def tasks_indexes(upgrade_step: int) -> tuple[IndexDefinition, ...]:
    """The tasks table's indexes at ``upgrade_step`` (``task_index_upgrade``): 1 adds
    the tenant-part index beside the old tenant and name indexes, 2 the name-part
    index, 3 deletes the old tenant index, and 0 (the end) the old name index."""
    unsharded = (UNSHARDED_TENANT_INDEX, UNSHARDED_NAME_INDEX)
    steps = {
        1: tuple(i for i in TASKS.indexes if i is not NAME_INDEX) + unsharded,
        2: TASKS.indexes + unsharded,
        3: (*TASKS.indexes, UNSHARDED_NAME_INDEX),
    }
    return steps.get(upgrade_step, TASKS.indexes)
