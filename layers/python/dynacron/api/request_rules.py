"""The rules between fields of a request body that the service enforces, stated in
the OpenAPI document (JSON Schema, as each model's ``json_schema_extra``) so that a
body valid by the document is not refused for breaking one of them."""

from __future__ import annotations

from typing import Any

from dynacron.domain.tasks.specs import SCHEDULE_KINDS
from dynacron.domain.tasks.tags import KEY_PATTERN, MAX_TAGS, MAX_VALUE_LENGTH, VALUE_PATTERN


# "Given" is present and not null: text, but ``after`` may be a list (fan-in).
def _given(name: str) -> dict[str, Any]:
    given: dict[str, Any] = {"type": "string"}
    if name == "after":
        given = {"anyOf": [{"type": "string"}, {"type": "array"}]}
    return {"required": [name], "properties": {name: given}}


def _when_only_after(*, patch: bool = False) -> dict[str, Any]:
    """``when`` qualifies ``after`` alone; on PATCH it may come alone (for an
    ``after`` task), never with another kind."""
    if patch:
        others = [_absent(kind) for kind in SCHEDULE_KINDS if kind != "after"]
        return {"anyOf": [_absent("when"), {"allOf": others}]}
    return {"anyOf": [_absent("when"), _given("after")]}


def _given_object(name: str) -> dict[str, Any]:
    return {"required": [name], "properties": {name: {"type": "object"}}}


def _absent(name: str) -> dict[str, Any]:
    return {"properties": {name: {"type": "null"}}}


def _run_all() -> dict[str, Any]:
    return {"required": ["catchup"], "properties": {"catchup": {"const": "run_all"}}}


def task_create_rules(schema: dict[str, Any]) -> None:
    """Exactly one schedule kind and one handler; ``anchor`` with ``rate`` only,
    ``dst`` never with ``rate``; ``catchup_window_seconds`` with ``run_all`` only."""
    schema["allOf"] = [
        {"oneOf": [_given(kind) for kind in SCHEDULE_KINDS]},
        {"oneOf": [_given("handler_url"), _given("handler"), _given_object("target")]},
        {"anyOf": [_absent("anchor"), _given("rate")]},
        {"anyOf": [_absent("dst"), _absent("rate")]},
        {"anyOf": [_absent("catchup_window_seconds"), _run_all()]},
        _when_only_after(),
    ]


def _missing(name: str) -> dict[str, Any]:
    return {"properties": {name: False}}


def task_patch_rules(schema: dict[str, Any]) -> None:
    """A patch that names a schedule kind (even as null) gives exactly one, which
    replaces the task's; the same for the handler. The rules of ``TaskCreate`` that
    hold whatever the stored task is; the rest depend on it (``anchor`` alone fits a
    rate task only, ``catchup_window_seconds`` alone a ``run_all`` task only)."""
    other_kinds = [_absent(kind) for kind in SCHEDULE_KINDS if kind != "rate"]
    schema["allOf"] = [
        {
            "oneOf": [
                {"allOf": [_missing(kind) for kind in SCHEDULE_KINDS]},
                *[_given(kind) for kind in SCHEDULE_KINDS],
            ]
        },
        {
            "oneOf": [
                {"allOf": [_missing("handler_url"), _missing("handler"), _missing("target")]},
                _given("handler_url"),
                _given("handler"),
                _given_object("target"),
            ]
        },
        {"anyOf": [_absent("anchor"), {"allOf": other_kinds}]},
        {"anyOf": [_absent("dst"), _absent("rate")]},
        {"anyOf": [_absent("catchup_window_seconds"), _absent("catchup"), _run_all()]},
        _when_only_after(patch=True),
    ]


def tags_schema(schema: dict[str, Any]) -> None:
    """The bounds ``domain.tasks.tags`` checks (its messages name the tag), stated here so
    that a body valid by the document is not refused for its tags."""
    bounded = {
        "type": "object",
        "maxProperties": MAX_TAGS,
        "propertyNames": {"pattern": KEY_PATTERN},
        "additionalProperties": {
            "type": "string",
            "maxLength": MAX_VALUE_LENGTH,
            "pattern": VALUE_PATTERN,
        },
    }
    if "anyOf" in schema:  # PATCH: null too (leaves the stored tags)
        schema["anyOf"] = [bounded if s.get("type") == "object" else s for s in schema["anyOf"]]
    else:
        schema.update(bounded)


def schedule_rules(schema: dict[str, Any]) -> None:
    """Exactly one schedule kind; ``anchor`` with ``rate`` only, ``dst`` never with it,
    ``when`` with ``after`` only."""
    schema["allOf"] = [
        {"oneOf": [_given(kind) for kind in SCHEDULE_KINDS]},
        {"anyOf": [_absent("anchor"), _given("rate")]},
        {"anyOf": [_absent("dst"), _absent("rate")]},
        _when_only_after(),
    ]
