"""A target call's error as an attempt's outcome (decision 0047): the services' own
error codes (as their botocore models name them, with their HTTP statuses) land in
throttled, the service's failure and timed out (retried by the task's policy) or
refused (not retried, quoting the service)."""

from __future__ import annotations

import pytest
from botocore.exceptions import (
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    ParamValidationError,
    ReadTimeoutError,
)

from dynacron.adapters.delivery.target_calls import failure_of


def client_error(code: str, status: int, message: str = "said the service") -> ClientError:
    return ClientError(
        {
            "Error": {"Code": code, "Message": message},
            "ResponseMetadata": {"HTTPStatusCode": status},
        },
        "Operation",
    )


@pytest.mark.parametrize(
    ("code", "status", "says"),
    [
        ("TooManyRequestsException", 429, "was throttled"),  # Lambda
        ("ThrottlingException", 400, "was throttled"),  # EventBridge, ECS, Step Functions
        ("AWS.SimpleQueueService.RequestThrottled", 403, "was throttled"),  # SQS
        ("Throttled", 429, "was throttled"),  # SNS
        ("KmsThrottled", 400, "was throttled"),  # SQS, its queue's key
        ("KMSThrottling", 400, "was throttled"),  # SNS, its topic's key
        ("KmsThrottlingException", 400, "was throttled"),  # Step Functions
        ("ExecutionLimitExceeded", 400, "was throttled"),  # Step Functions: too many open
        ("EC2ThrottledException", 502, "was throttled"),  # Lambda in a VPC
        ("ServiceException", 500, "failed on the service's side"),  # Lambda
        ("InternalError", 500, "failed on the service's side"),  # SNS
        ("ResourceConflictException", 409, "failed on the service's side"),  # Lambda updating
        ("ENILimitReachedException", 502, "failed on the service's side"),  # Lambda in a VPC
        ("EFSMountTimeoutException", 408, "timed out"),  # Lambda could not start in time
        ("SnapStartTimeoutException", 408, "timed out"),
    ],
)
def test_a_passing_failure_is_retried(code: str, status: int, says: str) -> None:
    failure = failure_of(client_error(code, status), "Invoke")

    assert failure.retryable
    assert failure.error == f"Invoke {says} ({code}: said the service)"


@pytest.mark.parametrize(
    ("code", "status"),
    [
        ("AccessDeniedException", 403),  # Lambda, EventBridge, Step Functions, ECS
        ("AuthorizationError", 403),  # SNS
        ("AWS.SimpleQueueService.NonExistentQueue", 400),  # SQS
        ("ResourceNotFoundException", 404),  # Lambda, EventBridge
        ("StateMachineDoesNotExist", 400),  # Step Functions
        ("ValidationException", 400),
        ("InvalidParameterException", 400),  # ECS, SNS
        ("ClusterNotFoundException", 400),  # ECS
        # Lambda answers 502 for a function's KMS key it may not use, or that is gone.
        ("KMSAccessDeniedException", 502),
        ("KMSNotFoundException", 502),
        ("KMSDisabledException", 502),
        ("KmsAccessDenied", 400),  # SQS
    ],
)
def test_a_refusal_is_final_and_quotes_the_service(code: str, status: int) -> None:
    failure = failure_of(client_error(code, status, "not yours"), "Publish")

    assert not failure.retryable
    assert failure.error == f"Publish was refused ({code}: not yours)"


@pytest.mark.parametrize(
    ("error", "says"),
    [
        (ReadTimeoutError(endpoint_url="https://sqs.test"), "SendMessage timed out"),
        (ConnectTimeoutError(endpoint_url="https://sqs.test"), "SendMessage timed out"),
        (
            EndpointConnectionError(endpoint_url="https://sqs.test"),
            "SendMessage could not reach the service",
        ),
    ],
)
def test_a_call_that_never_got_its_answer_is_retried(error: Exception, says: str) -> None:
    failure = failure_of(error, "SendMessage")

    assert failure.retryable
    assert failure.error.startswith(says)


def test_parameters_the_sdk_refuses_are_final() -> None:
    failure = failure_of(ParamValidationError(report="MessageBody is missing"), "SendMessage")

    assert not failure.retryable
    assert "MessageBody is missing" in failure.error
