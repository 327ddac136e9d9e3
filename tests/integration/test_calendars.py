"""Calendars through the API and the real tick in local mode (the embedded SQLite
set), with a clock the test moves (decision 0056)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from dynacron.domain.executions.execution import ExecutionStatus
from dynacron.domain.instants import format_instant
from dynacron.domain.tasks.task import execution_id_for
from dynacron.entry.composition import Dynacron
from tests.conftest import START
from tests.integration.api_client import call
from tests.support import Sink, recording_ticker

DAY = timedelta(days=1)
BOB = "arn:aws:iam::000000000000:user/bob"
# START is 2026-11-30 12:00 UTC: a daily 13:00 in Berlin (12:00 UTC) runs at START + n days.
TOMORROW = "2026-12-01"


def test_a_daily_cron_skips_the_day_its_calendar_excludes(
    embedded: Callable[..., Dynacron], sink: Sink
) -> None:
    system = embedded(shard_count=1)
    # Given a calendar that excludes tomorrow, and a daily task held to it
    status, calendar = call(
        system,
        "PUT",
        "/calendars/holidays",
        {"timezone": "Europe/Berlin", "dates": [{"from": TOMORROW, "note": "company day"}]},
    )
    assert status == 200, calendar
    assert calendar["dates"] == [{"from": TOMORROW, "to": TOMORROW, "note": "company day"}]
    status, task = call(
        system,
        "POST",
        "/tasks",
        {
            "cron": "0 13 * * *",
            "timezone": "Europe/Berlin",
            "handler_url": f"{sink.url}/h",
            "exclude_calendars": ["holidays"],
        },
    )
    assert status == 201, task
    assert task["exclude_calendars"] == ["holidays"]
    task_id = task["task_id"]

    # Its preview marks tomorrow as excluded
    status, shown = call(system, "GET", f"/tasks/{task_id}/next", count=3)
    assert status == 200
    tomorrow = START + DAY
    assert shown["occurrences"][:2] == [format_instant(tomorrow), format_instant(tomorrow + DAY)]
    assert shown["skipped"] == [
        {"occurrence": format_instant(tomorrow), "reason": "excluded by calendar holidays"}
    ]

    # When tomorrow comes, nothing runs and it is recorded SKIPPED
    ticker, queue = recording_ticker(system)
    system.clock.set(tomorrow)  # type: ignore[attr-defined]
    ticker.tick()
    assert queue.accepted == []
    skipped = system.executions.get(execution_id_for(task_id, tomorrow))
    assert skipped is not None
    assert skipped.status is ExecutionStatus.SKIPPED
    assert skipped.error == "excluded by calendar holidays"

    # And the day after runs
    system.clock.set(tomorrow + DAY)  # type: ignore[attr-defined]
    ticker.tick()
    assert [d.execution_id for d in queue.accepted] == [execution_id_for(task_id, tomorrow + DAY)]


def test_a_calendar_changed_reaches_its_tasks_and_one_in_use_is_not_deleted(
    embedded: Callable[..., Dynacron], sink: Sink
) -> None:
    system = embedded(shard_count=1)
    assert call(system, "PUT", "/calendars/holidays", {"dates": ["2027-01-01"]})[0] == 200
    status, task = call(
        system,
        "POST",
        "/tasks",
        {"cron": "0 12 * * *", "handler_url": f"{sink.url}/h", "exclude_calendars": ["holidays"]},
    )
    assert status == 201, task
    task_id = task["task_id"]

    # Putting the calendar again copies its new days onto the task: tomorrow is excluded now
    assert call(system, "PUT", "/calendars/holidays", {"dates": [TOMORROW]})[0] == 200
    _, shown = call(system, "GET", f"/tasks/{task_id}/next", count=2)
    assert [s["occurrence"] for s in shown["skipped"]] == [format_instant(START + DAY)]

    # Delete is refused while the task names it, and allowed once it does not
    status, problem = call(system, "DELETE", "/calendars/holidays")
    assert status == 409, problem
    assert task_id in problem["detail"]
    assert call(system, "GET", "/calendars")[1]["calendars"][0]["name"] == "holidays"
    # A PATCH changes the calendar fields it names, and keeps the others
    status, patched = call(system, "PATCH", f"/tasks/{task_id}", {"on_excluded": "next"})
    assert status == 200, patched
    assert (patched["exclude_calendars"], patched["on_excluded"]) == (["holidays"], "next")
    status, patched = call(system, "PATCH", f"/tasks/{task_id}", {"exclude_calendars": []})
    assert status == 200, patched
    assert patched["exclude_calendars"] == []
    assert call(system, "DELETE", "/calendars/holidays")[0] == 204
    assert call(system, "GET", "/calendars/holidays")[0] == 404


def test_calendars_are_the_tenants_own_and_bad_ones_change_nothing(
    embedded: Callable[..., Dynacron], sink: Sink
) -> None:
    system = embedded(shard_count=1)
    assert call(system, "PUT", "/calendars/holidays", {"dates": [TOMORROW]})[0] == 200

    # Another tenant sees none of them, and cannot name them on a task
    assert call(system, "GET", "/calendars/holidays", principal=BOB)[0] == 404
    assert call(system, "DELETE", "/calendars/holidays", principal=BOB)[0] == 404
    assert call(system, "GET", "/calendars", principal=BOB)[1] == {"calendars": []}
    body = {"rate": "1 hour", "handler_url": f"{sink.url}/h", "exclude_calendars": ["holidays"]}
    status, problem = call(system, "POST", "/tasks", body, principal=BOB)
    assert status == 422, problem

    # A bad date, a huge list, an unknown field: 422, the calendar as it was
    for bad in (
        {"dates": ["2026-02-30"]},
        {"dates": ["2026-01-01"] * 501},
        {"dates": [], "holidays": True},
        {"dates": [{"from": "2026-12-31", "to": "2026-12-01"}]},
        {"timezone": "Mars/Olympus", "dates": []},
    ):
        status, problem = call(system, "PUT", "/calendars/holidays", bad)
        assert status == 422, (bad, problem)
    assert call(system, "GET", "/calendars/holidays")[1]["dates"][0]["from"] == TOMORROW


def test_a_schedule_preview_marks_excluded_days_and_a_named_tasks_skips(
    embedded: Callable[..., Dynacron], sink: Sink
) -> None:
    system = embedded(shard_count=1)
    assert call(system, "PUT", "/calendars/holidays", {"dates": [TOMORROW]})[0] == 200
    daily = {"cron": "0 12 * * *", "count": 3}

    # A schedule not yet registered, with the calendars it would have
    status, shown = call(
        system, "POST", "/schedules/preview", {**daily, "exclude_calendars": ["holidays"]}
    )
    assert status == 200, shown
    assert shown["skipped"] == [
        {"occurrence": format_instant(START + DAY), "reason": "excluded by calendar holidays"}
    ]

    # A task's new schedule, previewed with that task's skips
    status, task = call(
        system, "POST", "/tasks", {"cron": "0 12 * * *", "handler_url": f"{sink.url}/h"}
    )
    assert status == 201, task
    until = format_instant(START + 3 * DAY)
    assert call(system, "POST", f"/tasks/{task['task_id']}/skip", {"until": until})[0] == 200
    status, shown = call(
        system, "POST", "/schedules/preview", {**daily, "task_id": task["task_id"]}
    )
    assert status == 200, shown
    assert [s["occurrence"] for s in shown["skipped"]] == [
        format_instant(START + DAY),
        format_instant(START + 2 * DAY),
    ]
    # Another tenant's task is not found
    status, _ = call(
        system, "POST", "/schedules/preview", {**daily, "task_id": task["task_id"]}, principal=BOB
    )
    assert status == 404
