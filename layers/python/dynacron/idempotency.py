"""Powertools idempotency around handler calls, keyed by execution id.

The record lives in the idempotency table (``resources.IDEMPOTENCY``) under a key
derived from the execution id alone, so it answers for every attempt of one
occurrence:

- while a handler call is in progress, a second call for the same execution is
  refused (``IdempotencyAlreadyInProgressError``) instead of running concurrently;
  the in-progress record expires with the handler's timeout, so a worker that died
  mid-call does not block the retry for longer than the call could have lasted;
- once a handler *succeeded*, the record holds that answer, and any later delivery
  of the execution (an SQS duplicate, a retry after the worker died before
  recording the outcome) returns it without calling the handler again;
- any other answer (a failure, or 202 Accepted) deletes the record, so the next
  attempt calls the handler again, as it should.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, cast

from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent_function,
)
from aws_lambda_powertools.utilities.idempotency.exceptions import (
    IdempotencyAlreadyInProgressError,
)
from aws_lambda_powertools.utilities.idempotency.persistence.datarecord import DataRecord

from dynacron.domain.executions import DeliveryResult
from dynacron.domain.retry import AttemptFailure
from dynacron.faults import NO_FAULTS, Boundary, Faults

# Fixed, so the key does not depend on the Lambda function's name: the worker,
# local mode and any future caller agree on the record of an execution.
KEY_PREFIX = "dynacron-handler"
# Leaves the worker time to record the outcome after the handler's own timeout
# (at most as long again as the timeout itself).
RECORDING_MARGIN_MS = 5_000


class RemainingTime(Protocol):
    def get_remaining_time_in_millis(self) -> int: ...


@dataclass(frozen=True)
class HandlerDeadline:
    """What Powertools reads as the Lambda context: the time the handler call may take.

    The in-progress record expires at the earlier of the invocation's end and the
    handler's timeout (plus a margin to record the outcome).
    """

    handler_timeout_ms: int
    invocation: RemainingTime | None = None

    def get_remaining_time_in_millis(self) -> int:
        limit = self.handler_timeout_ms + min(RECORDING_MARGIN_MS, self.handler_timeout_ms)
        if self.invocation is None:
            return limit
        return min(limit, self.invocation.get_remaining_time_in_millis())


@dataclass(frozen=True)
class GuardedResult:
    result: DeliveryResult
    # True when the handler had already succeeded for this execution and was not called.
    replayed: bool = False
    # True when another call for this execution was still in progress: not called.
    in_progress: bool = False


class _NotASuccess(Exception):
    """Carries a non-success answer out of the idempotent call, so Powertools deletes
    its in-progress record instead of saving the answer."""

    def __init__(self, result: DeliveryResult) -> None:
        super().__init__(result.answer.value)
        self.result = result


class IdempotentHandlerCalls:
    """At most one handler call per execution at a time; none after a success."""

    def __init__(
        self,
        client: Any,
        table_name: str,
        *,
        ttl_seconds: int,
        handler_timeout_seconds: float,
        faults: Faults = NO_FAULTS,
    ) -> None:
        self._persistence = DynamoDBPersistenceLayer(table_name=table_name, boto3_client=client)
        self._ttl_seconds = ttl_seconds
        self._handler_timeout_ms = int(handler_timeout_seconds * 1000)
        self._faults = faults

    @property
    def in_progress_limit_seconds(self) -> float:
        """The longest an in-progress record can block a new call (a dead caller's)."""
        return HandlerDeadline(self._handler_timeout_ms).get_remaining_time_in_millis() / 1000

    def call(
        self,
        execution_id: str,
        handler_call: Callable[[], DeliveryResult],
        invocation: RemainingTime | None = None,
    ) -> GuardedResult:
        replayed = False

        def on_replay(response: Any, record: DataRecord) -> Any:
            nonlocal replayed
            replayed = True
            return response

        # A config per call: it carries this call's deadline and replay flag, and the
        # persistence layer is safely shared between threads.
        config = IdempotencyConfig(
            event_key_jmespath="execution_id",
            expires_after_seconds=self._ttl_seconds,
            response_hook=cast(Any, on_replay),
        )
        # Powertools only reads get_remaining_time_in_millis() from the context.
        config.register_lambda_context(
            cast(Any, HandlerDeadline(self._handler_timeout_ms, invocation))
        )

        @idempotent_function(
            data_keyword_argument="execution",
            persistence_store=self._persistence,
            config=config,
            key_prefix=KEY_PREFIX,
        )
        def call_handler(execution: dict[str, str]) -> dict[str, Any]:
            result = handler_call()
            self._faults.reached(Boundary.WORKER_HANDLER_RETURNED)
            if not result.ok:
                raise _NotASuccess(result)
            return {"status_code": result.status_code, "excerpt": result.excerpt}

        try:
            stored = call_handler(execution={"execution_id": execution_id})
        except _NotASuccess as answer:
            return GuardedResult(answer.result)
        except IdempotencyAlreadyInProgressError:
            return GuardedResult(
                DeliveryResult.failed(
                    AttemptFailure("the handler is still running for an earlier attempt")
                ),
                in_progress=True,
            )
        saved = stored if isinstance(stored, dict) else {}
        return GuardedResult(
            DeliveryResult.succeeded(saved.get("status_code"), saved.get("excerpt")), replayed
        )
