"""A Python handler that never returns is counted, not only bounded (issue 23):
``PythonHandlersOverrunning``, the calls of a worker process still running past
their timeout, is sent when a call overruns and when an overrunning call returns.
Through the composed worker on moto, and the delivery on its own."""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

from dynacron.adapters.delivery.python_handlers import PythonDelivery
from dynacron.adapters.delivery.registry import ExecutionContext, HandlerRegistry
from dynacron.adapters.powertools.metrics import EmfDocument, ReliabilityMetrics
from dynacron.api.requests import TaskCreate
from dynacron.definitions import metric_names
from dynacron.domain.clock import SettableClock
from dynacron.domain.executions.execution import Dispatch
from dynacron.entry.composition import Dynacron
from dynacron.entry.settings import Settings
from dynacron.local.gateway import LocalContext
from dynacron.local.runtime import sqs_event
from tests.integration.api_client import ALICE
from tests.integration.test_metrics_emitted import DISPATCH_ARN, received, values_of
from tests.support import wait_until
from tests.unit.test_handlers import NOW, make_task

OVERRUNNING = metric_names.PYTHON_HANDLERS_OVERRUNNING


def hung_registry(let_go: threading.Event, returned: threading.Event) -> HandlerRegistry:
    registry = HandlerRegistry()

    def hung(run: ExecutionContext) -> None:
        let_go.wait(30)
        returned.set()

    registry.register("hung", hung)
    registry.register("quick", lambda run: None)
    return registry


def test_a_hung_handler_in_the_worker_is_counted_until_it_returns(
    aws: tuple[Any, Any], settings: Settings, clock: SettableClock
) -> None:
    documents: list[EmfDocument] = []
    let_go, returned = threading.Event(), threading.Event()
    system = Dynacron(
        dataclasses.replace(settings, http_timeout_seconds=0.3),
        dynamodb=aws[0],
        sqs=aws[1],
        clock=clock,
        handlers=hung_registry(let_go, returned),
        emit_metrics=documents.append,
    )
    task = system.task_service.register(
        ALICE, TaskCreate(handler="hung", rate="1 minute").to_spec()
    )
    assert task.next_run_at is not None
    clock.set(task.next_run_at)
    assert sum(r.claimed for r in system.ticker.tick()) == 1
    try:
        # When the worker runs it, and the handler does not return within its 0.3 s
        system.worker(sqs_event(received(system, aws), DISPATCH_ARN), LocalContext("worker"))
        # Then the invocation's metrics say one call is running past its timeout
        assert values_of(documents, OVERRUNNING) == [1.0]
        assert not returned.is_set()
    finally:
        let_go.set()
    # And once it returns, the count goes back to zero (sent with the next flush)
    assert returned.wait(5)

    def flushed() -> list[float]:
        system.metrics.flush()
        return values_of(documents, OVERRUNNING)

    assert wait_until(lambda: flushed() == [1.0, 0.0], timeout=5)


def test_each_overrun_moves_the_count_and_a_call_on_time_does_not() -> None:
    documents: list[EmfDocument] = []
    metrics = ReliabilityMetrics(documents.append)
    let_go, returned = threading.Event(), threading.Event()
    delivery = PythonDelivery(
        hung_registry(let_go, returned), timeout_seconds=0.2, max_running=4, metrics=metrics
    )

    def dispatch(number: int) -> Dispatch:
        return Dispatch(execution_id=f"t1_{number}", task_id="t1", scheduled_at=NOW, attempt=1)

    try:
        assert delivery.deliver(make_task("quick"), dispatch(0), "token").ok
        assert delivery.overrunning == 0
        for number in (1, 2):
            result = delivery.deliver(make_task("hung"), dispatch(number), "token")
            assert not result.ok
            assert delivery.overrunning == number
        metrics.flush()
        assert values_of(documents, OVERRUNNING) == [1.0, 2.0]
    finally:
        let_go.set()
    assert wait_until(lambda: delivery.overrunning == 0, timeout=5)
    metrics.flush()
    # Down one at a time, in whichever order the two returned.
    assert sorted(values_of(documents, OVERRUNNING)) == [0.0, 1.0, 1.0, 2.0]
    assert values_of(documents, OVERRUNNING)[-1] == 0.0
