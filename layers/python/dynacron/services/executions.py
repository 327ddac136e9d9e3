"""Use cases on executions behind the API: callbacks from long jobs, executions across
a tenant's tasks, dead letters, redrive."""

from __future__ import annotations

import dataclasses
from enum import StrEnum

from dynacron.domain.clock import Clock
from dynacron.domain.errors import CallbackRefused, Conflict, ExecutionNotFound
from dynacron.domain.executions import dead_letters, transitions
from dynacron.domain.executions.attention import AttentionQuery
from dynacron.domain.executions.execution import (
    Execution,
    ExecutionStatus,
    LeaseTerms,
    new_token,
    token_matches,
)
from dynacron.domain.executions.retry import AttemptFailure
from dynacron.domain.tasks.task import task_id_of
from dynacron.ports import DeadLetterQueue, DispatchQueue, ExecutionStore, Page
from dynacron.services.outcomes import AttemptOutcomes, Outcome

# One answer for every refusal of a token, whatever the reason.
TOKEN_REFUSED = (
    "the callback token is not the current one of this execution "
    "(or there is no such execution): send the token of the delivery, unchanged"
)


class Completion(StrEnum):
    """How a long job says it ended, in its ``complete`` callback."""

    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"


@dataclasses.dataclass(frozen=True, kw_only=True)
class ExecutionService:
    """The API's use cases on executions, each for one tenant: another tenant's
    execution looks exactly like a missing one."""

    executions: ExecutionStore
    queue: DispatchQueue
    dead_letter_queue: DeadLetterQueue
    outcomes: AttemptOutcomes
    clock: Clock
    lease_terms: LeaseTerms

    def get(self, tenant_id: str, execution_id: str) -> Execution:
        """The tenant's execution; ``ExecutionNotFound`` if missing or another tenant's."""
        execution = self.executions.get(_shaped(execution_id))
        # GetItem takes no condition: the owner is checked here, once for every route.
        if execution is None or execution.tenant_id != tenant_id:
            raise ExecutionNotFound(execution_id)
        return execution

    def heartbeat(self, tenant_id: str, execution_id: str, callback_token: str) -> Execution:
        """A long job is alive (the tenant's signed route): see ``heartbeat_of``."""
        return self.heartbeat_of(self._authorised(tenant_id, execution_id, callback_token))

    def complete(
        self,
        tenant_id: str,
        execution_id: str,
        callback_token: str,
        status: Completion,
        error: str | None,
    ) -> Execution:
        """A long job finished (the tenant's signed route): see ``complete_of``."""
        execution = self._authorised(tenant_id, execution_id, callback_token)
        return self.complete_of(execution, status, error)

    def by_callback_token(self, execution_id: str, callback_token: str | None) -> Execution:
        """The execution whose current attempt was given ``callback_token``: the whole
        authorisation of the token routes, which carry no caller identity.

        An unknown id, a missing token and a wrong or earlier attempt's token are
        one and the same ``CallbackRefused``, so the route reveals nothing about
        which execution ids exist. The token is compared with the stored digest in
        constant time; it is never logged or stored. A token stays good for its
        attempt's execution after the attempt ended (a replay is then a
        ``Conflict`` that changes nothing), until the next attempt begins.
        """
        try:
            execution = self.executions.get(_shaped(execution_id))
        except ExecutionNotFound:
            execution = None
        digest = execution.callback_digest if execution is not None else None
        if not callback_token or not token_matches(callback_token, digest):
            raise CallbackRefused(TOKEN_REFUSED)
        assert execution is not None
        return execution

    def heartbeat_of(self, execution: Execution) -> Execution:
        """A long job is alive: its lease is extended by the callback lease."""
        _still_running(execution)
        assert execution.lease_token is not None
        lease_until = self.clock.now() + self.lease_terms.awaiting_callback
        renew = transitions.renew(
            execution.lease_token,
            lease_until,
            keeping=self.executions.keeping(execution.execution_id),
        )
        if not self.executions.apply(execution.execution_id, renew):
            raise Conflict(
                f"execution {execution.execution_id!r} moved on while the heartbeat arrived"
            )
        return dataclasses.replace(execution, lease_until=lease_until)

    def complete_of(self, execution: Execution, status: Completion, error: str | None) -> Execution:
        """A long job finished: SUCCEEDED, or FAILED (retried by the task's policy)."""
        _still_running(execution)
        assert execution.lease_token is not None
        if status is Completion.SUCCEEDED:
            outcome = self.outcomes.succeeded(execution, execution.lease_token)
        else:
            failure = AttemptFailure(f"the handler reported failure: {error or 'no reason given'}")
            outcome = self.outcomes.failed(execution, execution.lease_token, failure)
        if outcome is Outcome.LEASE_LOST:
            raise Conflict(
                f"execution {execution.execution_id!r} moved on while the completion arrived"
            )
        return self.get(execution.tenant_id, execution.execution_id)

    def needing_attention(
        self, tenant_id: str, query: AttentionQuery, limit: int, token: str | None
    ) -> Page[Execution]:
        """The tenant's executions an operator looks for (``domain.executions.attention``),
        newest first."""
        return self.executions.needing_attention(tenant_id, query, limit, token)

    def dead_letters(self, tenant_id: str, limit: int, token: str | None) -> Page[Execution]:
        """One page of the tenant's dead letters, most recent first."""
        return self.executions.dead_letters(tenant_id, limit, token)

    def redrive(self, tenant_id: str, execution_id: str) -> Execution:
        """Replay a dead letter under the same execution id, with a fresh retry budget."""
        now = self.clock.now()
        redrive = dead_letters.redrive(
            tenant_id,
            now=now,
            lease_until=self.lease_terms.pickup_deadline(now),
            new_token=new_token(),
            keeping=self.executions.keeping(execution_id),
        )
        redriven = self.executions.apply_returning(_shaped(execution_id), redrive)
        execution = redriven.execution if redriven.held else None
        if execution is None:
            current = self.get(tenant_id, execution_id)
            raise Conflict(
                f"execution {execution_id!r} is {current.status.value}, not a dead letter"
            )
        # Recorded first: if this send is lost, the queued attempt's lease runs out
        # and the reaper sends it.
        self.queue.send_later(execution.as_dispatch(), 0)
        self.dead_letter_queue.remove(execution_id)
        return execution

    def _authorised(self, tenant_id: str, execution_id: str, callback_token: str) -> Execution:
        execution = self.get(tenant_id, execution_id)
        _still_running(execution)
        if not token_matches(callback_token, execution.callback_digest):
            raise CallbackRefused(TOKEN_REFUSED)
        return execution


def _still_running(execution: Execution) -> None:
    if execution.status is not ExecutionStatus.RUNNING or execution.lease_token is None:
        raise Conflict(
            f"execution {execution.execution_id!r} is {execution.status.value}; "
            "only a running execution takes heartbeats and completions"
        )


def _shaped(execution_id: str) -> str:
    """An id that cannot be an execution's is simply not found."""
    try:
        task_id_of(execution_id)
    except ValueError:
        raise ExecutionNotFound(execution_id) from None
    return execution_id
