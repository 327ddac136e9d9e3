"""Completion tracking's pure parts (decision 0049): run names that carry the
execution id and attempt, state-change events read into a run's end, and the
stack's rules matching exactly what the domain reads."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from dynacron.definitions import completion_events
from dynacron.domain.executions import completion
from dynacron.domain.executions.completion import (
    RunEnd,
    StillRunning,
    attempt_of,
    format_duration,
    run_end_of_description,
    run_end_of_event,
    run_name,
)
from dynacron.domain.tasks.targets import STATE_MACHINE_NAME_CHARS

EXECUTION_ID = "nightly_20261130T120000.000Z"
MACHINE = "arn:aws:states:us-east-1:123456789012:stateMachine:etl"


def test_the_stacks_rules_match_what_the_domain_reads() -> None:
    for name in (
        "STEP_FUNCTIONS_SOURCE",
        "STEP_FUNCTIONS_EVENT",
        "STEP_FUNCTIONS_ENDED",
        "ECS_SOURCE",
        "ECS_EVENT",
        "ECS_ENDED",
        "RUN_NAME_PREFIX",
    ):
        assert getattr(completion_events, name) == getattr(completion, name), name


@pytest.mark.parametrize("ecs", [False, True])
@pytest.mark.parametrize("attempt", [1, 12])
def test_a_run_name_reads_back_as_its_execution_and_attempt(ecs: bool, attempt: int) -> None:
    name = run_name(EXECUTION_ID, attempt, ecs=ecs)

    assert attempt_of(name, ecs=ecs) == (EXECUTION_ID, attempt)
    # ECS's startedBy takes no "."; a state machine's name takes no "/".
    assert ("." in name) is not ecs
    # dynacron's prefix, which the stack's rules match; a name without it is no run of ours
    assert name.startswith("dynacron-")
    assert attempt_of(name.removeprefix("dynacron-"), ecs=ecs) is None


def test_a_name_too_long_for_the_service_is_shortened_and_reads_as_no_run_of_it() -> None:
    long_id = "t" * 90 + "_20261130T120000.000Z"

    name = run_name(long_id, 1, ecs=False)

    assert len(name) == STATE_MACHINE_NAME_CHARS
    assert name != run_name(long_id, 2, ecs=False)
    assert attempt_of(name, ecs=False) != (long_id, 1)


def test_a_running_or_foreign_state_machine_event_is_no_end() -> None:
    detail = {"name": f"{EXECUTION_ID}-1", "stateMachineArn": MACHINE, "status": "RUNNING"}
    event = {"source": "aws.states", "detail-type": completion.STEP_FUNCTIONS_EVENT}

    assert run_end_of_event({**event, "detail": detail}) is None
    # Not AWS's: a source anyone may put on a bus is never read as an end.
    forged = {**event, "source": "aws.statesx", "detail": {**detail, "status": "SUCCEEDED"}}
    assert run_end_of_event(forged) is None
    unnamed = {**event, "detail": {**detail, "status": "FAILED", "name": "adhoc"}}
    assert run_end_of_event(unnamed) is None


def test_a_timed_out_execution_fails_with_its_error_cause_and_duration() -> None:
    started = datetime(2026, 11, 30, 12, tzinfo=UTC)
    detail = {
        "name": f"dynacron-{EXECUTION_ID}-3",
        "stateMachineArn": MACHINE,
        "executionArn": f"{MACHINE}:dynacron-{EXECUTION_ID}-3".replace(
            ":stateMachine:", ":execution:"
        ),
        "status": "TIMED_OUT",
        "startDate": int(started.timestamp() * 1000),
        "stopDate": int((started + timedelta(hours=2, seconds=5)).timestamp() * 1000),
        "error": "States.Timeout",
        "cause": None,
    }

    end = run_end_of_event(
        {"source": "aws.states", "detail-type": completion.STEP_FUNCTIONS_EVENT, "detail": detail}
    )

    assert end == RunEnd(
        execution_id=EXECUTION_ID,
        attempt=3,
        resource_arn=MACHINE,
        run_arn=f"{MACHINE}:dynacron-{EXECUTION_ID}-3".replace(":stateMachine:", ":execution:"),
        succeeded=False,
        summary="the state machine execution TIMED_OUT: States.Timeout: no cause given",
        duration=timedelta(hours=2, seconds=5),
    )
    assert end.said.endswith("after 2h0m5s")


@pytest.mark.parametrize(
    ("containers", "succeeded"),
    [
        ([{"name": "app", "exitCode": 0}, {"name": "log", "exitCode": 0}], True),
        ([{"name": "app", "exitCode": 0}, {"name": "log", "exitCode": 137}], False),
        ([{"name": "app"}], False),  # never ran: no exit code
        ([], False),
    ],
)
def test_an_ecs_task_succeeded_only_if_every_container_exited_0(
    containers: list[dict[str, object]], succeeded: bool
) -> None:
    description = {
        "startedBy": run_name(EXECUTION_ID, 1, ecs=True),
        "clusterArn": "arn:aws:ecs:us-east-1:123456789012:cluster/batch",
        "lastStatus": "STOPPED",
        "containers": containers,
        "stoppedReason": "Essential container in task exited",
        "startedAt": datetime(2026, 11, 30, 12, tzinfo=UTC),
        "stoppedAt": datetime(2026, 11, 30, 15, tzinfo=UTC),
    }

    end = run_end_of_description(description, ecs=True, missing="-")

    assert isinstance(end, RunEnd)
    assert end.succeeded is succeeded
    assert end.duration == timedelta(hours=3)


def test_a_described_task_not_yet_stopped_is_still_running() -> None:
    description = {"startedBy": run_name(EXECUTION_ID, 1, ecs=True), "lastStatus": "RUNNING"}

    assert run_end_of_description(description, ecs=True, missing="-") == StillRunning()


@pytest.mark.parametrize(
    ("duration", "said"),
    [
        (timedelta(seconds=12.5), "12.5s"),
        (timedelta(minutes=4, seconds=2), "4m2s"),
        (timedelta(hours=3), "3h0m0s"),
    ],
)
def test_durations_read_as_a_person_reads_them(duration: timedelta, said: str) -> None:
    assert format_duration(duration) == said
