"""A warm worker reads a tenant's signing secrets once every few seconds."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest

from dynacron.adapters.delivery.secrets import SECRETS_KEPT, KeptSecrets
from dynacron.domain.clock import SettableClock


class Record:
    """A tenant record that counts its reads, rotated as the store would."""

    def __init__(self) -> None:
        self.secrets = {"acme": ["s1"], "empty": []}
        self.reads = 0

    def __call__(self, tenant_id: str) -> list[str]:
        self.reads += 1
        return list(self.secrets[tenant_id])


def test_a_tenant_is_read_once_while_its_secrets_are_kept_and_again_after() -> None:
    clock = SettableClock(datetime(2026, 12, 3, tzinfo=UTC))
    record = Record()
    kept = KeptSecrets(record, clock)
    assert [kept("acme") for _ in range(100)] == [("s1",)] * 100
    assert record.reads == 1
    record.secrets["acme"] = ["s2", "s1"]
    clock.advance(SECRETS_KEPT - timedelta(milliseconds=1))
    # Until the copy expires, the rotation has not reached it; "s1" still signs.
    assert kept("acme") == ("s1",)
    clock.advance(timedelta(milliseconds=1))
    assert kept("acme") == ("s2", "s1")
    assert record.reads == 2


def test_no_secrets_yet_are_asked_again_and_errors_reach_the_caller() -> None:
    clock = SettableClock(datetime(2026, 12, 3, tzinfo=UTC))
    record = Record()
    kept = KeptSecrets(record, clock)
    assert kept("empty") == ()
    assert kept("empty") == ()
    assert record.reads == 2
    with pytest.raises(KeyError):
        kept("unknown")


def test_calls_that_miss_together_wait_for_one_read() -> None:
    clock = SettableClock(datetime(2026, 12, 3, tzinfo=UTC))
    reading = threading.Event()
    release = threading.Event()
    record = Record()

    def slow_record(tenant_id: str) -> list[str]:
        reading.set()
        release.wait(5)
        return record(tenant_id)

    kept = KeptSecrets(slow_record, clock)
    # Given one call reading the tenant's record (a cold worker's first record)...
    results: list[Sequence[str]] = []
    first = threading.Thread(target=lambda: results.append(kept("acme")))
    first.start()
    assert reading.wait(5)
    # ...when nine more records of the batch ask for the same tenant meanwhile
    others = [threading.Thread(target=lambda: results.append(kept("acme"))) for _ in range(9)]
    for thread in others:
        thread.start()
    release.set()
    for thread in [first, *others]:
        thread.join(5)
    # Then they all sign with what the one read returned
    assert results == [("s1",)] * 10
    assert record.reads == 1
