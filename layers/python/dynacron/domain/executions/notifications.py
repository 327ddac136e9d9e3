"""Notifications per task: what a task asks to be told (``NotifySettings``), what it
was last told (``NotificationState``), and, given an execution's end, what to send.

Pure: the caller passes the time. Why it works this way is decision 0057:

- a *failure* is an execution that failed for good (its last attempt failed, or it
  could not be retried): ``on_failure`` is sent once ``after`` of them follow one
  another, and then not again until a success ends the storm; that success sends
  ``on_recovery``, with the number of failed executions the storm counted;
- ``on_dead_letter`` is sent for every execution that ends in the dead-letter queue,
  and ``on_late`` for an occurrence with no success ``within_seconds`` after it was
  due; both are rate-limited per task: at most one each ``RATE_LIMIT_SECONDS``,
  the ones held back counted and reported by the next one sent.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from dynacron.domain.errors import InvalidRequest
from dynacron.domain.instants import format_instant, parse_instant

# At most one dead-letter or late notification per task in this long; the others
# are counted and the count goes with the next one sent.
RATE_LIMIT_SECONDS = 300
# ``on_failure.after``: how many failed executions in a row; a bound keeps it meaningful.
MAX_FAILURES_AFTER = 1000
# ``on_late.within_seconds``: at least a minute, at most a week.
MIN_LATE_SECONDS = 60
MAX_LATE_SECONDS = 7 * 24 * 3600
# The ends (and late occurrences) a task's state remembers counting, newest last, as
# 8 hex digits each (256 characters at most): a repeat of any is counted once. A
# repeat comes from the reaper's replay of a follow-up (within minutes) or a late
# check's message received twice.
REMEMBERED_COUNTS = 32
COUNT_DIGITS = 8
NOTIFY_FIELD = "notify"


class NoticeKind(StrEnum):
    """Which of a task's notifications a notice is."""

    FAILURE = "on_failure"
    RECOVERY = "on_recovery"
    DEAD_LETTER = "on_dead_letter"
    LATE = "on_late"


@dataclass(frozen=True)
class NotifyTarget:
    """Where one kind of notification goes, and the numbers that kind takes."""

    url: str
    # on_failure only: this many failed executions in a row.
    after: int = 1
    # on_late only: no success this long after the scheduled time.
    within_seconds: int | None = None


@dataclass(frozen=True)
class NotifySettings:
    """A task's ``notify``: each kind it asks for, with its URL."""

    on_failure: NotifyTarget | None = None
    on_recovery: NotifyTarget | None = None
    on_dead_letter: NotifyTarget | None = None
    on_late: NotifyTarget | None = None

    def target(self, kind: NoticeKind) -> NotifyTarget | None:
        """The target of ``kind``, or None if the task does not ask for it."""
        value: NotifyTarget | None = getattr(self, kind.value)
        return value

    @property
    def given(self) -> list[tuple[NoticeKind, NotifyTarget]]:
        """The kinds asked for, with their targets, in a fixed order."""
        return [(kind, t) for kind in NoticeKind if (t := self.target(kind)) is not None]

    @property
    def watches_ends(self) -> bool:
        """Whether an execution's end may owe a notification (``on_late`` alone does not)."""
        return any(kind is not NoticeKind.LATE for kind, _ in self.given)


@dataclass(frozen=True)
class NotificationState:
    """What a task's notifications have counted and sent; stored on the task."""

    consecutive_failures: int = 0
    # An on_failure was sent for the storm now counted: the next success sends on_recovery.
    failure_notified: bool = False
    # The last rate-limited notification sent, and how many were held back since.
    last_notified_at: datetime | None = None
    held_back: int = 0
    # The last ``REMEMBERED_COUNTS`` executions (or late occurrences) counted, as
    # ``count_digest``s, newest last: counting one of them again is a repeat.
    counted: tuple[str, ...] = ()
    # The scheduled time of the newest failure in the run now counted: a success of
    # an earlier occurrence (a replay of one that changed nothing, so was never
    # remembered, or one that ended late) does not end a run that began after it.
    failing_since: datetime | None = None

    @property
    def is_initial(self) -> bool:
        """Nothing counted, nothing sent: the state of a task never notified."""
        return self == NO_NOTIFICATIONS

    def has_counted(self, counted_as: str) -> bool:
        """Whether ``counted_as`` is one of the ends this state remembers counting."""
        return count_digest(counted_as) in self.counted

    def counting(self, counted_as: str) -> NotificationState:
        """This state, remembering ``counted_as`` too (the oldest forgotten past the bound)."""
        counted = (*self.counted, count_digest(counted_as))[-REMEMBERED_COUNTS:]
        return dataclasses.replace(self, counted=counted)


NO_NOTIFICATIONS = NotificationState()


def count_digest(counted_as: str) -> str:
    """What a state keeps of an end it counted: short, and a false repeat one in
    four billion per end remembered."""
    return hashlib.sha256(counted_as.encode()).hexdigest()[:COUNT_DIGITS]


class Ending(StrEnum):
    """What an execution's end counts as, for its task's notifications."""

    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    # Dead-lettered: a failure that also went to the dead-letter queue.
    DEAD_LETTERED = "DEAD_LETTERED"
    # An occurrence with no success in time (its on_late check found it so).
    LATE = "LATE"


@dataclass(frozen=True)
class Notice:
    """One notification to send: its kind, URL, and the count it reports (failed
    executions for on_failure and on_recovery; for the others this one and those
    held back since the last one sent)."""

    kind: NoticeKind
    url: str
    count: int


def ending_of(status: str) -> Ending | None:
    """What an execution that ended with ``status`` counts as; None: nothing (SKIPPED)."""
    if status == "SUCCEEDED":
        return Ending.SUCCEEDED
    # Every execution that fails for good is dead-lettered (decision 0006).
    if status == "FAILED":
        return Ending.DEAD_LETTERED
    return None


@dataclass(frozen=True)
class NotificationMessage:
    """One notice on its way: what the worker POSTs, and its own delivery attempt."""

    kind: NoticeKind
    url: str
    count: int
    task_id: str
    task_name: str
    tenant_id: str
    execution_id: str
    scheduled_at: datetime
    status: str
    error: str | None
    # When the notice was decided: the same on every attempt of its delivery.
    notified_at: datetime
    attempt: int = 1

    @property
    def notice_id(self) -> str:
        """The same on every attempt: the receiver's idempotency key."""
        return f"{self.execution_id}:{self.kind.value}"


@dataclass(frozen=True)
class LateCheck:
    """The on_late timer of one occurrence: whether its execution succeeded by
    ``due_at`` (its scheduled time plus ``within_seconds``)."""

    task_id: str
    execution_id: str
    scheduled_at: datetime
    due_at: datetime

    @property
    def counted_as(self) -> str:
        """What the task's notification state records once this check is counted."""
        return f"{self.execution_id}#late"


def late_check(
    settings: NotifySettings, task_id: str, execution_id: str, scheduled_at: datetime
) -> LateCheck | None:
    """The on_late timer for an occurrence of a task with ``settings``; None without on_late."""
    late = settings.on_late
    if late is None or late.within_seconds is None:
        return None
    return LateCheck(
        task_id, execution_id, scheduled_at, scheduled_at + timedelta(seconds=late.within_seconds)
    )


@dataclass(frozen=True)
class NoticeSent:
    """How one attempt to deliver a notice went: ``error`` None if it was taken."""

    error: str | None = None
    # False: trying again cannot help (no signing secret, a URL the policy refuses).
    retryable: bool = True


@dataclass(frozen=True)
class Decision:
    """What an ending sends, and the state to store after it (the same state: no write)."""

    notices: tuple[Notice, ...]
    state: NotificationState


def decide(
    settings: NotifySettings,
    state: NotificationState,
    ending: Ending,
    now: datetime,
    scheduled_at: datetime | None = None,
) -> Decision:
    """The notices ``ending`` sends for a task with ``settings`` that was in ``state``;
    ``scheduled_at``: the occurrence's, which orders a success against the failures
    counted (None: a success always ends the run)."""
    notices: list[Notice] = []
    if ending is Ending.SUCCEEDED:
        newest = state.failing_since
        if newest is not None and scheduled_at is not None and scheduled_at < newest:
            return Decision((), state)  # older than the run's newest failure
        if state.failure_notified and settings.on_recovery is not None:
            notices.append(
                Notice(NoticeKind.RECOVERY, settings.on_recovery.url, state.consecutive_failures)
            )
        return Decision(
            tuple(notices),
            dataclasses.replace(
                state, consecutive_failures=0, failure_notified=False, failing_since=None
            ),
        )
    if ending is Ending.LATE:
        return _rate_limited(settings.on_late, NoticeKind.LATE, state, now)
    failures = state.consecutive_failures + 1
    notified = state.failure_notified
    on_failure = settings.on_failure
    if on_failure is not None and not notified and failures >= on_failure.after:
        notices.append(Notice(NoticeKind.FAILURE, on_failure.url, failures))
        notified = True
    elif on_failure is None and settings.on_recovery is not None and not notified:
        # on_recovery without on_failure: a storm begins at its first failure.
        notified = True
    newest = state.failing_since
    if scheduled_at is not None and (newest is None or scheduled_at > newest):
        newest = scheduled_at
    state = dataclasses.replace(
        state, consecutive_failures=failures, failure_notified=notified, failing_since=newest
    )
    if ending is Ending.DEAD_LETTERED:
        limited = _rate_limited(settings.on_dead_letter, NoticeKind.DEAD_LETTER, state, now)
        return Decision((*notices, *limited.notices), limited.state)
    return Decision(tuple(notices), state)


def _rate_limited(
    target: NotifyTarget | None, kind: NoticeKind, state: NotificationState, now: datetime
) -> Decision:
    if target is None:
        return Decision((), state)
    last = state.last_notified_at
    if last is not None and now < last + timedelta(seconds=RATE_LIMIT_SECONDS):
        return Decision((), dataclasses.replace(state, held_back=state.held_back + 1))
    notice = Notice(kind, target.url, state.held_back + 1)
    return Decision((notice,), dataclasses.replace(state, last_notified_at=now, held_back=0))


def check_notify(settings: NotifySettings) -> None:
    """The numbers of ``settings`` within their bounds (the URLs are the service's check)."""
    if settings.on_failure is not None and not 1 <= settings.on_failure.after <= MAX_FAILURES_AFTER:
        raise InvalidRequest(
            "notify.on_failure.after", f"must be between 1 and {MAX_FAILURES_AFTER}"
        )
    late = settings.on_late
    if late is not None and (
        late.within_seconds is None
        or not MIN_LATE_SECONDS <= late.within_seconds <= MAX_LATE_SECONDS
    ):
        raise InvalidRequest(
            "notify.on_late.within_seconds",
            f"must be between {MIN_LATE_SECONDS} and {MAX_LATE_SECONDS} seconds",
        )


def notify_to_map(settings: NotifySettings) -> dict[str, Any] | None:
    """``settings`` as the record (and the API) keeps them; None if it asks for nothing."""
    values: dict[str, Any] = {}
    for kind, target in settings.given:
        entry: dict[str, Any] = {"url": target.url}
        if kind is NoticeKind.FAILURE:
            entry["after"] = target.after
        if kind is NoticeKind.LATE:
            entry["within_seconds"] = target.within_seconds
        values[kind.value] = entry
    return values or None


def notify_from_map(values: dict[str, Any] | None) -> NotifySettings:
    """Settings as ``notify_to_map`` stored them; none if none were."""
    if not values:
        return NO_NOTIFY

    def target(kind: NoticeKind) -> NotifyTarget | None:
        entry = values.get(kind.value)
        if entry is None:
            return None
        within = entry.get("within_seconds")
        return NotifyTarget(
            url=str(entry["url"]),
            after=int(entry.get("after", 1)),
            within_seconds=int(within) if within is not None else None,
        )

    return NotifySettings(**{kind.value: target(kind) for kind in NoticeKind})


NO_NOTIFY = NotifySettings()


def state_to_map(state: NotificationState) -> dict[str, Any] | None:
    """``state`` as the task record keeps it; None for a task never notified."""
    if state.is_initial:
        return None
    values: dict[str, Any] = {
        "consecutive_failures": state.consecutive_failures,
        "failure_notified": state.failure_notified,
        "last_notified_at": (
            format_instant(state.last_notified_at) if state.last_notified_at else None
        ),
        "held_back": state.held_back,
        "counted": "".join(state.counted),
    }
    if state.failing_since is not None:  # only while failing: a task item stays small
        values["failing_since"] = format_instant(state.failing_since)
    return values


def state_from_map(values: dict[str, Any] | None) -> NotificationState:
    """A state as ``state_to_map`` stored it; the initial one if none was."""
    if not values:
        return NO_NOTIFICATIONS
    last = values.get("last_notified_at")
    since = values.get("failing_since")
    return NotificationState(
        consecutive_failures=int(values.get("consecutive_failures", 0)),
        failure_notified=bool(values.get("failure_notified", False)),
        last_notified_at=parse_instant(last) if last else None,
        held_back=int(values.get("held_back", 0)),
        counted=_counted_from(values),
        failing_since=parse_instant(since) if since else None,
    )


def _counted_from(values: dict[str, Any]) -> tuple[str, ...]:
    joined = str(values.get("counted") or "")
    counted = tuple(joined[i : i + COUNT_DIGITS] for i in range(0, len(joined), COUNT_DIGITS))
    legacy = values.get("last_counted")  # a state stored before ``counted``: its one id
    return (count_digest(legacy), *counted) if legacy else counted
