"""Each change of a coordination record as the services make it: the domain's
transition (``dynacron.domain.coordination.transitions``), carried out by the store's
``apply``. Sequences of changes (release, else withdraw; try slots in turn; reserve
a key; rotate a secret) are the services' own, imported. One line per change, so
that a contract test reads as the sequence of moves it checks."""

from __future__ import annotations

from datetime import datetime

from dynacron.domain.coordination import transitions
from dynacron.domain.coordination.limits import HostState
from dynacron.domain.coordination.uptime import ShardHistory
from dynacron.ports import CreateKeys, CursorStore, LimitStore, ShardLeases
from dynacron.services.limits import take_slot
from dynacron.services.tasks import reserve_key, rotate_secret
from dynacron.services.tick_loop import release

__all__ = ["release", "reserve_key", "rotate_secret", "take_slot"]


# Cursors --------------------------------------------------------------------------


def advance(cursors: CursorStore, shard: int, bucket: datetime) -> bool:
    return cursors.apply(shard, transitions.advance_cursor(bucket))


def rewind(cursors: CursorStore, shard: int, bucket: datetime, seen: datetime) -> bool:
    return cursors.apply(shard, transitions.rewind_cursor(bucket, seen))


def record_tick(
    cursors: CursorStore, shard: int, history: ShardHistory, seen: ShardHistory
) -> bool:
    return cursors.apply(shard, transitions.record_tick(history, seen))


# Shard leases ---------------------------------------------------------------------


def acquire(leases: ShardLeases, shard: int, owner: str, now: datetime, until: datetime) -> bool:
    return leases.apply(shard, transitions.acquire_lease(owner, now, until))


def request_handover(leases: ShardLeases, shard: int, owner: str) -> bool:
    return leases.apply(shard, transitions.request_handover(owner))


def renew(leases: ShardLeases, shard: int, owner: str, until: datetime) -> bool:
    return leases.apply(shard, transitions.renew_lease(owner, until))


def hand_over(leases: ShardLeases, shard: int, owner: str, until: datetime) -> bool:
    return leases.apply(shard, transitions.hand_over_lease(owner, until))


# Limits ---------------------------------------------------------------------------


def extend_slot(limits: LimitStore, slot: str, holder: str, until: datetime) -> bool:
    return limits.apply_slot(slot, transitions.extend_slot(holder, until))


def release_slot(limits: LimitStore, slot: str, holder: str) -> bool:
    return limits.apply_slot(slot, transitions.release_slot(holder))


def replace_host(limits: LimitStore, state: HostState, now: datetime) -> bool:
    return limits.apply_host(state.host, transitions.replace_host(state), now)


# Create keys ----------------------------------------------------------------------


def mark_created(keys: CreateKeys, tenant_id: str, key: str, task_id: str) -> bool:
    return keys.apply(tenant_id, key, transitions.mark_key_created(task_id))
