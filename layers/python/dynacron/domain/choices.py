"""Requests that name one of several alternatives, and the refusal when they do not.

A request may offer fields that exclude each other (a schedule's kinds, a task's
handlers, a skip's forms); the refusal reads the same for each.
"""

from __future__ import annotations

from collections.abc import Sequence

from dynacron.domain.errors import InvalidRequest


def exactly_one_of(field: str, fields: Sequence[tuple[str, object]]) -> str:
    """The name of the one of ``fields`` (name and value pairs) whose value is set;
    ``InvalidRequest`` on ``field``, naming each of them and those found, when none
    or several are."""
    given = [name for name, value in fields if value is not None]
    if len(given) != 1:
        names = [repr(name) for name, _ in fields]
        choices = f"{', '.join(names[:-1])} or {names[-1]}" if len(names) > 1 else names[0]
        found = " and ".join(repr(name) for name in given) if given else "none"
        raise InvalidRequest(field, f"give exactly one of {choices} (found {found})")
    return given[0]
