"""Completion tracking: an execution of a Step Functions or ECS target with
``track: "completion"`` ends when the run it started ends (decision 0049).

A tracked attempt names its run after the execution id and the attempt
(``run_name``): the state machine execution's name, the ECS task's ``startedBy``.
The run's end reaches dynacron as the service's state-change event
(``run_end_of_event``) or, if that event was lost, as the answer of a describe
call the reaper makes once a tracked lease is long overdue (``run_end_of_description``);
both read into one ``RunEnd``.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from dynacron.domain.instants import parse_instant
from dynacron.domain.tasks.targets import STATE_MACHINE_NAME_CHARS, service_token

# A tracked attempt's lease: how long the run goes without anyone asking about it.
# Its end normally arrives as an event long before; only a lost event makes the
# reaper describe the run, once this long after the last look (decision 0049).
CHECK_AFTER = timedelta(hours=1)

STEP_FUNCTIONS_EVENT = "Step Functions Execution Status Change"
ECS_EVENT = "ECS Task State Change"
STEP_FUNCTIONS_SOURCE = "aws.states"
ECS_SOURCE = "aws.ecs"
# What the stack's rules match (definitions/completion_events.py, kept equal by
# tests/unit/test_completion_events.py). A state machine execution in these has ended.
STEP_FUNCTIONS_ENDED = ("SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED")
ECS_ENDED = "STOPPED"
# Every tracked run's name starts so: the stack's rules match only names with it,
# so the ends of the account's other runs invoke nothing.
RUN_NAME_PREFIX = "dynacron-"
# ECS's bound on the name a run carries (a state machine's: targets.STATE_MACHINE_NAME_CHARS).
ECS_STARTED_BY_CHARS = 128
REASON_LIMIT = 900

_STARTED_BY = re.compile(r"[^A-Za-z0-9_/-]")


def run_name(execution_id: str, attempt: int, *, ecs: bool) -> str:
    """The name a tracked attempt's run carries: ``dynacron-EXECUTION-ID-ATTEMPT`` (a state
    machine execution's name; an ECS task's ``startedBy``, where ``.``, which ECS
    refuses, is written ``/``). An id the service cannot carry so, for its
    characters or length, is shortened with a hash of the whole: its events then
    name no execution, and the reaper's look finds its end (decision 0049).
    Each attempt starts its own run: a retry must not find the failed one."""
    text = f"{RUN_NAME_PREFIX}{execution_id}-{attempt}"
    if not ecs:
        return service_token(text, STATE_MACHINE_NAME_CHARS)
    if "/" not in text:
        text = text.replace(".", "/")
    cleaned = _STARTED_BY.sub("-", text)
    if cleaned == text and len(text) <= ECS_STARTED_BY_CHARS and "/" not in execution_id:
        return text
    digest = f"{zlib.crc32(text.encode()):08x}"
    return f"{cleaned[: ECS_STARTED_BY_CHARS - len(digest) - 1]}-{digest}"


def attempt_of(name: str, *, ecs: bool) -> tuple[str, int] | None:
    """The execution id and attempt a run's name says, if it reads as one."""
    if not name.startswith(RUN_NAME_PREFIX):
        return None
    execution_id, _, attempt = name.removeprefix(RUN_NAME_PREFIX).rpartition("-")
    if not execution_id or not attempt.isdigit():
        return None
    if ecs:
        execution_id = execution_id.replace("/", ".")
    return execution_id, int(attempt)


@dataclass(frozen=True)
class RunEnd:
    """How a tracked run ended, as dynacron records it."""

    execution_id: str
    attempt: int
    # The state machine's or the cluster's ARN: the task's target must name it.
    resource_arn: str
    # The run's own ARN (the state machine execution's, the ECS task's): the one the
    # attempt recorded when it started it, or the end is not its run's.
    run_arn: str
    succeeded: bool
    # Why it failed (the state machine's error and cause; the containers' exit
    # codes and the stopped reason), or what it came to (its output).
    summary: str
    duration: timedelta | None

    @property
    def said(self) -> str:
        """The summary with the run's duration."""
        took = f" after {format_duration(self.duration)}" if self.duration is not None else ""
        return f"{self.summary}{took}"[:REASON_LIMIT]


@dataclass(frozen=True)
class StillRunning:
    """A describe call found the run going on."""


@dataclass(frozen=True)
class RunMissing:
    """A describe call found no run of that name: it never started, or is forgotten."""

    reason: str


RunState = RunEnd | StillRunning | RunMissing


def run_end_of_event(event: Mapping[str, Any]) -> RunEnd | None:
    """The end an EventBridge state-change event reports; None for one that reports
    no end (a run starting, a task provisioning) or names no tracked run."""
    detail = event.get("detail")
    if not isinstance(detail, Mapping):
        return None
    kind = event.get("detail-type")
    if kind == STEP_FUNCTIONS_EVENT and event.get("source") == STEP_FUNCTIONS_SOURCE:
        return _state_machine_end(detail)
    if kind == ECS_EVENT and event.get("source") == ECS_SOURCE:
        return _ecs_task_end(detail)
    return None


def run_end_of_description(
    description: Mapping[str, Any] | None, *, ecs: bool, missing: str
) -> RunState:
    """What a describe call's answer (DescribeExecution's, or one task of
    DescribeTasks') says of a run; ``missing`` is why there is none."""
    if description is None:
        return RunMissing(missing)
    end = _ecs_task_end(description) if ecs else _state_machine_end(description)
    return end if end is not None else StillRunning()


def _state_machine_end(detail: Mapping[str, Any]) -> RunEnd | None:
    status = str(detail.get("status", ""))
    named = attempt_of(str(detail.get("name", "")), ecs=False)
    if status not in STEP_FUNCTIONS_ENDED or named is None:
        return None
    execution_id, attempt = named
    if status == "SUCCEEDED":
        output = detail.get("output")
        summary = "the state machine execution SUCCEEDED"
        if output:
            summary += f" with output {str(output)[:400]}"
    else:
        error = detail.get("error") or "no error named"
        cause = detail.get("cause") or "no cause given"
        summary = f"the state machine execution {status}: {error}: {cause}"
    return RunEnd(
        execution_id=execution_id,
        attempt=attempt,
        resource_arn=str(detail.get("stateMachineArn", "")),
        run_arn=str(detail.get("executionArn", "")),
        succeeded=status == "SUCCEEDED",
        summary=summary,
        duration=_between(detail.get("startDate"), detail.get("stopDate")),
    )


def _ecs_task_end(detail: Mapping[str, Any]) -> RunEnd | None:
    named = attempt_of(str(detail.get("startedBy", "")), ecs=True)
    if detail.get("lastStatus") != ECS_ENDED or named is None:
        return None
    execution_id, attempt = named
    containers = [c for c in detail.get("containers") or [] if isinstance(c, Mapping)]
    exits = [(str(c.get("name", "?")), c.get("exitCode")) for c in containers]
    # Every container must have exited 0: one that never ran has no exit code.
    succeeded = bool(exits) and all(code == 0 for _, code in exits)
    codes = ", ".join(
        f"{name} exit code {code}" if code is not None else f"{name} no exit code"
        for name, code in exits
    )
    reason = detail.get("stoppedReason") or "no reason given"
    stop_code = detail.get("stopCode")
    summary = f"the ECS task stopped ({codes or 'no containers'}): {reason}"
    if stop_code:
        summary += f" [{stop_code}]"
    return RunEnd(
        execution_id=execution_id,
        attempt=attempt,
        resource_arn=str(detail.get("clusterArn", "")),
        run_arn=str(detail.get("taskArn", "")),
        succeeded=succeeded,
        summary=summary,
        duration=_between(
            detail.get("startedAt") or detail.get("createdAt"), detail.get("stoppedAt")
        ),
    )


def _instant(value: object) -> datetime | None:
    """An event's instant: epoch milliseconds (Step Functions), ISO 8601 (ECS), or
    a datetime (a describe call's answer)."""
    if isinstance(value, datetime):
        return value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return datetime.fromtimestamp(value / 1000, UTC)
    if isinstance(value, str) and value:
        try:
            return parse_instant(value)
        except ValueError:
            return None
    return None


def _between(start: object, stop: object) -> timedelta | None:
    started, stopped = _instant(start), _instant(stop)
    if started is None or stopped is None or stopped < started:
        return None
    return stopped - started


def format_duration(duration: timedelta) -> str:
    """``3h0m5s``, ``4m2s``, ``12.5s``: a run's length as a person reads it."""
    seconds = duration.total_seconds()
    if seconds < 60:
        return f"{seconds:.3g}s"
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes}m{secs}s" if hours else f"{minutes}m{secs}s"
