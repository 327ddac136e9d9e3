"""Executions: one run of one occurrence of a task, the message that carries it, its lease.

An execution moves through these states; every move is one conditional write
that names the state it expects (see ``transitions``):

    (none) --first message--> RUNNING --2xx--> SUCCEEDED
    QUEUED --its message----> RUNNING --202--> RUNNING (awaiting heartbeat/complete)
    RUNNING --failure, attempts left--> QUEUED (next attempt, delayed)
    RUNNING --failure, none left / not retryable--> FAILED (dead letter)
    RUNNING --task deleted or paused--> SKIPPED
    (none) --overlap policy--> SKIPPED (recorded by the tick, never run)
    FAILED (dead letter) --redrive--> QUEUED

QUEUED and RUNNING executions hold a lease: a deadline by which something must
happen (the queued message starts, the worker heartbeats, the handler calls back).
A lease that ran out is taken over, by the reaper or by the message of a running
attempt coming back (decision 0015), so no execution waits forever.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum

from dynacron.domain.coordination.tenants import DEFAULT_TENANT
from dynacron.domain.executions.retry import AttemptFailure, RetryPolicy


class ExecutionStatus(StrEnum):
    """Where an execution is: waiting for an attempt, running one, or ended (final)."""

    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    SKIPPED = "SKIPPED"

    @property
    def is_final(self) -> bool:
        """Whether the execution ended: SUCCEEDED, FAILED (a dead letter) or SKIPPED."""
        return self not in (ExecutionStatus.QUEUED, ExecutionStatus.RUNNING)


# A handler's answer is kept, for dependent tasks, up to this many characters.
RESULT_EXCERPT_LIMIT = 1000


@dataclass(frozen=True)
class ResultSummary:
    """What a successful handler answered: its HTTP status and the start of its body,
    or what a Python handler returned."""

    status_code: int | None = None
    excerpt: str | None = None


@dataclass(frozen=True)
class HandlerCallRecord:
    """The idempotency record of an execution's handler call (Powertools' record,
    kept on the execution item: decision 0016).

    IN_PROGRESS while a call runs: no other call starts until it ends or
    ``in_progress_until_ms`` passes. COMPLETED once a call succeeded: ``response``
    is its answer, replayed instead of calling again. Neither counts after
    ``expires_at``. Times are epoch seconds and milliseconds of the wall clock,
    as Powertools keeps them.
    """

    IN_PROGRESS = "INPROGRESS"
    COMPLETED = "COMPLETED"

    status: str
    expires_at: int
    in_progress_until_ms: int | None = None
    response: ResultSummary | None = None


@dataclass(frozen=True)
class Upstream:
    """The upstream execution whose end started a dependent task's execution: with
    its final ``status`` (None in records written before it was kept), and for a
    fan-in (decision 0058) the ends of the other upstreams of its set, ``others``."""

    execution_id: str
    result: ResultSummary = field(default_factory=ResultSummary)
    status: str | None = None
    others: tuple[Upstream, ...] = ()

    @property
    def ends(self) -> tuple[Upstream, ...]:
        """Every upstream end that started the run: this one first, then the others."""
        return (self, *self.others)


@dataclass(frozen=True)
class Dispatch:
    """What travels through the queue: which occurrence to run, which attempt, not how.

    The worker reads the task when it runs, so a handler or payload changed after
    the occurrence was enqueued takes effect, and a deleted task does not fire.
    ``not_before`` is set on retries: SQS delays a message by at most 15 minutes,
    so a longer wait is made of several hops.
    """

    execution_id: str
    task_id: str
    scheduled_at: datetime
    attempt: int = 1
    # How long SQS holds the message before a worker may see it (jitter).
    delay_seconds: int = 0
    not_before: datetime | None = None
    upstream: Upstream | None = None
    # The task's tenant when it was sent: whose execution it is even if the task
    # is deleted before it begins. None in messages sent before messages said.
    tenant_id: str | None = None


@dataclass(frozen=True)
class Execution:
    """One occurrence of a task (or a trigger, backfill, dependent run), across its
    attempts: its status, its lease, and what its handler answered."""

    execution_id: str
    task_id: str
    scheduled_at: datetime
    status: ExecutionStatus
    attempt: int
    started_at: datetime | None = None
    completed_at: datetime | None = None
    error: str | None = None
    # The attempt number the current retry budget started at: 1, or the first
    # attempt after a redrive. Attempt numbers keep rising across redrives.
    first_attempt: int = 1
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    next_attempt_at: datetime | None = None
    lease_until: datetime | None = None
    lease_token: str | None = None
    accepted_at: datetime | None = None
    # A tracked target's run, while the execution waits for it (decision 0049).
    run_arn: str | None = None
    callback_digest: str | None = None
    dead_lettered_at: datetime | None = None
    upstream: Upstream | None = None
    result: ResultSummary | None = None
    # Its task's tenant, copied when the first attempt begins.
    tenant_id: str = DEFAULT_TENANT
    # The lease is in the lease index, where the reaper looks. A running attempt
    # begun from an SQS message is not: its undeleted message is what brings it
    # back if the worker dies (decision 0015).
    lease_indexed: bool = False
    # Listed across its tenant's tasks (GET /executions) since this instant: set
    # while it is FAILED, waiting for or running a retry, or a long job (202).
    attention_at: datetime | None = None

    @property
    def attempts_used(self) -> int:
        """Attempts counted against the current retry budget, this one included."""
        return self.attempt - self.first_attempt + 1

    def as_dispatch(self) -> Dispatch:
        """The message that runs the execution's current attempt."""
        return Dispatch(
            execution_id=self.execution_id,
            task_id=self.task_id,
            scheduled_at=self.scheduled_at,
            attempt=self.attempt,
            not_before=self.next_attempt_at,
            upstream=self.upstream,
            tenant_id=self.tenant_id,
        )


@dataclass(frozen=True)
class LeaseTerms:
    """How long each kind of lease lasts, and the margin allowed for clock skew.

    Clocks of different machines disagree. The holder of a lease renews it a skew
    margin before it ends by its own clock; the reaper treats it as abandoned only
    a skew margin after it ends by the reaper's clock. A holder and a reaper whose
    clocks differ by less than the margin never both believe they own it.
    """

    running: timedelta
    awaiting_callback: timedelta
    pickup_grace: timedelta
    clock_skew: timedelta

    @property
    def heartbeat_interval(self) -> timedelta:
        """Renew often enough that two heartbeats may be lost before the margin."""
        return max((self.running - self.clock_skew) / 3, timedelta(milliseconds=50))

    @property
    def message_hold(self) -> timedelta:
        """How long a worker keeps a received message invisible at each renewal
        (every ``heartbeat_interval``; decision 0038).

        Longer than a running lease plus the skew margin plus one renewal interval:
        when a worker dies, its message comes back only once the lease it began is
        abandoned, so the worker that receives it takes the lease over at once.
        """
        return self.running + self.clock_skew + self.heartbeat_interval + timedelta(seconds=1)

    def abandoned_before(self, now: datetime) -> datetime:
        """Leases that ended before this instant are abandoned, by the reaper's clock."""
        return now - self.clock_skew

    def pickup_deadline(self, due: datetime) -> datetime:
        """When a queued attempt due at ``due`` should have started, at the latest."""
        return due + self.pickup_grace


def new_token() -> str:
    """An unguessable secret: lease tokens and per-attempt callback tokens."""
    return secrets.token_urlsafe(24)


def token_digest(token: str) -> str:
    """What is stored for a callback token: its SHA-256, never the token itself."""
    return hashlib.sha256(token.encode()).hexdigest()


def token_matches(token: str, digest: str | None) -> bool:
    """Constant-time comparison, so response timing reveals nothing about the digest."""
    if digest is None:
        return False
    return hmac.compare_digest(token_digest(token), digest)


def scheduling_lag(scheduled_at: datetime, started_at: datetime) -> timedelta:
    """How late a handler started, measured from the occurrence's scheduled time."""
    return started_at - scheduled_at


def queue_latency(sent_at: datetime, due_at: datetime, started_at: datetime) -> timedelta | None:
    """How long a dispatch message waited for a worker: from when it could first run
    (its send, or its due time if it was sent to wait) to ``started_at``. None if
    it is not due yet: the worker sends it on, it does not start it."""
    available_at = max(sent_at, due_at)
    return started_at - available_at if started_at >= available_at else None


class HandlerAnswer(StrEnum):
    """What a handler's answer means for the attempt."""

    SUCCEEDED = "SUCCEEDED"
    # 202: the handler took the job and reports back through heartbeat/complete.
    ACCEPTED = "ACCEPTED"
    FAILED = "FAILED"


@dataclass(frozen=True)
class DeliveryResult:
    """What one call of a handler came to."""

    answer: HandlerAnswer
    status_code: int | None = None
    failure: AttemptFailure | None = None
    excerpt: str | None = None
    # ACCEPTED only: how long the lease waits for the end, when not the callback
    # lease (a tracked target's run, decision 0049).
    hold_for: timedelta | None = None
    # ACCEPTED only: the run a tracked target's call started (its state machine
    # execution's or ECS task's ARN); only its end ends the execution.
    run_arn: str | None = None

    @property
    def ok(self) -> bool:
        """Whether the handler succeeded (a 202 is not yet a success)."""
        return self.answer is HandlerAnswer.SUCCEEDED

    @property
    def summary(self) -> ResultSummary:
        """The status code and excerpt, as a success is kept."""
        return ResultSummary(self.status_code, self.excerpt)

    @classmethod
    def succeeded(
        cls, status_code: int | None = None, excerpt: str | None = None
    ) -> DeliveryResult:
        """A success; the excerpt is cut to ``RESULT_EXCERPT_LIMIT`` characters."""
        return cls(
            HandlerAnswer.SUCCEEDED,
            status_code,
            excerpt=excerpt[:RESULT_EXCERPT_LIMIT] if excerpt is not None else None,
        )

    @classmethod
    def accepted(
        cls,
        status_code: int = 202,
        *,
        excerpt: str | None = None,
        hold_for: timedelta | None = None,
        run_arn: str | None = None,
    ) -> DeliveryResult:
        """The handler took the job and will report back through the callbacks (or,
        ``hold_for`` given, the end of the run ``run_arn`` is awaited that long at a time)."""
        return cls(
            HandlerAnswer.ACCEPTED, status_code, excerpt=excerpt, hold_for=hold_for, run_arn=run_arn
        )

    @classmethod
    def failed(cls, failure: AttemptFailure, status_code: int | None = None) -> DeliveryResult:
        """A failed call: ``failure`` says whether trying again may help."""
        return cls(HandlerAnswer.FAILED, status_code, failure)
