"""boto3 clients answered in virtual time, for the scale benchmark.

A ``ClientDouble`` has the methods of a boto3 DynamoDB, SQS or Lambda client that
dynacron's adapters call, takes the same parameter dicts and answers with the
dicts botocore would parse, from ``bench/aws_double.py``'s model, after a round
trip drawn from a latency distribution in virtual time (``bench/simulation.py``).
An error the model answers is raised as botocore raises it: a ``ClientError`` with
AWS's code, message and fields. A throttled call is first retried as botocore's
default (standard) retry mode retries it, by botocore's own retry handler, whose
backoff is slept in virtual time: the real code sees what it would see from AWS.

Why not real clients: botocore's validation, serialisation, signing and parsing
are most of the CPU a call costs here (about 83 % of the tick's, BENCHMARKS.md
section 4), too much for a full-rate run in minutes. Their cost is not left out:
``BotocoreCpu`` measures it per operation on this machine, through the
``before-send`` double with real clients, and each call charges it to the
invocation that makes it. The double's own CPU (copying the parameters and the
answer) is not charged.
"""

from __future__ import annotations

import marshal
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import botocore.session
from botocore.awsrequest import AWSResponse
from botocore.exceptions import ClientError
from botocore.hooks import HierarchicalEmitter
from botocore.retries import standard

from bench.aws_double import AwsModel, ServiceError
from bench.aws_limits import Latency
from bench.simulation import Simulation

_SESSION = botocore.session.get_session()
# Operations whose parameters the model keeps (items, values written): copied first.
_STORING = frozenset({"PutItem", "UpdateItem", "TransactWriteItems"})


def _copy(value: Any) -> Any:
    """A deep copy of plain data (what the code sends and the model answers)."""
    return marshal.loads(marshal.dumps(value))


@dataclass
class CallStats:
    """Every call and attempt made through the client doubles, and the throttled ones."""

    calls: dict[str, int] = field(default_factory=dict)
    attempts: int = 0
    throttled_attempts: dict[str, int] = field(default_factory=dict)
    # Calls that still failed after botocore's retries: the real code saw the error.
    throttled_calls: dict[str, int] = field(default_factory=dict)

    def count(self, table: dict[str, int], name: str) -> None:
        table[name] = table.get(name, 0) + 1


class _Service:
    """The model and retry handler of one AWS service (per client, as botocore has them)."""

    def __init__(self, name: str) -> None:
        self.model = _SESSION.get_service_model(name)
        self.operations = {
            _snake(op): self.model.operation_model(op) for op in self.model.operation_names
        }


_SERVICES: dict[str, _Service] = {}


def _snake(operation: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in operation).lstrip("_")


class _FakeMeta:
    def __init__(self, service: _Service, events: HierarchicalEmitter) -> None:
        self.service_model = service.model
        self.events = events


class _FakeClient:
    """What ``botocore.retries.standard.register_retry_handler`` reads of a client."""

    def __init__(self, service: _Service) -> None:
        self.meta = _FakeMeta(service, HierarchicalEmitter())


class ClientDouble:
    """A boto3 client of ``service`` whose calls the ``model`` answers in virtual time.

    ``answer`` stands in for the model when given (the Lambda service answers
    ``invoke``); ``cpu`` is the CPU botocore would spend per call, charged to the
    calling invocation at its slowdown.
    """

    def __init__(
        self,
        service: str,
        model: AwsModel,
        simulation: Simulation,
        latency: Latency,
        rng: random.Random,
        stats: CallStats,
        cpu: Callable[[str, dict[str, Any]], float],
        answer: Callable[[str, dict[str, Any]], dict[str, Any]] | None = None,
    ) -> None:
        if service not in _SERVICES:
            _SERVICES[service] = _Service(service)
        self._service = _SERVICES[service]
        self._name = service
        self._model = model
        self._simulation = simulation
        self._latency = latency
        self._rng = rng
        self._stats = stats
        self._cpu = cpu
        self._answer = answer or model.answer
        fake = _FakeClient(self._service)
        # botocore's standard retry handler, built and registered as botocore does it.
        self._retry = standard.register_retry_handler(fake)
        self._events = fake.meta.events
        self._service_id = self._service.model.service_id.hyphenize()

    def __getattr__(self, method: str) -> Callable[..., dict[str, Any]]:
        operation = self._service.operations.get(method)
        if operation is None:
            raise AttributeError(method)

        def call(**params: Any) -> dict[str, Any]:
            return self._call(operation, params)

        self.__dict__[method] = call
        return call

    def _call(self, operation: Any, params: dict[str, Any]) -> dict[str, Any]:
        process = self._simulation.running()
        cpu_until = (
            process.local_now() + self._cpu(operation.name, params) * process.invocation.slowdown
        )
        # What a write stores is the model's own copy; what is only read is not copied.
        sent = _copy(params) if operation.name in _STORING else params
        name = f"{self._name}.{operation.name}"
        self._stats.count(self._stats.calls, name)
        context: dict[str, Any] = {}
        attempts = 1
        send_at = cpu_until
        while True:
            self._stats.attempts += 1
            latency = self._latency.draw(self._rng)
            value, error = process.request(
                cpu_until, send_at, latency, lambda: self._answer(name, sent)
            )
            if error is None:
                self._after_call(context, 200)
                response = dict(value)
                response["ResponseMetadata"] = {
                    "HTTPStatusCode": 200,
                    "RetryAttempts": attempts - 1,
                }
                process.rebase()
                return dict(response)
            if not isinstance(error, ServiceError):
                raise error
            parsed = {
                "Error": {"Code": error.code, "Message": str(error)},
                "ResponseMetadata": {"HTTPStatusCode": error.status},
                **_copy(error.fields),
            }
            http = AWSResponse("https://double", error.status, {}, None)
            delay = self._retry.needs_retry(
                response=(http, parsed),
                attempts=attempts,
                operation=operation,
                caught_exception=None,
                request_dict={"context": context},
            )
            throttling = "Throttl" in error.code or "Throughput" in error.code
            if throttling:
                self._stats.count(self._stats.throttled_attempts, name)
            if delay is None:
                self._after_call(context, error.status)
                if throttling:
                    self._stats.count(self._stats.throttled_calls, name)
                process.rebase()
                raise ClientError(parsed, operation.name)
            # botocore sleeps the backoff, then sends again (and spends its CPU again).
            attempts += 1
            now = self._simulation.local_now()
            cpu_until = now + self._cpu(operation.name, params) * process.invocation.slowdown
            send_at = cpu_until + delay

    def _after_call(self, context: dict[str, Any], status: int) -> None:
        http = _RESPONSES.get(status)
        if http is None:
            # Read only for its status by the retry handler: one per status serves all.
            http = _RESPONSES[status] = AWSResponse("https://double", status, {}, None)
        self._events.emit(f"after-call.{self._service_id}", context=context, http_response=http)


_RESPONSES: dict[int, AWSResponse] = {}


# Keys of a full BatchGetItem, the size its CPU is measured at; with ``BatchGetItem/1``
# (one key) measured too, a call is charged on the line between, by its keys.
BATCH_GET_KEYS = 100


class BotocoreCpu:
    """botocore's CPU per call of each operation, measured on this machine: real
    clients, requests answered at ``before-send`` by the model, the model's own CPU
    taken out (``bench/aws_double.py``'s ``model_cpu_seconds``).

    BatchGetItem's grows with the items it reads (on this machine, with the run's
    items: 0.74 ms for one key, 1.65 ms for 10, 12.95 ms for 100): a worker's wave
    of 10 charged at the full batch's was charged 6 to 8 times its CPU."""

    def __init__(self, measured: dict[str, float] | None = None) -> None:
        self.measured = dict(measured or {})

    def __call__(self, operation: str, params: dict[str, Any] | None = None) -> float:
        one = self.measured.get(f"{operation}/1")
        if operation == "BatchGetItem" and one is not None and params is not None:
            keys = sum(len(asked["Keys"]) for asked in params["RequestItems"].values())
            full = self.measured[operation]
            return one + (full - one) * (keys - 1) / (BATCH_GET_KEYS - 1)
        if operation in self.measured:
            return self.measured[operation]
        # An operation not measured costs what the measured ones cost on average.
        whole = [cpu for name, cpu in self.measured.items() if "/" not in name]
        return sum(whole) / len(whole) if whole else 0.0

    def measure(
        self, name: str, call: Callable[[], Any], model_cpu: Callable[[], float], times: int
    ) -> None:
        """Average CPU of ``call`` (one ``name`` operation) over ``times`` calls."""
        call()  # the first call loads the service model: a warm Lambda has it
        cpu, model = time.thread_time(), model_cpu()
        for _ in range(times):
            call()
        spent = time.thread_time() - cpu - (model_cpu() - model)
        self.measured[name] = spent / times
