"""Delivery to AWS targets with the caller's role (decision 0047).

For each call the worker acts as the task's ``role_arn``, assumed with STS and an
external id bound to the task's tenant (``external_id_for``): a tenant cannot
choose it, so a role whose trust policy names one tenant's external id refuses
every other tenant. Credentials are kept per (role, tenant) until shortly before
they expire, with a client per service made on them; at most ``max_roles`` pairs
are kept (the least recently used goes first).

The call itself is ``target_calls``'; its errors become the outcome classes the
worker retries, backs off, dead-letters, limits and records as it does an HTTP
handler's.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from dynacron.adapters.delivery.target_calls import (
    answer_of,
    execution_arn,
    failure_of,
    run_arn_of,
    target_call,
    tracked_answer,
)
from dynacron.domain.clock import Clock
from dynacron.domain.executions.execution import DeliveryResult, Dispatch
from dynacron.domain.executions.retry import AttemptFailure
from dynacron.domain.tasks.targets import TargetService, external_id_for, service_token
from dynacron.domain.tasks.task import Task

# Credentials are asked for this long, and renewed this long before they end.
SESSION_SECONDS = 3600
RENEW_BEFORE = timedelta(minutes=5)
MAX_ROLES = 128
# STS's role session name: at most 64 characters.
SESSION_NAME_CHARS = 64
SESSION_NAME_PREFIX = "dynacron-"

EMULATOR_CREDENTIALS = {"AccessKeyId": "local", "SecretAccessKey": "local"}
# boto3 clients by service name, made on one set of credentials.
ClientFactory = Callable[[str, dict[str, str] | None], Any]

# The instant (time.monotonic) the current target attempt must end by: its
# AssumeRole and its call share it (TargetDelivery sets it around one attempt).
_attempt_deadline: ContextVar[float | None] = ContextVar("target_attempt_deadline", default=None)
# Below this, a call is not started: it could not be answered in time.
MIN_CALL_SECONDS = 0.05


def remaining_seconds() -> float | None:
    """What is left of the current attempt's deadline, if one is set."""
    deadline = _attempt_deadline.get()
    return None if deadline is None else deadline - time.monotonic()


def _read_timeout_from_deadline(context: dict[str, Any], **_: Any) -> None:
    """before-call: the request's read timeout is what is left of the attempt's
    deadline (botocore honours ``read_timeout`` in the request context)."""
    left = remaining_seconds()
    if left is not None:
        context["read_timeout"] = max(left, MIN_CALL_SECONDS)


def client_factory(
    region: str, endpoint_url: str | None, timeout_seconds: float, calls_at_once: int = 10
) -> ClientFactory:
    """Clients of ``region`` (at ``endpoint_url``, an emulator's, if given) on the
    credentials passed, or the process's own when None. One attempt per call,
    within the handler timeout: retries are the task's policy, not botocore's.
    Each client pools a connection for each of ``calls_at_once`` (the worker's
    concurrency): past its pool, a call opens a connection and throws it away."""
    config = Config(
        connect_timeout=min(5.0, timeout_seconds),
        read_timeout=timeout_seconds,
        retries={"total_max_attempts": 1},
        max_pool_connections=max(10, calls_at_once),
    )
    lock = threading.Lock()
    # An emulator (local mode) takes any credentials; the process may have none.
    own = EMULATOR_CREDENTIALS if endpoint_url is not None else None
    # One session for every client, each made on its own credentials: a session per
    # client loads the service models again (some 8 MB and 0.2 s of CPU each).
    session = boto3.session.Session(region_name=region)

    def make(service: str, credentials: dict[str, str] | None) -> Any:
        credentials = credentials or own
        # boto3's sessions are not safe across threads: clients are made one at a time.
        with lock:
            # A service named at run time: none of the stubs' overloads.
            client = session.client(  # type: ignore[call-overload]
                service,
                endpoint_url=endpoint_url,
                config=config,
                aws_access_key_id=credentials["AccessKeyId"] if credentials else None,
                aws_secret_access_key=credentials["SecretAccessKey"] if credentials else None,
                aws_session_token=credentials.get("SessionToken") if credentials else None,
            )
        client.meta.events.register("before-call.*.*", _read_timeout_from_deadline)
        return client

    return make


@dataclass
class _Assumed:
    expires_at: datetime
    credentials: dict[str, str]
    clients: dict[str, Any] = field(default_factory=dict)


class AssumedRoles:
    """Clients acting as a role for a tenant; safe to use from several threads."""

    def __init__(
        self, make_client: ClientFactory, clock: Clock, *, max_roles: int = MAX_ROLES
    ) -> None:
        self._make_client = make_client
        self._clock = clock
        self._max_roles = max_roles
        self._sts: Any = None
        self._held: OrderedDict[tuple[str, str], _Assumed] = OrderedDict()
        self._lock = threading.Lock()
        # One lock a (role, tenant), held while its role is assumed: the records of a
        # batch that start together assume it once.
        self._assuming: dict[tuple[str, str], threading.Lock] = {}

    def client(self, role_arn: str, tenant_id: str, service: str) -> Any:
        """A client of ``service`` acting as ``role_arn`` for ``tenant_id``."""
        key = (role_arn, tenant_id)
        assumed = self._fresh(key)
        if assumed is None:
            with self._lock:
                assuming = self._assuming.setdefault(key, threading.Lock())
            with assuming:
                try:
                    assumed = self._fresh(key) or self._assume(key)
                except BaseException:
                    # Nothing kept, so nothing will drop its lock: dropped here, or
                    # every role that cannot be assumed would leave one for good.
                    with self._lock:
                        if key not in self._held and self._assuming.get(key) is assuming:
                            del self._assuming[key]
                    raise
        with self._lock:
            client = assumed.clients.get(service)
        if client is None:
            client = self._make_client(service, assumed.credentials)
            with self._lock:
                client = assumed.clients.setdefault(service, client)
        return client

    def _fresh(self, key: tuple[str, str]) -> _Assumed | None:
        with self._lock:
            assumed = self._held.get(key)
            if assumed is None or self._clock.now() >= assumed.expires_at - RENEW_BEFORE:
                return None
            self._held.move_to_end(key)
            return assumed

    def _assume(self, key: tuple[str, str]) -> _Assumed:
        role_arn, tenant_id = key
        with self._lock:
            if self._sts is None:
                self._sts = self._make_client("sts", None)
            sts = self._sts
        answer = sts.assume_role(
            RoleArn=role_arn,
            RoleSessionName=session_name(tenant_id),
            ExternalId=external_id_for(tenant_id),
            DurationSeconds=SESSION_SECONDS,
        )
        credentials = answer["Credentials"]
        assumed = _Assumed(
            expires_at=credentials["Expiration"],
            credentials={
                name: credentials[name]
                for name in ("AccessKeyId", "SecretAccessKey", "SessionToken")
            },
        )
        with self._lock:
            self._held[key] = assumed
            self._held.move_to_end(key)
            while len(self._held) > self._max_roles:
                dropped, _ = self._held.popitem(last=False)
                self._assuming.pop(dropped, None)
        return assumed

    def __len__(self) -> int:
        with self._lock:
            return len(self._held)

    @property
    def locks(self) -> int:
        """How many (role, tenant) pairs have a lock: those kept and those being assumed."""
        with self._lock:
            return len(self._assuming)


def session_name(tenant_id: str) -> str:
    """The role session's name: the tenant, as CloudTrail shows who acted."""
    return SESSION_NAME_PREFIX + service_token(
        tenant_id, SESSION_NAME_CHARS - len(SESSION_NAME_PREFIX)
    )


class TargetDelivery:
    """Calls a task's AWS target as its role, one call an attempt, within one
    deadline of ``timeout_seconds`` for the attempt's AssumeRole and call together:
    each request's read timeout is what is left of it (a synchronous Invoke still
    running past the handler timeout would otherwise overlap the next attempt)."""

    def __init__(self, roles: AssumedRoles, timeout_seconds: float | None = None) -> None:
        self.roles = roles
        self.timeout_seconds = timeout_seconds

    def deliver(self, task: Task, dispatch: Dispatch, callback_token: str) -> DeliveryResult:
        if self.timeout_seconds is None:
            return self._deliver(task, dispatch)
        token = _attempt_deadline.set(time.monotonic() + self.timeout_seconds)
        try:
            return self._deliver(task, dispatch)
        finally:
            _attempt_deadline.reset(token)

    def _deliver(self, task: Task, dispatch: Dispatch) -> DeliveryResult:
        target = task.target
        assert target is not None, "a target delivery needs a target"
        call = target_call(task, dispatch)
        try:
            client = self.roles.client(target.role_arn, task.tenant_id, call.service.client_name)
        except (ClientError, BotoCoreError) as error:
            failure = failure_of(error, "AssumeRole")
            return DeliveryResult.failed(
                AttemptFailure(
                    f"could not act as {target.role_arn}: {failure.error} (its trust policy must "
                    f"let dynacron's worker assume it with external id "
                    f"{external_id_for(task.tenant_id)!r})",
                    retryable=failure.retryable,
                )
            )
        operation = _operation_name(call.operation)
        left = remaining_seconds()
        if left is not None and left < MIN_CALL_SECONDS:
            return DeliveryResult.failed(
                AttemptFailure(
                    f"{operation} was not called: assuming {target.role_arn} used the "
                    f"attempt's {self.timeout_seconds:g} s"
                )
            )
        try:
            response = getattr(client, call.operation)(**call.parameters)
        except ClientError as error:
            if (
                call.service is TargetService.STEP_FUNCTIONS
                and error.response.get("Error", {}).get("Code") == "ExecutionAlreadyExists"
            ):
                # Named by the execution id: an earlier attempt started it.
                started = DeliveryResult.succeeded(
                    None, f"execution {call.parameters['name']} was started by an earlier attempt"
                )
                if not target.tracked:
                    return started
                return tracked_answer(started, execution_arn(target.arn, call.parameters["name"]))
            return DeliveryResult.failed(
                failure_of(error, operation),
                error.response.get("ResponseMetadata", {}).get("HTTPStatusCode"),
            )
        except BotoCoreError as error:
            return DeliveryResult.failed(failure_of(error, operation))
        answer = answer_of(call, response)
        return tracked_answer(answer, run_arn_of(call, response)) if target.tracked else answer


def _operation_name(snake: str) -> str:
    return "".join(part.capitalize() for part in snake.split("_"))
