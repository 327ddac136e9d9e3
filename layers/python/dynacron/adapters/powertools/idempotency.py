"""Powertools idempotency around handler calls, keyed by execution id.

The record answers for every attempt of one occurrence:

- while a handler call is in progress, a second call for the same execution is
  refused (``IdempotencyAlreadyInProgressError``) instead of running concurrently;
  the in-progress record expires with the handler's timeout, so a worker that died
  mid-call does not block the retry for longer than the call could have lasted;
- once a handler *succeeded*, the record holds that answer, and any later attempt
  of the execution (one that took over after the lease was lost) returns it
  without calling the handler again;
- any other answer (a failure, or 202 Accepted) deletes the record, so the next
  attempt calls the handler again, as it should.

Powertools runs the protocol (``idempotent_function``: save in progress, call,
save the success or delete); where the record lives is a persistence layer of
ours, as Powertools allows (``BasePersistenceLayer``): on the execution's own
item, so that saving the in-progress record is the same write that begins the
attempt, and saving the success the same write that ends it (decision 0016).
That store is a ``CallRecords``, given per call.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig, idempotent_function
from aws_lambda_powertools.utilities.idempotency.exceptions import (
    IdempotencyAlreadyInProgressError,
    IdempotencyItemAlreadyExistsError,
    IdempotencyItemNotFoundError,
    IdempotencyPersistenceLayerError,
)
from aws_lambda_powertools.utilities.idempotency.persistence.base import BasePersistenceLayer
from aws_lambda_powertools.utilities.idempotency.persistence.datarecord import DataRecord

from dynacron.domain.executions.execution import DeliveryResult, HandlerCallRecord, ResultSummary
from dynacron.domain.executions.retry import AttemptFailure
from dynacron.ports.faults import NO_FAULTS, Boundary, Faults
from dynacron.ports.guards import AttemptRefused, CallRecords, GuardedResult, RemainingTime

# Fixed, so the key does not depend on the Lambda function's name: the worker,
# local mode and any future caller agree on the record of an execution.
KEY_PREFIX = "dynacron-handler"
# Leaves the worker time to record the outcome after the handler's own timeout
# (at most as long again as the timeout itself).
RECORDING_MARGIN_MS = 5_000


class ExecutionItemPersistence(BasePersistenceLayer):
    """Powertools' persistence layer for one execution's record, kept by ``records``.

    Powertools builds the record (key, status, expiry, in-progress expiry, response)
    and decides what it means; this only translates it for ``records``. The key
    is not stored: the layer, and so the item, is the execution's own.
    """

    def __init__(self, records: CallRecords) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self._records = records

    def _get_record(self, idempotency_key: str) -> DataRecord:
        record = self._records.load()
        if record is None:
            raise IdempotencyItemNotFoundError
        return _data_record(idempotency_key, record)

    def _put_record(self, data_record: DataRecord) -> None:
        held = self._records.save_in_progress(_call_record(data_record), int(time.time() * 1000))
        if held is not None:
            raise IdempotencyItemAlreadyExistsError(
                old_data_record=_data_record(data_record.idempotency_key, held)
            )

    def _update_record(self, data_record: DataRecord) -> None:
        self._records.save_success(_call_record(data_record))

    def _delete_record(self, data_record: DataRecord) -> None:
        self._records.delete()


def _call_record(data_record: DataRecord) -> HandlerCallRecord:
    response = data_record.response_json_as_dict()
    return HandlerCallRecord(
        status=data_record.status,
        expires_at=int(data_record.expiry_timestamp or 0),
        in_progress_until_ms=data_record.in_progress_expiry_timestamp,
        response=ResultSummary(response.get("status_code"), response.get("excerpt"))
        if response is not None
        else None,
    )


def _data_record(idempotency_key: str, record: HandlerCallRecord) -> DataRecord:
    response = (
        json.dumps({"excerpt": record.response.excerpt, "status_code": record.response.status_code})
        if record.response is not None
        else ""
    )
    return DataRecord(
        idempotency_key=idempotency_key,
        status=record.status,
        expiry_timestamp=record.expires_at,
        in_progress_expiry_timestamp=record.in_progress_until_ms,
        response_data=response,
    )


@dataclass(frozen=True)
class HandlerCallDeadline:
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


class _NotASuccess(Exception):
    """Carries a non-success answer out of the idempotent call, so Powertools deletes
    its in-progress record instead of saving the answer."""

    def __init__(self, result: DeliveryResult) -> None:
        super().__init__(result.answer.value)
        self.result = result


class IdempotentHandlerCalls:
    """At most one handler call per execution at a time; none after a success
    (``ports.guards.HandlerCalls``)."""

    def __init__(
        self, *, ttl_seconds: int, handler_timeout_seconds: float, faults: Faults = NO_FAULTS
    ) -> None:
        self._ttl_seconds = ttl_seconds
        self._handler_timeout_ms = int(handler_timeout_seconds * 1000)
        self._faults = faults

    @property
    def in_progress_limit_seconds(self) -> float:
        """The longest an in-progress record can block a new call (a dead caller's)."""
        return HandlerCallDeadline(self._handler_timeout_ms).get_remaining_time_in_millis() / 1000

    def in_progress(self, invocation: RemainingTime | None = None) -> HandlerCallRecord:
        """The record Powertools would save for a call starting now: in progress
        until the call's deadline, kept ``ttl_seconds``."""
        now = time.time()
        deadline_ms = HandlerCallDeadline(self._handler_timeout_ms, invocation)
        return HandlerCallRecord(
            status=HandlerCallRecord.IN_PROGRESS,
            expires_at=int(now + self._ttl_seconds),
            in_progress_until_ms=int(now * 1000) + deadline_ms.get_remaining_time_in_millis(),
        )

    def call(
        self,
        execution_id: str,
        records: CallRecords,
        handler_call: Callable[[], DeliveryResult],
        invocation: RemainingTime | None = None,
    ) -> GuardedResult:
        replayed = False

        def on_replay(response: Any, record: DataRecord) -> Any:
            nonlocal replayed
            replayed = True
            return response

        # A config per call: it carries this call's deadline and replay flag.
        config = IdempotencyConfig(
            event_key_jmespath="execution_id",
            expires_after_seconds=self._ttl_seconds,
            response_hook=cast(Any, on_replay),
        )
        # Powertools only reads get_remaining_time_in_millis() from the context.
        config.register_lambda_context(
            cast(Any, HandlerCallDeadline(self._handler_timeout_ms, invocation))
        )

        @idempotent_function(
            data_keyword_argument="execution",
            persistence_store=ExecutionItemPersistence(records),
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
        except IdempotencyPersistenceLayerError as error:
            # Powertools wraps whatever the store raised while saving the record.
            if isinstance(error.__cause__, AttemptRefused):
                return GuardedResult(None)
            raise
        saved = stored if isinstance(stored, dict) else {}
        return GuardedResult(
            DeliveryResult.succeeded(saved.get("status_code"), saved.get("excerpt")), replayed
        )
