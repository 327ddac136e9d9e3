"""A worker that dies mid-call, as deployed (decision 0038): its message comes back
within a minute, not after the dispatch queue's six worker timeouts, and the next
worker takes the attempt over and runs it again.

The victim is a second execution environment of the template's worker (its own
clients and threads, the same role and environment). It is killed by making every
AWS call of its clients fail from then on: a dead process renews nothing. SQS runs
on the stack's clock, which the test moves.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from botocore.exceptions import EndpointConnectionError

from dynacron.definitions.environment import MESSAGE_HOLDS_VAR
from dynacron.definitions.resources import DISPATCH_QUEUE
from dynacron.domain.instants import parse_instant
from dynacron.local.runtime import sqs_event
from tests.deployed.harness import DeployedFunction, Deployment, queue_arn
from tests.deployed.steps import delete_tasks, executions, register
from tests.support import FakeLambdaContext, Sink, wait_until

_tenants = itertools.count(1)


@pytest.fixture
def principal(deployed: Deployment) -> Iterator[str]:
    """A tenant of its own for each scenario; its tasks are deleted afterwards."""
    caller = f"arn:aws:iam::000000000000:user/dead-worker-{next(_tenants)}"
    yield caller
    delete_tasks(deployed, caller)


class Killed(EndpointConnectionError):
    """What every AWS call of a killed environment meets."""


def kill(function: DeployedFunction) -> None:
    """From now on, no AWS call of ``function``'s clients reaches AWS."""

    def refuse(**_: Any) -> None:
        raise Killed(endpoint_url="killed")

    for client in (function.dynamodb, function.sqs):
        client.meta.events.register_first("before-send", refuse)


def test_a_worker_killed_mid_call_has_its_attempt_run_again_within_a_minute(
    deployed: Deployment, principal: str, sink: Sink
) -> None:
    worker = deployed.function("worker")
    assert worker.environment.get(MESSAGE_HOLDS_VAR, "on") == "on"
    victim = deployed.another_environment("worker")
    # Given a task whose first call is held at the handler until its worker has died
    sink.gate = threading.Event()
    at = (deployed.clock.now() + timedelta(seconds=30)).replace(microsecond=0)
    task = register(
        deployed,
        principal,
        at=at.isoformat(),
        handler_url=sink.url,
        retry={"max_attempts": 3, "base_delay_seconds": 1, "max_delay_seconds": 1},
    )
    deployed.clock.set(at)
    deployed.tick(deployed.shards_of([task["task_id"]]).pop())
    batch = deployed.receive_batch("worker", DISPATCH_QUEUE.env_var)
    assert len(batch) == 1
    event = sqs_event(batch, queue_arn(victim.environment[DISPATCH_QUEUE.env_var]))
    context = FakeLambdaContext("victim", remaining_millis=victim.timeout_seconds * 1000)
    ended: list[BaseException | dict[str, Any]] = []

    def invoke() -> None:
        try:
            ended.append(victim.invoke(event, context))
        except Exception as error:  # the kill, once the call is released
            ended.append(error)

    held = threading.Event()
    victim.sqs.meta.events.register(
        "after-call.sqs.ChangeMessageVisibilityBatch", lambda **_: held.set()
    )
    thread = threading.Thread(target=invoke)
    thread.start()
    try:
        assert wait_until(lambda: len(sink.snapshot()) == 1, timeout=30)
        began_real = time.monotonic()
        # When the worker dies mid-call (once its first hold of the message is made:
        # a worker that holds nothing leaves the queue's own timeout, 6 minutes)
        held.wait(5)
        kill(victim)
        killed_at = deployed.clock.now()
        # (The handler answers the dead worker's call; nothing of it is recorded.)
        sink.gate.set()
        thread.join(60)
        # Nothing comes back while the hold lasts...
        deployed.clock.advance(timedelta(seconds=30))
        assert deployed.receive_batch("worker", DISPATCH_QUEUE.env_var) == []
        # ...and once it ends the next invocation takes the attempt over. (Deviation:
        # the call's in-progress record expires by the wall clock, as Powertools
        # keeps it; the test waits it out, as the minute would have.)
        deployed.clock.advance(timedelta(seconds=16))
        # An in-progress record lasts the handler's timeout and a recording margin
        # of up to 5 s.
        timeout = deployed.settings.http_timeout_seconds
        in_progress = timeout + min(5.0, timeout) + 0.5
        time.sleep(max(0.0, in_progress - (time.monotonic() - began_real)))
        deployed.drain("worker", DISPATCH_QUEUE.env_var)
        deployed.clock.advance(timedelta(seconds=2))
        deployed.drain("worker", DISPATCH_QUEUE.env_var)
        # Then the attempt ran again within a minute of the death, and succeeded
        attempts = [d.body["attempt"] for d in sink.snapshot()]
        assert attempts == [1, 2], attempts
        (execution,) = executions(deployed, principal, task["task_id"])
        assert (execution["status"], execution["attempt"]) == ("SUCCEEDED", 2), execution
        ran_again_at = parse_instant(execution["started_at"])
        assert ran_again_at - killed_at <= timedelta(seconds=60), ran_again_at - killed_at
        print(f"\nkilled mid-call; attempt 2 began {ran_again_at - killed_at} later")
    finally:
        sink.gate.set()
        thread.join(60)
    # The dead environment recorded nothing: its writes were refused
    (death,) = ended
    assert isinstance(death, Exception), death
