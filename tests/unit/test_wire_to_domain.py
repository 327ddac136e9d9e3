"""The API turns a body into a domain value once: what a null means on the way in."""

from __future__ import annotations

import pytest

from dynacron.api.parameters import prefers_minimal
from dynacron.api.requests import TaskCreate, TaskPatch
from dynacron.domain.executions.retry import RetryPolicy
from dynacron.domain.schedules.wallclock import Ambiguous, DstPolicy, Nonexistent
from dynacron.domain.tasks.changes import UNSET
from dynacron.domain.tasks.task import CatchUp, Overlap


def test_a_body_becomes_a_spec_with_the_wire_defaults() -> None:
    spec = TaskCreate.model_validate(
        {"cron": "0 3 * * *", "handler": "nightly", "retry": {"max_attempts": 2}}
    ).to_spec()
    assert spec.schedule.cron == "0 3 * * *"
    assert spec.schedule.timezone == "UTC"
    assert (spec.handler_url, spec.handler_name) == (None, "nightly")
    # A retry body replaces the whole policy: the fields it leaves out are defaults.
    assert spec.retry == RetryPolicy(max_attempts=2)
    assert (spec.catchup, spec.overlap) == (CatchUp.RUN_ONCE, Overlap.ALLOW)


def test_a_null_kind_or_handler_clears_it_and_other_nulls_keep_the_stored_value() -> None:
    changes = TaskPatch.model_validate(
        {"rate": None, "cron": "5 * * * *", "handler_url": None, "name": None}
    ).to_changes()
    assert changes.rate is UNSET
    assert changes.cron == "5 * * * *"
    assert changes.handler_url is UNSET
    assert changes.handler_name is None
    assert changes.name is None


def test_naming_a_schedule_field_as_null_still_rebuilds_the_schedule() -> None:
    assert TaskPatch.model_validate({"start_at": None}).to_changes().touches_schedule
    assert not TaskPatch.model_validate({"payload": {"a": 1}}).to_changes().touches_schedule


def test_a_null_catchup_is_unset_and_a_dst_body_is_the_domain_policy() -> None:
    changes = TaskPatch.model_validate(
        {"catchup": None, "dst": {"ambiguous": "both"}, "version": 4}
    ).to_changes()
    assert changes.catchup is UNSET
    assert changes.dst == DstPolicy(Nonexistent.SHIFT, Ambiguous.BOTH)
    assert changes.version == 4


@pytest.mark.parametrize(
    ("prefer", "minimal"),
    [
        (None, False),
        ("", False),
        ("return=minimal", True),
        ("Return = Minimal", True),
        ('return="minimal"', True),
        ("respond-async, wait=10, return=minimal; charset=utf-8", True),
        ("return=representation", False),
        # Only the first of a preference given twice counts (RFC 7240, section 2).
        ("return=representation, return=minimal", False),
        ("return=minimal, return=representation", True),
        ("returns=minimal, minimal", False),
        ("return", False),
        (",;=,return==minimal", False),
    ],
)
def test_prefer_asks_for_a_minimal_answer_only_with_return_minimal(
    prefer: str | None, minimal: bool
) -> None:
    assert prefers_minimal(prefer) is minimal
