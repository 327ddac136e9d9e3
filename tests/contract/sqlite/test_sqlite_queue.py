"""The SQLite queues behave as the SQS standard queues dynacron relies on.

Every test uses a real database file in ``tmp_path``; time moves with a
``SettableClock``, never by sleeping.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import dynacron
from dynacron.adapters.messages import (
    EXECUTION_ID_ATTRIBUTE,
    FORWARD_REASON_ATTRIBUTE,
    MAX_DELAY_SECONDS,
    dispatch_from_body,
)
from dynacron.adapters.sqlite.database import Database
from dynacron.adapters.sqlite.queue import OutgoingMessage, ReceivedMessage, SqliteQueues
from dynacron.adapters.sqlite.queue_ports import SqliteDeadLetterQueue, SqliteDispatchQueue
from dynacron.definitions.resources import (
    DEAD_LETTER_QUEUE,
    DISPATCH_QUEUE,
    QUEUES,
    UNDELIVERED_QUEUE,
)
from dynacron.domain.clock import SettableClock
from dynacron.domain.executions.execution import Dispatch
from dynacron.local.runtime import sqs_event

START = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
DISPATCH = DISPATCH_QUEUE.suffix
UNDELIVERED = UNDELIVERED_QUEUE.suffix
DEAD_LETTERS = DEAD_LETTER_QUEUE.suffix
VISIBILITY = timedelta(seconds=DISPATCH_QUEUE.visibility_timeout_seconds)
# Long enough never to be what ends a test that works; the waits return at once.
PATIENCE_SECONDS = 30.0


@pytest.fixture
def clock() -> SettableClock:
    return SettableClock(START)


@pytest.fixture
def database(tmp_path: Path) -> Iterator[Database]:
    database = Database(tmp_path / "dynacron.sqlite3")
    yield database
    database.close()


@pytest.fixture
def queues(database: Database, clock: SettableClock) -> SqliteQueues:
    return SqliteQueues(database, clock)


def dispatch(execution_id: str = "t1_20261130T120000Z", **changes: object) -> Dispatch:
    values: dict[str, object] = {
        "execution_id": execution_id,
        "task_id": execution_id.split("_")[0],
        "scheduled_at": START,
    }
    return Dispatch(**{**values, **changes})  # type: ignore[arg-type]


def receive_one(queues: SqliteQueues, queue: str = DISPATCH) -> ReceivedMessage:
    messages = queues.receive(queue, max_messages=1)
    assert len(messages) == 1, messages
    return messages[0]


def test_a_message_comes_back_with_its_body_attributes_and_sqs_system_attributes(
    queues: SqliteQueues,
) -> None:
    message_id = queues.send(DISPATCH, '{"hello": 1}', attributes={"colour": "blue"})

    message = receive_one(queues)

    assert message.message_id == message_id
    assert message.body == '{"hello": 1}'
    assert message.message_attributes == {"colour": "blue"}
    start_ms = str(int(START.timestamp() * 1000))
    assert message.attributes == {
        "SentTimestamp": start_ms,
        "ApproximateReceiveCount": "1",
        "ApproximateFirstReceiveTimestamp": start_ms,
    }


def test_a_delayed_message_is_invisible_until_its_delay_ends(
    queues: SqliteQueues, clock: SettableClock
) -> None:
    queues.send(DISPATCH, "later", delay_seconds=30)

    assert queues.receive(DISPATCH) == []
    # Delayed: neither waiting nor in flight, as SQS counts.
    assert queues.depth(DISPATCH) == (0, 0)
    clock.advance(timedelta(seconds=29))
    assert queues.receive(DISPATCH) == []

    clock.advance(timedelta(seconds=1))
    assert [m.body for m in queues.receive(DISPATCH)] == ["later"]


def test_a_received_message_is_invisible_for_the_visibility_timeout_then_received_again(
    queues: SqliteQueues, clock: SettableClock
) -> None:
    queues.send(DISPATCH, "work")
    first = receive_one(queues)

    assert queues.depth(DISPATCH) == (0, 1)
    clock.advance(VISIBILITY - timedelta(milliseconds=1))
    assert queues.receive(DISPATCH) == []

    clock.advance(timedelta(milliseconds=1))
    assert queues.depth(DISPATCH) == (1, 0)
    second = receive_one(queues)

    assert second.message_id == first.message_id
    assert second.receipt_handle != first.receipt_handle
    assert second.attributes["ApproximateReceiveCount"] == "2"
    # The first receive's instant, not this one's.
    assert (
        second.attributes["ApproximateFirstReceiveTimestamp"]
        == first.attributes["ApproximateFirstReceiveTimestamp"]
    )
    assert int(second.attributes["ApproximateFirstReceiveTimestamp"]) < int(
        clock.now().timestamp() * 1000
    )


def test_a_receive_may_ask_for_its_own_visibility_timeout(
    queues: SqliteQueues, clock: SettableClock
) -> None:
    queues.send(DISPATCH, "short")
    assert len(queues.receive(DISPATCH, visibility_timeout=5)) == 1

    clock.advance(timedelta(seconds=5))

    assert receive_one(queues).attributes["ApproximateReceiveCount"] == "2"


def test_a_stale_receipt_handle_cannot_delete_a_message_received_again(
    queues: SqliteQueues, clock: SettableClock
) -> None:
    queues.send(DISPATCH, "work")
    stale = receive_one(queues).receipt_handle
    clock.advance(VISIBILITY)
    current = receive_one(queues).receipt_handle

    assert queues.delete(DISPATCH, [stale]) == 0
    assert queues.depth(DISPATCH) == (0, 1)
    assert queues.delete(DISPATCH, [current]) == 1
    assert queues.depth(DISPATCH) == (0, 0)
    # Deleted once: the handle deletes nothing more, nor does one never given out.
    assert queues.delete(DISPATCH, [current, "not-a-handle", "7.nope"]) == 0


def test_messages_a_dead_receiver_held_come_back_at_once_and_keep_their_count(
    queues: SqliteQueues, database: Database
) -> None:
    # Given two messages received by a process that died, one by a process alive
    queues.send_batch(DISPATCH, [OutgoingMessage("held-1"), OutgoingMessage("held-2")])
    held = queues.receive(DISPATCH, max_messages=2)
    queues.send(DISPATCH, "elsewhere")
    elsewhere = receive_one(queues)
    live_pid = os.getpid() + 1
    with database.write() as connection:  # as if another process had received it
        connection.execute(
            "UPDATE queue_messages SET receiver_pid = ? WHERE message_id = ?",
            (live_pid, elsewhere.message_id),
        )

    # When the messages of receivers that are gone are released
    released = queues.release_abandoned(DISPATCH, lambda pid: pid == live_pid)

    # Then the dead one's are visible now, without the clock moving
    assert released == 2
    again = queues.receive(DISPATCH, max_messages=10)
    assert {m.message_id for m in again} == {m.message_id for m in held}
    # keeping their receive count (a message that kills receivers still redrives)
    assert {m.attributes["ApproximateReceiveCount"] for m in again} == {"2"}
    # and the dead receiver's handles delete nothing
    assert queues.delete(DISPATCH, [m.receipt_handle for m in held]) == 0
    assert queues.depth(DISPATCH) == (0, 3)
    # While their receivers live, nothing is released
    assert queues.release_abandoned(DISPATCH, lambda pid: True) == 0


def test_the_latest_handle_still_deletes_after_the_visibility_timeout_ended(
    queues: SqliteQueues, clock: SettableClock
) -> None:
    # As on SQS: a slow consumer's delete works until someone else receives it.
    queues.send(DISPATCH, "work")
    handle = receive_one(queues).receipt_handle
    clock.advance(VISIBILITY * 2)

    assert queues.delete(DISPATCH, [handle]) == 1
    assert queues.receive(DISPATCH) == []


def test_a_handle_deletes_only_in_its_own_queue(queues: SqliteQueues) -> None:
    queues.send(DISPATCH, "work")
    handle = receive_one(queues).receipt_handle

    assert queues.delete(UNDELIVERED, [handle]) == 0
    assert queues.delete(DISPATCH, [handle]) == 1


def test_after_max_receive_count_receives_a_message_moves_to_the_undelivered_queue(
    queues: SqliteQueues, clock: SettableClock
) -> None:
    message_id = queues.send(DISPATCH, "poison", attributes={"kind": "test"})
    assert DISPATCH_QUEUE.max_receive_count == 5
    for count in range(1, 6):
        message = receive_one(queues)
        assert message.attributes["ApproximateReceiveCount"] == str(count)
        clock.advance(VISIBILITY)

    # The sixth receive finds it over the limit: moved, not received.
    assert queues.receive(DISPATCH) == []
    assert queues.depth(DISPATCH) == (0, 0)
    assert queues.depth(UNDELIVERED) == (1, 0)

    moved = receive_one(queues, UNDELIVERED)
    assert moved.message_id == message_id
    assert moved.body == "poison"
    assert moved.message_attributes == {"kind": "test"}
    # Counted afresh in the undelivered queue; sent when it was first sent.
    assert moved.attributes["ApproximateReceiveCount"] == "1"
    assert moved.attributes["SentTimestamp"] == str(int(START.timestamp() * 1000))


def test_a_receive_skips_over_redriven_messages_to_fill_its_batch(
    queues: SqliteQueues, clock: SettableClock
) -> None:
    queues.send(DISPATCH, "poison")
    for _ in range(5):
        receive_one(queues)
        clock.advance(VISIBILITY)
    queues.send(DISPATCH, "fresh")

    assert [m.body for m in queues.receive(DISPATCH)] == ["fresh"]
    assert [m.body for m in queues.receive(UNDELIVERED)] == ["poison"]


def test_queues_without_a_redrive_policy_receive_without_limit(
    queues: SqliteQueues, clock: SettableClock
) -> None:
    queues.send(DEAD_LETTERS, "copy")
    for _ in range(7):
        receive_one(queues, DEAD_LETTERS)
        clock.advance(timedelta(seconds=DEAD_LETTER_QUEUE.visibility_timeout_seconds))

    assert receive_one(queues, DEAD_LETTERS).attributes["ApproximateReceiveCount"] == "8"


def test_batches_are_sent_received_oldest_first_and_deleted(
    queues: SqliteQueues, clock: SettableClock
) -> None:
    ids = queues.send_batch(DISPATCH, [OutgoingMessage(f"m{i}") for i in range(25)])
    clock.advance(timedelta(seconds=1))
    late = queues.send(DISPATCH, "late")

    first = queues.receive(DISPATCH, max_messages=10)
    second = queues.receive(DISPATCH, max_messages=10)

    assert len(set(ids)) == 25
    assert [m.message_id for m in first] == ids[:10]
    assert [m.body for m in second] == [f"m{i}" for i in range(10, 20)]
    assert queues.depth(DISPATCH) == (6, 20)
    assert queues.delete(DISPATCH, [m.receipt_handle for m in first + second]) == 20
    rest = queues.receive(DISPATCH, max_messages=10)
    assert [m.message_id for m in rest] == [*ids[20:], late]
    assert queues.depth(DISPATCH) == (0, 6)


def test_entries_of_a_batch_keep_their_own_delay_and_attributes(
    queues: SqliteQueues, clock: SettableClock
) -> None:
    queues.send_batch(
        DISPATCH,
        [
            OutgoingMessage("now", attributes={"n": "1"}),
            OutgoingMessage("in ten", delay_seconds=10, attributes={"n": "2"}),
        ],
    )

    assert [(m.body, m.message_attributes) for m in queues.receive(DISPATCH)] == [
        ("now", {"n": "1"})
    ]
    clock.advance(timedelta(seconds=10))
    assert [(m.body, m.message_attributes) for m in queues.receive(DISPATCH)] == [
        ("in ten", {"n": "2"})
    ]


def test_an_empty_batch_sends_nothing_and_a_negative_delay_is_refused(
    queues: SqliteQueues,
) -> None:
    assert queues.send_batch(DISPATCH, []) == []
    with pytest.raises(ValueError, match="delay_seconds"):
        queues.send_batch(DISPATCH, [OutgoingMessage("ok"), OutgoingMessage("x", -1)])
    # All or nothing: the valid entry was not sent either.
    assert queues.depth(DISPATCH) == (0, 0)


def test_a_visibility_timeout_of_zero_never_returns_a_message_twice_in_one_receive(
    queues: SqliteQueues,
) -> None:
    queues.send_batch(DISPATCH, [OutgoingMessage(f"m{i}") for i in range(3)])

    first = queues.receive(DISPATCH, max_messages=10, visibility_timeout=0)
    again = queues.receive(DISPATCH, max_messages=10, visibility_timeout=0)

    assert [m.body for m in first] == ["m0", "m1", "m2"]
    assert [m.body for m in again] == ["m0", "m1", "m2"]
    assert {m.attributes["ApproximateReceiveCount"] for m in again} == {"2"}


def test_change_visibility_makes_a_message_visible_again_or_later(
    queues: SqliteQueues, clock: SettableClock
) -> None:
    queues.send(DISPATCH, "work")
    handle = receive_one(queues).receipt_handle

    assert queues.change_visibility(DISPATCH, handle, 0)
    again = receive_one(queues)
    assert queues.change_visibility(DISPATCH, again.receipt_handle, 60)
    clock.advance(timedelta(seconds=59))
    assert queues.receive(DISPATCH) == []
    clock.advance(timedelta(seconds=1))
    assert receive_one(queues).attributes["ApproximateReceiveCount"] == "3"
    # The first handle is stale now.
    assert not queues.change_visibility(DISPATCH, handle, 0)


def test_the_dispatch_queue_holds_received_messages_in_one_go_skipping_stale_handles(
    queues: SqliteQueues, clock: SettableClock
) -> None:
    # Given three received messages, one of them received again since (stale handle)
    for body in ("a", "b", "c"):
        queues.send(DISPATCH, body)
    received = queues.receive(DISPATCH, max_messages=10)
    assert len(received) == 3
    stale = received[2].receipt_handle
    assert queues.change_visibility(DISPATCH, stale, 0)
    receive_one(queues)
    # When the port holds all three for 45 s
    held = SqliteDispatchQueue(queues).hold([m.receipt_handle for m in received], 44.3)
    # Then the two it could hold come back after 44.3 s, and the third after its own
    # receive's visibility timeout
    assert held == 2
    clock.advance(timedelta(seconds=44))
    assert queues.receive(DISPATCH, max_messages=10) == []
    clock.advance(timedelta(seconds=1))
    assert sorted(m.body for m in queues.receive(DISPATCH, max_messages=10)) == ["a", "b"]


def test_messages_older_than_the_retention_are_gone(
    queues: SqliteQueues, clock: SettableClock
) -> None:
    retention = timedelta(seconds=DISPATCH_QUEUE.retention_seconds)
    queues.send(DISPATCH, "old, in flight")
    in_flight = receive_one(queues)
    queues.send(DISPATCH, "old, waiting")
    clock.advance(timedelta(seconds=1))
    queues.send(DISPATCH, "younger")
    assert queues.depth(DISPATCH) == (2, 1)

    clock.advance(retention - timedelta(seconds=1))

    assert queues.depth(DISPATCH) == (1, 0)
    assert [m.body for m in queues.receive(DISPATCH)] == ["younger"]
    # The receive dropped the expired messages: the old handle finds nothing.
    assert queues.delete(DISPATCH, [in_flight.receipt_handle]) == 0
    clock.advance(timedelta(seconds=1))
    assert queues.receive(DISPATCH, visibility_timeout=0) == []
    assert queues.depth(DISPATCH) == (0, 0)


def test_a_redriven_message_keeps_its_original_send_for_retention(
    queues: SqliteQueues, clock: SettableClock
) -> None:
    queues.send(DISPATCH, "poison")
    for _ in range(5):
        receive_one(queues)
        clock.advance(VISIBILITY)
    assert queues.receive(DISPATCH) == []
    assert queues.depth(UNDELIVERED) == (1, 0)

    clock.set(START + timedelta(seconds=UNDELIVERED_QUEUE.retention_seconds))

    assert queues.depth(UNDELIVERED) == (0, 0)
    assert queues.receive(UNDELIVERED) == []


def test_unknown_queues_and_incomplete_definitions_are_refused(
    database: Database, clock: SettableClock, queues: SqliteQueues
) -> None:
    with pytest.raises(KeyError, match="nowhere"):
        queues.send("nowhere", "body")
    with pytest.raises(ValueError, match="undelivered"):
        SqliteQueues(database, clock, definitions=[DISPATCH_QUEUE])


def test_the_schema_is_shared_by_queues_built_apart(
    database: Database, clock: SettableClock, tmp_path: Path
) -> None:
    SqliteQueues(database, clock).send(DISPATCH, "kept")
    other = Database(tmp_path / "dynacron.sqlite3")
    try:
        assert [m.body for m in SqliteQueues(other, clock).receive(DISPATCH)] == ["kept"]
    finally:
        other.close()


def test_a_received_message_feeds_the_sqs_event_lambda_would_build(
    queues: SqliteQueues,
) -> None:
    queues.send(DISPATCH, "body", attributes={"a": "b"})
    message = receive_one(queues)

    [record] = sqs_event([message.as_sqs_message()], "arn:aws:sqs:local:0:dispatch")["Records"]

    assert record["messageId"] == message.message_id
    assert record["receiptHandle"] == message.receipt_handle
    assert record["body"] == "body"
    assert record["attributes"]["ApproximateReceiveCount"] == "1"


# The adapters: the same ports, and meaning, as the SQS ones (adapters/aws/queue.py).


def test_dispatch_queue_sends_every_dispatch_as_its_body(queues: SqliteQueues) -> None:
    dispatch_queue = SqliteDispatchQueue(queues)
    sent = [dispatch(f"t{i}_20261130T120000Z", attempt=i) for i in range(1, 13)]

    assert dispatch_queue.send(sent) == sent
    assert dispatch_queue.depth() == 12
    received = queues.receive(DISPATCH, max_messages=20)
    assert [dispatch_from_body(m.body) for m in received] == sent
    assert dispatch_queue.depth() == 12  # in flight still counts


def test_dispatch_queue_honours_a_dispatch_delay_capped_as_sqs_caps_it(
    queues: SqliteQueues, clock: SettableClock
) -> None:
    dispatch_queue = SqliteDispatchQueue(queues)
    jittered = dispatch("a_20261130T120000Z", delay_seconds=7)
    too_long = dispatch("b_20261130T120000Z", delay_seconds=MAX_DELAY_SECONDS + 600)

    assert dispatch_queue.send([jittered, too_long]) == [jittered, too_long]

    assert dispatch_queue.depth() == 0  # both still delayed
    clock.advance(timedelta(seconds=7))
    first = receive_one(queues)
    assert dispatch_from_body(first.body).execution_id == "a_20261130T120000Z"
    queues.delete(DISPATCH, [first.receipt_handle])
    clock.advance(timedelta(seconds=MAX_DELAY_SECONDS - 7))
    assert [dispatch_from_body(m.body).execution_id for m in queues.receive(DISPATCH)] == [
        "b_20261130T120000Z"
    ]


def test_dispatch_queue_send_later_holds_the_message_capped_at_fifteen_minutes(
    queues: SqliteQueues, clock: SettableClock
) -> None:
    dispatch_queue = SqliteDispatchQueue(queues)
    retry = dispatch(attempt=2, not_before=START + timedelta(hours=1))

    dispatch_queue.send_later(retry, delay_seconds=3600)

    clock.advance(timedelta(seconds=MAX_DELAY_SECONDS - 1))
    assert queues.receive(DISPATCH) == []
    clock.advance(timedelta(seconds=1))
    assert dispatch_from_body(receive_one(queues).body) == retry


def test_dead_letter_queue_send_remove_and_forward(queues: SqliteQueues) -> None:
    dead_letters = SqliteDeadLetterQueue(queues)
    doomed = dispatch("a_20261130T120000Z", attempt=3)
    dead_letters.send(doomed, "gave up after 3 attempts")
    dead_letters.send(doomed, "again")
    dead_letters.send(dispatch("b_20261130T120000Z"), "other")
    dead_letters.forward("not json", "unreadable body")
    # A copy already received by an operator is found too.
    in_flight = receive_one(queues, DEAD_LETTERS)
    assert json.loads(in_flight.body)["execution_id"] == "a_20261130T120000Z"

    assert dead_letters.remove("a_20261130T120000Z") == 2
    assert dead_letters.remove("a_20261130T120000Z") == 0

    remaining = queues.receive(DEAD_LETTERS)
    assert [m.message_attributes for m in remaining] == [
        {EXECUTION_ID_ATTRIBUTE: "b_20261130T120000Z"},
        {FORWARD_REASON_ATTRIBUTE: "unreadable body"},
    ]
    copy = json.loads(remaining[0].body)
    assert copy["error"] == "other"
    assert dispatch_from_body(remaining[0].body) == dispatch("b_20261130T120000Z")
    assert remaining[1].body == "not json"


# Several processes: two Database objects on one file stand for two processes.


def test_concurrent_receivers_on_two_databases_get_each_message_exactly_once(
    tmp_path: Path, clock: SettableClock
) -> None:
    path = tmp_path / "shared.sqlite3"
    databases = [Database(path), Database(path)]
    try:
        queue_sets = [SqliteQueues(database, clock) for database in databases]
        sent = set(
            queue_sets[0].send_batch(DISPATCH, [OutgoingMessage(f"m{i}") for i in range(1000)])
        )
        received: list[list[ReceivedMessage]] = [[] for _ in range(8)]
        failures: list[BaseException] = []

        # Rounds in step, so every receiver competes in every round however the
        # threads are scheduled: 13 rounds of 8 receives of 10 cover 1,000 messages.
        rounds = -(-1000 // (8 * 10))
        in_step = threading.Barrier(8, timeout=PATIENCE_SECONDS)

        def drain(worker: int) -> None:
            queues = queue_sets[worker % 2]
            try:
                for _ in range(rounds):
                    in_step.wait()
                    received[worker] += queues.receive(DISPATCH, max_messages=10)
            except BaseException as error:  # reported below, not lost in the thread
                failures.append(error)
                in_step.abort()

        # Given eight receivers, four per database, receiving at the same moments
        threads = [threading.Thread(target=drain, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(PATIENCE_SECONDS)

        # Then every message was received once: none twice while invisible
        assert failures == []
        counts = Counter(m.message_id for batch in received for m in batch)
        assert set(counts) == sent
        assert set(counts.values()) == {1}
        assert all(received)  # every receiver got its share
        assert queue_sets[0].receive(DISPATCH) == []

        # And deleting concurrently from both databases deletes each exactly once
        deleted: list[int] = []

        def delete(worker: int) -> None:
            handles = [m.receipt_handle for m in received[worker]]
            deleted.append(queue_sets[worker % 2].delete(DISPATCH, handles))

        threads = [threading.Thread(target=delete, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(PATIENCE_SECONDS)
        assert sum(deleted) == 1000
        assert queue_sets[1].depth(DISPATCH) == (0, 0)
    finally:
        for database in databases:
            database.close()


def test_a_long_poll_returns_when_another_thread_sends(
    queues: SqliteQueues, tmp_path: Path, clock: SettableClock
) -> None:
    got: list[ReceivedMessage] = []
    waiter = threading.Thread(
        target=lambda: got.extend(queues.receive(DISPATCH, wait_seconds=PATIENCE_SECONDS))
    )
    waiter.start()

    queues.send(DISPATCH, "wake up")
    waiter.join(PATIENCE_SECONDS)

    assert not waiter.is_alive()
    assert [m.body for m in got] == ["wake up"]


def test_a_long_poll_wakes_for_a_send_through_another_database(
    queues: SqliteQueues, tmp_path: Path, clock: SettableClock
) -> None:
    other = Database(tmp_path / "dynacron.sqlite3")
    got: list[ReceivedMessage] = []
    waiter = threading.Thread(
        target=lambda: got.extend(queues.receive(DISPATCH, wait_seconds=PATIENCE_SECONDS))
    )
    waiter.start()
    try:
        SqliteQueues(other, clock).send(DISPATCH, "from elsewhere")
        waiter.join(PATIENCE_SECONDS)
    finally:
        other.close()

    assert [m.body for m in got] == ["from elsewhere"]


def test_a_long_poll_wakes_when_a_delayed_message_becomes_visible(
    queues: SqliteQueues, clock: SettableClock
) -> None:
    queues.send(DISPATCH, "delayed", delay_seconds=60)
    got: list[ReceivedMessage] = []
    waiter = threading.Thread(
        target=lambda: got.extend(queues.receive(DISPATCH, wait_seconds=PATIENCE_SECONDS))
    )
    waiter.start()

    clock.advance(timedelta(seconds=60))
    waiter.join(PATIENCE_SECONDS)

    assert [m.body for m in got] == ["delayed"]


def test_a_long_poll_with_nothing_to_receive_ends_empty(queues: SqliteQueues) -> None:
    assert queues.receive(DISPATCH, wait_seconds=0.1) == []


CHILD_SENDER = """
import sys
from datetime import datetime
from dynacron.adapters.sqlite.database import Database
from dynacron.adapters.sqlite.queue import SqliteQueues
from dynacron.domain.clock import SettableClock

queues = SqliteQueues(Database(sys.argv[1]), SettableClock(datetime.fromisoformat(sys.argv[2])))
print("ready", flush=True)
sys.stdin.readline()
print(queues.send("dispatch", "from another process"), flush=True)
"""


def test_a_long_poll_receives_what_another_process_sends(
    queues: SqliteQueues, database: Database
) -> None:
    layer = Path(dynacron.__file__).resolve().parents[1]
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD_SENDER, str(database.path), START.isoformat()],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={"PYTHONPATH": str(layer)},
    )
    try:
        assert child.stdout is not None
        assert child.stdin is not None
        assert child.stdout.readline().strip() == "ready"
        # Given the child is ready, when it is told to send while we are waiting
        child.stdin.write("go\n")
        child.stdin.flush()
        got = queues.receive(DISPATCH, wait_seconds=PATIENCE_SECONDS)
        message_id = child.stdout.readline().strip()
        assert child.wait(PATIENCE_SECONDS) == 0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()

    # Then the message arrives in this process
    assert [(m.message_id, m.body) for m in got] == [(message_id, "from another process")]


def test_every_queue_definition_is_usable(queues: SqliteQueues) -> None:
    for definition in QUEUES:
        queues.send(definition.suffix, definition.logical_id)
        assert [m.body for m in queues.receive(definition.suffix)] == [definition.logical_id]
