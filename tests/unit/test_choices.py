"""The one refusal of a request that must name exactly one of several fields."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from dynacron.domain.choices import exactly_one_of
from dynacron.domain.errors import InvalidRequest
from dynacron.domain.schedules.expressions import RateSchedule
from dynacron.domain.tasks.skips import SkipRequest, requested_skip
from dynacron.domain.tasks.specs import ScheduleSpec, TaskSpec, build_schedule, check_one_handler

T0 = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)


def test_the_one_field_set_is_named() -> None:
    assert exactly_one_of("pick", [("a", None), ("b", 0), ("c", None)]) == "b"


def test_a_false_value_counts_as_set_only_none_is_absent() -> None:
    assert exactly_one_of("pick", [("a", ""), ("b", None)]) == "a"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            [("a", None), ("b", None), ("c", None)],
            "give exactly one of 'a', 'b' or 'c' (found none)",
        ),
        (
            [("a", 1), ("b", None), ("c", 2)],
            "give exactly one of 'a', 'b' or 'c' (found 'a' and 'c')",
        ),
        ([("a", 1), ("b", 2)], "give exactly one of 'a' or 'b' (found 'a' and 'b')"),
        ([("a", None)], "give exactly one of 'a' (found none)"),
    ],
)
def test_none_or_several_are_refused_naming_each_choice_and_those_found(
    fields: list[tuple[str, object]], message: str
) -> None:
    with pytest.raises(InvalidRequest) as refused:
        exactly_one_of("pick", fields)
    assert (refused.value.field, refused.value.message) == ("pick", message)


def test_a_schedule_with_two_kinds_is_refused_in_the_words_the_api_gives() -> None:
    with pytest.raises(InvalidRequest) as refused:
        build_schedule(ScheduleSpec(cron="0 * * * *", at="2026-12-01T00:00:00Z"), T0, "t1")
    assert (refused.value.field, refused.value.message) == (
        "schedule",
        "give exactly one of 'cron', 'rate', 'at', 'fixed_delay' or 'after'"
        " (found 'cron' and 'at')",
    )


def test_a_task_with_no_handler_is_refused_in_the_words_the_api_gives() -> None:
    with pytest.raises(InvalidRequest) as refused:
        check_one_handler(TaskSpec(schedule=ScheduleSpec(rate="1 hour")))
    assert (refused.value.field, refused.value.message) == (
        "handler",
        "give exactly one of 'handler_url', 'handler' or 'target' (found none)",
    )


def test_a_skip_with_two_forms_is_refused_in_the_words_the_api_gives() -> None:
    schedule = build_schedule(ScheduleSpec(rate="1 hour"), T0, "t1")
    assert isinstance(schedule, RateSchedule)
    with pytest.raises(InvalidRequest) as refused:
        requested_skip(
            SkipRequest(occurrences=1, until="2026-12-01T00:00:00Z"),
            schedule,
            "UTC",
            T0,
            by="alice",
            now=T0,
        )
    assert (refused.value.field, refused.value.message) == (
        "skip",
        "give exactly one of 'occurrences', 'until' or 'at' (found 'occurrences' and 'until')",
    )
