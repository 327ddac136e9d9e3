"""Skips through the API, the real tick and the worker in local mode (the embedded
SQLite set), with a clock the test moves (decision 0055)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from dynacron.domain.executions.execution import ExecutionStatus
from dynacron.domain.instants import format_instant
from dynacron.domain.tasks.skips import MAX_SKIPPED_OCCURRENCES
from dynacron.domain.tasks.task import execution_id_for
from dynacron.entry.composition import Dynacron
from tests.conftest import START
from tests.integration.api_client import ALICE, call
from tests.support import Sink, recording_ticker

MINUTE = timedelta(minutes=1)
BOB = "arn:aws:iam::000000000000:user/bob"


def every_minute(system: Dynacron, sink: Sink) -> str:
    status, body = call(
        system, "POST", "/tasks", {"rate": "1 minute", "handler_url": f"{sink.url}/h"}
    )
    assert status == 201, body
    return str(body["task_id"])


def test_a_skipped_occurrence_is_recorded_skipped_and_the_one_after_runs(
    embedded: Callable[..., Dynacron], sink: Sink
) -> None:
    # Given an every-minute task in local mode whose next occurrence is skipped
    system = embedded(shard_count=1)
    task_id = every_minute(system, sink)
    status, body = call(
        system, "POST", f"/tasks/{task_id}/skip", {"occurrences": 1, "note": "deploy"}
    )
    assert status == 200, body
    first = START + MINUTE
    assert body["skips"] == [
        {
            "at": [format_instant(first)],
            "until": None,
            "by": ALICE,
            "asked_at": format_instant(START),
            "note": "deploy",
        }
    ]
    # Its preview shows the occurrence as skipped, the next as not
    status, shown = call(system, "GET", f"/tasks/{task_id}/next", count=2)
    assert status == 200
    assert [s["occurrence"] for s in shown["skipped"]] == [format_instant(first)]
    assert shown["skipped"][0]["reason"] == f"skipped at the request of {ALICE}: deploy"

    # When its time comes: nothing is sent, the occurrence is recorded SKIPPED, who and why
    ticker, queue = recording_ticker(system)
    system.clock.set(first)  # type: ignore[attr-defined]
    ticker.tick()
    assert queue.accepted == []
    skipped = system.executions.get(execution_id_for(task_id, first))
    assert skipped is not None
    assert skipped.status is ExecutionStatus.SKIPPED
    assert skipped.error == f"skipped at the request of {ALICE}: deploy"

    # Then the one after runs as before, delivered to its handler
    second = first + MINUTE
    system.clock.set(second)  # type: ignore[attr-defined]
    ticker.tick()
    (dispatch,) = queue.accepted
    assert dispatch.execution_id == execution_id_for(task_id, second)
    system.runner.run(dispatch)
    assert [d.body["execution_id"] for d in sink.snapshot()] == [dispatch.execution_id]
    ran = system.executions.get(dispatch.execution_id)
    assert ran is not None
    assert ran.status is ExecutionStatus.SUCCEEDED
    _, after = call(system, "GET", f"/tasks/{task_id}")
    assert after["skips"] == []


def test_a_skip_removed_before_it_is_reached_runs_the_occurrence(
    embedded: Callable[..., Dynacron], sink: Sink
) -> None:
    system = embedded(shard_count=1)
    task_id = every_minute(system, sink)
    until = format_instant(START + 10 * MINUTE)
    assert call(system, "POST", f"/tasks/{task_id}/skip", {"until": until})[0] == 200
    third = format_instant(START + 3 * MINUTE)
    status, body = call(system, "POST", f"/tasks/{task_id}/skip", {"at": [third]})
    assert status == 200
    assert len(body["skips"]) == 2

    # Removing one instant cuts the stretch there; removing all leaves none
    status, body = call(system, "DELETE", f"/tasks/{task_id}/skips", at=third)
    assert status == 200
    assert body["skips"][0]["until"] == third
    status, body = call(system, "DELETE", f"/tasks/{task_id}/skips")
    assert (status, body["skips"]) == (200, [])

    ticker, queue = recording_ticker(system)
    system.clock.set(START + MINUTE)  # type: ignore[attr-defined]
    ticker.tick()
    assert [d.execution_id for d in queue.accepted] == [execution_id_for(task_id, START + MINUTE)]


def test_another_tenants_task_is_missing_and_bad_skips_are_refused_untouched(
    embedded: Callable[..., Dynacron], sink: Sink
) -> None:
    system = embedded(shard_count=1)
    task_id = every_minute(system, sink)
    _, before = call(system, "GET", f"/tasks/{task_id}")

    # Another tenant can neither skip nor unskip it: it does not exist for them
    for method, path, body in (
        ("POST", f"/tasks/{task_id}/skip", {"occurrences": 1}),
        ("DELETE", f"/tasks/{task_id}/skips", None),
    ):
        status, problem = call(system, method, path, body, principal=BOB)
        assert status == 404, problem

    # A huge list, no choice or two, an instant off the grid: 422, and nothing changed
    huge = [format_instant(START + n * MINUTE) for n in range(1, MAX_SKIPPED_OCCURRENCES + 2)]
    for body in (
        {"at": huge},
        {"occurrences": 10_000},
        {"note": "why"},
        {"occurrences": 1, "until": format_instant(START + 5 * MINUTE)},
        {"at": [format_instant(START + MINUTE + timedelta(seconds=30))]},
        {"occurrences": 1, "note": "x" * 201},
    ):
        status, problem = call(system, "POST", f"/tasks/{task_id}/skip", body)
        assert status == 422, (body, problem)
        assert problem["detail"] or problem.get("errors"), problem
    assert call(system, "GET", f"/tasks/{task_id}")[1] == before
