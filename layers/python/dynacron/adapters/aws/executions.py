"""Executions and their leases in DynamoDB (the ``ExecutionStore`` port).

Each state transition is the domain's (``dynacron.domain.executions.transitions``): what it
expects and what it changes; a service builds it. Here each is carried out as one
conditional write (``expressions``), and the queries are answered (``execution_queries``).
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from dynacron.adapters.aws.errors import translating
from dynacron.adapters.aws.execution_items import call_from_item, execution_from_item
from dynacron.adapters.aws.execution_queries import (
    attention_page,
    dead_letter_page,
    expired_lease_ids,
    task_history_page,
)
from dynacron.adapters.aws.expressions import apply_transition, apply_transition_returning
from dynacron.adapters.aws.items import to_item
from dynacron.definitions.resources import LEASE_SHARDS
from dynacron.domain.conditions import Transition
from dynacron.domain.executions.attention import AttentionQuery
from dynacron.domain.executions.execution import Execution, HandlerCallRecord
from dynacron.domain.executions.record import Keeping
from dynacron.domain.tasks.task import shard_for, task_id_of
from dynacron.ports import Applied, Page, StoreUnavailable, Throttled

if TYPE_CHECKING:
    from types_boto3_dynamodb.client import DynamoDBClient


# Conditional writes of one ``apply_each`` in flight at once (boto3's connection pool
# keeps one per record in flight: decision 0034).
EACH_IN_FLIGHT = 16


class DynamoExecutionStore:
    """Executions and their leases. Each transition is one conditional write.

    Every write by a lease holder names the ``lease_token`` it holds, and every
    change of holder (begin, requeue, take_over, redrive) writes a new token: of
    a reaper and a late worker acting on one execution, only one can win.
    """

    def __init__(
        self,
        client: DynamoDBClient,
        table_name: str,
        retention: timedelta,
        lease_shards: int = LEASE_SHARDS,
    ) -> None:
        self._client = translating(client)
        self._table = table_name
        self._retention = retention
        self._lease_shards = lease_shards
        # Its threads start as the first batches need them.
        self._writers = ThreadPoolExecutor(EACH_IN_FLIGHT, "dynacron-executions")

    @property
    def lease_shards(self) -> int:
        return self._lease_shards

    def keeping(self, execution_id: str) -> Keeping:
        return Keeping(str(shard_for(execution_id, self._lease_shards)), self._retention)

    def _key(self, execution_id: str) -> dict[str, Any]:
        return to_item({"task_id": task_id_of(execution_id), "execution_id": execution_id})

    def apply(self, execution_id: str, transition: Transition) -> bool:
        """Carry out ``transition`` as one conditional write; False if it did not hold."""
        return self._apply(execution_id, transition)

    def _apply(self, execution_id: str, transition: Transition) -> bool:
        return apply_transition(self._client, self._table, self._key(execution_id), transition)

    def apply_returning(self, execution_id: str, transition: Transition) -> Applied:
        """As ``apply``, with the item: the new one if the transition held, else the one
        that made it fail (ReturnValuesOnConditionCheckFailure), in the same write."""
        return self._apply_returning(execution_id, transition)

    def _apply_returning(self, execution_id: str, transition: Transition) -> Applied:
        held, item = apply_transition_returning(
            self._client, self._table, self._key(execution_id), transition
        )
        if not item:
            return Applied(held)
        return Applied(held, execution_from_item(item), call_from_item(item))

    def apply_each(
        self, changes: Sequence[tuple[str, Transition]], *, returning: bool = True
    ) -> list[Applied | Exception]:
        """One conditional write per change, as ``apply_returning`` (DynamoDB has no
        conditional batch write), up to ``EACH_IN_FLIGHT`` in flight at once: a batch's
        begins take a round trip or two, not one per record. A throttled or failing
        change is answered with its exception; the store unreachable (any other
        ``StoreUnavailable``) raises once every change has been tried."""

        def one(change: tuple[str, Transition]) -> Applied | Exception:
            try:
                if not returning:
                    return Applied(self._apply(*change))
                return self._apply_returning(*change)
            except Throttled as throttled:
                return throttled
            except StoreUnavailable:
                raise
            except Exception as error:
                return error

        if len(changes) <= 1:
            return [one(change) for change in changes]
        return list(self._writers.map(one, changes))

    def held_call(self, execution_id: str) -> HandlerCallRecord | None:
        """The handler-call record kept on the execution, if any (expired ones too)."""
        response = self._client.get_item(
            TableName=self._table, Key=self._key(execution_id), ConsistentRead=True
        )
        return call_from_item(response.get("Item"))

    def expired_leases(self, shard: int, cutoff: datetime, limit: int) -> list[str]:
        """Ids of executions in one lease shard whose lease ended before ``cutoff``."""
        return expired_lease_ids(self._client, self._table, shard, cutoff, limit)

    def dead_letters(self, tenant_id: str, limit: int, token: str | None) -> Page[Execution]:
        """A tenant's dead-lettered executions, most recent first (its own index partition)."""
        return dead_letter_page(self._client, self._table, tenant_id, limit, token)

    def needing_attention(
        self, tenant_id: str, query: AttentionQuery, limit: int, token: str | None
    ) -> Page[Execution]:
        """The tenant's listed executions that ``query`` admits, newest first by when
        they were listed (its own partition of the attention index)."""
        return attention_page(self._client, self._table, tenant_id, query, limit, token)

    def get(self, execution_id: str) -> Execution | None:
        response = self._client.get_item(
            TableName=self._table, Key=self._key(execution_id), ConsistentRead=True
        )
        item = response.get("Item")
        return execution_from_item(item) if item else None

    def list_for_task(self, task_id: str, limit: int, token: str | None) -> Page[Execution]:
        """A task's executions, newest scheduled time first."""
        return task_history_page(self._client, self._table, task_id, limit, token)
