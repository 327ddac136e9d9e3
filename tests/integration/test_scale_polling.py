"""The scale benchmark's event source mapping polls as SQS long polling answers, and a
run split over processes does what one process does (bench/lambda_double.py,
bench/scale.py)."""

from __future__ import annotations

import dataclasses
import random
from datetime import UTC, datetime
from typing import Any

from bench.aws_double import AwsModel
from bench.aws_limits import LONG_POLL_SECONDS, Latency
from bench.client_double import BotocoreCpu
from bench.lambda_double import FunctionSpec, LambdaService, SqsEventSource
from bench.scale import Deployment, Part, Scenario, run
from bench.simulation import Simulation

START = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
QUICK = Latency(median=0.01, p99=0.02)


class Mapping:
    """A worker behind an event source mapping of ``pollers`` pollers, on virtual time;
    the worker records each batch's size, and fails its first ``failing`` batches."""

    def __init__(
        self, pollers: int, failing: int = 0, account: int = 1000, handler_seconds: float = 0.0
    ) -> None:
        self.simulation = Simulation(START)
        self.model = AwsModel(now=self.simulation.epoch)
        self.url = self.model.settings().dispatch_queue_url
        self.batches: list[tuple[float, int]] = []
        self._failing = failing
        worker = FunctionSpec("worker", 256, 60.0, self._handle)
        rng = random.Random(1)
        self._handler_seconds = handler_seconds
        lambdas = LambdaService(
            self.simulation, [worker], lambda spec: None, rng, QUICK, account_concurrency=account
        )
        self.esm = SqsEventSource(lambdas, self.model, self.url, "worker", 10, pollers, QUICK, rng)

    def _handle(self, app: Any, event: dict[str, Any], context: Any) -> dict[str, Any]:
        self.batches.append((self.simulation.local_now(), len(event["Records"])))
        self.simulation.wait(self._handler_seconds)
        if len(self.batches) <= self._failing:
            return {
                "batchItemFailures": [{"itemIdentifier": r["messageId"]} for r in event["Records"]]
            }
        return {"batchItemFailures": []}

    def send_at(self, at: float, *sizes: int) -> None:
        """SendMessageBatch calls of ``sizes`` messages each, all at ``at``."""

        def send() -> None:
            for size in sizes:
                entries = [{"Id": str(n), "MessageBody": f"m{n}"} for n in range(size)]
                self.model.answer(
                    "sqs.SendMessageBatch", {"QueueUrl": self.url, "Entries": entries}
                )

        self.simulation.at(at, send)

    @property
    def receives(self) -> int:
        return self.model.calls["sqs.ReceiveMessage"]


def test_messages_sent_to_waiting_long_polls_are_taken_by_one_poll_per_ten() -> None:
    # Given five pollers waiting on an empty queue
    mapping = Mapping(pollers=5)
    mapping.esm.start(warm=True)
    mapping.simulation.run(1.0)
    assert mapping.receives == 0  # a waiting long poll has not returned yet

    # When 25 messages arrive at once, in three SendMessageBatch calls
    mapping.send_at(2.0, 10, 10, 5)
    mapping.simulation.run(3.0)

    # Then three polls returned them, ten at most each, and no poll returned empty
    assert sorted(size for _, size in mapping.batches) == [5, 10, 10]
    assert mapping.receives == 3
    assert mapping.esm.empty_receives == 0


def test_a_long_poll_on_an_empty_queue_returns_empty_after_its_wait_time() -> None:
    # Given five pollers on a queue that stays empty
    mapping = Mapping(pollers=5)
    mapping.esm.start(warm=True)

    # When a little under three wait times pass
    mapping.simulation.run(3 * LONG_POLL_SECONDS - 1)

    # Then each poller's poll returned empty once every 20 seconds: ten requests
    assert mapping.receives == 10
    assert mapping.esm.empty_receives == 10
    assert mapping.batches == []


def test_a_message_whose_visibility_timeout_ends_is_answered_to_a_waiting_poll() -> None:
    # Given a batch the worker fails: its message comes back after the queue's
    # visibility timeout, while every poller waits
    mapping = Mapping(pollers=2, failing=1)
    visibility = mapping.model.queues[mapping.url].definition.visibility_timeout_seconds
    mapping.esm.start(warm=True)
    mapping.send_at(1.0, 1)

    # When the timeout has passed
    mapping.simulation.run(1.0 + visibility + 1.0)

    # Then a waiting poll returned it as it showed (it was received at 1 s), not at
    # the end of the poll's wait
    (_, _), (second, size) = mapping.batches
    assert size == 1
    assert 1.0 + visibility <= second < 1.0 + visibility + 0.5


def test_a_waiting_poll_takes_no_batch_it_could_not_pass_to_the_function() -> None:
    # Given a worker with room for one invocation at a time, busy for 5 s with a batch
    mapping = Mapping(pollers=2, account=1, handler_seconds=5.0)
    mapping.esm.start(warm=True)
    mapping.send_at(1.0, 10)
    mapping.send_at(2.0, 10)

    # When the first invocation ends
    mapping.simulation.run(10.0)

    # Then the second batch, left in the queue meanwhile, went to the next invocation
    # (not held in flight by a poll until its visibility timeout)
    assert [size for _, size in mapping.batches] == [10, 10]
    assert mapping.batches[1][0] < 8.0


def test_the_parts_shares_add_up_to_the_whole() -> None:
    parts = [Part(index, 3) for index in range(3)]
    assert sum(part.share(1000) for part in parts) == 1000
    assert sorted(s for part in parts for s in part.shards(14)) == list(range(14))


def test_a_run_split_over_two_processes_fires_what_one_process_fires() -> None:
    # Given a small run
    scenario = Scenario(
        registered=200,
        fires_per_second=50,
        steady_seconds=2.0,
        burst=40,
        burst_after_seconds=1.0,
        tenants=2,
        worker_in_flight=4,
        drain_seconds=60.0,
    )
    deployment = Deployment.for_rate(200, 0.2)
    deployment.config = dataclasses.replace(deployment.config, shard_count=4)

    # When it runs in one process, and split over two
    whole = run(scenario, deployment, BotocoreCpu())
    split = run(scenario, deployment, BotocoreCpu(), processes=2)

    # Then the split one fired every occurrence the whole one did, each once
    assert split["processes"] == 2
    assert split["due"] == whole["due"] == 140
    assert split["statuses"] == whole["statuses"] == {"SUCCEEDED": 140}
    assert split["lost"] == whole["lost"] == 0
    assert split["duplicate_handler_calls"] == 0
    assert split["lateness_seconds"]["steady"]["count"] == 100
    assert [part["fired"] > 0 for part in split["parts"]] == [True, True]
