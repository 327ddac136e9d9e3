"""What an execution's end sends to a task's notification URLs (decision 0057): the
pure rules, with the time passed in."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from rich.console import Console

from dynacron.api.responses import TaskPage, TaskView
from dynacron.cli import tables
from dynacron.domain.errors import InvalidRequest
from dynacron.domain.executions.notifications import (
    NO_NOTIFICATIONS,
    RATE_LIMIT_SECONDS,
    REMEMBERED_COUNTS,
    Decision,
    Ending,
    NoticeKind,
    NotificationState,
    NotifySettings,
    NotifyTarget,
    check_notify,
    decide,
    notify_from_map,
    notify_to_map,
    state_from_map,
    state_to_map,
)
from dynacron.domain.tasks.specs import ScheduleSpec, TaskSpec, new_task

NOW = datetime(2026, 12, 6, 0, 0, tzinfo=UTC)
ALL = NotifySettings(
    on_failure=NotifyTarget("http://127.0.0.1:9/failure", after=3),
    on_recovery=NotifyTarget("http://127.0.0.1:9/recovery"),
    on_dead_letter=NotifyTarget("http://127.0.0.1:9/dead"),
    on_late=NotifyTarget("http://127.0.0.1:9/late", within_seconds=600),
)


def run(
    settings: NotifySettings, endings: list[Ending], every: timedelta = timedelta(seconds=10)
) -> tuple[list[tuple[NoticeKind, int]], NotificationState]:
    """The notices a sequence of endings sends, ``every`` apart, and the last state."""
    state, sent = NO_NOTIFICATIONS, []
    for i, ending in enumerate(endings):
        decision: Decision = decide(settings, state, ending, NOW + i * every)
        sent += [(notice.kind, notice.count) for notice in decision.notices]
        state = decision.state
    return sent, state


def test_on_failure_is_sent_once_after_n_failures_in_a_row_and_recovery_once_with_the_count() -> (
    None
):
    settings = NotifySettings(on_failure=ALL.on_failure, on_recovery=ALL.on_recovery)
    sent, state = run(settings, [Ending.FAILED] * 5 + [Ending.SUCCEEDED, Ending.SUCCEEDED])
    assert sent == [(NoticeKind.FAILURE, 3), (NoticeKind.RECOVERY, 5)]
    assert state.consecutive_failures == 0
    assert not state.failure_notified


def test_a_success_within_the_storm_resets_the_count_and_sends_no_recovery() -> None:
    settings = NotifySettings(on_failure=ALL.on_failure, on_recovery=ALL.on_recovery)
    sent, _ = run(settings, [Ending.FAILED, Ending.FAILED, Ending.SUCCEEDED, Ending.FAILED])
    assert sent == []


def test_a_success_of_a_task_that_never_failed_changes_nothing() -> None:
    decision = decide(ALL, NO_NOTIFICATIONS, Ending.SUCCEEDED, NOW)
    assert decision == Decision((), NO_NOTIFICATIONS)


def test_on_failure_defaults_to_the_first_failure() -> None:
    settings = NotifySettings(on_failure=NotifyTarget("http://127.0.0.1:9/f"))
    assert run(settings, [Ending.FAILED, Ending.FAILED])[0] == [(NoticeKind.FAILURE, 1)]


def test_recovery_alone_follows_a_storm_that_began_at_its_first_failure() -> None:
    settings = NotifySettings(on_recovery=ALL.on_recovery)
    sent, _ = run(settings, [Ending.FAILED, Ending.DEAD_LETTERED, Ending.SUCCEEDED])
    assert sent == [(NoticeKind.RECOVERY, 2)]


def test_dead_letters_are_rate_limited_and_the_next_one_sent_counts_those_held_back() -> None:
    settings = NotifySettings(on_dead_letter=ALL.on_dead_letter)
    minute = timedelta(seconds=60)
    assert RATE_LIMIT_SECONDS == 300
    # Dead letters at 0, 1, 2, 3, 4 and 5 minutes: the first is sent, the next four
    # are held back, the one at 5 minutes is sent with the count of five.
    sent, state = run(settings, [Ending.DEAD_LETTERED] * 6, every=minute)
    assert sent == [(NoticeKind.DEAD_LETTER, 1), (NoticeKind.DEAD_LETTER, 5)]
    assert state.held_back == 0
    assert state.last_notified_at == NOW + 5 * minute


def test_a_dead_letter_counts_as_a_failure_too() -> None:
    settings = NotifySettings(
        on_failure=NotifyTarget("http://127.0.0.1:9/f", after=2),
        on_dead_letter=ALL.on_dead_letter,
    )
    sent, _ = run(settings, [Ending.DEAD_LETTERED, Ending.DEAD_LETTERED])
    assert sent == [(NoticeKind.DEAD_LETTER, 1), (NoticeKind.FAILURE, 2)]


def test_late_occurrences_are_rate_limited_and_do_not_count_as_failures() -> None:
    settings = NotifySettings(on_late=ALL.on_late)
    sent, state = run(settings, [Ending.LATE] * 3)
    assert sent == [(NoticeKind.LATE, 1)]
    assert state.held_back == 2
    assert state.consecutive_failures == 0


def test_an_ending_the_task_does_not_ask_about_sends_nothing() -> None:
    assert run(NotifySettings(), [Ending.FAILED, Ending.DEAD_LETTERED, Ending.LATE])[0] == []


def test_settings_and_state_round_trip_through_the_record() -> None:
    assert notify_from_map(notify_to_map(ALL)) == ALL
    assert notify_to_map(NotifySettings()) is None
    state = NotificationState(4, True, NOW, 2).counting("job_1").counting("job_2")
    assert state_from_map(state_to_map(state)) == state
    assert state_to_map(NO_NOTIFICATIONS) is None
    failing = decide(ALL, state, Ending.FAILED, NOW, NOW - timedelta(minutes=1)).state
    assert failing.failing_since == NOW - timedelta(minutes=1)
    assert state_from_map(state_to_map(failing)) == failing
    assert "failing_since" not in (state_to_map(state) or {})  # kept only while failing


def test_a_success_older_than_the_runs_newest_failure_does_not_end_the_run() -> None:
    failing = decide(ALL, NO_NOTIFICATIONS, Ending.FAILED, NOW, NOW).state
    earlier = decide(ALL, failing, Ending.SUCCEEDED, NOW, NOW - timedelta(seconds=1))
    assert earlier == Decision((), failing)
    later = decide(ALL, failing, Ending.SUCCEEDED, NOW, NOW + timedelta(seconds=1))
    assert later.state.consecutive_failures == 0
    # An earlier failure ending late counts, and keeps the newest failure's time
    late = decide(ALL, failing, Ending.FAILED, NOW, NOW - timedelta(minutes=5)).state
    assert (late.consecutive_failures, late.failing_since) == (2, NOW)


def test_a_state_remembers_the_last_ends_it_counted_and_reads_an_older_record() -> None:
    state = NO_NOTIFICATIONS
    for n in range(REMEMBERED_COUNTS + 1):
        state = state.counting(f"job_{n}")
    # The newest REMEMBERED_COUNTS are repeats, the oldest forgotten: the record stays small
    assert all(state.has_counted(f"job_{n}") for n in range(1, REMEMBERED_COUNTS + 1))
    assert not state.has_counted("job_0")
    assert len(state_to_map(state)["counted"]) == REMEMBERED_COUNTS * 8  # type: ignore[index]
    # A record stored before ``counted`` kept the last one alone
    legacy = state_from_map({"consecutive_failures": 1, "last_counted": "job_7"})
    assert legacy.has_counted("job_7")
    assert legacy.consecutive_failures == 1


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        (NotifySettings(on_failure=NotifyTarget("u", after=0)), "notify.on_failure.after"),
        (NotifySettings(on_late=NotifyTarget("u")), "notify.on_late.within_seconds"),
        (
            NotifySettings(on_late=NotifyTarget("u", within_seconds=5)),
            "notify.on_late.within_seconds",
        ),
    ],
)
def test_numbers_out_of_bounds_are_refused_naming_the_field(
    settings: NotifySettings, field: str
) -> None:
    with pytest.raises(InvalidRequest) as refused:
        check_notify(settings)
    assert refused.value.field == field


def test_the_api_and_the_cli_show_a_tasks_notify() -> None:
    task = new_task(
        TaskSpec(ScheduleSpec(rate="1 minute"), handler_url="http://127.0.0.1:9/h", notify=ALL),
        NOW,
        task_id="t1",
        tenant_id="default",
    )
    view = TaskView.of(task)
    assert view.notify is not None
    assert view.notify.to_domain() == ALL
    console = Console(record=True, width=400)
    console.print(tables.tasks(view))
    shown = console.export_text()
    assert "on_failure (after 3) -> http://127.0.0.1:9/failure" in shown
    assert "on_late (within 600 s) -> http://127.0.0.1:9/late" in shown
    # A listing keeps its columns: notify is shown for one task alone
    assert "notify" not in tables.tasks(TaskPage(items=[view], next_token=None)).columns[-1].header
