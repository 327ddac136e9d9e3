"""AWS targets: a task that calls an AWS API with its owner's role instead of POSTing
to a URL (decision 0047).

A target is shaped like EventBridge Scheduler's ``Target`` in snake_case (``arn``,
``role_arn``, ``input`` and the per-service parameters), so a schedule moves over
unchanged. The ARN's service decides the call: Lambda ``Invoke``, SQS
``SendMessage``, SNS ``Publish``, EventBridge ``PutEvents``, Step Functions
``StartExecution``, ECS ``RunTask``.

What the call carries: without ``input``, the envelope an HTTP handler receives
(task id, execution id, scheduled time, attempt, payload); with ``input``, that
text with its placeholders (``PLACEHOLDERS``) replaced. Idempotency where the
service has a key for it: ``service_token`` makes the execution id fit one.

The worker assumes ``role_arn`` with an external id bound to the task's tenant
(``external_id_for``): a tenant never chooses it, so naming another tenant's role
gets an external id that role's trust policy does not accept.
"""

from __future__ import annotations

import hashlib
import json
import re
import zlib
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from dynacron.domain.errors import InvalidRequest


class TargetService(StrEnum):
    """The AWS services a target may call, by the service part of its ARN."""

    LAMBDA = "lambda"
    SQS = "sqs"
    SNS = "sns"
    EVENTBRIDGE = "events"
    STEP_FUNCTIONS = "states"
    ECS = "ecs"

    @property
    def client_name(self) -> str:
        """The service's name in the AWS SDKs, where it differs from its ARN's."""
        return "stepfunctions" if self is TargetService.STEP_FUNCTIONS else self.value

    @property
    def proper_name(self) -> str:
        """The service as its owner names it."""
        return _TITLES[self]


_TITLES = {
    TargetService.LAMBDA: "Lambda",
    TargetService.SQS: "SQS",
    TargetService.SNS: "SNS",
    TargetService.EVENTBRIDGE: "EventBridge",
    TargetService.STEP_FUNCTIONS: "Step Functions",
    TargetService.ECS: "ECS",
}


class InvocationType(StrEnum):
    """How a Lambda target is invoked: queued (``Event``) or waited for."""

    EVENT = "Event"
    REQUEST_RESPONSE = "RequestResponse"


class Tracking(StrEnum):
    """What an execution of a target waits for (decision 0049). Untracked, the call
    is the end; ``completion`` keeps the execution RUNNING until the state machine
    execution or the ECS task it started ends."""

    COMPLETION = "completion"


# The services whose runs dynacron can follow to their end.
TRACKABLE = (TargetService.STEP_FUNCTIONS, TargetService.ECS)


class LaunchType(StrEnum):
    """Where an ECS target's task runs."""

    EC2 = "EC2"
    FARGATE = "FARGATE"
    EXTERNAL = "EXTERNAL"


# Placeholders ``input`` may hold; each is replaced, as text, on every call. The
# EventBridge Scheduler context attributes mean the same, so an input written for
# it works unchanged.
EXECUTION_ID = "<dynacron.execution-id>"
SCHEDULED_AT = "<dynacron.scheduled-time>"
TASK_ID = "<dynacron.task-id>"
ATTEMPT = "<dynacron.attempt>"
SCHEDULER_ALIASES = {
    "<aws.scheduler.execution-id>": EXECUTION_ID,
    "<aws.scheduler.scheduled-time>": SCHEDULED_AT,
    "<aws.scheduler.attempt-number>": ATTEMPT,
}
PLACEHOLDERS = (EXECUTION_ID, SCHEDULED_AT, TASK_ID, ATTEMPT, *SCHEDULER_ALIASES)

# EventBridge Scheduler's own bound on Input; every service here takes at least this.
MAX_INPUT_CHARS = 8192
MAX_ARN_CHARS = 1600
# The services' bounds on their idempotency keys.
STATE_MACHINE_NAME_CHARS = 80
ECS_CLIENT_TOKEN_CHARS = 64
SQS_DEDUPLICATION_CHARS = 128
# EventBridge's bound on a detail type and a source.
MAX_DETAIL_TYPE_CHARS = 128
MAX_SOURCE_CHARS = 256
MAX_NETWORK_IDS = 16
# What RunTask's ``overrides`` (an ECS target's input) may hold, in its own names.
ECS_OVERRIDES = (
    "containerOverrides",
    "cpu",
    "memory",
    "taskRoleArn",
    "executionRoleArn",
    "ephemeralStorage",
    "inferenceAcceleratorOverrides",
)
DEFAULT_EVENT_SOURCE = "dynacron"
DEFAULT_DETAIL_TYPE = "Scheduled Execution"

_ARN = re.compile(
    r"^arn:(?P<partition>aws[a-z-]*):(?P<service>[a-z0-9-]+):(?P<region>[a-z0-9-]*):"
    r"(?P<account>\d{12})?:(?P<resource>.+)$"
)
_ROLE = re.compile(r"^arn:(?P<partition>aws[a-z-]*):iam::\d{12}:role/[\w+=,.@/-]{1,512}$", re.ASCII)
_NAME = r"[A-Za-z0-9_.-]"
_RESOURCES = {
    TargetService.LAMBDA: re.compile(r"^function:[A-Za-z0-9_-]{1,64}(:[A-Za-z0-9$_-]{1,128})?$"),
    # A queue's and a topic's bound counts the ".fifo" of a FIFO one.
    TargetService.SQS: re.compile(r"^(?=.{1,80}$)[A-Za-z0-9_-]+(\.fifo)?$"),
    TargetService.SNS: re.compile(r"^(?=.{1,256}$)[A-Za-z0-9_-]+(\.fifo)?$"),
    TargetService.EVENTBRIDGE: re.compile(rf"^event-bus/{_NAME}{{1,256}}$"),
    # Step Functions refuses in a name only blanks, control and non-ASCII characters,
    # brackets, wildcards and "#%\^|~`$&,;:/ (its own words).
    TargetService.STEP_FUNCTIONS: re.compile(
        r"^stateMachine:(?=[!-~]{1,80}$)[^<>{}\[\]?*\"#%\\^|~`$&,;:/]+$"
    ),
    TargetService.ECS: re.compile(rf"^cluster/{_NAME}{{1,255}}$"),
}
_RESOURCE_SHAPES = {
    TargetService.LAMBDA: "function:NAME or function:NAME:ALIAS",
    TargetService.SQS: "the queue's name (1 to 80 characters, a FIFO queue's .fifo included)",
    TargetService.SNS: "the topic's name (1 to 256 characters, a FIFO topic's .fifo included)",
    TargetService.EVENTBRIDGE: "event-bus/NAME",
    TargetService.STEP_FUNCTIONS: "stateMachine:NAME",
    TargetService.ECS: "cluster/NAME",
}
_TASK_DEFINITION = re.compile(
    r"^arn:aws[a-z-]*:ecs:[a-z0-9-]+:\d{12}:task-definition/[A-Za-z0-9_-]{1,255}(:\d+)?$"
)
_SUBNET = re.compile(r"^subnet-[0-9a-f]{8,17}$")
_SECURITY_GROUP = re.compile(r"^sg-[0-9a-f]{8,17}$")
# An external id is 2-1224 of these (STS's rule).
_EXTERNAL_ID = re.compile(r"^[\w+=,.@:/-]{2,1200}$", re.ASCII)
_DIGESTED = "sha256:"
EXTERNAL_ID_PREFIX = "dynacron:"


@dataclass(frozen=True)
class Arn:
    """An ARN's parts."""

    partition: str
    service: str
    region: str
    account: str
    resource: str

    @property
    def name(self) -> str:
        """The resource's own name: what follows its type (``function:``, ``event-bus/``)."""
        if self.service == TargetService.LAMBDA:
            return self.resource.split(":")[1]
        return re.split(r"[:/]", self.resource)[-1]

    @property
    def is_fifo(self) -> bool:
        """A FIFO queue or topic: one that takes a group and a deduplication id."""
        return self.resource.endswith(".fifo")


def parse_arn(field_name: str, text: str) -> Arn:
    """``text`` as an ARN; ``InvalidRequest`` naming ``field_name`` if it is not one."""
    match = _ARN.match(text) if len(text) <= MAX_ARN_CHARS else None
    if match is None:
        raise InvalidRequest(
            field_name, f"{text[:100]!r} is not an ARN (arn:PARTITION:SERVICE:REGION:ACCOUNT:...)"
        )
    return Arn(**match.groupdict(default=""))


@dataclass(frozen=True)
class AwsVpcConfiguration:
    """The network of an ECS task in ``awsvpc`` mode (Fargate's)."""

    subnets: tuple[str, ...]
    security_groups: tuple[str, ...] = ()
    assign_public_ip: bool = False


@dataclass(frozen=True)
class EcsParameters:
    """What ``RunTask`` needs beyond the cluster (the target's ARN); one task a call."""

    task_definition_arn: str
    launch_type: LaunchType | None = None
    network: AwsVpcConfiguration | None = None
    platform_version: str | None = None
    group: str | None = None


@dataclass(frozen=True)
class Target:
    """An AWS API a task calls, with the role it is called as."""

    arn: str
    role_arn: str
    input: str | None = None
    # SQS (FIFO) only.
    message_group_id: str | None = None
    # EventBridge only.
    detail_type: str | None = None
    source: str | None = None
    # Lambda only.
    invocation_type: InvocationType = InvocationType.EVENT
    ecs: EcsParameters | None = None
    # Step Functions and ECS only: wait for the run's end (decision 0049).
    track: Tracking | None = None

    @property
    def tracked(self) -> bool:
        """Whether an execution waits for the run it starts to end."""
        return self.track is Tracking.COMPLETION

    @property
    def parsed_arn(self) -> Arn:
        """The target's ARN in parts (checked at registration)."""
        return parse_arn("target.arn", self.arn)

    @property
    def service(self) -> TargetService:
        """The service the target's ARN names: it decides the call."""
        return TargetService(self.parsed_arn.service)


@dataclass(frozen=True)
class TargetPolicy:
    """Where targets may point: the stack's partition and region. ``refusal`` set
    means this deployment delivers no targets at all, and says why (local mode
    without an AWS emulator). ``role_patterns``: the role ARNs (IAM's ``*`` and
    ``?`` wildcards) the worker may assume, as the operator's ``target_roles``
    grants it; None where no grant limits it (local mode's emulator)."""

    partition: str = "aws"
    region: str = ""
    refusal: str | None = None
    role_patterns: tuple[str, ...] | None = None

    def check(self, target: Target) -> None:
        """``InvalidRequest`` naming the field of ``target`` this deployment refuses."""
        if self.refusal is not None:
            raise InvalidRequest("target", self.refusal)
        check_target(target)
        arn = target.parsed_arn
        if arn.partition != self.partition:
            raise InvalidRequest(
                "target.arn",
                f"is in partition {arn.partition!r}; this stack is in {self.partition!r}",
            )
        if arn.region != self.region:
            raise InvalidRequest(
                "target.arn", f"is in region {arn.region!r}; this stack calls {self.region!r} only"
            )
        role_partition = target.role_arn.split(":")[1]
        if role_partition != self.partition:
            raise InvalidRequest(
                "target.role_arn",
                f"is in partition {role_partition!r}; this stack is in {self.partition!r}",
            )
        if self.role_patterns is not None and not any(
            iam_wildcard_matches(pattern, target.role_arn) for pattern in self.role_patterns
        ):
            # The worker's own policy would refuse the AssumeRole at every call.
            allowed = ", ".join(self.role_patterns) or "none (its target_roles is empty)"
            raise InvalidRequest(
                "target.role_arn",
                f"is not a role this stack's worker may assume; its operator allows: {allowed}",
            )
        if target.ecs is not None:
            definition = target.ecs.task_definition_arn.split(":")
            if definition[1] != self.partition or definition[3] != self.region:
                raise InvalidRequest(
                    "target.ecs_parameters.task_definition_arn",
                    f"must be in partition {self.partition!r} and region {self.region!r}",
                )


def iam_wildcard_matches(pattern: str, arn: str) -> bool:
    """Whether ``arn`` is one of those ``pattern`` names in an IAM policy's
    ``Resource``: ``*`` any run of characters, ``?`` any one, case counting."""
    parts = (".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch("".join(parts), arn, re.DOTALL) is not None


def partition_of(region: str) -> str:
    """The partition a region belongs to."""
    if region.startswith("cn-"):
        return "aws-cn"
    if region.startswith("us-gov-"):
        return "aws-us-gov"
    return "aws"


def check_target(target: Target) -> None:
    """Every rule of ``target`` that needs no deployment setting; raises
    ``InvalidRequest`` naming the field."""
    arn = parse_arn("target.arn", target.arn)
    try:
        service = TargetService(arn.service)
    except ValueError:
        known = ", ".join(s.value for s in TargetService)
        raise InvalidRequest(
            "target.arn", f"service {arn.service!r} is not a target dynacron calls ({known})"
        ) from None
    if not arn.region:
        raise InvalidRequest("target.arn", "names no region")
    if not arn.account:
        raise InvalidRequest("target.arn", "names no account")
    if not _RESOURCES[service].match(arn.resource):
        raise InvalidRequest(
            "target.arn", f"{service.proper_name} ARNs end in {_RESOURCE_SHAPES[service]}"
        )
    if not _ROLE.match(target.role_arn):
        raise InvalidRequest(
            "target.role_arn", "must be an IAM role's ARN (arn:PARTITION:iam::ACCOUNT:role/NAME)"
        )
    _check_parameters(target, service, arn)
    if target.input is not None:
        _check_input(target, service)


def _check_parameters(target: Target, service: TargetService, arn: Arn) -> None:
    def only(name: str, given: object, owner: TargetService) -> None:
        if given is not None and service is not owner:
            raise InvalidRequest(f"target.{name}", f"applies to {owner.proper_name} targets only")

    only("sqs_parameters", target.message_group_id, TargetService.SQS)
    only("eventbridge_parameters", target.detail_type or target.source, TargetService.EVENTBRIDGE)
    only("ecs_parameters", target.ecs, TargetService.ECS)
    if target.invocation_type is not InvocationType.EVENT:
        only("lambda_parameters", target.invocation_type, TargetService.LAMBDA)
    if target.track is not None and service not in TRACKABLE:
        raise InvalidRequest(
            "target.track",
            "applies to Step Functions and ECS targets only: their runs end later",
        )
    if service is TargetService.SQS and arn.is_fifo and not target.message_group_id:
        raise InvalidRequest(
            "target.sqs_parameters.message_group_id", "is required for a FIFO queue"
        )
    if target.message_group_id is not None and not 1 <= len(target.message_group_id) <= 128:
        raise InvalidRequest("target.sqs_parameters.message_group_id", "is 1 to 128 characters")
    if target.detail_type is not None and not 1 <= len(target.detail_type) <= MAX_DETAIL_TYPE_CHARS:
        raise InvalidRequest(
            "target.eventbridge_parameters.detail_type",
            f"is 1 to {MAX_DETAIL_TYPE_CHARS} characters",
        )
    if target.source is not None and (
        not 1 <= len(target.source) <= MAX_SOURCE_CHARS or target.source.startswith("aws.")
    ):
        raise InvalidRequest(
            "target.eventbridge_parameters.source",
            f"is 1 to {MAX_SOURCE_CHARS} characters, and not one of AWS's own (aws.*)",
        )
    if service is TargetService.ECS:
        if target.ecs is None:
            raise InvalidRequest(
                "target.ecs_parameters", "an ECS target needs task_definition_arn at least"
            )
        _check_ecs(target.ecs)


def _check_ecs(ecs: EcsParameters) -> None:
    prefix = "target.ecs_parameters"
    if not _TASK_DEFINITION.match(ecs.task_definition_arn):
        raise InvalidRequest(
            f"{prefix}.task_definition_arn",
            "must be a task definition's ARN (arn:aws:ecs:REGION:ACCOUNT:task-definition/NAME:REV)",
        )
    network = ecs.network
    if network is None:
        if ecs.launch_type is LaunchType.FARGATE:
            raise InvalidRequest(
                f"{prefix}.network_configuration", "is required with launch type FARGATE"
            )
        return
    where = f"{prefix}.network_configuration.awsvpc_configuration"
    if not 1 <= len(network.subnets) <= MAX_NETWORK_IDS:
        raise InvalidRequest(f"{where}.subnets", f"names 1 to {MAX_NETWORK_IDS} subnets")
    if len(network.security_groups) > 5:
        raise InvalidRequest(f"{where}.security_groups", "names at most 5 security groups")
    for subnet in network.subnets:
        if not _SUBNET.match(subnet):
            raise InvalidRequest(f"{where}.subnets", f"{subnet[:40]!r} is not a subnet id")
    for group in network.security_groups:
        if not _SECURITY_GROUP.match(group):
            raise InvalidRequest(
                f"{where}.security_groups", f"{group[:40]!r} is not a security group id"
            )


# What a placeholder stands for when ``input`` is checked at registration.
_SAMPLE = {
    EXECUTION_ID: "t_20260101T000000Z",
    SCHEDULED_AT: "2026-01-01T00:00:00Z",
    TASK_ID: "t",
    ATTEMPT: "1",
}


def _check_input(target: Target, service: TargetService) -> None:
    text = target.input or ""
    if len(text) > MAX_INPUT_CHARS:
        raise InvalidRequest("target.input", f"is longer than {MAX_INPUT_CHARS} characters")
    if not text and service in (TargetService.SQS, TargetService.SNS):
        # SQS and SNS refuse an empty message at every call; leave input out to send
        # the envelope.
        raise InvalidRequest(
            "target.input",
            f"is empty: {service.proper_name} sends no empty message "
            "(leave input out to send the envelope)",
        )
    if service not in (TargetService.EVENTBRIDGE, TargetService.STEP_FUNCTIONS, TargetService.ECS):
        return
    # These services take JSON: the input must be JSON with any value in place.
    try:
        value = json.loads(substitute(text, _SAMPLE))
    except ValueError:
        raise InvalidRequest(
            "target.input", f"must be JSON: {service.proper_name} takes JSON"
        ) from None
    if service is not TargetService.STEP_FUNCTIONS and not isinstance(value, dict):
        raise InvalidRequest(
            "target.input", f"must be a JSON object: {service.proper_name} takes one"
        )
    if service is TargetService.ECS:
        unknown = sorted(set(value) - set(ECS_OVERRIDES))
        if unknown:
            raise InvalidRequest(
                "target.input",
                f"is RunTask's overrides, which take {', '.join(ECS_OVERRIDES)}; "
                f"not {', '.join(repr(k[:40]) for k in unknown[:3])}",
            )


def substitute(text: str, values: dict[str, str]) -> str:
    """``text`` with each placeholder replaced by its value (``values`` by dynacron's
    names; EventBridge Scheduler's names mean the same)."""
    for alias, name in SCHEDULER_ALIASES.items():
        text = text.replace(alias, name)
    for name, value in values.items():
        text = text.replace(name, value)
    return text


def placeholder_values(
    task_id: str, execution_id: str, scheduled_at: str, attempt: int
) -> dict[str, str]:
    """What each placeholder stands for in one attempt."""
    return {
        EXECUTION_ID: execution_id,
        SCHEDULED_AT: scheduled_at,
        TASK_ID: task_id,
        ATTEMPT: str(attempt),
    }


def service_token(execution_id: str, limit: int) -> str:
    """``execution_id`` as an idempotency key of at most ``limit`` characters from
    ``[A-Za-z0-9_.-]`` (Step Functions' execution name, ECS's clientToken, SQS's
    deduplication id): the same every attempt, distinct for distinct ids (a long one
    keeps its start and a hash of the whole)."""
    token = re.sub(r"[^A-Za-z0-9_.-]", "-", execution_id)
    if len(token) <= limit and token == execution_id:
        return token
    digest = f"{zlib.crc32(execution_id.encode()):08x}"
    return f"{token[: limit - len(digest) - 1]}-{digest}"


def external_id_for(tenant_id: str) -> str:
    """The external id the worker sends when it assumes a role for ``tenant_id``:
    ``dynacron:`` and the tenant id, or, for a tenant id STS would refuse as one,
    ``dynacron:sha256:`` and its digest. Derived from the caller's tenant, never
    from the task, so one tenant cannot present another's."""
    plain = f"{EXTERNAL_ID_PREFIX}{tenant_id}"
    if _EXTERNAL_ID.match(plain) and not tenant_id.startswith(_DIGESTED):
        return plain
    # A tenant named like a digest is digested too: its plain id would be another's.
    return f"{EXTERNAL_ID_PREFIX}{_DIGESTED}{hashlib.sha256(tenant_id.encode()).hexdigest()}"


def target_to_map(target: Target) -> dict[str, Any]:
    """A target as the task record keeps it (EventBridge Scheduler's names)."""
    values: dict[str, Any] = {"arn": target.arn, "role_arn": target.role_arn}
    if target.input is not None:
        values["input"] = target.input
    if target.message_group_id is not None:
        values["sqs_parameters"] = {"message_group_id": target.message_group_id}
    if target.detail_type is not None or target.source is not None:
        values["eventbridge_parameters"] = {
            k: v
            for k, v in (("detail_type", target.detail_type), ("source", target.source))
            if v is not None
        }
    if target.invocation_type is not InvocationType.EVENT:
        values["lambda_parameters"] = {"invocation_type": target.invocation_type.value}
    if target.ecs is not None:
        values["ecs_parameters"] = ecs_to_map(target.ecs)
    if target.track is not None:
        values["track"] = target.track.value
    return values


def ecs_to_map(ecs: EcsParameters) -> dict[str, Any]:
    """ECS parameters as stored and shown (EventBridge Scheduler's names)."""
    values: dict[str, Any] = {"task_definition_arn": ecs.task_definition_arn, "task_count": 1}
    if ecs.launch_type is not None:
        values["launch_type"] = ecs.launch_type.value
    if ecs.platform_version is not None:
        values["platform_version"] = ecs.platform_version
    if ecs.group is not None:
        values["group"] = ecs.group
    if ecs.network is not None:
        values["network_configuration"] = {
            "awsvpc_configuration": {
                "subnets": list(ecs.network.subnets),
                "security_groups": list(ecs.network.security_groups),
                "assign_public_ip": "ENABLED" if ecs.network.assign_public_ip else "DISABLED",
            }
        }
    return values


def target_from_map(values: dict[str, Any]) -> Target:
    """A target as ``target_to_map`` stored it (or as the API took it)."""
    sqs = values.get("sqs_parameters") or {}
    events = values.get("eventbridge_parameters") or {}
    lambda_ = values.get("lambda_parameters") or {}
    ecs = values.get("ecs_parameters")
    return Target(
        arn=str(values["arn"]),
        role_arn=str(values["role_arn"]),
        input=values.get("input"),
        message_group_id=sqs.get("message_group_id"),
        detail_type=events.get("detail_type"),
        source=events.get("source"),
        invocation_type=InvocationType(lambda_.get("invocation_type", InvocationType.EVENT)),
        ecs=ecs_from_map(ecs) if ecs is not None else None,
        track=Tracking(values["track"]) if values.get("track") else None,
    )


def ecs_from_map(values: dict[str, Any]) -> EcsParameters:
    """ECS parameters as ``ecs_to_map`` wrote them."""
    network = (values.get("network_configuration") or {}).get("awsvpc_configuration")
    launch_type = values.get("launch_type")
    return EcsParameters(
        task_definition_arn=str(values["task_definition_arn"]),
        launch_type=LaunchType(launch_type) if launch_type is not None else None,
        platform_version=values.get("platform_version"),
        group=values.get("group"),
        network=(
            AwsVpcConfiguration(
                subnets=tuple(network.get("subnets") or ()),
                security_groups=tuple(network.get("security_groups") or ()),
                assign_public_ip=network.get("assign_public_ip") == "ENABLED",
            )
            if network is not None
            else None
        ),
    )
