"""The conditional changes of the records that coordinate the scheduler, as data.

Each move of a shard lease, a concurrency slot, a host's breaker state, a shard's
cursor and tick history, a create (idempotency) key and a tenant's signing secrets
is a pure function here returning a ``Transition`` (``dynacron.domain.conditions``)
on the record's attribute names below: the state it expects and what it changes,
named by its move (whoever watches the writes, such as the cost meter, names each
write by it).
Each store carries one out atomically (DynamoDB: one conditional write, the record's
key and its TTL added; SQLite: one transaction that checks the condition on the
row). Two stores, one set of rules.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from dynacron.domain.conditions import (
    AllOf,
    AnyOf,
    AtMost,
    Below,
    Copy,
    Equals,
    Exists,
    Missing,
    NotEquals,
    Transition,
    names_move,
)
from dynacron.domain.coordination.create_keys import KEY_LIFETIME, CreateKey
from dynacron.domain.coordination.limits import BreakerState, HostState
from dynacron.domain.coordination.uptime import Outage, ShardHistory
from dynacron.domain.instants import format_instant, parse_instant

# A shard lease's and a concurrency slot's attributes.
OWNER = "owner"
SUCCESSOR = "successor"
LEASE_UNTIL = "lease_until"
HOLDER = "holder"
# A host's breaker state, guarded by its version.
VERSION = "version"
# A shard cursor's: the oldest due bucket that may hold work, and the tick history.
BUCKET = "bucket"
LAST_TICK_AT = "last_tick_at"
TICKING_SINCE = "ticking_since"
OUTAGES = "outages"
# A create key's reservation; it counts as absent from ``expires_at`` (epoch seconds) on.
TASK_ID = "task_id"
FINGERPRINT = "fingerprint"
CREATED = "created"
EXPIRES_AT = "expires_at"
# A tenant's signing secrets, newest first.
SIGNING_SECRETS = "signing_secrets"


# --- shard leases: which tick works a shard, and until when ---------------------------


@names_move("acquire")
def acquire_lease(owner: str, now: datetime, until: datetime) -> Transition:
    """Hold a shard's lease until ``until``, written whole (a waiting successor is
    forgotten). Expects no lease, one expired at ``now``, or ``owner``'s already."""
    return Transition(
        expects=AnyOf(
            Missing(OWNER), AtMost(LEASE_UNTIL, format_instant(now)), Equals(OWNER, owner)
        ),
        sets={OWNER: owner, LEASE_UNTIL: format_instant(until)},
        creates=True,
    )


@names_move("request_handover")
def request_handover(owner: str) -> Transition:
    """Ask the holder to pass the lease to ``owner`` at its hand-over. Expects someone
    else to hold it and nobody else to be waiting (a standby keeps its place)."""
    return Transition(
        expects=AllOf(Exists(OWNER), NotEquals(OWNER, owner), Missing(SUCCESSOR)),
        sets={SUCCESSOR: owner},
    )


@names_move("renew")
def renew_lease(owner: str, until: datetime) -> Transition:
    """Hold the lease until ``until``. Expects ``owner`` to hold it; a waiting
    standby stays waiting (the holder hands over at its deadline)."""
    return Transition(expects=Equals(OWNER, owner), sets={LEASE_UNTIL: format_instant(until)})


@names_move("hand_over")
def hand_over_lease(owner: str, until: datetime) -> Transition:
    """Make the waiting successor the holder until ``until``. Expects ``owner`` to hold
    the lease and someone to wait for it."""
    return Transition(
        expects=AllOf(Equals(OWNER, owner), Exists(SUCCESSOR)),
        sets={LEASE_UNTIL: format_instant(until)},
        computes={OWNER: Copy(SUCCESSOR)},
        removes=frozenset({SUCCESSOR}),
    )


@names_move("release")
def release_lease(owner: str) -> Transition:
    """Give the lease up: the record goes. Expects ``owner`` to hold it."""
    return Transition(expects=Equals(OWNER, owner), deletes=True)


@names_move("release")
def withdraw_handover(owner: str) -> Transition:
    """Withdraw ``owner``'s request for the lease. Expects ``owner`` to be waiting."""
    return Transition(expects=Equals(SUCCESSOR, owner), removes=frozenset({SUCCESSOR}))


# --- concurrency slots and host breakers ----------------------------------------------


# A concurrency limit tries this many of its slots before the execution waits:
# bounded writes per attempt, whatever the limit.
SLOT_PROBES = 4


def slots_to_try(scope: str, limit: int, first: int) -> list[str]:
    """The slots of ``scope``'s ``limit`` a taker tries, in turn, starting at ``first``
    (drawn at random, so that waiters spread out): at most ``SLOT_PROBES``."""
    return [f"{scope}#{(first + offset) % limit}" for offset in range(min(limit, SLOT_PROBES))]


@names_move("acquire_slot")
def acquire_slot(holder: str, now: datetime, until: datetime) -> Transition:
    """Hold a slot until ``until``, written whole. Expects it free, expired before
    ``now``, or ``holder``'s already."""
    return Transition(
        expects=AnyOf(
            Missing(HOLDER), Below(LEASE_UNTIL, format_instant(now)), Equals(HOLDER, holder)
        ),
        sets={HOLDER: holder, LEASE_UNTIL: format_instant(until)},
        creates=True,
    )


@names_move("extend_slot")
def extend_slot(holder: str, until: datetime) -> Transition:
    """Hold a slot until ``until``. Expects ``holder`` to hold it."""
    return Transition(expects=Equals(HOLDER, holder), sets={LEASE_UNTIL: format_instant(until)})


@names_move("release_slot")
def release_slot(holder: str) -> Transition:
    """Free a slot: the record goes. Expects ``holder`` to hold it."""
    return Transition(expects=Equals(HOLDER, holder), deletes=True)


def host_record(state: HostState) -> dict[str, Any]:
    """A host's breaker state as stored (absent fields left out)."""
    record: dict[str, Any] = {
        "breaker": state.breaker.value,
        "consecutive_failures": state.consecutive_failures,
        "breaker_until": _instant_or_none(state.breaker_until),
        "paused_until": _instant_or_none(state.paused_until),
        VERSION: state.version,
    }
    return {name: value for name, value in record.items() if value is not None}


def host_from_record(host: str, record: Mapping[str, Any] | None) -> HostState:
    """A host's breaker state as stored (the initial state where there is none)."""
    if record is None:
        return HostState(host=host)
    return HostState(
        host=host,
        breaker=BreakerState(record.get("breaker", BreakerState.CLOSED)),
        consecutive_failures=int(record.get("consecutive_failures", 0)),
        breaker_until=_instant_from(record.get("breaker_until")),
        paused_until=_instant_from(record.get("paused_until")),
        version=int(record.get(VERSION, 0)),
    )


@names_move("replace_host")
def replace_host(state: HostState) -> Transition:
    """Store a host's breaker state whole. Expects none stored, or the one at the
    version before ``state``'s."""
    return Transition(
        expects=AnyOf(Missing(VERSION), Equals(VERSION, state.version - 1)),
        sets=host_record(state),
        creates=True,
    )


# --- shard cursors and tick history ----------------------------------------------------


@names_move("advance")
def advance_cursor(bucket: datetime) -> Transition:
    """Move a shard's cursor to ``bucket``. Expects none, or one before it: never back."""
    at = format_instant(bucket)
    return Transition(expects=AnyOf(Missing(BUCKET), Below(BUCKET, at)), sets={BUCKET: at})


@names_move("rewind")
def rewind_cursor(bucket: datetime, seen: datetime) -> Transition:
    """Move a shard's cursor back to ``bucket`` after the clock stepped back
    (decision 0037). Expects the cursor still ``seen``: of two ticks, one rewinds."""
    return Transition(
        expects=Equals(BUCKET, format_instant(seen)), sets={BUCKET: format_instant(bucket)}
    )


def outage_to_text(outage: Outage) -> str:
    """An outage as stored: its last tick and the next one, ``/`` between."""
    return f"{format_instant(outage.last_tick)}/{format_instant(outage.next_tick)}"


def outage_from_text(text: str) -> Outage:
    """An outage as ``outage_to_text`` stored it."""
    last_tick, _, next_tick = text.partition("/")
    return Outage(last_tick=parse_instant(last_tick), next_tick=parse_instant(next_tick))


@names_move("record_tick")
def record_tick(history: ShardHistory, seen: ShardHistory) -> Transition:
    """Store ``history`` (``seen`` with one more tick). Expects the stored last tick
    still ``seen``'s (none if it has none): of two ticks of one shard, one records
    an outage, once."""
    if history.last_tick is None or history.ticking_since is None:
        raise ValueError("a recorded tick has a last tick and a start")
    return Transition(
        expects=(
            Missing(LAST_TICK_AT)
            if seen.last_tick is None
            else Equals(LAST_TICK_AT, format_instant(seen.last_tick))
        ),
        sets={
            LAST_TICK_AT: format_instant(history.last_tick),
            TICKING_SINCE: format_instant(history.ticking_since),
            OUTAGES: [outage_to_text(o) for o in history.outages],
        },
    )


# --- create keys and tenants' secrets -------------------------------------------------


@names_move("reserve")
def reserve_create_key(key: CreateKey, task_id: str, now: datetime) -> Transition:
    """Hold ``key`` for ``task_id`` until ``now`` plus ``KEY_LIFETIME``. Expects no
    reservation, or one expired at ``now``."""
    return Transition(
        expects=AnyOf(Missing(TASK_ID), AtMost(EXPIRES_AT, int(now.timestamp()))),
        sets={
            TASK_ID: task_id,
            FINGERPRINT: key.fingerprint,
            CREATED: False,
            EXPIRES_AT: int((now + KEY_LIFETIME).timestamp()),
        },
    )


@names_move("mark_created")
def mark_key_created(task_id: str) -> Transition:
    """Note that the task a key holds was stored. Expects the key still held for
    ``task_id``: one expired and taken since names another."""
    return Transition(expects=Equals(TASK_ID, task_id), sets={CREATED: True})


@names_move("rotate_secret")
def rotate_secret(current: list[str], fresh_secret: str) -> Transition:
    """Make ``fresh_secret`` current and keep the one it replaces (an older one goes).
    Expects the secrets still ``current``: of two rotations, one wins."""
    return Transition(
        expects=Equals(SIGNING_SECRETS, list(current)),
        sets={SIGNING_SECRETS: [fresh_secret, current[0]]},
    )


def _instant_from(value: str | None) -> datetime | None:
    return parse_instant(value) if value else None


def _instant_or_none(value: datetime | None) -> str | None:
    return format_instant(value) if value is not None else None
