"""An execution read back from a DynamoDB item (the domain reads the record), and the
table's keys and indexes checked against the record's names."""

from __future__ import annotations

from typing import Any

from dynacron.adapters.aws.items import from_item
from dynacron.definitions.resources import (
    ATTENTION_INDEX,
    DEAD_LETTER_INDEX,
    EXECUTIONS,
    LEASE_INDEX,
)
from dynacron.domain.executions.execution import Execution, HandlerCallRecord
from dynacron.domain.executions.record import (
    ATTENTION_AT,
    ATTENTION_TENANT,
    DEAD_LETTER,
    DEAD_LETTERED_AT,
    EXPIRES_AT,
    LEASE_SHARD,
    LEASE_UNTIL,
    call_from_record,
    execution_from_record,
)


def execution_from_item(item: dict[str, Any]) -> Execution:
    return execution_from_record(from_item(item))


# The record's attribute names are the domain's (its transitions test them); the
# resources that key, index and expire the table must name the same ones.
if EXECUTIONS.ttl_attribute != EXPIRES_AT:
    raise RuntimeError("executions expire through the executions table's TTL attribute")
if (LEASE_INDEX.partition_key.name, LEASE_INDEX.sort_key.name) != (LEASE_SHARD, LEASE_UNTIL):
    raise RuntimeError("the lease index is keyed by the lease's shard and end")
if (DEAD_LETTER_INDEX.partition_key.name, DEAD_LETTER_INDEX.sort_key.name) != (
    DEAD_LETTER,
    DEAD_LETTERED_AT,
):
    raise RuntimeError("the dead-letter index is keyed by the dead letter's partition and time")
if (ATTENTION_INDEX.partition_key.name, ATTENTION_INDEX.sort_key.name) != (
    ATTENTION_TENANT,
    ATTENTION_AT,
):
    raise RuntimeError("the attention index is keyed by the tenant and when it was listed")


def call_from_item(item: dict[str, Any] | None) -> HandlerCallRecord | None:
    """The handler-call record kept on an execution item, if it holds one."""
    return call_from_record(from_item(item or {}))
