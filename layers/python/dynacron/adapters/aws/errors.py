"""AWS errors in the ports' terms.

Each AWS adapter wraps the client it is given, so that a call that fails for a
reason the adapter does not handle itself (a lost condition, a cancelled
transaction, a rejected page token) raises ``StoreUnavailable`` (``Throttled``
when AWS asks to slow down), which services catch without knowing botocore. The
raised error is still a ``ClientError`` with the same response, for logs and for
callers that want AWS's own code.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Generic, ParamSpec, TypeVar, cast

from botocore.exceptions import BotoCoreError, ClientError

from dynacron.ports import StoreUnavailable, Throttled

# Outcomes the adapters read themselves: a condition that did not hold, a transaction
# one of whose conditions did not, a page token DynamoDB does not accept.
HANDLED_BY_ADAPTERS = frozenset(
    {"ConditionalCheckFailedException", "TransactionCanceledException", "ValidationException"}
)
THROTTLING_CODES = frozenset(
    {"ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded"}
)


class AwsUnavailable(ClientError, StoreUnavailable):
    """An AWS call failed; the response is AWS's."""

    @property
    def transient(self) -> bool:
        """Throttled, or AWS's own failure (a 5xx); not a refusal (access denied,
        no such table), which lasts until the deployment changes."""
        status = self.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        return error_code(self) in THROTTLING_CODES or int(status) >= 500


class AwsThrottled(AwsUnavailable, Throttled):
    """AWS throttled the call."""


class AwsUnreachable(StoreUnavailable):
    """The call never got an answer from AWS (connection, timeout, credentials)."""


def error_code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


ClientT = TypeVar("ClientT")
P = ParamSpec("P")
R = TypeVar("R")


class TranslatingClient(Generic[ClientT]):
    """A boto3 client whose calls raise in the ports' terms (see the module's doc)."""

    def __init__(self, client: ClientT) -> None:
        self._client = client

    @property
    def unwrapped(self) -> ClientT:
        return self._client

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._client, name)
        if name.startswith("_") or not callable(attribute):
            return attribute
        return _translated(attribute)


def _translated(call: Callable[P, R]) -> Callable[P, R]:
    @functools.wraps(call)
    def translated(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return call(*args, **kwargs)
        except AwsUnavailable:
            raise
        except ClientError as error:
            code = error_code(error)
            if code in HANDLED_BY_ADAPTERS:
                raise
            kind = AwsThrottled if code in THROTTLING_CODES else AwsUnavailable
            raise kind(error.response, error.operation_name) from error
        except BotoCoreError as error:
            raise AwsUnreachable(str(error)) from error

    return translated


def translating(client: ClientT) -> ClientT:
    """``client``, translating its errors; a client already translating is kept as it is.

    Typed as the client it wraps: every method is the client's own, called with the
    same arguments and answering the same way; only the errors it raises change.
    """
    if isinstance(client, TranslatingClient):
        return client
    # The wrapper forwards every attribute (__getattr__), so it is used as the client.
    return cast(ClientT, TranslatingClient(client))
