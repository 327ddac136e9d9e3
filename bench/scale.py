"""The real tick, claim and worker at 10,000 fires a second, on virtual time, against
AWS's documented limits.

What runs is dynacron's own code, unchanged: each simulated Lambda invocation calls
``Dynacron.tick`` (the looping tick, its hand-out of pages), ``Dynacron.claim`` or
``Dynacron.worker`` (``entry/events.py``) of a ``Dynacron`` built per execution
environment (``entry/composition.py``), with its clock, its sleep and its AWS
clients given by the simulation:

- time is virtual (``bench/simulation.py``): every invocation is a process of a
  discrete-event simulation whose clock advances by each AWS call's round trip,
  drawn from a lognormal distribution, and by its own CPU, measured on this
  machine and slowed down by its memory's share of a vCPU (1 vCPU at 1,769 MB);
  the tick's 16 threads are 16 processes sharing its invocation's CPU;
- AWS is ``bench/aws_double.py``'s model behind client doubles
  (``bench/client_double.py``), with DynamoDB's per-partition and per-table
  throughput, SQS's in-flight quota, visibility and redrive, and Lambda's
  concurrency, scaling rate, asynchronous retries and SQS event source mapping
  (``bench/lambda_double.py``); the limits and their documentation pages are in
  ``bench/aws_limits.py``. A throttled call is retried by botocore's own retry
  handler (its backoff slept in virtual time), then by the code;
- the handler is a stand-in ``Delivery`` that reads the tenant's signing secrets
  as the HTTP delivery does, then answers 200 after a drawn latency;
- what runs on threads runs as processes of the simulation instead: the tick's
  pool (``virtual_threads``), a batch's records (``virtual_batches``) and the
  worker's message holds (``virtual_holds``: its thread and event on virtual time,
  its ChangeMessageVisibilityBatch calls answered by the double);
- Python's cyclic collector, walking the simulation's whole heap, is not charged to
  the simulated invocation it happens to interrupt.

Each fire's lateness is also split into stages (``Stages``): the due query that found
it, its claim's re-read, its message sent, received, and the handler's call.

The deployment is ``dynacron plan --fires-per-second 10000``'s, with the
template's defaults for the rest (``infra/config.py``): shards, memories, the
claim function's reserved concurrency, the worker's batch and its event source
mapping's maximum concurrency. The scenario: ``--registered`` recurring tasks
(1 million), of which ``fires x steady`` fall due evenly over the steady phase and
come back ten minutes later, in the same due-index bucket, the rest later in the
hour; then ``--burst`` one-time tasks due within one second. Every due occurrence
must end SUCCEEDED (checked on the executions table).

Run: .venv/bin/python -m bench.scale [--registered N] [--steady S] [--worker-in-flight N]
BENCH_QUICK=1: a few simulated seconds at the full rate.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import logging
import math
import multiprocessing
import os
import random
import resource
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from unittest import mock

from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    process_partial_response,
)
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from bench import throughput
from bench.aws_double import AwsDouble, AwsModel
from bench.aws_limits import (
    ACCOUNT_CONCURRENCY,
    IN_FLIGHT_PER_QUEUE,
    ON_DEMAND_TABLE_UNITS,
    PARTITION_READ_UNITS,
    PARTITION_WRITE_UNITS,
    SCALING_ENVIRONMENTS,
    Latency,
    Throughput,
)
from bench.client_double import BATCH_GET_KEYS, BotocoreCpu, CallStats, ClientDouble
from bench.common import QUICK, distribution, percentile, write_result
from bench.lambda_double import FunctionSpec, LambdaService, SqsEventSource
from bench.simulation import (
    Invocation,
    Simulation,
    VirtualClock,
    VirtualPool,
    VirtualThreading,
)
from dynacron.adapters.aws import executions as aws_executions
from dynacron.adapters.aws.cursors import DynamoCursorStore
from dynacron.adapters.aws.due_page_hand_out import LambdaDuePageHandOut
from dynacron.adapters.aws.task_items import task_to_item
from dynacron.definitions.resources import TENANT_KEY_PREFIX, WORKER_TIMEOUT_SECONDS
from dynacron.definitions.tick_timing import LoopTiming
from dynacron.domain.clock import SettableClock
from dynacron.domain.coordination import transitions
from dynacron.domain.executions.execution import DeliveryResult, Dispatch, HandlerAnswer
from dynacron.domain.instants import format_instant, parse_instant
from dynacron.domain.schedules.expressions import OneTimeSchedule, RateSchedule
from dynacron.domain.tasks.task import Task, TaskStatus, execution_id_for, task_id_of
from dynacron.entry import events
from dynacron.entry.composition import Dynacron
from dynacron.entry.settings import Settings
from dynacron.planning.capacity import plan
from dynacron.planning.capacity_model import PRICES
from dynacron.planning.partitions import Workload
from dynacron.planning.quotas import LAMBDA_CONCURRENCY
from dynacron.services import message_holds, page_claimer, tick_loop
from infra.config import SchedulerConfig

START = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
# Round trips (not AWS figures: DynamoDB answers in single-digit milliseconds).
DYNAMODB_LATENCY = Latency(median=0.005, p99=0.020)
SQS_LATENCY = Latency(median=0.010, p99=0.040)
LAMBDA_API_LATENCY = Latency(median=0.015, p99=0.050)
# From an asynchronous Invoke's 202 to the invocation starting.
ASYNC_START = Latency(median=0.030, p99=0.150)
HANDLER_LATENCY = Latency(median=0.2, p99=0.8)
# The tick function's timeout and schedule, as the CDK construct takes them (decision 0036).
TICK_TIMEOUT_SECONDS = LoopTiming().invocation_seconds
CLAIM_TIMEOUT_SECONDS = 30.0
TICK_SCHEDULE_SECONDS = LoopTiming().schedule_period_seconds
RECURRING_EVERY_SECONDS = 600
LATER_FROM_SECONDS = 700.0
LATER_SPAN_SECONDS = 2800.0


@dataclass(frozen=True)
class Scenario:
    registered: int = 1_000_000
    fires_per_second: int = 10_000
    steady_seconds: float = 60.0
    burst: int = 100_000
    burst_after_seconds: float = 15.0
    tenants: int = 1000
    handler: Latency = HANDLER_LATENCY
    # Records a worker invocation runs at once: the worker's ``worker_concurrency``.
    worker_in_flight: int = 32
    # Virtual seconds after the last due instant by which everything must be done.
    drain_seconds: float = 240.0
    seed: int = 7
    # A partition's write units a second (DynamoDB's 1,000; lowered to provoke throttling).
    partition_write_units: float = PARTITION_WRITE_UNITS
    # The looping tick's interval (``LoopTiming``'s unless compared with another).
    tick_interval_seconds: float = LoopTiming().tick_interval_seconds

    @property
    def steady_fires(self) -> int:
        return int(self.fires_per_second * self.steady_seconds)

    @property
    def burst_at(self) -> float:
        return self.steady_seconds + self.burst_after_seconds


@dataclass
class Deployment:
    """The template's settings for the rate: ``dynacron plan`` and ``infra/config.py``."""

    config: SchedulerConfig
    tick_concurrency: int
    # The account's Lambda concurrency: the default quota, or what the plan says to
    # ask for when the row needs more (every function shares it: a worker over it is
    # throttled, and its batch waits out the queue's visibility timeout).
    account_concurrency: int = ACCOUNT_CONCURRENCY

    @classmethod
    def for_rate(cls, fires_per_second: float, handler_seconds: float) -> Deployment:
        sized = plan(fires_per_second, workload=Workload(handler_seconds=handler_seconds))
        account = max(
            [ACCOUNT_CONCURRENCY]
            + [
                need.request
                for need in sized.quotas
                if need.quota is LAMBDA_CONCURRENCY and need.exceeded
            ]
        )
        values: dict[str, Any] = {}
        for key, value in sized.context().items():
            kind = type(getattr(SchedulerConfig(), key))
            values[key] = kind(value) if kind is not str else value
        # The plan names provisioned billing; the template's default (on demand) is
        # what the double models, so that is kept, with the table quota of 40,000.
        values.pop("billing", None)
        values.pop("provisioned_max_capacity", None)
        return cls(SchedulerConfig(**values), sized.tick_concurrency, account)


@dataclass(frozen=True)
class Part:
    """One of ``of`` processes a run is split over (one per core): the shards ``s``
    with ``s % of == index``, their tasks, and an even share of every limit AWS pools
    over more than one shard: the account's Lambda concurrency and each function's
    scaling rate, the claim function's reserved concurrency, the worker mapping's
    concurrency and scaling, the table's (and each index's) on-demand quota and the
    dispatch queue's in-flight quota. Per-partition limits are per shard already
    (a due-index partition is a bucket of one shard; a task's, one task), so the
    parts are independent; the tenants' records are read by both. An even split is
    stricter than AWS: one part cannot borrow what the other leaves unused."""

    index: int = 0
    of: int = 1

    def shards(self, count: int) -> list[int]:
        return [shard for shard in range(count) if shard % self.of == self.index]

    def share(self, total: int) -> int:
        """This part's whole share of ``total``: the parts' shares add up to it."""
        return total // self.of + (1 if self.index < total % self.of else 0)


@dataclass
class Handled:
    """What the stand-in handler saw: each execution's calls, and when the first began."""

    calls: Counter[str] = field(default_factory=Counter)
    first_call: dict[str, float] = field(default_factory=dict)


class StandInDelivery:
    """The HTTP delivery's reads (the tenant's signing secrets, from ``secrets_of``,
    set once the app is built), then a drawn wait and a 200: no request leaves the
    process."""

    def __init__(
        self, simulation: Simulation, latency: Latency, rng: random.Random, handled: Handled
    ) -> None:
        self._simulation = simulation
        self.secrets_of: Callable[[str], list[str]] = lambda tenant: []
        self._latency = latency
        self._rng = rng
        self._handled = handled

    def deliver(self, task: Task, dispatch: Dispatch, callback_token: str) -> DeliveryResult:
        if not self.secrets_of(task.tenant_id):
            raise AssertionError(f"tenant {task.tenant_id} has no signing secret")
        called_at = self._simulation.local_now()
        self._handled.calls[dispatch.execution_id] += 1
        self._handled.first_call.setdefault(dispatch.execution_id, called_at)
        self._simulation.wait(self._latency.draw(self._rng))
        return DeliveryResult(answer=HandlerAnswer.SUCCEEDED, status_code=200)


class VirtualHeartbeats:
    """Stands in for the worker's heartbeat thread (a real thread cannot wait in
    virtual time): counts the attempts that outlived a heartbeat interval, when a
    renewal would have been due; the run expects none."""

    def __init__(self, simulation: Simulation, interval_seconds: float) -> None:
        self._simulation = simulation
        self._interval = interval_seconds
        self.due = 0

    @contextmanager
    def keeping(self, execution_id: str, lease_token: str) -> Iterator[None]:
        began = self._simulation.local_now()
        try:
            yield
        finally:
            if self._simulation.local_now() - began >= self._interval:
                self.due += 1


@contextmanager
def virtual_batches(simulation: Simulation, failures: Counter[str]) -> Iterator[None]:
    """The worker's batch (``record_batches.process_in_waves``: a pool of threads, which
    cannot wait in virtual time) runs its records as processes of the simulation
    instead, in waves of ``concurrency`` (each wave begun together, its handler calls
    at once, its successes ended together; a wave starts once the one before has
    ended, where the threads start the next records as soon as any end); the partial
    batch response is still Powertools'. The records reported failed are counted in
    ``failures`` by their exception's type."""

    def in_waves(
        event: dict[str, Any],
        *,
        begin_wave: Callable[[list[SQSRecord]], list[Any]],
        finish: Callable[[list[Any]], list[Exception | None]],
        settled: Callable[[SQSRecord], None],
        context: Any,
        concurrency: int,
    ) -> dict[str, Any]:
        records = [SQSRecord(record) for record in event.get("Records") or []]
        errors: dict[str, Exception] = {}
        step = max(1, concurrency)
        for start in range(0, len(records), step):
            wave = records[start : start + step]
            try:
                starts = begin_wave(wave)
            except Exception as error:
                starts = [error] * len(wave)
            calls = [(r, s) for r, s in zip(wave, starts, strict=True) if callable(s)]
            errors.update(
                (r.message_id, s)
                for r, s in zip(wave, starts, strict=True)
                if isinstance(s, Exception)
            )
            ran = VirtualPool(simulation, max(1, len(calls))).map(_ran, calls) if calls else []
            left = []
            for (record, _), (rest, error) in zip(calls, ran, strict=True):
                if error is not None:
                    errors[record.message_id] = error
                elif rest is not None:
                    left.append((record, rest))
            if left:
                try:
                    finished = finish([rest for _, rest in left])
                except Exception as error:
                    finished = [error] * len(left)
                for (record, _), error in zip(left, finished, strict=True):
                    if error is not None:
                        errors[record.message_id] = error
            for record in wave:
                settled(record)
        failures.update(type(error).__name__ for error in errors.values())

        def ended(record: SQSRecord) -> None:
            if record.message_id in errors:
                raise errors[record.message_id]

        processor = BatchProcessor(event_type=EventType.SQS)
        return dict(process_partial_response(event, ended, processor, context))

    with mock.patch.object(events, "process_in_waves", in_waves):
        yield


def _ran(call: tuple[SQSRecord, Callable[[], Any]]) -> tuple[Any, Exception | None]:
    """A record's call, run by a process of the simulation: what it answered, or raised."""
    try:
        return call[1](), None
    except Exception as error:
        return None, error


@contextmanager
def virtual_holds(simulation: Simulation) -> Iterator[None]:
    """The worker's message holds (``services/message_holds.py``: a thread per batch
    renewing its messages' visibility, ChangeMessageVisibilityBatch, every heartbeat
    interval until the block ends) run unchanged, their thread and event a process
    of the worker's invocation and a wait in virtual time."""
    with mock.patch.object(message_holds, "threading", VirtualThreading(simulation)):
        yield


@contextmanager
def tick_interval(seconds: float) -> Iterator[None]:
    """The looping tick (``services/tick_loop.py``) ticks every ``seconds``, its other
    timings ``LoopTiming``'s: to compare intervals side by side."""
    timing = dataclasses.replace(LoopTiming(), tick_interval_seconds=seconds)
    with mock.patch.object(tick_loop, "LoopTiming", return_value=timing):
        yield


@contextmanager
def virtual_threads(simulation: Simulation, workers: int) -> Iterator[None]:
    """The tick's thread pool (``page_claimer``'s ``ThreadPoolExecutor``) and the
    execution store's (a batch's begins and ends, ``apply_each``) built inside are
    ``workers`` processes of the simulation instead."""

    def executor(*_: Any, **__: Any) -> VirtualPool:
        return VirtualPool(simulation, workers)

    with (
        mock.patch.object(page_claimer, "ThreadPoolExecutor", executor),
        mock.patch.object(aws_executions, "ThreadPoolExecutor", executor),
    ):
        yield


class Stages:
    """When each due occurrence passed each stage of its way to the handler, on the
    model's clock (a call is applied halfway through its round trip): the tick's due
    query that found its task, the consistent re-read before its claim (the tick's or
    a claim invocation's), its message sent, and received by the event source
    mapping. With the handler's call (``Handled``) these split lateness into waits."""

    def __init__(self, model: AwsModel, simulation: Simulation, tasks_table: str) -> None:
        self._simulation = simulation
        self._tasks_table = tasks_table
        self.found: dict[str, float] = {}
        self.read: dict[str, float] = {}
        self.sent: dict[str, float] = {}
        self.received: dict[str, float] = {}
        self.worker_started: dict[str, float] = {}
        self._answer = model.answer
        model.answer = self._traced  # type: ignore[method-assign]

    def _traced(self, name: str, params: dict[str, Any]) -> dict[str, Any]:
        answer = self._answer(name, params)
        now = self._simulation.now
        if name == "dynamodb.Query" and params.get("IndexName"):
            for item in answer.get("Items", ()):
                self.found.setdefault(item["task_id"]["S"], now)
        elif name == "dynamodb.BatchGetItem":
            for item in answer.get("Responses", {}).get(self._tasks_table, ()):
                self.read.setdefault(item["task_id"]["S"], now)
        elif name == "sqs.SendMessageBatch":
            for entry in params["Entries"]:
                self.sent.setdefault(_execution_of(entry["MessageBody"]), now)
        elif name == "sqs.ReceiveMessage":
            for message in answer.get("Messages", ()):
                self.received.setdefault(_execution_of(message["Body"]), now)
        return answer


def _execution_of(body: str) -> str:
    return str(json.loads(body)["execution_id"])


def stage_waits(
    stages: Stages, handled: Handled, expected: dict[str, datetime], burst_from: datetime
) -> dict[str, dict[str, list[float]]]:
    """Each phase's lateness split into the waits between stages (seconds)."""
    names = (
        "due_to_found",
        "found_to_read",
        "read_to_sent",
        "sent_to_received",
        "received_to_handler",
    )
    waits: dict[str, dict[str, list[float]]] = {
        "steady": {n: [] for n in names},
        "burst": {n: [] for n in names},
    }
    for execution_id, at in expected.items():
        task_id = task_id_of(execution_id)
        due = (at - START).total_seconds()
        points = (
            due,
            stages.found.get(task_id),
            stages.read.get(task_id),
            stages.sent.get(execution_id),
            stages.received.get(execution_id),
            handled.first_call.get(execution_id),
        )
        if any(p is None for p in points):
            continue
        phase = waits["burst" if at >= burst_from else "steady"]
        for name, begin, end in zip(names, points, points[1:], strict=False):
            phase[name].append(end - begin)  # type: ignore[operator]
    return waits


class CountingLog(logging.Handler):
    """dynacron's warnings and errors, counted by message instead of printed."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.counts: Counter[str] = Counter()

    def emit(self, record: logging.LogRecord) -> None:
        self.counts[record.getMessage()] += 1


# The world


def task_ids(count: int, rng: random.Random) -> list[str]:
    return [uuid.UUID(int=rng.getrandbits(128)).hex for _ in range(count)]


def fill(
    model: AwsModel, settings: Settings, scenario: Scenario, part: Part = Part()
) -> list[tuple[str, datetime]]:
    """Store every task of ``part``'s shards, each as ``task_to_item`` writes it (the
    same tasks, whatever the split); returns their due occurrences."""
    rng = random.Random(scenario.seed)
    sharding = settings.sharding
    shards = set(part.shards(sharding.shard_count))
    table = model.tables[settings.tasks_table]
    due: list[tuple[str, datetime]] = []
    recurring = _template(
        RateSchedule(every_seconds=RECURRING_EVERY_SECONDS, anchor=START), settings
    )
    one_time = _template(OneTimeSchedule(at=START), settings)
    steady = scenario.steady_fires
    later = scenario.registered - steady
    tenants = [f"tenant-{n:04d}" for n in range(scenario.tenants)]
    items = []
    for number, task_id in enumerate(task_ids(scenario.registered + scenario.burst, rng)):
        if number < steady:
            at = START + timedelta(seconds=number / scenario.fires_per_second)
            template, schedule_at = recurring, "anchor"
        elif number < steady + later:
            # Not due in the run: later in the same hour, in the same due-index
            # partitions, after the run's end (the steady tasks come back at 600 s).
            offset = LATER_FROM_SECONDS + (number - steady) * (LATER_SPAN_SECONDS / max(1, later))
            at = START + timedelta(seconds=offset)
            template, schedule_at = recurring, "anchor"
        else:
            at = START + timedelta(seconds=scenario.burst_at + rng.random())
            template, schedule_at = one_time, "at"
        placement = sharding.place(task_id, at, START - timedelta(days=1))
        assert placement is not None
        if placement.shard not in shards:
            continue
        instant = {"S": format_instant(at)}
        item = dict(template)
        item["task_id"] = {"S": task_id}
        item["tenant_id"] = {"S": tenants[number % len(tenants)]}
        item["next_run_at"] = instant
        item["schedule"] = {"M": {**template["schedule"]["M"], schedule_at: instant}}
        item["due_bucket"] = {"S": placement.key}
        items.append(item)
        if number < steady or number >= steady + later:
            due.append((task_id, parse_instant(instant["S"])))
    table.load(items)
    secrets = {"L": [{"S": "c2VjcmV0LWZvci1zY2FsZQ"}]}
    for tenant in tenants:
        model.put(
            settings.coordination_table,
            {"key": {"S": f"{TENANT_KEY_PREFIX}{tenant}"}, "signing_secrets": secrets},
        )
    for shard in range(settings.shard_count):
        DynamoCursorStore(_Direct(model), settings.coordination_table).apply(
            shard, transitions.advance_cursor(sharding.bucket(START))
        )
    return due


def _template(schedule: Any, settings: Settings) -> dict[str, Any]:
    task = Task(
        task_id="template",
        name="scale",
        schedule=schedule,
        handler_url="http://127.0.0.1:9/hook",
        payload={"customer": 1},
        status=TaskStatus.ACTIVE,
        next_run_at=START,
        created_at=START - timedelta(days=1),
        updated_at=START - timedelta(days=1),
    )
    return task_to_item(task, settings.sharding.place("template", START, START))


class _Direct:
    """A client answering at once from the model (filling it before the run)."""

    def __init__(self, model: AwsModel) -> None:
        self._model = model

    def __getattr__(self, method: str) -> Callable[..., dict[str, Any]]:
        operation = "".join(part.capitalize() for part in method.split("_"))
        return lambda **params: self._model.answer(f"dynamodb.{operation}", params)


# The run


@dataclass
class World:
    simulation: Simulation
    model: AwsModel
    throughput: Throughput
    settings: Settings
    lambdas: LambdaService
    esm: SqsEventSource
    handled: Handled
    stats: CallStats
    heartbeats: list[VirtualHeartbeats]
    log: CountingLog
    stages: Stages
    part: Part
    record_failures: Counter[str] = field(default_factory=Counter)


def build(
    scenario: Scenario, deployment: Deployment, botocore_cpu: BotocoreCpu, part: Part = Part()
) -> tuple[World, list[tuple[str, datetime]]]:
    simulation = Simulation(START)
    throughput = Throughput(now=simulation.epoch, table_units=ON_DEMAND_TABLE_UNITS / part.of)
    model = AwsModel(now=simulation.epoch, throughput=throughput)
    config = deployment.config
    settings = model.settings(
        shard_count=config.shard_count,
        tick_concurrency=deployment.tick_concurrency,
        worker_concurrency=scenario.worker_in_flight,
        claim_function="dynacron-claim",
    )
    throughput.partition_write = throughput.partition_read = math.inf  # while filling
    due = fill(model, settings, scenario, part)
    model.queues[settings.dispatch_queue_url].in_flight_quota = part.share(IN_FLIGHT_PER_QUEUE)
    throughput.partition_write = scenario.partition_write_units
    throughput.partition_read = PARTITION_READ_UNITS
    throughput.consumed.clear()
    model.calls.clear()
    stages = Stages(model, simulation, settings.tasks_table)
    rng = random.Random(scenario.seed)
    random.seed(scenario.seed)  # botocore's backoff jitter
    handled, stats = Handled(), CallStats()
    heartbeats: list[VirtualHeartbeats] = []
    log = CountingLog()
    logger = logging.getLogger("dynacron")
    logger.handlers[:] = [log]
    logger.setLevel(logging.WARNING)
    logger.propagate = False
    lambdas: LambdaService

    def client(service: str, latency: Latency, answer: Any = None) -> ClientDouble:
        return ClientDouble(service, model, simulation, latency, rng, stats, botocore_cpu, answer)

    def invoke(name: str, params: dict[str, Any]) -> dict[str, Any]:
        assert params["InvocationType"] == "Event"
        lambdas.invoke_async(params["FunctionName"], json.loads(params["Payload"]))
        return {"StatusCode": 202}

    def make_app(spec: FunctionSpec) -> Dynacron:
        env_settings = settings
        page_claims = None
        if spec.name == "dynacron-tick":
            page_claims = LambdaDuePageHandOut(
                client("lambda", LAMBDA_API_LATENCY, invoke), "dynacron-claim"
            )
        pool = deployment.tick_concurrency
        delivery = StandInDelivery(simulation, scenario.handler, rng, handled)
        with virtual_threads(simulation, pool):
            app = Dynacron(
                env_settings,
                dynamodb=client("dynamodb", DYNAMODB_LATENCY),  # type: ignore[arg-type]
                sqs=client("sqs", SQS_LATENCY),  # type: ignore[arg-type]
                clock=VirtualClock(simulation),
                sleep=simulation.wait,
                emit_metrics=lambda document: None,
                page_claims=page_claims,
                delivery=delivery,
            )
        delivery.secrets_of = app.tenants.signing_secrets
        beats = VirtualHeartbeats(
            simulation, settings.lease_terms.heartbeat_interval.total_seconds()
        )
        app.runner._heartbeats = beats  # type: ignore[assignment]
        heartbeats.append(beats)
        return app

    functions = [
        FunctionSpec("dynacron-tick", config.tick_memory_mb, TICK_TIMEOUT_SECONDS, tick_handler),
        FunctionSpec(
            "dynacron-claim",
            config.claim_memory_mb,
            CLAIM_TIMEOUT_SECONDS,
            claim_handler,
            reserved=part.share(config.claim_reserved_concurrency),
        ),
        FunctionSpec(
            "dynacron-worker",
            config.worker_memory_mb,
            WORKER_TIMEOUT_SECONDS,
            worker_handler,
        ),
    ]
    lambdas = LambdaService(
        simulation,
        functions,
        make_app,
        rng,
        ASYNC_START,
        account_concurrency=part.share(deployment.account_concurrency),
        scaling_environments=SCALING_ENVIRONMENTS / part.of,
    )
    esm = SqsEventSource(
        lambdas,
        model,
        settings.dispatch_queue_url,
        "dynacron-worker",
        config.worker_batch_size,
        part.share(config.worker_max_concurrency),
        SQS_LATENCY,
        rng,
        share=1 / part.of,
    )
    world = World(
        simulation,
        model,
        throughput,
        settings,
        lambdas,
        esm,
        handled,
        stats,
        heartbeats,
        log,
        stages,
        part,
    )
    return world, due


def tick_handler(app: Dynacron, event: dict[str, Any], context: Any) -> dict[str, Any]:
    return app.tick(event, context)


def claim_handler(app: Dynacron, event: dict[str, Any], context: Any) -> dict[str, Any]:
    return app.claim(event, context)


def worker_handler(app: Dynacron, event: dict[str, Any], context: Any) -> dict[str, Any]:
    return app.worker(event, context)


def schedule_ticks(world: World, until: float) -> None:
    """EventBridge's rule: every minute, one looping tick per shard (asynchronous)."""
    shards = world.part.shards(world.settings.shard_count)

    def fire() -> None:
        for shard in shards:
            world.lambdas.invoke_async("dynacron-tick", {"shard": shard, "loop": True})
        if world.simulation.now + TICK_SCHEDULE_SECONDS < until:
            world.simulation.after(TICK_SCHEDULE_SECONDS, fire)

    world.simulation.at(0.0, fire)


def run(
    scenario: Scenario, deployment: Deployment, botocore_cpu: BotocoreCpu, processes: int = 1
) -> dict[str, Any]:
    """Simulate ``scenario`` on ``deployment``, its shards split over ``processes``
    processes (``Part``), and merge their figures. One process runs here; more are
    forked, each simulating its part."""
    began = time.perf_counter()
    if processes == 1:
        parts = [run_part(scenario, deployment, botocore_cpu, Part())]
    else:
        forked = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(processes, mp_context=forked) as pool:
            futures = [
                pool.submit(run_part, scenario, deployment, botocore_cpu, Part(index, processes))
                for index in range(processes)
            ]
            parts = [future.result() for future in futures]
    return merge(parts, scenario, deployment, time.perf_counter() - began)


def run_part(
    scenario: Scenario, deployment: Deployment, botocore_cpu: BotocoreCpu, part: Part
) -> dict[str, Any]:
    """Simulate ``part`` of the run; the "dynacron" logger (which ``build`` points at
    a counting handler) is left as it was found, for whatever runs next in this
    process (a Powertools ``Logger`` made later reads its first handler)."""
    logger = logging.getLogger("dynacron")
    kept = (logger.handlers[:], logger.level, logger.propagate)
    try:
        return _run(scenario, deployment, botocore_cpu, part)
    finally:
        logger.handlers[:], logger.level, logger.propagate = kept[0], kept[1], kept[2]


def _run(
    scenario: Scenario, deployment: Deployment, botocore_cpu: BotocoreCpu, part: Part
) -> dict[str, Any]:
    began, cpu = time.perf_counter(), time.process_time()
    world, due = build(scenario, deployment, botocore_cpu, part)
    label = f"[part {part.index + 1}/{part.of}] " if part.of > 1 else ""
    # What the build made lives to the end: kept out of the collector's walks (the
    # collections left are not charged to the simulated invocations either).
    gc.collect()
    gc.freeze()
    # Fewer, larger young collections: the run makes garbage fast, cycles rarely.
    gc.set_threshold(100_000, 50, 50)
    built = time.perf_counter() - began
    print(
        f"  {label}{len(due):,} occurrences due, {scenario.registered + scenario.burst:,} "
        f"tasks registered, built in {built:.0f} s",
        flush=True,
    )
    # A part may have nothing due (fewer shards than processes, or a small run).
    last_due_at = max(((at - START).total_seconds() for _, at in due), default=0.0)
    end = last_due_at + scenario.drain_seconds
    world.esm.start(warm=True)
    schedule_ticks(world, end)
    expected = {execution_id_for(task_id, at): at for task_id, at in due}
    step = 5.0
    at = 0.0
    with (
        virtual_batches(world.simulation, world.record_failures),
        virtual_holds(world.simulation),
        tick_interval(scenario.tick_interval_seconds),
    ):
        while at < end:
            at += step
            world.simulation.run(at)
            world.throughput.forget_full()
            done = len(world.handled.first_call)
            print(
                f"  {label}t={at:5.0f} s  handler calls {done:,}/{len(expected):,}  "
                f"wall {time.perf_counter() - began:4.0f} s",
                flush=True,
            )
            working = world.lambdas.functions["dynacron-worker"].busy
            if (
                done >= len(expected)
                and not working
                and at >= last_due_at + 5
                and not running(world, expected)
            ):
                break
    wall = time.perf_counter() - began
    return report(world, scenario, deployment, expected, at, wall, time.process_time() - cpu, built)


def running(world: World, expected: dict[str, datetime]) -> bool:
    """Whether a worker still holds an execution it called the handler for (its finish
    not yet written): the run goes on until it has ended."""
    table = world.model.tables[world.settings.executions_table]
    for execution_id in expected:
        item = table.items.get((task_id_of(execution_id), execution_id))
        if item is not None and item["status"]["S"] == "RUNNING":
            return True
    return False


def report(
    world: World,
    scenario: Scenario,
    deployment: Deployment,
    expected: dict[str, datetime],
    simulated: float,
    wall: float,
    cpu: float,
    built: float,
) -> dict[str, Any]:
    """One part's figures: counts, and the raw values ``merge`` makes distributions of."""
    settings = world.settings
    table = world.model.tables[settings.executions_table]
    statuses: Counter[str] = Counter()
    for execution_id in expected:
        item = table.items.get((task_id_of(execution_id), execution_id))
        statuses[item["status"]["S"] if item else "MISSING"] += 1
    burst_from = START + timedelta(seconds=scenario.burst_at)
    lateness: dict[str, list[float]] = {"steady": [], "burst": []}
    for execution_id, at in expected.items():
        first = world.handled.first_call.get(execution_id)
        if first is None:
            continue
        phase = "burst" if at >= burst_from else "steady"
        lateness[phase].append(first - (at - START).total_seconds())
    dispatch = world.model.queues[settings.dispatch_queue_url]
    consumed = world.throughput.consumed
    return {
        "due": len(expected),
        "fired": sum(1 for e in expected if e in world.handled.first_call),
        "statuses": dict(statuses),
        "lost": len(expected) - statuses["SUCCEEDED"],
        "duplicate_handler_calls": sum(
            count - 1 for count in world.handled.calls.values() if count > 1
        ),
        "dispatch_messages_sent": dispatch.sent,
        "duplicate_messages": dispatch.sent - len(expected),
        "redriven_messages": dispatch.redriven,
        "heartbeats_due": sum(h.due for h in world.heartbeats),
        "worker_records_failed": dict(world.record_failures),
        "functions": {
            name: {
                "memory_mb": state.spec.memory_mb,
                "peak_concurrency": state.peak,
                "invocations": state.invocations,
                "environments": state.environments,
                "gb_seconds": state.gb_seconds,
                "throttled_starts": state.throttles,
                "async_events_dropped": state.async_dropped,
                "errors": dict(state.errors),
            }
            for name, state in world.lambdas.functions.items()
        },
        "throttled": [
            {"table": t, "index": i, "partition": p, "reason": r, "requests": n}
            for (t, i, p, r), n in world.throughput.throttled.items()
        ],
        "throttled_attempts": sum(world.stats.throttled_attempts.values()),
        "calls_that_reached_the_code": dict(world.stats.throttled_calls),
        "esm_peak_pollers": world.esm.peak_pollers,
        "esm_receives": {"all": world.esm.receives, "empty": world.esm.empty_receives},
        "account_peak_concurrency": world.lambdas.account_peak,
        "warnings": dict(world.log.counts),
        "consumed_units": {
            f"{t}{'/' + i if i else ''} {'write' if w else 'read'}": u
            for (t, i, w), u in consumed.items()
        },
        "usage": {
            "write_units": sum(u for (_, _, write), u in consumed.items() if write),
            "read_units": sum(u for (_, _, write), u in consumed.items() if not write),
            "sqs_requests": {
                name.removeprefix("sqs."): n
                for name, n in world.model.calls.items()
                if name.startswith("sqs.")
            },
            "lambda_gb_seconds": sum(s.gb_seconds for s in world.lambdas.functions.values()),
            "lambda_invocations": sum(s.invocations for s in world.lambdas.functions.values()),
        },
        "calls": dict(world.stats.calls),
        "lateness": lateness,
        "stages": stage_waits(world.stages, world.handled, expected, burst_from),
        "simulated_seconds": simulated,
        "wall_seconds": wall,
        "cpu_seconds": cpu,
        "build_seconds": built,
        "collector_seconds": world.simulation.gc_seconds,
        "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
    }


def merge(
    parts: list[dict[str, Any]], scenario: Scenario, deployment: Deployment, wall: float
) -> dict[str, Any]:
    """The run's figures from its parts': counts added (a peak too: an upper bound,
    the parts' peaks need not coincide), distributions of the values pooled."""

    def added(key: str) -> Any:
        return sum(part[key] for part in parts)

    def counted(key: str) -> dict[str, Any]:
        total: Counter[str] = Counter()
        for part in parts:
            total.update(part[key])
        return dict(sorted(total.items()))

    lateness = {
        phase: [v for part in parts for v in part["lateness"][phase]]
        for phase in ("steady", "burst")
    }
    stages = {
        phase: {
            name: distribution(values)
            for name in parts[0]["stages"][phase]
            if (values := [v for part in parts for v in part["stages"][phase][name]])
        }
        for phase in ("steady", "burst")
    }
    functions: dict[str, Any] = {}
    for name in parts[0]["functions"]:
        each = [part["functions"][name] for part in parts]
        errors: Counter[str] = Counter()
        for f in each:
            errors.update(f["errors"])
        functions[name] = {
            "memory_mb": each[0]["memory_mb"],
            **{
                key: sum(f[key] for f in each)
                for key in (
                    "peak_concurrency",
                    "invocations",
                    "environments",
                    "throttled_starts",
                    "async_events_dropped",
                )
            },
            "gb_seconds": round(sum(f["gb_seconds"] for f in each), 1),
            "errors": dict(errors),
        }
    throttled = sorted(
        (t for part in parts for t in part["throttled"]), key=lambda t: -int(t["requests"])
    )
    reached = counted("calls_that_reached_the_code")
    usage = {
        "write_units": sum(p["usage"]["write_units"] for p in parts),
        "read_units": sum(p["usage"]["read_units"] for p in parts),
        "sqs_requests": dict(sum((Counter(p["usage"]["sqs_requests"]) for p in parts), Counter())),
        "lambda_gb_seconds": sum(p["usage"]["lambda_gb_seconds"] for p in parts),
        "lambda_invocations": sum(p["usage"]["lambda_invocations"] for p in parts),
    }
    fired = added("fired")
    cpu, built = added("cpu_seconds"), added("build_seconds")
    return {
        "scenario": {
            **{k: v for k, v in dataclasses.asdict(scenario).items() if k != "handler"},
            "handler_latency_seconds": {
                "median": scenario.handler.median,
                "p99": scenario.handler.p99,
            },
        },
        "deployment": {
            **dataclasses.asdict(deployment.config),
            "tick_concurrency": deployment.tick_concurrency,
            "account_concurrency": deployment.account_concurrency,
        },
        "latency_seconds": {
            "dynamodb": dataclasses.asdict(DYNAMODB_LATENCY),
            "sqs": dataclasses.asdict(SQS_LATENCY),
            "lambda_api": dataclasses.asdict(LAMBDA_API_LATENCY),
            "async_start": dataclasses.asdict(ASYNC_START),
        },
        "processes": len(parts),
        "due": added("due"),
        "fired": fired,
        "statuses": counted("statuses"),
        "lost": added("lost"),
        "duplicate_handler_calls": added("duplicate_handler_calls"),
        "dispatch_messages_sent": added("dispatch_messages_sent"),
        "duplicate_messages": added("duplicate_messages"),
        "redriven_messages": added("redriven_messages"),
        "heartbeats_due": added("heartbeats_due"),
        "worker_records_failed": counted("worker_records_failed"),
        "lateness_seconds": {phase: distribution(values) for phase, values in lateness.items()},
        "lateness_stages_seconds": stages,
        "steady_rate": rate_over(lateness["steady"]),
        "throttled_requests": {
            "by_partition": throttled[:12],
            "partitions": len(throttled),
            "total": sum(int(t["requests"]) for t in throttled),
            "attempts_retried_by_botocore": added("throttled_attempts") - sum(reached.values()),
            "calls_that_reached_the_code": reached,
        },
        "functions": functions,
        "esm_peak_pollers": added("esm_peak_pollers"),
        "esm_receives": {
            kind: sum(p["esm_receives"][kind] for p in parts) for kind in ("all", "empty")
        },
        "account_peak_concurrency": added("account_peak_concurrency"),
        "warnings": dict(Counter(counted("warnings")).most_common(10)),
        "cost": costs(usage, fired),
        "consumed_units": {k: round(v) for k, v in counted("consumed_units").items()},
        "calls": counted("calls"),
        "simulated_seconds": max(p["simulated_seconds"] for p in parts),
        "wall_seconds": round(wall, 1),
        "cpu_seconds": round(cpu, 1),
        "build_seconds": round(max(p["build_seconds"] for p in parts), 1),
        "cpu_ms_per_fire": round(1000 * (cpu - built) / max(1, fired), 3),
        "collector_seconds": round(added("collector_seconds"), 1),
        "max_rss_mb": added("max_rss_mb"),
        "parts": [
            {
                "fired": p["fired"],
                "wall_seconds": round(p["wall_seconds"], 1),
                "cpu_seconds": round(p["cpu_seconds"], 1),
                "max_rss_mb": p["max_rss_mb"],
            }
            for p in parts
        ],
    }


def rate_over(lateness: list[float]) -> dict[str, float]:
    """Whether the steady phase kept up: its p99 lateness."""
    if not lateness:
        return {}
    return {"p99_lateness_seconds": round(percentile(lateness, 0.99), 3)}


def costs(usage: dict[str, Any], fires: int) -> dict[str, Any]:
    """Per million fires, at AWS's list prices (``planning.capacity_model.PRICES``):
    every SQS request counted, the event source mapping's receives and deletes among
    them (Lambda's pollers' requests are billed to the account)."""
    p = PRICES
    sqs_requests = sum(usage["sqs_requests"].values())
    per = 1e6 / max(1, fires)
    parts = {
        "dynamodb_writes": usage["write_units"]
        * p.dynamodb_on_demand_per_million_write_units
        / 1e6,
        "dynamodb_reads": usage["read_units"] * p.dynamodb_on_demand_per_million_read_units / 1e6,
        "sqs_requests": sqs_requests * p.sqs_standard_per_million_requests / 1e6,
        "lambda_gb_seconds": usage["lambda_gb_seconds"] * p.lambda_arm_per_gb_second,
        "lambda_requests": usage["lambda_invocations"] * p.lambda_per_million_requests / 1e6,
    }
    return {
        "usd_per_million_fires": {k: round(v * per, 3) for k, v in parts.items()},
        "usd_per_million_fires_total": round(sum(parts.values()) * per, 3),
        "write_units_per_fire": round(usage["write_units"] / max(1, fires), 2),
        "read_units_per_fire": round(usage["read_units"] / max(1, fires), 2),
        "sqs_requests_per_fire": round(sqs_requests / max(1, fires), 3),
        "sqs_requests_per_fire_by_operation": {
            name: round(n / max(1, fires), 3) for name, n in sorted(usage["sqs_requests"].items())
        },
        "lambda_gb_seconds_per_fire": round(usage["lambda_gb_seconds"] / max(1, fires), 4),
    }


# botocore's CPU


def measure_botocore_cpu(times: int = 200) -> BotocoreCpu:
    """botocore's CPU per call of each operation the run makes, through real clients
    answered by the ``before-send`` double, on items as the run has them."""
    double = AwsDouble(latency_seconds=0.0)
    settings = double.settings(shard_count=1)
    dynamodb, sqs = double.clients()
    scenario = Scenario(registered=200, fires_per_second=100, steady_seconds=2, burst=0, tenants=2)
    fill(double, settings, scenario)
    table = double.tables[settings.tasks_table]
    ids = [key[0] for key in list(table.items)[:BATCH_GET_KEYS]]
    task_key = {"task_id": {"S": ids[0]}}
    item = table.items[(ids[0],)]
    bucket = item["due_bucket"]["S"]
    cpu = BotocoreCpu()
    model_cpu = lambda: double.model_cpu_seconds  # noqa: E731
    calls: dict[str, Callable[[], Any]] = {
        "GetItem": lambda: dynamodb.get_item(
            TableName=settings.tasks_table, Key=task_key, ConsistentRead=True
        ),
        "Query": lambda: dynamodb.query(
            TableName=settings.tasks_table,
            IndexName="due-index",
            KeyConditionExpression="#b = :b AND #n <= :n",
            ExpressionAttributeNames={"#b": "due_bucket", "#n": "next_run_at"},
            ExpressionAttributeValues={":b": {"S": bucket}, ":n": {"S": "2027"}},
            Limit=100,
        ),
        "BatchGetItem": lambda: dynamodb.batch_get_item(
            RequestItems={
                settings.tasks_table: {
                    "Keys": [{"task_id": {"S": i}} for i in ids],
                    "ConsistentRead": True,
                }
            }
        ),
        "BatchGetItem/1": lambda: dynamodb.batch_get_item(
            RequestItems={settings.tasks_table: {"Keys": [task_key], "ConsistentRead": True}}
        ),
        "UpdateItem": lambda: dynamodb.update_item(
            TableName=settings.tasks_table,
            Key=task_key,
            UpdateExpression="SET #v = :v, #n = :n, #s = :s",
            ConditionExpression="#v = :v OR attribute_exists(#v)",
            ExpressionAttributeNames={"#v": "version", "#n": "next_run_at", "#s": "updated_at"},
            ExpressionAttributeValues={
                ":v": {"N": "1"},
                ":n": item["next_run_at"],
                ":s": item["updated_at"],
            },
            ReturnValues="ALL_NEW",
        ),
        "PutItem": lambda: dynamodb.put_item(TableName=settings.tasks_table, Item=item),
        "SendMessageBatch": lambda: sqs.send_message_batch(
            QueueUrl=settings.dispatch_queue_url,
            Entries=[{"Id": str(n), "MessageBody": json.dumps(item)[:600]} for n in range(10)],
        ),
        "GetQueueAttributes": lambda: sqs.get_queue_attributes(
            QueueUrl=settings.dispatch_queue_url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        ),
    }
    sqs.send_message_batch(
        QueueUrl=settings.dispatch_queue_url,
        Entries=[{"Id": str(n), "MessageBody": "held"} for n in range(10)],
    )
    received = sqs.receive_message(QueueUrl=settings.dispatch_queue_url, MaxNumberOfMessages=10)
    handles = [m["ReceiptHandle"] for m in received["Messages"]]
    calls["ChangeMessageVisibilityBatch"] = lambda: sqs.change_message_visibility_batch(
        QueueUrl=settings.dispatch_queue_url,
        Entries=[
            {"Id": str(n), "ReceiptHandle": h, "VisibilityTimeout": 60}
            for n, h in enumerate(handles)
        ],
    )
    for name, call in calls.items():
        cpu.measure(name, call, model_cpu, times)
    return cpu


# The client double checked against moto


def verify_against_moto() -> dict[str, Any]:
    """Section 4's verification tick (50 tasks on every tick path) through the client
    doubles on virtual time, against moto through real clients: both must do and
    leave the same; then again with each task's first claim throttled in both (moto
    answering DynamoDB's error before it, the double's model refusing it), retried
    by botocore's retry handler in each. Raises AssertionError otherwise."""
    plain = throughput.same_outcome(throughput.moto_tick(), _client_double_tick(None))
    throttled = throughput.same_outcome(
        throughput.moto_tick(throughput.throttle_first_claims()),
        _client_double_tick(throughput.throttle_first_claims()),
    )
    return {
        **plain,
        "throttled_case": {"claimed": throttled["claimed"], "identical": throttled["identical"]},
    }


def _client_double_tick(refuses: Callable[[str, dict[str, Any]], bool] | None) -> tuple[Any, Any]:
    simulation = Simulation(throughput.STARTED)
    model = AwsModel(now=simulation.epoch)
    model.refuses = refuses
    settings = throughput._verification_settings(model.settings(shard_count=1))
    rng, stats, cpu = random.Random(1), CallStats(), BotocoreCpu()

    def client(service: str) -> Any:
        return ClientDouble(service, model, simulation, DYNAMODB_LATENCY, rng, stats, cpu)

    DynamoCursorStore(_Direct(model), settings.coordination_table).apply(
        0, transitions.advance_cursor(settings.sharding.bucket(throughput.STARTED))
    )
    clock = SettableClock(throughput.STARTED)
    with virtual_threads(simulation, settings.tick_concurrency):
        app = Dynacron(settings, dynamodb=client("dynamodb"), sqs=client("sqs"), clock=clock)
    dynamodb = client("dynamodb")
    items = throughput.verification_items(settings)
    process = simulation.spawn(
        Invocation(1.0),
        lambda: throughput._tick_for_verification(app, dynamodb, items, clock),
    )
    outcomes: list[Any] = []
    process.done.append(outcomes.append)
    simulation.run(3600.0)
    simulation.close()
    (outcome, error) = outcomes[0]
    if error is not None:
        raise error
    return outcome, throughput.model_state(model, settings)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--registered", type=int, default=100_000 if QUICK else 1_000_000)
    parser.add_argument("--steady", type=float, default=3.0 if QUICK else 60.0)
    parser.add_argument("--burst", type=int, default=10_000 if QUICK else 100_000)
    parser.add_argument("--fires-per-second", type=int, default=10_000)
    parser.add_argument(
        "--tick-interval",
        type=float,
        default=LoopTiming().tick_interval_seconds,
        help="the looping tick's interval in seconds; default: LoopTiming's",
    )
    parser.add_argument(
        "--worker-in-flight", type=int, help="records a worker runs at once; default: the plan's"
    )
    parser.add_argument(
        "--worker-max-concurrency", type=int, help="the worker mapping's; default: the plan's"
    )
    parser.add_argument(
        "--claim-reserved-concurrency", type=int, help="the claim function's; default: the plan's"
    )
    parser.add_argument(
        "--processes",
        type=int,
        default=min(2, os.cpu_count() or 1),
        help="split the shards over this many processes (default: 2, or 1 on one core)",
    )
    parser.add_argument(
        "--result", default="scale", help="bench/results/<RESULT>.json (default: scale)"
    )
    args = parser.parse_args()
    handler = HANDLER_LATENCY
    deployment = Deployment.for_rate(args.fires_per_second, handler.median)
    overrides = {
        "worker_max_concurrency": args.worker_max_concurrency,
        "claim_reserved_concurrency": args.claim_reserved_concurrency,
    }
    deployment.config = dataclasses.replace(
        deployment.config, **{k: v for k, v in overrides.items() if v}
    )
    scenario = Scenario(
        registered=args.registered,
        fires_per_second=args.fires_per_second,
        steady_seconds=args.steady,
        burst=args.burst,
        tick_interval_seconds=args.tick_interval,
        worker_in_flight=args.worker_in_flight or deployment.config.worker_concurrency,
    )
    checked = verify_against_moto()
    print(f"client double checked against moto: {checked}", flush=True)
    botocore_cpu = measure_botocore_cpu()
    measured = {k: round(v * 1000, 3) for k, v in botocore_cpu.measured.items()}
    print(f"botocore CPU per call (ms): {measured}", flush=True)
    result = run(scenario, deployment, botocore_cpu, args.processes)
    result["checked_against_moto"] = checked
    result["command"] = " ".join(["python -m bench.scale", *sys.argv[1:]])
    result["botocore_cpu_ms_per_call"] = {
        k: round(v * 1000, 3) for k, v in botocore_cpu.measured.items()
    }
    print(
        json.dumps(
            {k: result[k] for k in ("lost", "lateness_seconds", "cost", "wall_seconds")}, indent=1
        )
    )
    write_result(args.result, result)


if __name__ == "__main__":
    main()
