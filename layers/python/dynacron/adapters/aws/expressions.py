"""A domain transition as one DynamoDB write: its condition as a ConditionExpression,
its changes as an UpdateExpression (or, for a new record, a conditional PutItem's item),
and that write carried out.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from botocore.exceptions import ClientError

from dynacron.adapters.aws.items import conditional_write, is_condition_failure, to_item
from dynacron.domain.conditions import (
    AllOf,
    AnyOf,
    AtMost,
    Below,
    Condition,
    Equals,
    Exists,
    Missing,
    NotEquals,
    Plus,
    Transition,
)

if TYPE_CHECKING:
    from types_boto3_dynamodb.client import DynamoDBClient

_PLAIN_NAME = re.compile(r"\w+")


class Placeholders:
    """The ``#name`` and ``:value`` placeholders of one request's expressions."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}
        self.values: dict[str, Any] = {}

    def name(self, attribute: str) -> str:
        for placeholder, named in self.names.items():
            if named == attribute:
                return placeholder
        readable = _PLAIN_NAME.fullmatch(attribute) is not None
        placeholder = f"#{attribute}" if readable else f"#n{len(self.names)}"
        self.names[placeholder] = attribute
        return placeholder

    def value(self, value: Any) -> str:
        if value is None:
            raise ValueError("DynamoDB compares with values, never None: test Missing instead")
        placeholder = f":v{len(self.values)}"
        self.values[placeholder] = value
        return placeholder

    def condition(self, condition: Condition) -> str:
        """``condition`` as a ConditionExpression."""
        match condition:
            case Exists(field):
                return f"attribute_exists({self.name(field)})"
            case Missing(field):
                return f"attribute_not_exists({self.name(field)})"
            case Equals(field, value):
                return f"{self.name(field)} = {self.value(value)}"
            case NotEquals(field, value):
                return f"{self.name(field)} <> {self.value(value)}"
            case Below(field, value):
                return f"{self.name(field)} < {self.value(value)}"
            case AtMost(field, value):
                return f"{self.name(field)} <= {self.value(value)}"
            case AllOf():
                return " AND ".join(self._operand(c) for c in condition.conditions)
            case AnyOf():
                return " OR ".join(self._operand(c) for c in condition.conditions)
        raise TypeError(f"no DynamoDB expression for {condition!r}")

    def _operand(self, condition: Condition) -> str:
        text = self.condition(condition)
        return f"({text})" if isinstance(condition, AllOf | AnyOf) else text

    def update(self, transition: Transition) -> str:
        """The changes of ``transition`` (not a new record) as an UpdateExpression."""
        assignments = [f"{self.name(n)} = {self.value(v)}" for n, v in transition.sets.items()]
        assignments += [
            f"{self.name(n)} = {self.name(computed.source)}"
            + (f" + {self.value(computed.amount)}" if isinstance(computed, Plus) else "")
            for n, computed in transition.computes.items()
        ]
        clauses = []
        if assignments:
            clauses.append("SET " + ", ".join(assignments))
        if transition.removes:
            clauses.append("REMOVE " + ", ".join(self.name(n) for n in sorted(transition.removes)))
        if not clauses:
            raise ValueError("a transition that changes nothing is no write")
        return " ".join(clauses)

    def request(self) -> dict[str, Any]:
        """The ExpressionAttributeNames and -Values used (a request may name none)."""
        request: dict[str, Any] = {}
        if self.names:
            request["ExpressionAttributeNames"] = dict(self.names)
        if self.values:
            request["ExpressionAttributeValues"] = to_item(self.values)
        return request


def write_request(transition: Transition, key: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments (but the table) of the one write that carries out
    ``transition`` on the item at ``key``: a conditional PutItem of the whole record
    when it ``creates`` one, a conditional DeleteItem when it ``deletes`` it, else a
    conditional UpdateItem."""
    placeholders = Placeholders()
    if transition.deletes:
        condition = placeholders.condition(transition.expects)
        return {"Key": key, "ConditionExpression": condition, **placeholders.request()}
    if transition.creates:
        condition = placeholders.condition(transition.expects)
        return {
            "Item": to_item(dict(transition.sets)),
            "ConditionExpression": condition,
            **placeholders.request(),
        }
    update = placeholders.update(transition)
    condition = placeholders.condition(transition.expects)
    return {
        "Key": key,
        "UpdateExpression": update,
        "ConditionExpression": condition,
        **placeholders.request(),
    }


def apply_transition(
    client: DynamoDBClient, table: str, key: dict[str, Any], transition: Transition
) -> bool:
    """Carry out ``transition`` on the item at ``key`` of ``table`` as one conditional
    write; False if it did not hold."""
    request = write_request(transition, key)
    write: Callable[..., object] = client.update_item
    if transition.creates:
        write = client.put_item
    elif transition.deletes:
        write = client.delete_item
    return conditional_write(write, table, **request)


def apply_transition_returning(
    client: DynamoDBClient, table: str, key: dict[str, Any], transition: Transition
) -> tuple[bool, dict[str, Any] | None]:
    """As ``apply_transition``, with the item: the new one if the transition held,
    else the one that made it fail (None if there is none)."""
    if transition.deletes:
        raise ValueError("a deleted record has no new item to return")
    request = write_request(transition, key)
    try:
        if transition.creates:
            client.put_item(
                TableName=table, ReturnValuesOnConditionCheckFailure="ALL_OLD", **request
            )
            return True, request["Item"]
        response = client.update_item(
            TableName=table,
            ReturnValues="ALL_NEW",
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
            **request,
        )
    except ClientError as error:
        if is_condition_failure(error):
            # ReturnValuesOnConditionCheckFailure puts the item in the error's
            # response, a key botocore's stubs do not declare.
            return False, cast("dict[str, Any] | None", error.response.get("Item"))
        raise
    return True, response.get("Attributes")


def apply_to_record(
    client: DynamoDBClient,
    table: str,
    key: dict[str, Any],
    transition: Transition,
    *,
    also_sets: dict[str, Any] | None = None,
) -> bool:
    """``apply_transition`` on the record at ``key`` (plain values): a whole new record
    holds its key too, and ``also_sets`` adds what only this store keeps (a TTL) to
    any write but a delete. False if the transition did not hold."""
    sets = dict(transition.sets)
    if transition.creates:
        sets.update(key)
    if also_sets and not transition.deletes:
        sets.update(also_sets)
    if sets != transition.sets:
        transition = dataclasses.replace(transition, sets=sets)
    return apply_transition(client, table, to_item(key), transition)
