"""Tags: a task's small map of strings, and the filters ``GET /tasks`` takes.

Every bound on tags lives here, once: the API's schema states them, the wire
models leave the checking to ``checked_tags`` and ``parse_tag_filter``, whose
messages name the field. Tags are labels only: dynacron never interprets a value,
it compares it whole, byte for byte.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from dynacron.domain.errors import InvalidRequest

MAX_TAGS = 20
MAX_KEY_LENGTH = 63
MAX_VALUE_LENGTH = 256
# All keys and values together, in UTF-8: the tenant index holds them, and a
# filtered listing pays for every entry it reads, matched or not.
MAX_TAGS_BYTES = 2048
# A filter names at most as many tags as a task can carry.
MAX_TAG_FILTERS = MAX_TAGS
KEY_CHARACTERS = r"A-Za-z0-9_.\-/"
# The rules as patterns that read alike in ECMA-262 (the API's document) and in
# Python. ``_END`` is the end of the text: "$" also matches before a final newline
# in Python, and validators of the document may be Python.
_END = r"(?![\s\S])"
KEY_PATTERN = f"^[{KEY_CHARACTERS}]{{1,{MAX_KEY_LENGTH}}}{_END}"
_VALUE_CHARACTER = "[^\\u0000-\\u001f\\u007f-\\u009f]"
VALUE_PATTERN = f"^{_VALUE_CHARACTER}*{_END}"
FILTER_PATTERN = (
    f"^[{KEY_CHARACTERS}]{{1,{MAX_KEY_LENGTH}}}(:{_VALUE_CHARACTER}{{0,{MAX_VALUE_LENGTH}}})?{_END}"
)
KEY_RULE = f"1-{MAX_KEY_LENGTH} characters of letters, digits, '_', '.', '-' and '/'"
VALUE_RULE = f"0-{MAX_VALUE_LENGTH} characters, no control characters"
# What a tag filter looks like, for the API's documents.
FILTER_RULE = "'key:value' (the key has that value) or 'key' (the key is set)"

_KEY = re.compile(KEY_PATTERN)
# Control characters, and the surrogates a JSON text can carry alone (no store
# can encode them).
_REFUSED_CATEGORIES = frozenset({"Cc", "Cs"})


@dataclass(frozen=True)
class TagFilter:
    """One ``?tag=`` of a listing: the key is set (``value`` None) or has ``value``."""

    key: str
    value: str | None = None

    def matches(self, tags: Mapping[str, str]) -> bool:
        """Whether a task with ``tags`` passes this filter."""
        if self.key not in tags:
            return False
        return self.value is None or tags[self.key] == self.value


def checked_tags(tags: Mapping[str, str], field: str = "tags") -> dict[str, str]:
    """``tags`` as a task stores them (by key, as every store gives them back), if
    within the bounds; else ``InvalidRequest``."""
    if len(tags) > MAX_TAGS:
        raise InvalidRequest(field, f"has {len(tags)} tags; at most {MAX_TAGS} are allowed")
    for key, value in tags.items():
        _check_key(key, field)
        _check_value(value, f"{field}.{key}")
    size = sum(len(key.encode()) + len(value.encode()) for key, value in tags.items())
    if size > MAX_TAGS_BYTES:
        raise InvalidRequest(
            field, f"hold {size} bytes of keys and values (UTF-8); at most {MAX_TAGS_BYTES}"
        )
    return dict(sorted(tags.items()))


def parse_tag_filter(text: str, field: str = "tag") -> TagFilter:
    """A filter as sent: ``key:value`` or ``key`` (split at the first ':', which no
    key contains, so a value may hold any)."""
    key, colon, value = text.partition(":")
    _check_key(key, field)
    if not colon:
        return TagFilter(key)
    _check_value(value, field)
    return TagFilter(key, value)


def parse_tag_filters(texts: Iterable[str], field: str = "tag") -> tuple[TagFilter, ...]:
    """Every filter of a listing, each checked (the same one twice is kept once, but
    counts twice against the bound, as the API's document counts it)."""
    given = list(texts)
    if len(given) > MAX_TAG_FILTERS:
        raise InvalidRequest(
            field, f"{len(given)} tag filters given; at most {MAX_TAG_FILTERS} are allowed"
        )
    return tuple(dict.fromkeys(parse_tag_filter(text, field) for text in given))


def matches_all(tags: Mapping[str, str], filters: Iterable[TagFilter]) -> bool:
    """Whether ``tags`` satisfy every filter (no filter: always)."""
    return all(f.matches(tags) for f in filters)


def _check_key(key: str, field: str) -> None:
    if not isinstance(key, str) or _KEY.fullmatch(key) is None:
        raise InvalidRequest(field, f"key {_shown(key)} is not {KEY_RULE}")


def _check_value(value: str, field: str) -> None:
    if not isinstance(value, str):
        raise InvalidRequest(field, "must be a string")
    if len(value) > MAX_VALUE_LENGTH:
        raise InvalidRequest(
            field, f"is {len(value)} characters long; at most {MAX_VALUE_LENGTH} are allowed"
        )
    if any(unicodedata.category(c) in _REFUSED_CATEGORIES for c in value):
        raise InvalidRequest(field, f"must be {VALUE_RULE}")


def _shown(key: object) -> str:
    """A refused key in a message: quoted, escaped and cut short (it is the caller's
    own text, but a message is no place for 10 KB of it)."""
    text = repr(key)
    return text if len(text) <= MAX_KEY_LENGTH + 10 else text[: MAX_KEY_LENGTH + 6] + "...'"
