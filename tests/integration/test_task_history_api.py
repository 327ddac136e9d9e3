"""The change history through the API (decision 0054): a PATCH shows in
``GET /tasks/{id}/changes`` with the field before and after, a revert restores it
through PATCH's version check, the history outlives the task, one tenant's only."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from dynacron.domain.clock import SettableClock
from dynacron.entry.composition import Dynacron
from tests.integration.api_client import ALICE, call

BOB = "arn:aws:sts::000000000000:assumed-role/Billing/session-1"
HOOK = "http://127.0.0.1:9/hook"


def changes(system: Dynacron, task_id: str, **query: Any) -> list[dict[str, Any]]:
    status, page = call(system, "GET", f"/tasks/{task_id}/changes", **query)
    assert status == 200, page
    items: list[dict[str, Any]] = page["items"]
    return items


def test_a_patch_is_recorded_and_a_revert_restores_it(
    system: Dynacron, clock: SettableClock
) -> None:
    # Given a task, renamed and given a new payload a second later
    _, task = call(
        system,
        "POST",
        "/tasks",
        {"name": "nightly", "rate": "1 hour", "handler_url": HOOK, "payload": {"n": 1}},
    )
    task_id = task["task_id"]
    clock.advance(timedelta(seconds=1))
    status, patched = call(
        system, "PATCH", f"/tasks/{task_id}", {"name": "hourly", "payload": {"n": 2}}
    )
    assert status == 200, patched

    # Then the history shows the PATCH first, with only what changed, by whom
    latest, created = changes(system, task_id)
    assert latest["what"] == "patch"
    assert latest["who"] == ALICE
    assert latest["before"] == {"name": "nightly", "payload": {"n": 1}, "version": 1}
    assert latest["after"] == {"name": "hourly", "payload": {"n": 2}, "version": 2}
    assert created["what"] == "create"
    assert created["after"]["name"] == "nightly"

    # When a revert names a stale version, it is refused and records nothing
    stale = {"change_id": latest["change_id"], "version": 1}
    status, problem = call(system, "POST", f"/tasks/{task_id}/revert", stale)
    assert status == 409, problem
    assert len(changes(system, task_id)) == 2

    # When it names the current one, the fields before come back, as a change itself
    clock.advance(timedelta(seconds=1))
    body = {"change_id": latest["change_id"], "version": 2}
    status, reverted = call(system, "POST", f"/tasks/{task_id}/revert", body)
    assert status == 200, reverted
    assert (reverted["name"], reverted["payload"], reverted["version"]) == ("nightly", {"n": 1}, 3)
    revert = changes(system, task_id)[0]
    assert revert["what"] == "revert"
    assert revert["note"] == latest["change_id"]
    assert revert["after"] == {"name": "nightly", "payload": {"n": 1}, "version": 3}


def test_the_history_outlives_the_task_pages_and_is_one_tenants(
    system: Dynacron, clock: SettableClock
) -> None:
    _, task = call(system, "POST", "/tasks", {"rate": "1 hour", "handler_url": HOOK})
    task_id = task["task_id"]
    for note in ("deploy", None):
        clock.advance(timedelta(seconds=1))
        assert call(system, "POST", f"/tasks/{task_id}/pause", {"note": note})[0] == 200
        clock.advance(timedelta(seconds=1))
        assert call(system, "POST", f"/tasks/{task_id}/resume")[0] == 200
    clock.advance(timedelta(seconds=1))
    assert call(system, "DELETE", f"/tasks/{task_id}")[0] == 204

    # Newest first, over pages of two, after the task is gone
    status, first = call(system, "GET", f"/tasks/{task_id}/changes", limit=2)
    assert status == 200
    _, second = call(
        system, "GET", f"/tasks/{task_id}/changes", limit=2, next_token=first["next_token"]
    )
    _, third = call(
        system, "GET", f"/tasks/{task_id}/changes", limit=2, next_token=second["next_token"]
    )
    whats = [c["what"] for page in (first, second, third) for c in page["items"]]
    assert whats == ["delete", "resume", "pause", "resume", "pause", "create"]
    assert third["next_token"] is None
    pause = third["items"][0]
    assert pause["note"] == "deploy"
    assert pause["after"]["status"] == "PAUSED"
    assert pause["after"]["pause_note"] == "deploy"
    # A change of status alone cannot be reverted through PATCH
    body = {"change_id": pause["change_id"], "version": 1}
    assert call(system, "POST", f"/tasks/{task_id}/revert", body)[0] == 404  # task deleted

    # Another tenant sees no history of it, nor can it revert one
    status, problem = call(system, "GET", f"/tasks/{task_id}/changes", principal=BOB)
    assert status == 404, problem


def test_another_tenant_cannot_revert_a_real_change(system: Dynacron) -> None:
    _, task = call(system, "POST", "/tasks", {"rate": "1 hour", "handler_url": HOOK})
    task_id = task["task_id"]
    call(system, "PATCH", f"/tasks/{task_id}", {"name": "mine"})
    change_id = changes(system, task_id)[0]["change_id"]
    body = {"change_id": change_id, "version": 2}
    status, _ = call(system, "POST", f"/tasks/{task_id}/revert", body, principal=BOB)
    assert status == 404
    assert call(system, "GET", f"/tasks/{task_id}")[1]["name"] == "mine"


def test_trigger_is_recorded_and_a_status_change_is_not_revertible(system: Dynacron) -> None:
    _, task = call(system, "POST", "/tasks", {"rate": "1 hour", "handler_url": HOOK})
    task_id = task["task_id"]
    assert call(system, "POST", f"/tasks/{task_id}/trigger")[0] == 202
    trigger = changes(system, task_id)[0]
    assert trigger["what"] == "trigger"
    assert trigger["after"]["execution_id"].startswith(task_id)
    status, problem = call(
        system,
        "POST",
        f"/tasks/{task_id}/revert",
        {"change_id": trigger["change_id"], "version": 1},
    )
    assert status == 422, problem
    assert "pause or resume" in problem["detail"]


def test_the_document_describes_both_routes(system: Dynacron) -> None:
    status, doc = call(system, "GET", "/openapi.json")
    assert status == 200
    listing = doc["paths"]["/tasks/{task_id}/changes"]["get"]
    assert {"limit", "next_token"} <= {p["name"] for p in listing["parameters"]}
    assert "kept after the task is deleted" in listing["description"]
    revert = doc["paths"]["/tasks/{task_id}/revert"]["post"]
    assert "409" in revert["responses"]
    assert "version" in revert["description"]


def test_a_change_the_task_does_not_have_is_a_422_naming_change_id(system: Dynacron) -> None:
    _, task = call(system, "POST", "/tasks", {"rate": "1 hour", "handler_url": HOOK})
    body = {"change_id": "20261130T120000.000Z-nothing", "version": 1}
    status, problem = call(system, "POST", f"/tasks/{task['task_id']}/revert", body)
    assert status == 422, problem
    assert "change_id" in problem["detail"]
    assert call(system, "GET", f"/tasks/{task['task_id']}")[1] == task


def test_notify_calendars_and_when_are_recorded_and_a_revert_restores_them(
    system: Dynacron, clock: SettableClock
) -> None:
    # Given an upstream, a task after it, and a calendar
    assert call(system, "PUT", "/calendars/holidays", {"dates": ["2027-01-01"]})[0] == 200
    _, upstream = call(system, "POST", "/tasks", {"rate": "1 hour", "handler_url": HOOK})
    after = {"after": upstream["task_id"], "handler_url": HOOK}
    follower = call(system, "POST", "/tasks", after)[1]["task_id"]
    upstream_id = upstream["task_id"]
    # When each new field alone is changed, then the change reverted
    patches = [
        (upstream_id, {"notify": {"on_failure": {"url": HOOK, "after": 1}}}, "notify", {}),
        (upstream_id, {"exclude_calendars": ["holidays"]}, "exclude_calendars", []),
        (upstream_id, {"only_calendars": ["holidays"]}, "only_calendars", []),
        (follower, {"when": "always"}, "when", "success"),
    ]
    for task_id, body, field, before in patches:
        clock.advance(timedelta(seconds=1))
        status, patched = call(system, "PATCH", f"/tasks/{task_id}", body)
        assert status == 200, patched
        # Then the record names the field, before and after
        latest = changes(system, task_id)[0]
        assert latest["before"][field] == before, latest
        assert latest["after"][field] == body[field], latest
        # And the revert puts it back
        clock.advance(timedelta(seconds=1))
        revert = {"change_id": latest["change_id"], "version": patched["version"]}
        status, reverted = call(system, "POST", f"/tasks/{task_id}/revert", revert)
        assert status == 200, reverted
        assert reverted.get(field) in (before, None), (field, reverted)
        assert changes(system, task_id)[0]["after"][field] == before


def test_a_skip_and_its_removal_are_recorded_by_whom(
    system: Dynacron, clock: SettableClock
) -> None:
    _, task = call(system, "POST", "/tasks", {"rate": "1 hour", "handler_url": HOOK})
    task_id = task["task_id"]
    clock.advance(timedelta(seconds=1))
    status, skipped = call(system, "POST", f"/tasks/{task_id}/skip", {"occurrences": 1})
    assert status == 200, skipped
    skip = changes(system, task_id)[0]
    assert (skip["what"], skip["who"]) == ("skip", ALICE)
    assert skip["before"]["skips"] == []
    assert len(skip["after"]["skips"]) == 1
    clock.advance(timedelta(seconds=1))
    assert call(system, "DELETE", f"/tasks/{task_id}/skips")[0] == 200
    unskip = changes(system, task_id)[0]
    assert (unskip["what"], unskip["who"]) == ("skip", ALICE)
    assert (len(unskip["before"]["skips"]), unskip["after"]["skips"]) == (1, [])


def test_a_stray_api_key_header_does_not_hide_who_signed(system: Dynacron) -> None:
    # Given no API keys configured, and a role's session sending an x-api-key anyway
    assert not system.settings.api_keys
    body = {"rate": "1 hour", "handler_url": HOOK}
    stray = {"x-api-key": "not-a-key-here"}
    status, task = call(system, "POST", "/tasks", body, principal=BOB, headers=stray)
    assert status == 201, task
    # Then the change is recorded as by the session that signed, not its role (the tenant)
    status, page = call(system, "GET", f"/tasks/{task['task_id']}/changes", principal=BOB)
    assert status == 200, page
    assert page["items"][0]["who"] == BOB
