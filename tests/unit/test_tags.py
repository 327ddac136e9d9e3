"""Tags: their bounds, the filters of a listing, and how create and PATCH set them."""

from __future__ import annotations

import pytest

from dynacron.domain.errors import InvalidRequest
from dynacron.domain.tasks.changes import TaskChanges, apply_changes
from dynacron.domain.tasks.specs import ScheduleSpec, TaskSpec, new_task
from dynacron.domain.tasks.tags import (
    MAX_KEY_LENGTH,
    MAX_TAG_FILTERS,
    MAX_TAGS,
    MAX_VALUE_LENGTH,
    TagFilter,
    checked_tags,
    matches_all,
    parse_tag_filter,
    parse_tag_filters,
)
from tests.conftest import START

HOOK = "http://127.0.0.1:9/hook"


def refused(call: object, *args: object) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as error:
        call(*args)  # type: ignore[operator]
    return error.value


def test_tags_within_the_bounds_are_kept_as_given_in_key_order() -> None:
    tags = {
        "team": "billing",
        "a" * MAX_KEY_LENGTH: "x" * MAX_VALUE_LENGTH,
        "k8s.io/app-name_v2": "",
        "unicode": "größe: 10 €, 東京",
    }
    assert checked_tags(tags) == tags
    assert list(checked_tags({"b": "1", "a": "2"})) == ["a", "b"]
    assert checked_tags({f"k{n}": "v" for n in range(MAX_TAGS)}) == {
        f"k{n}": "v" for n in range(MAX_TAGS)
    }


@pytest.mark.parametrize(
    ("tags", "field", "says"),
    [
        ({f"k{n}": "v" for n in range(MAX_TAGS + 1)}, "tags", "at most 20"),
        ({"": "v"}, "tags", "1-63 characters"),
        ({"a" * (MAX_KEY_LENGTH + 1): "v"}, "tags", "1-63 characters"),
        ({"has space": "v"}, "tags", "'has space'"),
        ({"colon:key": "v"}, "tags", "letters, digits"),
        ({"ключ": "v"}, "tags", "letters, digits"),
        ({"env": "x" * (MAX_VALUE_LENGTH + 1)}, "tags.env", "257 characters long"),
        ({f"k{n:02}": "é" * 60 for n in range(18)}, "tags", "2214 bytes"),
        ({"env": "line\nbreak"}, "tags.env", "no control characters"),
        ({"env": "nul\x00"}, "tags.env", "no control characters"),
        ({"env": "c1\x85"}, "tags.env", "no control characters"),
        ({"env": "lone \ud800 surrogate"}, "tags.env", "no control characters"),
    ],
)
def test_tags_out_of_bounds_are_refused_naming_the_field(
    tags: dict[str, str], field: str, says: str
) -> None:
    error = refused(checked_tags, tags)
    assert error.field == field
    assert says in error.message


def test_a_huge_refused_key_is_cut_short_in_the_message() -> None:
    error = refused(checked_tags, {"x" * 10_000: "v"})
    assert len(error.message) < 300


def test_a_filter_is_a_key_and_perhaps_a_value_split_at_the_first_colon() -> None:
    assert parse_tag_filter("env") == TagFilter("env")
    assert parse_tag_filter("env:prod") == TagFilter("env", "prod")
    assert parse_tag_filter("env:") == TagFilter("env", "")
    assert parse_tag_filter("url:http://x:80/y") == TagFilter("url", "http://x:80/y")


@pytest.mark.parametrize("text", ["", ":prod", "bad key:v", "env:a\tb", "x" * 64])
def test_a_malformed_filter_is_refused_as_the_tag_parameter(text: str) -> None:
    assert refused(parse_tag_filter, text).field == "tag"


def test_filters_are_bounded_and_a_repeated_one_counts_once() -> None:
    assert parse_tag_filters(["a:1", "a:1", "b"]) == (TagFilter("a", "1"), TagFilter("b"))
    many = [f"k{n}" for n in range(MAX_TAG_FILTERS + 1)]
    assert "at most 20" in refused(parse_tag_filters, many).message


def test_every_filter_must_match() -> None:
    tags = {"env": "prod", "team": "billing", "empty": ""}
    assert matches_all(tags, ())
    assert matches_all(tags, (TagFilter("env", "prod"), TagFilter("team")))
    assert matches_all(tags, (TagFilter("empty", ""),))
    assert matches_all(tags, (TagFilter("empty"),))
    assert not matches_all(tags, (TagFilter("env", "prod"), TagFilter("owner")))
    assert not matches_all(tags, (TagFilter("env", "Prod"),))
    assert not matches_all(tags, (TagFilter("env", "pro"),))
    assert not matches_all({}, (TagFilter("env"),))


def spec(**fields: object) -> TaskSpec:
    return TaskSpec(schedule=ScheduleSpec(rate="1 minute"), handler_url=HOOK, **fields)  # type: ignore[arg-type]


def test_a_new_task_carries_its_checked_tags() -> None:
    task = new_task(spec(tags={"env": "prod"}), START, task_id="t", tenant_id="acme")
    assert task.tags == {"env": "prod"}
    assert new_task(spec(), START, task_id="t", tenant_id="acme").tags == {}
    with pytest.raises(InvalidRequest) as error:
        new_task(spec(tags={"bad key": "v"}), START, task_id="t", tenant_id="acme")
    assert error.value.field == "tags"


def test_patch_replaces_the_whole_map_clears_it_with_empty_and_keeps_it_unnamed() -> None:
    task = new_task(spec(tags={"env": "prod", "team": "a"}), START, task_id="t", tenant_id="x")

    replaced = apply_changes(task, TaskChanges(tags={"env": "dev"}), START)
    assert replaced.tags == {"env": "dev"}
    assert replaced.version == task.version + 1

    assert apply_changes(task, TaskChanges(tags={}), START).tags == {}
    assert apply_changes(task, TaskChanges(name="other"), START).tags == task.tags


def test_patch_with_bad_tags_is_refused() -> None:
    task = new_task(spec(tags={"env": "prod"}), START, task_id="t", tenant_id="x")
    too_many = {f"k{n}": "v" for n in range(MAX_TAGS + 1)}
    with pytest.raises(InvalidRequest) as error:
        apply_changes(task, TaskChanges(tags=too_many, name="renamed"), START)
    assert error.value.field == "tags"
