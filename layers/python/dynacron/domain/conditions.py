"""The small language a transition is stated in: what it expects, what it changes.

A ``Condition`` is what a stored record must be for a change to apply; a
``Transition`` pairs one with the attributes it sets, removes or computes. Both
read a record as a plain mapping of attribute names to plain values (str, int,
bool, dict), and know nothing of executions or tasks: the ``transitions`` modules of
``dynacron.domain.executions``, ``.tasks`` and ``.coordination`` state each move in
this language, and each store carries one out atomically (the DynamoDB adapters
compile it into a condition and update expression, the SQLite adapters check
``holds`` and write ``applied_to`` inside one transaction).

Conditions follow DynamoDB's semantics, so both stores agree on every edge: a
comparison with a missing attribute is false, except ``NotEquals`` (``<>``), which
is true; values of different kinds (text and number) never compare.
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, ParamSpec

Record = Mapping[str, Any]
P = ParamSpec("P")


# --- conditions --------------------------------------------------------------------


class Condition(ABC):
    """What a record must be for a transition to apply."""

    @abstractmethod
    def holds(self, record: Record | None) -> bool:
        """Whether ``record`` (None or empty: there is none) meets the condition."""


def _kind(value: Any) -> str:
    # DynamoDB's types as far as comparisons go: a number never equals a text.
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float | Decimal):
        return "number"
    return type(value).__name__


_INCOMPARABLE = object()


def _comparable(record: Record | None, field: str, value: Any) -> Any:
    """The stored ``field`` if present and of ``value``'s kind, else ``_INCOMPARABLE``:
    a comparison with a missing field or another kind is false, as on DynamoDB."""
    if record is None or field not in record:
        return _INCOMPARABLE
    stored = record[field]
    return stored if _kind(stored) == _kind(value) else _INCOMPARABLE


@dataclass(frozen=True)
class Exists(Condition):
    """The record has ``field`` (``attribute_exists``)."""

    field: str

    def holds(self, record: Record | None) -> bool:
        """False when there is no record."""
        return record is not None and self.field in record


@dataclass(frozen=True)
class Missing(Condition):
    """The record lacks ``field``, or there is no record (``attribute_not_exists``)."""

    field: str

    def holds(self, record: Record | None) -> bool:
        """True when there is no record."""
        return record is None or self.field not in record


@dataclass(frozen=True)
class Equals(Condition):
    """``field`` is present and equal to ``value`` (``=``)."""

    field: str
    value: Any

    def holds(self, record: Record | None) -> bool:
        """False on a missing field or a value of another kind."""
        stored = _comparable(record, self.field, self.value)
        return stored is not _INCOMPARABLE and bool(stored == self.value)


@dataclass(frozen=True)
class NotEquals(Condition):
    """``field`` is missing or differs from ``value`` (``<>``, true on a missing one)."""

    field: str
    value: Any

    def holds(self, record: Record | None) -> bool:
        """True on a missing field or a value of another kind."""
        return not Equals(self.field, self.value).holds(record)


@dataclass(frozen=True)
class Below(Condition):
    """``field`` is present and less than ``value`` (``<``): numbers by value, text
    by code point, which for stored instants is time order."""

    field: str
    value: Any

    def holds(self, record: Record | None) -> bool:
        """False on a missing field, a value of another kind, or one with no order."""
        stored = _comparable(record, self.field, self.value)
        if stored is _INCOMPARABLE or _kind(stored) not in ("number", "str"):
            return False
        return bool(stored < self.value)


@dataclass(frozen=True)
class AtMost(Condition):
    """``field`` is present and at most ``value`` (``<=``), compared as ``Below`` is."""

    field: str
    value: Any

    def holds(self, record: Record | None) -> bool:
        """``Below`` or ``Equals``: false on a missing field or a value of another kind."""
        return Below(self.field, self.value).holds(record) or Equals(self.field, self.value).holds(
            record
        )


@dataclass(frozen=True, init=False)
class _Combined(Condition):
    conditions: tuple[Condition, ...]

    def __init__(self, *conditions: Condition) -> None:
        if not conditions:
            raise ValueError(f"{type(self).__name__} needs at least one condition")
        object.__setattr__(self, "conditions", conditions)


@dataclass(frozen=True, init=False)
class AllOf(_Combined):
    """Every one of ``conditions`` holds (``AND``)."""

    def holds(self, record: Record | None) -> bool:
        """Every condition holds (none given: true)."""
        return all(c.holds(record) for c in self.conditions)


@dataclass(frozen=True, init=False)
class AnyOf(_Combined):
    """At least one of ``conditions`` holds (``OR``)."""

    def holds(self, record: Record | None) -> bool:
        """One condition holds, at least (none given: false)."""
        return any(c.holds(record) for c in self.conditions)


# --- changes -----------------------------------------------------------------------


@dataclass(frozen=True)
class Plus:
    """The value ``source`` had before the transition, plus ``amount``: every computed
    value reads the record as it was (as DynamoDB's and SQL's SET both do)."""

    source: str
    amount: int


@dataclass(frozen=True)
class Copy:
    """The value ``source`` had before the transition (as ``Plus`` reads it)."""

    source: str


@dataclass(frozen=True)
class Transition:
    """One atomic change of a stored record.

    Applies only if ``expects`` holds. Then ``removes`` go, ``sets`` are written,
    and each of ``computes`` is set from the record as it was. With ``creates``,
    ``sets`` is the whole new record, written over whatever ``expects`` admits (as
    a conditional put: nothing, or a record in a state it may replace). With
    ``deletes``, the record goes and nothing else changes.
    """

    expects: Condition
    sets: Mapping[str, Any] = field(default_factory=dict)
    removes: frozenset[str] = frozenset()
    computes: Mapping[str, Plus | Copy] = field(default_factory=dict)
    creates: bool = False
    deletes: bool = False
    # Which move of the record this is (``begin``, ``finish``, ...): for whoever
    # watches the writes (the cost meter names each write by it); no part of the change.
    move: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if any(value is None for value in self.sets.values()):
            raise ValueError("a transition sets values, never None: remove the attribute")
        touched = [*self.sets, *self.computes]
        if len(set(touched)) != len(touched) or self.removes & set(touched):
            raise ValueError("a transition changes each attribute once")
        if self.creates and (self.removes or self.computes):
            raise ValueError("a new record is written whole")
        if self.deletes and (self.creates or self.sets or self.removes or self.computes):
            raise ValueError("a deleted record changes nothing else")

    def holds(self, record: Record | None) -> bool:
        """Whether the transition applies to ``record`` (None: there is none)."""
        return self.expects.holds(record)

    def applied_to(self, record: Record | None) -> dict[str, Any]:
        """The record after the transition (whether it ``holds`` is not checked here;
        empty if it ``deletes`` the record)."""
        if self.deletes:
            return {}
        if self.creates:
            return dict(self.sets)
        before = dict(record or {})
        after = {name: value for name, value in before.items() if name not in self.removes}
        after.update(self.sets)
        for name, computed in self.computes.items():
            if computed.source not in before:
                raise ValueError(f"{name} is computed from {computed.source}, which is missing")
            value = before[computed.source]
            after[name] = value + computed.amount if isinstance(computed, Plus) else value
        return after


def names_move(name: str) -> Callable[[Callable[P, Transition]], Callable[P, Transition]]:
    """Names the move each transition of the decorated function makes (``Transition.move``)."""

    def naming(build: Callable[P, Transition]) -> Callable[P, Transition]:
        @functools.wraps(build)
        def named(*args: P.args, **kwargs: P.kwargs) -> Transition:
            transition = build(*args, **kwargs)
            # Set on the transition just built rather than copied (``replace`` would
            # check it all again, on every fire): ``move`` is no part of the change.
            object.__setattr__(transition, "move", name)
            return transition

        return named

    return naming
