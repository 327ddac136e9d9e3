"""The coordination contracts: tick cursors, tenants' secrets, shard leases, limits."""

from __future__ import annotations

from datetime import timedelta

import pytest

from dynacron.domain.coordination import transitions as coordination
from dynacron.domain.coordination.create_keys import KEY_LIFETIME, CreateKey, KeyReservation
from dynacron.domain.coordination.limits import (
    BreakerPolicy,
    BreakerState,
    HostState,
    RateLimit,
    after_failure,
    after_retry_after,
    after_success,
)
from dynacron.domain.coordination.tenants import TenantQuota
from dynacron.domain.coordination.uptime import ShardHistory
from dynacron.ports import AdapterSet, ShardLease
from tests.contract import coordination_changes as changes
from tests.contract.builders import SHARDING, START, a_task

SECOND = timedelta(seconds=1)
HOUR = timedelta(hours=1)
GRACE = timedelta(seconds=60)

# Cursors ---------------------------------------------------------------------------


def test_a_cursor_only_moves_forward(adapters: AdapterSet) -> None:
    cursors = adapters.cursors
    bucket = SHARDING.bucket(START)
    assert cursors.get(3) is None
    assert cursors.read(3).bucket is None

    assert changes.advance(cursors, 3, bucket)
    assert not changes.advance(cursors, 3, bucket - HOUR)
    assert not changes.advance(cursors, 3, bucket)
    assert cursors.get(3) == bucket
    assert changes.advance(cursors, 3, bucket + HOUR)

    assert cursors.get(3) == bucket + HOUR
    assert cursors.read(3).bucket == bucket + HOUR
    assert cursors.get(2) is None


def test_a_cursor_moves_back_only_from_the_bucket_seen(adapters: AdapterSet) -> None:
    """After the clock stepped back (decision 0037), of two ticks one rewinds."""
    cursors = adapters.cursors
    bucket = SHARDING.bucket(START)
    assert not changes.rewind(cursors, 4, bucket - 2 * HOUR, bucket)  # no cursor yet
    assert changes.advance(cursors, 4, bucket)

    assert changes.rewind(cursors, 4, bucket - 2 * HOUR, bucket)
    assert not changes.rewind(cursors, 4, bucket - 3 * HOUR, bucket)
    assert cursors.get(4) == bucket - 2 * HOUR
    # And it moves forward from there, as ever.
    assert changes.advance(cursors, 4, bucket - HOUR)
    assert cursors.get(4) == bucket - HOUR


def test_record_tick_only_over_the_history_seen(adapters: AdapterSet) -> None:
    cursors = adapters.cursors
    bucket = SHARDING.bucket(START)
    assert changes.advance(cursors, 1, bucket)

    # Given a shard no tick has recorded yet
    never = cursors.read(1, heartbeat=10 * SECOND).history
    assert never == ShardHistory(heartbeat=10 * SECOND)

    # When two ticks record their first run over that same history, one wins
    first = never.record(START, GRACE)
    assert changes.record_tick(cursors, 1, first, never)
    assert not changes.record_tick(cursors, 1, never.record(START + SECOND, GRACE), never)
    assert cursors.read(1, heartbeat=10 * SECOND).history == first

    # When the next tick comes after an outage, it records it over what it read
    later = first.record(START + 10 * 60 * SECOND, GRACE)
    assert later.outages
    assert not changes.record_tick(cursors, 1, later, never)
    assert changes.record_tick(cursors, 1, later, first)

    # Then the history is the new one, and the cursor is untouched
    cursor = cursors.read(1, heartbeat=10 * SECOND)
    assert cursor.history == later
    assert cursor.bucket == bucket


# Tenants ---------------------------------------------------------------------------


def test_tenants_secrets_are_ensured_once_and_rotated_keeping_one(
    adapters: AdapterSet,
) -> None:
    tenants = adapters.tenants
    assert tenants.signing_secrets("acme") == []
    assert tenants.task_count("acme") == 0

    # ensure_secret stores the first secret only
    assert tenants.ensure_secret("acme", "first") == ["first"]
    assert tenants.ensure_secret("acme", "second") == ["first"]
    assert tenants.signing_secrets("acme") == ["first"]

    # a rotation makes the fresh one current and keeps only the one it replaces
    assert changes.rotate_secret(tenants, "acme", "third") == ["third", "first"]
    assert changes.rotate_secret(tenants, "acme", "fourth") == ["fourth", "third"]
    assert tenants.signing_secrets("acme") == ["fourth", "third"]

    # a tenant without any gets the fresh one as its first
    assert changes.rotate_secret(tenants, "other", "only") == ["only"]
    assert tenants.signing_secrets("other") == ["only"]
    assert tenants.task_count("acme") == 0


# Shard leases ----------------------------------------------------------------------


def test_a_tenant_s_own_limits_are_set_replaced_and_removed(adapters: AdapterSet) -> None:
    tenants, tasks = adapters.tenants, adapters.tasks
    # A tenant never seen has no limits of its own
    assert tenants.quota("acme") == TenantQuota()
    # Set before it has any task, then kept by its creates, count and secret
    tenants.set_quota("acme", TenantQuota(max_tasks=10_000_000, rate_per_second=2.5))
    tasks.create_within_quota(a_task("first", tenant_id="acme"), None, 10, "acme-secret")
    assert tenants.quota("acme") == TenantQuota(max_tasks=10_000_000, rate_per_second=2.5)
    assert tenants.task_count("acme") == 1
    assert tenants.signing_secrets("acme") == ["acme-secret"]
    # Replaced: the rate removed (the default again), the count and secret kept
    tenants.set_quota("acme", TenantQuota(max_tasks=3))
    assert tenants.quota("acme") == TenantQuota(max_tasks=3)
    assert tenants.task_count("acme") == 1
    assert tenants.signing_secrets("acme") == ["acme-secret"]
    tenants.set_quota("acme", TenantQuota())
    assert tenants.quota("acme") == TenantQuota()
    # Each tenant's own
    assert tenants.quota("other") == TenantQuota()


def test_a_shard_lease_is_acquired_renewed_handed_over_and_released(
    adapters: AdapterSet,
) -> None:
    leases = adapters.leases
    assert leases.get(0) is None

    # Tick a takes the free lease; tick b cannot while it runs; a may take it again
    assert changes.acquire(leases, 0, "a", START, START + 30 * SECOND)
    assert leases.get(0) == ShardLease(owner="a", lease_until=START + 30 * SECOND)
    assert not changes.acquire(leases, 0, "b", START + 10 * SECOND, START + 40 * SECOND)
    assert changes.acquire(leases, 0, "a", START + 10 * SECOND, START + 40 * SECOND)

    # b asks for it; the holder cannot ask itself, and c cannot take b's place
    assert changes.request_handover(leases, 0, "b")
    assert not changes.request_handover(leases, 0, "a")
    assert not changes.request_handover(leases, 0, "c")
    assert leases.get(0) == ShardLease("a", START + 40 * SECOND, successor="b")

    # With a successor waiting, a still renews (b keeps waiting); only the holder
    # hands over
    assert changes.renew(leases, 0, "a", START + 50 * SECOND)
    assert leases.get(0) == ShardLease("a", START + 50 * SECOND, successor="b")
    assert not changes.hand_over(leases, 0, "b", START + 70 * SECOND)
    assert changes.hand_over(leases, 0, "a", START + 70 * SECOND)
    assert leases.get(0) == ShardLease("b", START + 70 * SECOND)

    # Now b renews and a cannot
    assert changes.renew(leases, 0, "b", START + 100 * SECOND)
    assert not changes.renew(leases, 0, "a", START + 100 * SECOND)
    assert not changes.hand_over(leases, 0, "b", START + 100 * SECOND)  # nobody waiting
    assert leases.get(0) == ShardLease("b", START + 100 * SECOND)

    # Only the holder releases
    assert not changes.release(leases, 0, "a")
    assert leases.get(0) is not None
    assert changes.release(leases, 0, "b")
    assert leases.get(0) is None
    assert not changes.request_handover(leases, 0, "b")  # nobody holds it


def test_an_expired_shard_lease_is_free_and_a_waiter_may_withdraw(adapters: AdapterSet) -> None:
    leases = adapters.leases
    assert changes.acquire(leases, 2, "a", START, START + 30 * SECOND)

    # Once it ended, anyone takes it
    assert changes.acquire(leases, 2, "b", START + 31 * SECOND, START + 61 * SECOND)
    assert leases.get(2) == ShardLease("b", START + 61 * SECOND)
    assert not changes.renew(leases, 2, "a", START + 90 * SECOND)

    # A waiting tick that gives up withdraws its request, and the holder renews again
    assert changes.request_handover(leases, 2, "c")
    assert not changes.release(leases, 2, "c")
    assert leases.get(2) == ShardLease("b", START + 61 * SECOND)
    assert changes.renew(leases, 2, "b", START + 91 * SECOND)
    # Other shards are untouched
    assert leases.get(1) is None


# Limits ----------------------------------------------------------------------------


def test_concurrency_slots_up_to_the_limit(adapters: AdapterSet) -> None:
    limits = adapters.limits
    until = START + 30 * SECOND

    # Two holders take both slots of a limit of two; a third waits
    first = changes.take_slot(limits, "acme/task", 2, "h1", START, until)
    second = changes.take_slot(limits, "acme/task", 2, "h2", START, until)
    assert first is not None
    assert second is not None
    assert first != second
    assert changes.take_slot(limits, "acme/task", 2, "h3", START, until) is None
    # A holder asking again gets the slot it holds
    assert changes.take_slot(limits, "acme/task", 2, "h1", START, until) == first
    # Another scope has its own slots
    assert changes.take_slot(limits, "acme/other-task", 1, "h3", START, until) is not None

    # Only the holder extends
    assert changes.extend_slot(limits, first, "h1", START + 60 * SECOND)
    assert not changes.extend_slot(limits, first, "h3", START + 60 * SECOND)

    # When the second slot's lease ran out, the waiter takes it
    later = START + 31 * SECOND
    assert changes.take_slot(limits, "acme/task", 2, "h3", later, later + 30 * SECOND) == second
    assert not changes.extend_slot(limits, second, "h2", later + 60 * SECOND)

    # Only its holder releases a slot, and once released another takes it
    assert not changes.release_slot(limits, second, "h2")
    assert changes.release_slot(limits, second, "h3")
    assert not changes.release_slot(limits, second, "h3")
    assert changes.take_slot(limits, "acme/task", 2, "h4", later, later + 30 * SECOND) == second


def test_the_token_bucket_makes_bursts_wait(adapters: AdapterSet) -> None:
    limits = adapters.limits
    rate = RateLimit(per_second=1, burst=2)

    # A full bucket gives a burst of two, then asks to wait a token's time
    assert limits.take_token("acme/host", rate, START) == 0
    assert limits.take_token("acme/host", rate, START) == 0
    assert limits.take_token("acme/host", rate, START) == pytest.approx(1.0)
    # Another host's bucket is full
    assert limits.take_token("acme/other-host", rate, START) == 0

    # A second on, one token came back
    assert limits.take_token("acme/host", rate, START + SECOND) == 0
    assert limits.take_token("acme/host", rate, START + SECOND) == pytest.approx(1.0)
    # An idle bucket starts again full
    later = START + 100 * SECOND
    assert limits.take_token("acme/host", rate, later) == 0
    assert limits.take_token("acme/host", rate, later) == 0
    assert limits.take_token("acme/host", rate, later) > 0


def test_host_state_is_replaced_only_from_the_version_read(adapters: AdapterSet) -> None:
    limits = adapters.limits
    policy = BreakerPolicy(failure_threshold=2, cool_down=10 * SECOND)
    fresh = limits.host("acme/host")
    assert fresh == HostState(host="acme/host")

    # Given one failure recorded
    failed = after_failure(fresh, START, policy)
    assert changes.replace_host(limits, failed, START)
    assert limits.host("acme/host") == failed
    # A writer that read the state before it is refused
    assert not changes.replace_host(limits, after_failure(fresh, START, policy), START)

    # When two workers race from the same read, one wins
    opened = after_failure(failed, START + SECOND, policy)
    closed = after_success(failed)
    assert closed is not None
    assert opened.breaker is BreakerState.OPEN
    assert changes.replace_host(limits, opened, START + SECOND)
    assert not changes.replace_host(limits, closed, START + SECOND)

    # Then the store holds the winner's state, instants included
    stored = limits.host("acme/host")
    assert stored == opened
    assert stored.breaker_until == START + 11 * SECOND
    paused = after_retry_after(stored, START + HOUR)
    assert paused is not None
    assert changes.replace_host(limits, paused, START + 2 * SECOND)
    assert limits.host("acme/host").paused_until == START + HOUR
    assert limits.host("other/host") == HostState(host="other/host")


def test_many_hosts_are_read_at_once_each_as_stored(adapters: AdapterSet) -> None:
    limits = adapters.limits
    policy = BreakerPolicy(failure_threshold=1, cool_down=10 * SECOND)
    # Given one host whose breaker opened, and one paused
    opened = after_failure(HostState(host="acme/opened"), START, policy)
    paused = after_retry_after(HostState(host="acme/paused"), START + HOUR)
    assert paused is not None
    assert changes.replace_host(limits, opened, START)
    assert changes.replace_host(limits, paused, START)

    # When they are read together with a host never seen, one of them twice
    read = limits.hosts(["acme/paused", "acme/never", "acme/opened", "acme/paused"])

    # Then each is answered in the order asked, as one read of it alone answers
    assert read == [paused, HostState(host="acme/never"), opened, paused]
    assert read == [limits.host(state.host) for state in read]
    assert limits.hosts([]) == []


# Idempotency keys of task creations -----------------------------------------------


def create_key(key: str, body: object = None) -> CreateKey:
    return CreateKey.of(key, body if body is not None else {"rate": "1 hour"})


def test_a_create_key_is_held_by_its_first_task_until_it_expires(adapters: AdapterSet) -> None:
    keys = adapters.create_keys
    key = create_key("key-1")
    # Given a key reserved for one task
    first = changes.reserve_key(keys, "alice", key, "task-1", START)
    assert first == KeyReservation("task-1", key.fingerprint, created=False)
    # When another request reserves it, with another body and another task id
    other = create_key("key-1", {"rate": "2 hours"})
    # Then it is told what holds the key: the first task, its body, not created yet
    assert changes.reserve_key(keys, "alice", other, "task-2", START + HOUR) == first
    # And once the first task is stored, the reservation says so
    assert changes.mark_created(keys, "alice", "key-1", "task-1")
    assert changes.reserve_key(keys, "alice", key, "task-3", START + HOUR) == KeyReservation(
        "task-1", key.fingerprint, created=True
    )
    # And a day after its reservation, the key is free again
    later = START + KEY_LIFETIME
    assert changes.reserve_key(keys, "alice", other, "task-4", later) == KeyReservation(
        "task-4", other.fingerprint, created=False
    )
    # And the first task's late confirmation does not mark the new reservation
    assert not changes.mark_created(keys, "alice", "key-1", "task-1")
    assert changes.reserve_key(keys, "alice", other, "task-5", later).created is False


def test_create_keys_are_each_tenant_s_own(adapters: AdapterSet) -> None:
    keys = adapters.create_keys
    # Two tenants with the same key, and two whose names and keys would run together
    pairs = [("alice", "k"), ("bob", "k"), ("a#b", "c"), ("a", "b#c")]
    for number, (tenant, key) in enumerate(pairs):
        held = changes.reserve_key(keys, tenant, create_key(key), f"task-{number}", START)
        # Then each reservation is its own: none found another's
        assert held.task_id == f"task-{number}", (tenant, key)


def test_create_keys_reserved_and_marked_together_answer_each_as_alone(
    adapters: AdapterSet,
) -> None:
    keys = adapters.create_keys
    taken = create_key("taken")
    changes.reserve_key(keys, "alice", taken, "task-0", START)
    fresh = [create_key(f"key-{n}") for n in range(3)]
    # When a batch's keys are reserved together, one of them already held
    asked = [*fresh[:2], taken, fresh[2]]
    answers = keys.apply_returning_each(
        "alice",
        [
            (key.key, coordination.reserve_create_key(key, f"task-{n + 1}", START))
            for n, key in enumerate(asked)
        ],
    )
    # Then each is answered as alone: the free ones held, the taken one named
    assert answers == [None, None, KeyReservation("task-0", taken.fingerprint, False), None]
    # And marked together, each mark as alone: the one held for another task refused
    marked = keys.apply_each(
        "alice",
        [
            ("key-0", coordination.mark_key_created("task-1")),
            ("taken", coordination.mark_key_created("task-3")),
            ("key-2", coordination.mark_key_created("task-4")),
        ],
    )
    assert marked == [True, False, True]
    assert changes.reserve_key(keys, "alice", fresh[0], "task-9", START).created is True
    assert changes.reserve_key(keys, "alice", fresh[1], "task-9", START).created is False


def test_create_keys_changed_twice_in_one_call_each_see_the_change_before(
    adapters: AdapterSet,
) -> None:
    keys = adapters.create_keys
    first, second = create_key("twice"), create_key("twice", {"rate": "2 hours"})
    # When one call reserves a key for one task and then again for another
    answers = keys.apply_returning_each(
        "alice",
        [
            ("twice", coordination.reserve_create_key(first, "task-1", START)),
            ("twice", coordination.reserve_create_key(second, "task-2", START)),
        ],
    )
    # Then the second is told the first holds it, as two calls would be told
    assert answers == [None, KeyReservation("task-1", first.fingerprint, False)]
    # And marks in one call: the holder's taken, the other's refused, the next one
    # sees it marked already
    marked = keys.apply_each(
        "alice",
        [
            ("twice", coordination.mark_key_created("task-2")),
            ("twice", coordination.mark_key_created("task-1")),
            ("twice", coordination.mark_key_created("task-1")),
        ],
    )
    assert marked == [False, True, True]
    assert changes.reserve_key(keys, "alice", first, "task-9", START) == KeyReservation(
        "task-1", first.fingerprint, created=True
    )
