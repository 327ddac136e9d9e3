"""EventBridge Scheduler schedules as dynacron tasks (issue 25, must-have 7).

Pure: a schedule as ``scheduler:GetSchedule`` answers it (a mapping with its
``datetime`` values) becomes the body of ``POST /tasks``, with what could not be
carried over said, per schedule. Refused (no body) when the task would not do
what the schedule did: a cron year other than ``*``, a target dynacron cannot call.

Expressions:

- ``cron(min hour day-of-month month day-of-week year)``: the year must be ``*``.
  EventBridge numbers the days of the week 1-7 from Sunday, cron 0-6: numbers are
  shifted (``2-6`` is ``1-5``, ``6#3`` is ``5#3``, ``7L`` is ``6L``), names kept, and
  ``L`` alone (the week's last day) is Saturday. ``?``, ``L``, ``W`` and ``#`` mean
  the same in dynacron's cron.
- ``rate(5 minutes)`` is the rate ``5 minutes``.
- ``at(2027-01-01T09:00:00)`` is a wall-clock time in the schedule's time zone.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from dynacron.domain.executions.retry import MAX_ATTEMPTS_LIMIT
from dynacron.domain.tasks.task import MAX_JITTER_SECONDS

# The services whose ARN a dynacron target may name (decision 0047).
TARGET_SERVICES = frozenset({"lambda", "sqs", "sns", "events", "states", "ecs"})
DAY_NAMES = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
# A tag on every imported task: the schedule it came from, by a digest of its ARN.
SOURCE_TAG = "eventbridge-schedule"
IDEMPOTENCY_PREFIX = "eventbridge:"
_EXPRESSION = re.compile(r"^(cron|rate|at)\((.*)\)$", re.DOTALL)


class UnmappableSchedule(ValueError):
    """A schedule that cannot become an equivalent task, and why."""


@dataclass(frozen=True)
class ImportedSchedule:
    """One schedule's translation: the task to create (None: refused), and each thing
    carried over only approximately or not at all."""

    arn: str
    name: str
    group: str
    body: dict[str, Any] | None
    notes: tuple[str, ...] = field(default=())
    # DISABLED in EventBridge: created, then paused.
    paused: bool = False

    @property
    def idempotency_key(self) -> str:
        """The batch item's key: the same for the same schedule, every run."""
        return idempotency_key_for(self.arn)


def schedule_digest(arn: str) -> str:
    """24 hex digits of the ARN's SHA-256: the tag value and the key's body."""
    return hashlib.sha256(arn.encode()).hexdigest()[:24]


def idempotency_key_for(arn: str) -> str:
    """``eventbridge:`` and the ARN's digest (a batch item's idempotency key)."""
    return IDEMPOTENCY_PREFIX + schedule_digest(arn)


def translate_expression(expression: str) -> dict[str, str]:
    """``cron(...)``, ``rate(...)`` or ``at(...)`` as the schedule fields of a task."""
    matched = _EXPRESSION.match(expression.strip())
    if matched is None:
        raise UnmappableSchedule(f"{expression!r} is not a cron(), rate() or at() expression")
    kind, inner = matched.group(1), matched.group(2).strip()
    if kind == "rate":
        parts = inner.split()
        if len(parts) != 2 or not parts[0].isdigit():
            raise UnmappableSchedule(f"rate({inner}) is not 'rate(value unit)'")
        return {"rate": f"{int(parts[0])} {parts[1].lower()}"}
    if kind == "at":
        try:
            datetime.fromisoformat(inner)
        except ValueError:
            raise UnmappableSchedule(f"at({inner}) is not yyyy-mm-ddThh:mm:ss") from None
        return {"at": inner}
    return {"cron": translate_cron(inner)}


def translate_cron(fields_text: str) -> str:
    """EventBridge's six cron fields as dynacron's five."""
    fields = fields_text.split()
    if len(fields) != 6:
        raise UnmappableSchedule(
            f"cron({fields_text}) has {len(fields)} fields; EventBridge's has 6 "
            "(minutes hours day-of-month month day-of-week year)"
        )
    minute, hour, day_of_month, month, day_of_week, year = fields
    if year != "*":
        raise UnmappableSchedule(
            f"cron year {year!r}: dynacron's cron has no year field; only '*' can be "
            "imported (recreate it with start_at/end_at bounding the years)"
        )
    return " ".join((minute, hour, day_of_month, month, _day_of_week(day_of_week)))


def _day_of_week(field_text: str) -> str:
    return ",".join(_day_item(item) for item in field_text.upper().split(","))


def _day_item(item: str) -> str:
    base, slash, step = item.partition("/")
    if base in ("*", "?"):
        shifted = base
    elif base == "L":
        shifted = "6"  # the week's last day: Saturday
    elif "#" in base:
        day, _, nth = base.partition("#")
        shifted = f"{_day(day)}#{nth}"
    elif base.endswith("L"):
        shifted = f"{_day(base[:-1])}L"
    elif "-" in base:
        first, _, last = base.partition("-")
        shifted = f"{_day(first)}-{_day(last)}"
    else:
        shifted = _day(base)
    return shifted + slash + step


def _day(text: str) -> str:
    """One EventBridge day of the week (1-7 from Sunday, or a name) in cron's 0-6."""
    if text in DAY_NAMES:
        return text
    if text.isdigit() and 1 <= int(text) <= 7:
        return str(int(text) - 1)
    raise UnmappableSchedule(f"day of week {text!r} is not 1-7 or SUN-SAT")


def _instant(value: Any) -> str:
    instant = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    if instant.tzinfo is None:
        instant = instant.replace(tzinfo=UTC)
    return instant.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def translate_schedule(schedule: Mapping[str, Any]) -> ImportedSchedule:
    """``schedule`` (``GetSchedule``'s answer) as a task body and notes."""
    arn, name = str(schedule["Arn"]), str(schedule["Name"])
    group = str(schedule.get("GroupName") or "default")
    notes: list[str] = []
    try:
        body = _body(schedule, notes)
    except UnmappableSchedule as refused:
        return ImportedSchedule(arn, name, group, None, (str(refused), *notes))
    paused = schedule.get("State") == "DISABLED"
    if paused:
        notes.append("the schedule is DISABLED: the task is created, then paused")
    return ImportedSchedule(arn, name, group, body, tuple(notes), paused)


def _body(schedule: Mapping[str, Any], notes: list[str]) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": str(schedule["Name"])[:200],
        **translate_expression(str(schedule["ScheduleExpression"])),
        "timezone": str(schedule.get("ScheduleExpressionTimezone") or "UTC"),
        "tags": {SOURCE_TAG: schedule_digest(str(schedule["Arn"]))},
    }
    if schedule.get("StartDate") is not None:
        body["start_at"] = _instant(schedule["StartDate"])
    if schedule.get("EndDate") is not None:
        body["end_at"] = _instant(schedule["EndDate"])
    window = schedule.get("FlexibleTimeWindow") or {}
    if window.get("Mode") == "FLEXIBLE":
        seconds = int(window.get("MaximumWindowInMinutes", 0)) * 60
        if seconds > MAX_JITTER_SECONDS:
            notes.append(
                f"flexible window of {seconds // 60} minutes cut to dynacron's largest "
                f"jitter, {MAX_JITTER_SECONDS // 60} minutes"
            )
        body["jitter_seconds"] = min(seconds, MAX_JITTER_SECONDS)
    target = schedule.get("Target") or {}
    body["target"] = _target(target, notes)
    retry = target.get("RetryPolicy")
    if retry is not None:
        # EventBridge counts retries after the first attempt; dynacron, attempts in all.
        attempts = int(retry.get("MaximumRetryAttempts", 185)) + 1
        if attempts > MAX_ATTEMPTS_LIMIT:
            notes.append(f"{attempts - 1} retries cut to dynacron's {MAX_ATTEMPTS_LIMIT - 1}")
        body["retry"] = {"max_attempts": min(attempts, MAX_ATTEMPTS_LIMIT)}
        if "MaximumEventAgeInSeconds" in retry:
            notes.append(
                f"maximum event age {retry['MaximumEventAgeInSeconds']} s not mapped: "
                "dynacron retries until max_attempts, with backoff up to max_delay_seconds"
            )
    dead_letter = (target.get("DeadLetterConfig") or {}).get("Arn")
    if dead_letter:
        notes.append(
            f"dead-letter queue {dead_letter} not mapped: exhausted executions go to "
            "dynacron's dead letters (GET /dead-letters)"
        )
    if schedule.get("ActionAfterCompletion") == "DELETE":
        notes.append("ActionAfterCompletion DELETE not mapped: the task stays, COMPLETED")
    if schedule.get("KmsKeyArn"):
        notes.append("KmsKeyArn not mapped: dynacron encrypts with its tables' keys")
    return body


def _target(target: Mapping[str, Any], notes: list[str]) -> dict[str, Any]:
    arn = str(target.get("Arn", ""))
    parts = arn.split(":")
    service = parts[2] if len(parts) > 2 else ""
    if service == "scheduler":
        raise UnmappableSchedule(
            f"universal target {arn}: dynacron calls only Lambda, SQS, SNS, EventBridge, "
            "Step Functions and ECS"
        )
    if service not in TARGET_SERVICES:
        raise UnmappableSchedule(f"target {arn}: dynacron cannot call service {service!r}")
    mapped: dict[str, Any] = {"arn": arn, "role_arn": str(target.get("RoleArn", ""))}
    if target.get("Input") is not None:
        mapped["input"] = str(target["Input"])
    sqs = target.get("SqsParameters") or {}
    if sqs.get("MessageGroupId"):
        mapped["sqs_parameters"] = {"message_group_id": sqs["MessageGroupId"]}
    events = target.get("EventBridgeParameters") or {}
    if events:
        mapped["eventbridge_parameters"] = {
            key: events[source]
            for key, source in (("detail_type", "DetailType"), ("source", "Source"))
            if events.get(source)
        }
    ecs = target.get("EcsParameters")
    if ecs:
        mapped["ecs_parameters"] = _ecs(ecs, notes)
    for unmapped in ("KinesisParameters", "SageMakerPipelineParameters"):
        if target.get(unmapped):
            raise UnmappableSchedule(f"{unmapped} is not a dynacron target")
    return mapped


def _ecs(ecs: Mapping[str, Any], notes: list[str]) -> dict[str, Any]:
    mapped: dict[str, Any] = {"task_definition_arn": ecs["TaskDefinitionArn"]}
    for key, source in (
        ("launch_type", "LaunchType"),
        ("platform_version", "PlatformVersion"),
        ("group", "Group"),
    ):
        if ecs.get(source):
            mapped[key] = ecs[source]
    vpc = (ecs.get("NetworkConfiguration") or {}).get("awsvpcConfiguration")
    if vpc:
        mapped["network_configuration"] = {
            "awsvpc_configuration": {
                "subnets": list(vpc.get("Subnets", [])),
                "security_groups": list(vpc.get("SecurityGroups", [])),
                "assign_public_ip": vpc.get("AssignPublicIp", "DISABLED"),
            }
        }
    if int(ecs.get("TaskCount", 1)) != 1:
        notes.append(f"TaskCount {ecs['TaskCount']} not mapped: one ECS task per execution")
    for unmapped in (
        "CapacityProviderStrategy",
        "PlacementConstraints",
        "PlacementStrategy",
        "PropagateTags",
        "Tags",
        "EnableECSManagedTags",
        "EnableExecuteCommand",
        "ReferenceId",
    ):
        if ecs.get(unmapped):
            notes.append(f"ECS {unmapped} not mapped")
    return mapped
