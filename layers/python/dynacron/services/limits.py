"""The gate every delivery passes: host pause and breaker, concurrency slots, rate.

Why, in docs/decisions/: 0013-limits-breakers-pacing.md and
0020-host-pauses-per-tenant.md (host state is kept per tenant and host).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from dynacron.domain.clock import Clock
from dynacron.domain.coordination import transitions
from dynacron.domain.coordination.limits import (
    BreakerPolicy,
    HostState,
    Verdict,
    admit,
    after_failure,
    after_probe_taken,
    after_retry_after,
    after_success,
    host_scope,
    spread,
    target_scope,
)
from dynacron.domain.executions.execution import DeliveryResult, Dispatch, HandlerAnswer
from dynacron.domain.tasks.task import Task
from dynacron.ports import LimitStore
from dynacron.ports.metrics import Metrics

logger = logging.getLogger("dynacron")

# A full concurrency limit is tried again after 1 s plus up to this much spread.
SLOT_WAIT = timedelta(seconds=1)
SLOT_SPREAD_SECONDS = 2.0
# A scope whose slots this worker found all held is not tried in the store again for
# this long: the executions that come meanwhile wait at once, without spending
# ``SLOT_PROBES`` refused writes each, unless a slot given back here is free for them.
SCOPE_FULL_RECHECK = timedelta(milliseconds=250)
# How many scopes a worker remembers that of: the oldest is forgotten first.
REMEMBERED_SCOPES = 1024
# A host change lost to another worker's write is read and tried again this often.
HOST_WRITE_ROUNDS = 5
# Answers that say the host (or the gateway before it) is down, not the handler.
HOST_DOWN_STATUSES = frozenset({502, 503, 504})
# A worker reuses what it last read of a host for this long: a breaker opened by
# another worker is seen within it, and a burst costs one read less per execution.
HOST_READ_TTL = timedelta(seconds=1)


@dataclass(frozen=True)
class Wait:
    """Not now: come back at ``until``. ``reason``: concurrency, rate, breaker, paused."""

    until: datetime
    reason: str


@dataclass
class Pass:
    """Admitted: what to give back once the handler has answered."""

    holder: str
    # The host as this task's tenant sees it (``host_scope``).
    host: str | None = None
    # The host as read at admission: a success that changes nothing is not re-read.
    state: HostState | None = None
    probe: bool = False
    slots: list[str] = field(default_factory=list)
    # The scope and limit each of ``slots`` was taken under.
    scopes: dict[str, tuple[str, int]] = field(default_factory=dict)
    # When the leases of ``slots`` run out.
    slots_until: datetime | None = None


class LimitGate:
    """Admits a delivery or says how long it must wait, per tenant and host.

    ``admit`` runs before an attempt begins; a ``Wait`` answer means the worker sends
    the message on with a delay: the attempt has not started, so no attempt is used,
    and the wait is counted as lateness. ``before_call`` runs just before the handler
    is called and makes sure the slots held will outlast the call. ``report`` runs
    after the handler answered, frees the slots and tells the host's breaker how the
    call went (``release`` frees the slots sooner, as soon as the call returns).

    A worker remembers what it learnt of a scope's slots: one it found full is not
    tried again for ``SCOPE_FULL_RECHECK``, and a slot it gave back is the first it
    tries next (most likely still free). Under a full limit an execution that must
    wait then costs no write, and one that goes usually one: fewer writes, and
    shorter waits for them, keep each slot held for little more than its call.
    """

    def __init__(
        self,
        *,
        store: LimitStore,
        metrics: Metrics,
        clock: Clock,
        breaker: BreakerPolicy,
        call_timeout: timedelta,
        clock_skew: timedelta,
        max_pause: timedelta = timedelta(hours=1),
    ) -> None:
        self._store = store
        self._metrics = metrics
        self._clock = clock
        self._breaker = breaker
        # A slot's lease covers one handler call and twice the clock skew; a call
        # goes only while at least a call and one skew of it are left.
        self._slot_lease = call_timeout + 2 * clock_skew
        self._lease_left_to_call = call_timeout + clock_skew
        # The longest a Retry-After pauses a host (delivery caps it already; this
        # keeps any other source from writing a date past what a datetime holds).
        self._max_pause_seconds = max_pause.total_seconds()
        self._lock = threading.Lock()
        self._hosts: dict[str, tuple[datetime, HostState]] = {}
        # Per scope and limit (a slot of a lowered limit is not one of the new
        # limit's): until when it is taken as full, and slots given back here.
        self._full_until: dict[tuple[str, int], datetime] = {}
        self._given_back: dict[tuple[str, int], list[str]] = {}

    def admit(self, task: Task, dispatch: Dispatch) -> Pass | Wait:
        """May this attempt call its handler now? Holds slots (and maybe the probe)."""
        now = self._clock.now()
        granted = Pass(holder=f"{dispatch.execution_id}#{dispatch.attempt}")
        seed = f"{granted.holder}#{now.timestamp()}"
        host = host_scope_of(task)
        state: HostState | None = None
        if host is not None:
            granted.host = host
            granted.state = state = self._host(host, now)
            admission = admit(state, now)
            if admission.verdict is Verdict.WAIT and admission.wait_until is not None:
                # Spread over a second, so the host is not met by everyone at once.
                return self._wait(
                    admission.wait_until + _seconds(spread(seed, 1)), admission.reason
                )
            granted.probe = admission.verdict is Verdict.PROBE
        limits = task.limits
        scopes = [(f"task#{task.task_id}", limits.max_concurrency)]
        if host is not None:
            scopes.append((f"host#{host}", limits.host_max_concurrency))
        granted.slots_until = now + self._slot_lease
        for scope, limit in scopes:
            if limit is None:
                continue
            slot = self._take_slot(scope, limit, granted.holder, now, granted.slots_until)
            if slot is None:
                self._give_back(granted)
                return self._wait(now + _slot_wait(seed), "concurrency")
            granted.slots.append(slot)
            granted.scopes[slot] = (scope, limit)
        if host is not None and limits.rate_limit is not None:
            wait_seconds = self._store.take_token(host, limits.rate_limit, now)
            if wait_seconds > 0:
                self._give_back(granted)
                return self._wait(now + _seconds(wait_seconds + spread(seed, 1)), "rate")
        if granted.probe and state is not None:
            # One probe at a time: whoever writes HALF_OPEN first goes, the rest wait.
            probing = after_probe_taken(state, now, self._breaker)
            if not self._replace_host(probing, now):
                self._give_back(granted)
                return self._wait(now + self._breaker.cool_down, "breaker")
            self._remember(probing, now)
            logger.info("breaker half-open: probing", extra={"host": host})
            self._metrics.breaker_changed("HALF_OPEN")
        return granted

    def before_call(self, granted: Pass) -> Wait | None:
        """Just before the handler is called: make sure the slots held outlast the call.

        Their leases ran from admission, and the writes since (``begin``, the
        idempotency record) take milliseconds, or seconds when DynamoDB throttles
        and the SDK retries. A call that outlived its slot's lease would let another
        worker take the slot and make N+1 calls at once, so a lease with less than a
        call and one clock skew left is extended first (one conditional write, rare);
        a slot another execution took meanwhile means this call must not go: wait.
        """
        if not granted.slots or granted.slots_until is None:
            return None
        now = self._clock.now()
        if granted.slots_until - now >= self._lease_left_to_call:
            return None
        until = now + self._slot_lease
        for slot in list(granted.slots):
            if not self._store.apply_slot(slot, transitions.extend_slot(granted.holder, until)):
                granted.slots.remove(slot)  # no longer ours: nothing to give back
                self._give_back(granted)
                logger.info("slot lost before the call", extra={"slot": slot})
                return self._wait(
                    now + _slot_wait(f"{granted.holder}#{now.timestamp()}"), "concurrency"
                )
        granted.slots_until = until
        return None

    def release(self, granted: Pass) -> None:
        """Free the slots, as soon as the call has returned: the attempt's end is
        still to be written, but the handler is done with this execution."""
        self._give_back(granted)

    def report(self, granted: Pass, result: DeliveryResult | None) -> None:
        """Free the slots (if ``release`` did not); tell the breaker how the call went
        (None: not called)."""
        self._give_back(granted)
        if granted.host is None or result is None:
            return
        now = self._clock.now()
        state = granted.state or self._store.host(granted.host)
        for _ in range(HOST_WRITE_ROUNDS):
            changed = self._after(state, result, now)
            if changed is None or self._replace_host(changed, now):
                break
            now = self._clock.now()
            state = self._store.host(granted.host)
        else:
            return
        if changed is not None:
            self._remember(changed, now)
        if changed is not None and changed.breaker is not state.breaker:
            logger.warning(
                "breaker %s",
                changed.breaker.value.lower(),
                extra={"host": granted.host, "failures": changed.consecutive_failures},
            )
            self._metrics.breaker_changed(changed.breaker.value)

    def _after(self, state: HostState, result: DeliveryResult, now: datetime) -> HostState | None:
        failure = result.failure
        if failure is not None and failure.retry_after_seconds is not None:
            # 429/503 with Retry-After: the host is alive and asks this tenant to slow down.
            self._metrics.host_paused()
            pause = min(max(0, failure.retry_after_seconds), self._max_pause_seconds)
            return after_retry_after(state, now + timedelta(seconds=pause))
        if failure is not None and result.status_code is None and not failure.retryable:
            return None  # refused before any call (URL policy): says nothing of the host
        unhealthy = result.answer is HandlerAnswer.FAILED and (
            result.status_code is None or result.status_code in HOST_DOWN_STATUSES
        )
        if unhealthy:
            return after_failure(state, now, self._breaker)
        # Any other answer shows a host that is up: a 500 or a 4xx is the handler's
        # verdict on this execution, for its retry policy, not a sign of an outage.
        return after_success(state)

    def read_hosts(self, tasks: Iterable[Task]) -> None:
        """Read, in one store call, the breaker states of ``tasks``' hosts that this
        worker has not read within ``HOST_READ_TTL``, so that admitting each of them
        reads none: a wave of ten records for ten tenants' hosts cost ten consistent
        GetItems one after another (about 0.1 s of a record's wait in the scale run)."""
        now = self._clock.now()
        hosts = set()
        for task in tasks:
            try:
                host = host_scope_of(task)
            except ValueError:
                continue  # a URL that cannot be parsed: its record is set aside alone
            if host is not None:
                hosts.add(host)
        stale = sorted(host for host in hosts if self._cached(host, now) is None)
        if len(stale) <= 1:
            return
        try:
            states = self._store.hosts(stale)
        except Exception:
            # Only a head start: each record reads its own host as it is admitted,
            # and fails alone if that read fails too.
            logger.warning("hosts not read together", exc_info=True)
            return
        for state in states:
            self._remember(state, now)

    def _cached(self, host: str, now: datetime) -> HostState | None:
        """The host's state as read within ``HOST_READ_TTL``, or None."""
        with self._lock:
            cached = self._hosts.get(host)
        if cached is not None and now - cached[0] < HOST_READ_TTL:
            return cached[1]
        return None

    def _host(self, host: str, now: datetime) -> HostState:
        cached = self._cached(host, now)
        if cached is not None:
            return cached
        state = self._store.host(host)
        self._remember(state, now)
        return state

    def _remember(self, state: HostState, now: datetime) -> None:
        with self._lock:
            self._hosts[state.host] = (now, state)

    def _take_slot(
        self, scope: str, limit: int, holder: str, now: datetime, until: datetime
    ) -> str | None:
        """One of ``scope``'s slots for ``holder``: one given back here first, then
        (unless the scope was found full just now) those ``take_slot`` tries."""
        with self._lock:
            given_back = self._given_back.pop((scope, limit), [])
            freed = given_back.pop() if given_back else None
            if given_back:
                self._given_back[(scope, limit)] = given_back
            full_until = self._full_until.pop((scope, limit), None)
            if full_until is not None and now < full_until:
                self._full_until[(scope, limit)] = full_until
        if freed is not None and self._store.apply_slot(
            freed, transitions.acquire_slot(holder, now, until)
        ):
            return freed
        if full_until is not None and now < full_until:
            return None
        slot = take_slot(self._store, scope, limit, holder, now, until)
        if slot is None:
            # From when the last slot tried was refused: trying takes a while.
            full_until = self._clock.now() + SCOPE_FULL_RECHECK
            with self._lock:
                _remember_scope(self._full_until, (scope, limit), full_until)
        return slot

    def _give_back(self, granted: Pass) -> None:
        for slot in granted.slots:
            if self._store.apply_slot(slot, transitions.release_slot(granted.holder)):
                scope = granted.scopes.get(slot)
                if scope is not None:
                    with self._lock:
                        # At most the limit's: the slots that are this worker's to reuse.
                        freed = [s for s in self._given_back.pop(scope, []) if s != slot]
                        kept = freed[max(0, len(freed) - scope[1] + 1) :]
                        _remember_scope(self._given_back, scope, [*kept, slot])
        granted.slots.clear()

    def _replace_host(self, state: HostState, now: datetime) -> bool:
        """Store ``state`` if the stored one is still at the version before it."""
        return self._store.apply_host(state.host, transitions.replace_host(state), now)

    def _wait(self, until: datetime, reason: str) -> Wait:
        self._metrics.limit_wait(reason, (until - self._clock.now()).total_seconds())
        return Wait(until, reason)


def host_scope_of(task: Task) -> str | None:
    """The scope of a task's host breaker: its handler URL's host, or its target's
    resource (which stands in for a host: its breaker and its pauses)."""
    if task.target is not None:
        return target_scope(task.tenant_id, task.target.arn)
    if task.handler_url:
        return host_scope(task.tenant_id, task.handler_url)
    return None


def _remember_scope(memory: dict[tuple[str, int], Any], scope: tuple[str, int], value: Any) -> None:
    """Note ``value`` for ``scope`` as the newest, forgetting the oldest beyond
    ``REMEMBERED_SCOPES``."""
    memory.pop(scope, None)
    memory[scope] = value
    while len(memory) > REMEMBERED_SCOPES:
        del memory[next(iter(memory))]


def _seconds(value: float) -> timedelta:
    return timedelta(seconds=value)


def _slot_wait(seed: str) -> timedelta:
    """How long a full concurrency limit waits: 1 s, and up to 2 s spread by ``seed``."""
    return SLOT_WAIT + _seconds(spread(seed, SLOT_SPREAD_SECONDS))


def take_slot(
    store: LimitStore, scope: str, limit: int, holder: str, now: datetime, until: datetime
) -> str | None:
    """Hold one of ``scope``'s ``limit`` slots until ``until``: the first of those the
    store has a taker try (``LimitStore.slots``) that is free, expired at ``now`` or
    ``holder``'s already; its key, or None if every slot tried was held."""
    take = transitions.acquire_slot(holder, now, until)
    for slot in store.slots(scope, limit):
        if store.apply_slot(slot, take):
            return slot
    return None
