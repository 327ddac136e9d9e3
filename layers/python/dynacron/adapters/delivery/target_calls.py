"""One attempt of an AWS target as an API call, and its answer or error as an
attempt's result (decision 0047).

``target_call`` builds the call the target's ARN decides (operation and
parameters, ready for a boto3 client); ``answer_of`` reads its answer;
``failure_of`` turns an error into the outcome classes the worker already has:
throttling, a service's own failure and a timeout are retryable, a refusal
(access denied, not found, invalid) is not, and says the service's message.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionError,
    ConnectTimeoutError,
    ParamValidationError,
    ReadTimeoutError,
)

from dynacron.adapters.delivery.answers import readable
from dynacron.adapters.delivery.http import request_body
from dynacron.domain.executions.completion import CHECK_AFTER, run_name
from dynacron.domain.executions.execution import DeliveryResult, Dispatch
from dynacron.domain.executions.retry import AttemptFailure
from dynacron.domain.instants import format_instant
from dynacron.domain.tasks.targets import (
    DEFAULT_DETAIL_TYPE,
    DEFAULT_EVENT_SOURCE,
    ECS_CLIENT_TOKEN_CHARS,
    SQS_DEDUPLICATION_CHARS,
    STATE_MACHINE_NAME_CHARS,
    InvocationType,
    Target,
    TargetService,
    placeholder_values,
    service_token,
    substitute,
)
from dynacron.domain.tasks.task import Task

# Error codes the services use for "slow down": the call may succeed later. Matched
# without case: the services spell KMS's throttle "KMSThrottling", "KmsThrottled"
# and "KmsThrottlingException".
THROTTLING_CODES = frozenset(
    code.lower()
    for code in (
        "Throttling",
        "ThrottlingException",
        "Throttled",
        "ThrottledException",
        "TooManyRequestsException",
        "ProvisionedThroughputExceededException",
        "ProvisionedThroughputExceeded",
        "RequestThrottled",
        "RequestThrottledException",
        "RequestLimitExceeded",
        "RequestLimitExceededException",
        "LimitExceededException",
        "SlowDown",
        "KMSThrottling",
        "KMSThrottlingException",
        "KmsThrottled",
        "EC2ThrottledException",
        "PriorRequestNotComplete",
        # Step Functions: too many executions open; one ending makes room.
        "ExecutionLimitExceeded",
    )
)
# The service's own failure: the call may succeed later.
SERVICE_FAILURE_CODES = frozenset(
    code.lower()
    for code in (
        "InternalFailure",
        "InternalError",
        "InternalServerError",
        "InternalException",
        "ServiceException",
        "ServiceUnavailable",
        "ServiceUnavailableException",
        "ServerException",
        "ResourceConflictException",  # Lambda: the function is being updated
        "ResourceNotReadyException",
        "EC2UnexpectedException",
    )
)
# Words of a refusal that no later attempt changes, even in a 5xx answer (Lambda
# answers 502 for a function whose KMS key it may not use or cannot find).
REFUSAL_WORDS = ("accessdenied", "notfound", "disabled")
# A function's answer read into the excerpt at most this far.
MAX_ANSWER_BYTES = 64 * 1024
TAG_EXECUTION_ID = "dynacron:execution-id"
TAG_SCHEDULED_AT = "dynacron:scheduled-time"
TAG_TASK_ID = "dynacron:task-id"
# SQS and SNS messages carry the execution as message attributes too, whatever
# their body (an input without placeholders carries none of it).
ATTRIBUTE_EXECUTION_ID = "dynacron.execution-id"
ATTRIBUTE_SCHEDULED_AT = "dynacron.scheduled-time"
ATTRIBUTE_TASK_ID = "dynacron.task-id"
ATTRIBUTE_ATTEMPT = "dynacron.attempt"


@dataclass(frozen=True)
class TargetCall:
    """A boto3 client's method (``operation``, snake_case) and its parameters."""

    service: TargetService
    operation: str
    parameters: dict[str, Any]


def envelope(task: Task, dispatch: Dispatch) -> str:
    """What an HTTP handler receives (but the callbacks: a target's call is its end)."""
    return request_body(task, dispatch).decode()


def call_input(task: Task, dispatch: Dispatch) -> str:
    """The text the call carries: the target's ``input`` with its placeholders
    replaced, or else the envelope."""
    assert task.target is not None
    if task.target.input is None:
        return envelope(task, dispatch)
    return substitute(
        task.target.input,
        placeholder_values(
            task.task_id,
            dispatch.execution_id,
            format_instant(dispatch.scheduled_at),
            dispatch.attempt,
        ),
    )


def target_call(task: Task, dispatch: Dispatch) -> TargetCall:
    """The API call one attempt of ``task`` makes."""
    target = task.target
    assert target is not None, "a target call needs a target"
    service = target.service
    text = call_input(task, dispatch)
    execution_id = dispatch.execution_id
    match service:
        case TargetService.LAMBDA:
            parameters: dict[str, Any] = {
                "FunctionName": target.arn,
                "InvocationType": target.invocation_type.value,
                "Payload": text.encode(),
            }
        case TargetService.SQS:
            parameters = {
                "QueueUrl": _queue_url(target),
                "MessageBody": text,
                "MessageAttributes": message_attributes(task, dispatch),
            }
            if target.message_group_id is not None:
                parameters["MessageGroupId"] = target.message_group_id
            if target.parsed_arn.is_fifo:
                parameters["MessageDeduplicationId"] = service_token(
                    execution_id, SQS_DEDUPLICATION_CHARS
                )
        case TargetService.SNS:
            parameters = {
                "TopicArn": target.arn,
                "Message": text,
                "MessageAttributes": message_attributes(task, dispatch),
            }
            if target.parsed_arn.is_fifo:
                parameters["MessageGroupId"] = task.task_id
                parameters["MessageDeduplicationId"] = service_token(
                    execution_id, SQS_DEDUPLICATION_CHARS
                )
        case TargetService.EVENTBRIDGE:
            entry = {
                "EventBusName": target.arn,
                "Source": target.source or DEFAULT_EVENT_SOURCE,
                "DetailType": target.detail_type or DEFAULT_DETAIL_TYPE,
                "Detail": text,
                "Resources": [],
            }
            parameters = {"Entries": [entry]}
        case TargetService.STEP_FUNCTIONS:
            parameters = {
                "stateMachineArn": target.arn,
                # Tracked, each attempt starts its own run (decision 0049).
                "name": run_name(execution_id, dispatch.attempt, ecs=False)
                if target.tracked
                else service_token(execution_id, STATE_MACHINE_NAME_CHARS),
                "input": text,
            }
        case TargetService.ECS:
            parameters = _run_task(task, target, dispatch)
    return TargetCall(service, _OPERATIONS[service], parameters)


_OPERATIONS = {
    TargetService.LAMBDA: "invoke",
    TargetService.SQS: "send_message",
    TargetService.SNS: "publish",
    TargetService.EVENTBRIDGE: "put_events",
    TargetService.STEP_FUNCTIONS: "start_execution",
    TargetService.ECS: "run_task",
}


def message_attributes(task: Task, dispatch: Dispatch) -> dict[str, dict[str, str]]:
    """The execution as an SQS or SNS message's attributes (the same shape in both)."""
    values = {
        ATTRIBUTE_EXECUTION_ID: ("String", dispatch.execution_id),
        ATTRIBUTE_SCHEDULED_AT: ("String", format_instant(dispatch.scheduled_at)),
        ATTRIBUTE_TASK_ID: ("String", task.task_id),
        ATTRIBUTE_ATTEMPT: ("Number", str(dispatch.attempt)),
    }
    return {
        name: {"DataType": kind, "StringValue": value} for name, (kind, value) in values.items()
    }


def _queue_url(target: Target) -> str:
    """A queue's URL from its ARN (SQS calls take the URL); an emulator's client
    rewrites the host to its own endpoint."""
    arn = target.parsed_arn
    suffix = ".amazonaws.com.cn" if arn.partition == "aws-cn" else ".amazonaws.com"
    return f"https://sqs.{arn.region}{suffix}/{arn.account}/{arn.resource}"


def _run_task(task: Task, target: Target, dispatch: Dispatch) -> dict[str, Any]:
    """RunTask of one task. Its input, if any, is the ``overrides`` (RunTask's own
    shape); the execution id and scheduled time go as tags either way, and as the
    client token, which makes a repeated attempt start no second task."""
    ecs = target.ecs
    assert ecs is not None
    parameters: dict[str, Any] = {
        "cluster": target.arn,
        "taskDefinition": ecs.task_definition_arn,
        "count": 1,
        "clientToken": service_token(dispatch.execution_id, ECS_CLIENT_TOKEN_CHARS),
        "startedBy": "dynacron",
        "tags": [
            {"key": TAG_EXECUTION_ID, "value": dispatch.execution_id},
            {"key": TAG_SCHEDULED_AT, "value": format_instant(dispatch.scheduled_at)},
            {"key": TAG_TASK_ID, "value": task.task_id},
        ],
    }
    if target.tracked:
        # Each attempt its own task, named so its state-change event finds the
        # execution (decision 0049): a retry must not get the stopped one back.
        parameters["clientToken"] = service_token(
            f"{dispatch.execution_id}-{dispatch.attempt}", ECS_CLIENT_TOKEN_CHARS
        )
        parameters["startedBy"] = run_name(dispatch.execution_id, dispatch.attempt, ecs=True)
    if ecs.launch_type is not None:
        parameters["launchType"] = ecs.launch_type.value
    if ecs.platform_version is not None:
        parameters["platformVersion"] = ecs.platform_version
    if ecs.group is not None:
        parameters["group"] = ecs.group
    if ecs.network is not None:
        parameters["networkConfiguration"] = {
            "awsvpcConfiguration": {
                "subnets": list(ecs.network.subnets),
                "securityGroups": list(ecs.network.security_groups),
                "assignPublicIp": "ENABLED" if ecs.network.assign_public_ip else "DISABLED",
            }
        }
    if target.input is not None:
        parameters["overrides"] = json.loads(call_input(task, dispatch))
    return parameters


def tracked_answer(result: DeliveryResult, run_arn: str | None) -> DeliveryResult:
    """A tracked target's started run (``run_arn``): the execution waits for its
    end, and for no other run's (decision 0049)."""
    if not result.ok:
        return result
    return DeliveryResult.accepted(
        result.status_code or 200, excerpt=result.excerpt, hold_for=CHECK_AFTER, run_arn=run_arn
    )


def run_arn_of(call: TargetCall, response: dict[str, Any]) -> str | None:
    """The run a StartExecution's or RunTask's answer names."""
    if call.service is TargetService.STEP_FUNCTIONS:
        arn = response.get("executionArn")
    else:
        arn = (response.get("tasks") or [{}])[0].get("taskArn")
    return str(arn) if arn else None


def execution_arn(state_machine_arn: str, name: str) -> str:
    """A state machine execution's ARN: its machine's, with ``execution`` and its name."""
    return state_machine_arn.replace(":stateMachine:", ":execution:", 1) + f":{name}"


def answer_of(call: TargetCall, response: dict[str, Any]) -> DeliveryResult:
    """A call's answer as the attempt's result: the service's id of what it did, or
    the failure it reported inside a successful answer."""
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    match call.service:
        case TargetService.LAMBDA:
            return _lambda_answer(call, response)
        case TargetService.SQS | TargetService.SNS:
            return DeliveryResult.succeeded(status, f"MessageId {response.get('MessageId')}")
        case TargetService.EVENTBRIDGE:
            if response.get("FailedEntryCount"):
                entry = response["Entries"][0]
                code = entry.get("ErrorCode", "")
                return DeliveryResult.failed(
                    _classified(code, entry.get("ErrorMessage", ""), "PutEvents", status), status
                )
            return DeliveryResult.succeeded(status, f"EventId {response['Entries'][0]['EventId']}")
        case TargetService.STEP_FUNCTIONS:
            return DeliveryResult.succeeded(status, f"executionArn {response.get('executionArn')}")
        case TargetService.ECS:
            return _ecs_answer(response, status)
    raise AssertionError(f"no answer for {call.service}")


def _lambda_answer(call: TargetCall, response: dict[str, Any]) -> DeliveryResult:
    status = response.get("StatusCode")
    payload = response.get("Payload")
    text = ""
    if payload is not None:
        try:
            text = payload.read(MAX_ANSWER_BYTES).decode("utf-8", errors="replace")
        finally:
            # Unread, the rest of an answer (up to 6 MB) holds its pooled connection.
            payload.close()
    if response.get("FunctionError"):
        # The function ran and raised: its answer says why; a later attempt may succeed.
        return DeliveryResult.failed(
            AttemptFailure(
                f"the function failed ({response['FunctionError']}): {readable(text, 500)}"
            ),
            status,
        )
    if call.parameters["InvocationType"] == InvocationType.EVENT:
        return DeliveryResult.succeeded(status, "queued for the function")
    return DeliveryResult.succeeded(status, text or None)


def _ecs_answer(response: dict[str, Any], status: int | None) -> DeliveryResult:
    failures = response.get("failures") or []
    tasks = response.get("tasks") or []
    if failures or not tasks:
        failure = failures[0] if failures else {"reason": "RunTask started no task"}
        reason = str(failure.get("reason", ""))
        detail = f": {failure['detail']}" if failure.get("detail") else ""
        # RESOURCE:* (no capacity now) and AGENT are ECS's own passing states.
        retryable = reason.startswith(("RESOURCE:", "AGENT")) or not failures
        return DeliveryResult.failed(
            AttemptFailure(f"RunTask failed: {reason}{detail}", retryable=retryable), status
        )
    return DeliveryResult.succeeded(status, f"taskArn {tasks[0].get('taskArn')}")


def failure_of(error: Exception, operation: str) -> AttemptFailure:
    """What ``operation`` raising ``error`` means for the attempt."""
    if isinstance(error, ClientError):
        details = error.response.get("Error", {})
        status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return _classified(
            str(details.get("Code", "")), str(details.get("Message", "")), operation, status
        )
    if isinstance(error, ConnectTimeoutError | ReadTimeoutError):
        return AttemptFailure(f"{operation} timed out: {error}")
    if isinstance(error, ParamValidationError):
        return AttemptFailure(f"{operation} refused its parameters: {error}", retryable=False)
    if isinstance(error, ConnectionError | BotoCoreError):
        return AttemptFailure(f"{operation} could not reach the service: {error}")
    raise error


def _classified(code: str, message: str, operation: str, status: int | None) -> AttemptFailure:
    said = readable(f"{code}: {message}" if message else code, 500)
    # SQS names its errors "AWS.SimpleQueueService.RequestThrottled" and the like.
    short = code.rsplit(".", 1)[-1].lower()
    if short in THROTTLING_CODES or status == 429:
        return AttemptFailure(f"{operation} was throttled ({said})")
    if any(word in short for word in REFUSAL_WORDS):
        return AttemptFailure(f"{operation} was refused ({said})", retryable=False)
    if short in SERVICE_FAILURE_CODES or (status is not None and status >= 500):
        return AttemptFailure(f"{operation} failed on the service's side ({said})")
    # Lambda's EFSMountTimeoutException, SnapStartTimeoutException (408): the function
    # could not start in time; it may next time.
    if short.endswith("timeoutexception") or status == 408:
        return AttemptFailure(f"{operation} timed out ({said})")
    return AttemptFailure(f"{operation} was refused ({said})", retryable=False)
