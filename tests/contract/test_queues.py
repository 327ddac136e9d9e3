"""The queue contracts: the dispatch queue and the dead-letter queue's copies.

The ports have no receive (a worker is fed by its event source), so what is sent
shows in ``depth``; every message here is sent ready, or delayed far past the test.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from dynacron.ports import AdapterSet
from tests.contract.builders import START, a_dispatch

LONG_DELAY = 600


def test_dispatches_sent_wait_in_the_queue(adapters: AdapterSet) -> None:
    queue = adapters.queue
    assert queue.depth() == 0

    # When a batch is sent, all of it is accepted and waits
    batch = [a_dispatch(f"job-{n}") for n in range(12)]
    accepted = queue.send(batch)
    assert sorted(d.execution_id for d in accepted) == sorted(d.execution_id for d in batch)
    assert queue.depth() == 12
    assert queue.send([]) == []

    # One sent on to run now waits too
    queue.send_later(a_dispatch("retry", attempt=2), 0)
    assert queue.depth() == 13


def test_delayed_dispatches_are_not_waiting_yet(adapters: AdapterSet) -> None:
    queue = adapters.queue
    queue.send([a_dispatch("now")])

    # A dispatch sent on for later, or sent with its jitter delay, is accepted...
    queue.send_later(a_dispatch("later"), LONG_DELAY)
    jittered = dataclasses.replace(a_dispatch("jittered"), delay_seconds=LONG_DELAY)
    assert queue.send([jittered]) == [jittered]

    # ...but is not waiting for a worker until its delay ends
    assert queue.depth() == 1


def test_dead_letter_copies_are_removed_by_execution(adapters: AdapterSet) -> None:
    dead_letters = adapters.dead_letter_queue
    first = a_dispatch("job", tenant_id="acme")
    second = a_dispatch("job", at=START + timedelta(hours=1), tenant_id="acme")

    # Given two copies of one execution, one of another, and a forwarded message
    dead_letters.send(first, "no attempts left")
    dead_letters.send(first, "no attempts left (sent twice)")
    dead_letters.send(second, "not retryable")
    dead_letters.forward("{not a dispatch", "unreadable message")

    # When one execution's copies are removed, exactly those go
    assert dead_letters.remove(first.execution_id) == 2
    assert dead_letters.remove(first.execution_id) == 0
    # and the others are still there to be found
    assert dead_letters.remove(second.execution_id) == 1
    assert dead_letters.remove(second.execution_id) == 0
    assert dead_letters.remove("never_20261130T120000000Z") == 0
