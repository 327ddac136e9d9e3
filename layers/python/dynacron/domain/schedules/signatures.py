"""A task's schedule signature: what decides when its executions start, and nothing
of which task it is. Herds come from shared schedules, so a tenant's forecast can
count each signature's occurrences once and multiply them by the tasks that share
it (the schedule census, decision 0046), instead of computing every task's.

A signature holds the kind and expression with ``H`` resolved (two tasks whose
``H`` fell alike share one), the time zone and daylight-saving policy, the
start and end bounds, the jitter, and:

- for a fixed rate its period and phase, the phase to the second, or to the
  minute when the period is whole minutes (the minute each occurrence falls in is
  the same either way); the anchor itself is left out: a rate anchored in the
  future is counted from now, not from its anchor;
- for a one-time task the minute of its instant;
- for a fixed delay its delay only: its times depend on how long each run took,
  so its executions are spread evenly over the delay (an approximation);
- an ``after`` task has none: its runs follow another task's, not the clock.

Who is counted: ACTIVE and COMPLETED tasks. A task completes only when its
schedule has nothing left (a one-time task fired, a bound passed), so the
signature of a COMPLETED one has no occurrence ahead, and a fire, which may
complete a task, changes no count: nothing is written when a task fires. PAUSED
and ERROR tasks (paused, set aside) are taken out.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cached_property
from typing import Any

from dynacron.domain.errors import InvalidSchedule
from dynacron.domain.instants import format_instant, parse_instant
from dynacron.domain.schedules.cron import resolve_hashes
from dynacron.domain.schedules.expressions import (
    CronSchedule,
    FixedDelaySchedule,
    OneTimeSchedule,
    RateSchedule,
    Schedule,
    Window,
)
from dynacron.domain.schedules.wallclock import Ambiguous, DstPolicy, Nonexistent
from dynacron.domain.tasks.task import Task, TaskStatus

# The statuses a census counts (see above): never changed by a fire.
COUNTED = frozenset({TaskStatus.ACTIVE, TaskStatus.COMPLETED})
# The task record's attribute holding the key it is counted under (absent: nowhere).
CENSUS_KEY = "census"
# The epoch a rate's phase is measured from.
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Signature:
    """One schedule signature, as canonical JSON text (``text``): equal signatures
    have equal text, and ``key`` (a short hash of it) names it in a task's record."""

    text: str

    @cached_property
    def fields(self) -> dict[str, Any]:
        """The text's fields, as ``signature_of`` wrote them."""
        loaded: dict[str, Any] = json.loads(self.text)
        return loaded

    @property
    def key(self) -> str:
        """16 hex digits of the text's SHA-256: what a task's record keeps."""
        return signature_key(self.text)

    @property
    def kind(self) -> str:
        """``cron``, ``rate``, ``at`` or ``fixed_delay``."""
        return str(self.fields["kind"])

    @property
    def jitter_seconds(self) -> int:
        """The tasks' jitter: their starts spread over this many seconds."""
        return int(self.fields.get("jitter", 0))

    @property
    def ends_at(self) -> datetime | None:
        """After this no occurrence is left (a one-time minute, an end bound); None
        if it runs on. Its census entry may be forgotten a while after."""
        if self.kind == "at":
            return parse_instant(self.fields["minute"]) + timedelta(minutes=1)
        end = self.fields.get("end_at")
        return parse_instant(end) + timedelta(seconds=self.jitter_seconds) if end else None

    def schedule(self) -> Schedule:
        """A schedule with the signature's times (for a fixed delay: its delay)."""
        fields = self.fields
        window = Window(
            start_at=_instant(fields.get("start_at")), end_at=_instant(fields.get("end_at"))
        )
        if self.kind == "cron":
            return CronSchedule(
                expression=fields["expression"],
                timezone=fields["timezone"],
                dst=DstPolicy(Nonexistent(fields["nonexistent"]), Ambiguous(fields["ambiguous"])),
                seed=fields.get("seed"),
                window=window,
            )
        if self.kind == "rate":
            anchor = _EPOCH + timedelta(seconds=fields["phase"])
            return RateSchedule(every_seconds=fields["period"], anchor=anchor, window=window)
        if self.kind == "at":
            return OneTimeSchedule(at=parse_instant(fields["minute"]))
        return FixedDelaySchedule(delay_seconds=fields["delay"], window=window)


def signature_key(text: str) -> str:
    """The key of a signature's text (``Signature.key``)."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def signature_of(task: Task) -> Signature | None:
    """The task's schedule signature; None for an ``after`` task (no times of its own)."""
    schedule = task.schedule
    fields: dict[str, Any]
    if isinstance(schedule, CronSchedule):
        try:
            resolved = resolve_hashes(schedule.expression, schedule.seed)
            schedule.zone  # noqa: B018  (its zone must load too)
        except InvalidSchedule:
            # Written around the API: it never runs (the tick sets it aside).
            return None
        fields = {
            "kind": "cron",
            "expression": resolved if resolved is not None else schedule.expression,
            "timezone": schedule.timezone,
            "nonexistent": schedule.dst.nonexistent.value,
            "ambiguous": schedule.dst.ambiguous.value,
        }
        if resolved is None:
            fields["seed"] = schedule.seed
    elif isinstance(schedule, RateSchedule):
        period = schedule.every_seconds
        phase = int((schedule.anchor - _EPOCH).total_seconds()) % period
        if period % 60 == 0:
            phase -= phase % 60
        fields = {"kind": "rate", "period": period, "phase": phase}
    elif isinstance(schedule, OneTimeSchedule):
        minute = schedule.at.replace(second=0, microsecond=0)
        fields = {"kind": "at", "minute": format_instant(minute)}
    elif isinstance(schedule, FixedDelaySchedule):
        fields = {"kind": "fixed_delay", "delay": schedule.delay_seconds}
    else:
        return None
    if not isinstance(schedule, OneTimeSchedule):
        if schedule.window.start_at is not None:
            fields["start_at"] = format_instant(schedule.window.start_at)
        if schedule.window.end_at is not None:
            fields["end_at"] = format_instant(schedule.window.end_at)
    if task.jitter_seconds:
        fields["jitter"] = task.jitter_seconds
    return Signature(json.dumps(fields, sort_keys=True, separators=(",", ":")))


def counted_signature(task: Task) -> Signature | None:
    """The signature the census counts ``task`` under; None if it counts it nowhere
    (PAUSED, ERROR, or an ``after`` task)."""
    return signature_of(task) if task.status in COUNTED else None


@dataclass(frozen=True)
class CensusChange:
    """What one task's write does to its tenant's census: a key taken off, one added
    (each with its signature, for the census entry). Empty when the task stays
    counted under the same key, as on every fire."""

    removed: str | None = None
    added: Signature | None = None

    @property
    def empty(self) -> bool:
        """Whether the write leaves the census as it was."""
        return self.removed is None and self.added is None


def census_change(counted_as: str | None, task: Task | None) -> CensusChange:
    """The change from a task counted under ``counted_as`` (None: nowhere) to
    ``task`` as it is written (None: deleted)."""
    added = counted_signature(task) if task is not None else None
    if added is not None and added.key == counted_as:
        return CensusChange()
    return CensusChange(removed=counted_as, added=added)


def minutes_of(
    occurrence: datetime, jitter_seconds: int, first: datetime
) -> Iterator[tuple[datetime, float]]:
    """The minutes an occurrence with ``jitter_seconds`` starts in, each with its
    share: every whole second of ``[0, jitter_seconds]`` is as likely an offset (the
    tick's ``jitter_offset``), and a start before ``first`` counts at ``first``."""
    offsets = jitter_seconds + 1
    offset = 0
    while offset < offsets:
        shifted = occurrence + timedelta(seconds=offset)
        minute = max(first, shifted).replace(second=0, microsecond=0)
        # The offsets from this one on that start in this same minute.
        room = math.ceil((minute + timedelta(minutes=1) - shifted).total_seconds())
        taken = min(offsets - offset, room)
        yield minute, taken / offsets
        offset += taken


def _instant(text: str | None) -> datetime | None:
    return parse_instant(text) if text else None
