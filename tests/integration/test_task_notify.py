"""A task's ``notify`` over the API: validated as handler URLs are, stored, shown,
replaced by PATCH (decision 0057)."""

from __future__ import annotations

from typing import Any

from dynacron.entry.composition import Dynacron
from tests.integration.api_client import call

HOOK = "http://127.0.0.1:9/hook"
NOTIFY = {
    "on_failure": {"url": "http://127.0.0.1:9/failed", "after": 3},
    "on_recovery": {"url": "http://127.0.0.1:9/recovered"},
    "on_dead_letter": {"url": "http://127.0.0.1:9/dead"},
    "on_late": {"url": "http://127.0.0.1:9/late", "within_seconds": 600},
}


def create(system: Dynacron, **fields: Any) -> tuple[int, dict[str, Any]]:
    return call(system, "POST", "/tasks", {"rate": "1 minute", "handler_url": HOOK, **fields})


def test_notify_is_stored_shown_and_replaced_by_patch(system: Dynacron) -> None:
    status, task = create(system, notify=NOTIFY)
    assert status == 201, task
    assert task["notify"] == NOTIFY
    path = f"/tasks/{task['task_id']}"
    assert call(system, "GET", path)[1]["notify"] == NOTIFY

    # A PATCH that does not name notify leaves it; one that does replaces it whole
    assert call(system, "PATCH", path, {"name": "renamed"})[1]["notify"] == NOTIFY
    only_dead = {"on_dead_letter": {"url": "http://127.0.0.1:9/dead"}}
    status, patched = call(system, "PATCH", path, {"notify": only_dead})
    # The kinds not asked for are shown as null
    assert (status, patched["notify"]) == (200, {**dict.fromkeys(NOTIFY), **only_dead})
    status, cleared = call(system, "PATCH", path, {"notify": {}})
    assert (status, cleared["notify"]) == (200, None)
    assert create(system)[1]["notify"] is None


# Each bad ``notify`` and the field its problem names.
REFUSED = [
    ({"on_failure": {"url": "http://169.254.169.254/latest"}}, "notify.on_failure.url"),
    ({"on_late": {"url": "ftp://127.0.0.1/x", "within_seconds": 600}}, "notify.on_late.url"),
    ({"on_recovery": {"url": "http://10.0.0.1/x"}}, "notify.on_recovery.url"),
    ({"on_failure": {"url": HOOK, "after": "3"}}, "after"),
    ({"on_failure": {"url": HOOK, "after": 0}}, "after"),
    ({"on_late": {"url": HOOK}}, "within_seconds"),
    ({"on_sunday": {"url": HOOK}}, "on_sunday"),
    ({"on_dead_letter": {"url": HOOK, "email": "x@example.com"}}, "email"),
    ({"on_dead_letter": HOOK}, "on_dead_letter"),
]


def test_a_bad_notify_is_refused_naming_its_field_and_nothing_is_stored(
    system: Dynacron,
) -> None:
    # One system for every case: each is a request that changes nothing
    status, task = create(system, notify=NOTIFY)
    assert status == 201
    path = f"/tasks/{task['task_id']}"
    for notify, field in REFUSED:
        status, problem = create(system, notify=notify)
        assert status == 422, (notify, problem)
        assert field in str(problem), (notify, problem)

        # A PATCH with it is refused the same way, and leaves the task as it was
        status, problem = call(system, "PATCH", path, {"notify": notify})
        assert status == 422, (notify, problem)
        assert field in str(problem), (notify, problem)
    assert call(system, "GET", "/tasks")[1]["items"] == [task]
