"""A warm worker reads a tenant's signing secrets once every few seconds."""

from __future__ import annotations

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
