"""Request bodies read as RFC 8259 JSON, where a number is a number.

``json.loads`` accepts ``NaN`` and ``Infinity`` (not JSON), turns ``1e400`` into
``inf``, raises a bare ``ValueError`` on an integer of more than 4300 digits, and
keeps ``5.0`` apart from ``5`` although JSON (and JSON Schema, which the OpenAPI
document speaks) has one number type: ``{"max_attempts": 5.0}`` is an integer
there. Each of those is refused here as invalid JSON, or read as the number it is.
"""

from __future__ import annotations

import json
import math
from typing import Any

# Beyond any bound of ours, and well inside what int() reads (4300 digits).
MAX_NUMBER_DIGITS = 100
# Integral values up to this are exact as floats: 5.0 and 5e3 are read as ints.
_EXACT_INTEGERS = 2**53


# Every body of this API is an object (or, where it is optional, null): the resolver
# would otherwise take a list's first object for the body ([{}] paused a task).
NOT_AN_OBJECT = "must be a JSON object"


def parse_json_body(text: str) -> Any:
    """The body as JSON; ``json.JSONDecodeError`` for anything that is not JSON,
    or not a JSON object (``NOT_AN_OBJECT``)."""
    try:
        body = json.loads(
            text, parse_int=_integer, parse_float=_number, parse_constant=_not_a_json_number
        )
    except RecursionError:
        # Some thousand levels deep: the parser's own stack ends before any bound of
        # ours is checked (payloads may nest 32 levels).
        raise json.JSONDecodeError("the body is nested too deeply", text, 0) from None
    if body is not None and not isinstance(body, dict):
        raise json.JSONDecodeError(NOT_AN_OBJECT, text, 0)
    return body


def _integer(text: str) -> int:
    if len(text) > MAX_NUMBER_DIGITS:
        raise json.JSONDecodeError(f"a number has more than {MAX_NUMBER_DIGITS} digits", text, 0)
    return int(text)


def _number(text: str) -> float | int:
    if len(text) > MAX_NUMBER_DIGITS:
        raise json.JSONDecodeError(f"a number has more than {MAX_NUMBER_DIGITS} digits", text, 0)
    value = float(text)
    if not math.isfinite(value):
        raise json.JSONDecodeError(f"{text} is out of range", text, 0)
    if value.is_integer() and abs(value) <= _EXACT_INTEGERS:
        return int(value)
    return value


def _not_a_json_number(text: str) -> Any:
    raise json.JSONDecodeError(f"{text} is not a JSON number", text, 0)
