from __future__ import annotations

from datetime import UTC, datetime

import pytest

import dynacron
from dynacron.adapters.delivery.registry import HandlerRegistry
from dynacron.domain.executions.execution import Dispatch, HandlerAnswer
from dynacron.domain.schedules.expressions import parse_rate
from dynacron.domain.tasks.task import Task, TaskStatus

NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)


def make_task(handler_name: str) -> Task:
    return Task(
        task_id="t1",
        name="t1",
        schedule=parse_rate("1 minute", NOW),
        handler_url=None,
        handler_name=handler_name,
        payload={"n": 1},
        status=TaskStatus.ACTIVE,
        next_run_at=NOW,
        created_at=NOW,
        updated_at=NOW,
    )


def test_the_decorator_registers_and_returns_the_function() -> None:
    registry = HandlerRegistry()

    @dynacron.handler("invoice", registry=registry)
    def send_invoice(run: dynacron.ExecutionContext) -> None:
        pass

    assert registry.get("invoice") is send_invoice
    assert "invoice" in registry
    assert "other" not in registry
    registry.register("invoice", send_invoice)  # the same function again is harmless


def test_a_name_is_taken_once_and_must_be_well_formed() -> None:
    registry = HandlerRegistry()
    registry.register("a", lambda run: None)
    with pytest.raises(ValueError, match="already registered"):
        registry.register("a", lambda run: None)
    with pytest.raises(ValueError, match="must be"):
        registry.register("has space", lambda run: None)


def test_a_python_handler_gets_the_execution_id_as_its_idempotency_key() -> None:
    from dynacron.adapters.delivery.python_handlers import PythonDelivery

    registry = HandlerRegistry()
    seen: list[dynacron.ExecutionContext] = []
    registry.register("record", seen.append)
    dispatch = Dispatch(execution_id="t1_x", task_id="t1", scheduled_at=NOW, attempt=3)
    result = PythonDelivery(registry).deliver(make_task("record"), dispatch, "token")
    assert result.answer is HandlerAnswer.SUCCEEDED
    (context,) = seen
    assert (context.execution_id, context.attempt, context.payload) == ("t1_x", 3, {"n": 1})


def test_a_raising_handler_is_retried_unless_it_fails_permanently() -> None:
    from dynacron.adapters.delivery.python_handlers import PythonDelivery

    registry = HandlerRegistry()

    def flaky(run: dynacron.ExecutionContext) -> None:
        raise TimeoutError("database busy")

    def hopeless(run: dynacron.ExecutionContext) -> None:
        raise dynacron.PermanentFailure("customer closed the account")

    registry.register("flaky", flaky)
    registry.register("hopeless", hopeless)
    dispatch = Dispatch(execution_id="t1_x", task_id="t1", scheduled_at=NOW)
    delivery = PythonDelivery(registry)
    retried = delivery.deliver(make_task("flaky"), dispatch, "token")
    assert retried.failure is not None
    assert retried.failure.retryable
    assert "TimeoutError: database busy" in retried.failure.error
    refused = delivery.deliver(make_task("hopeless"), dispatch, "token")
    assert refused.failure is not None
    assert not refused.failure.retryable
    missing = delivery.deliver(make_task("not-here"), dispatch, "token")
    assert missing.failure is not None
    assert "no handler named 'not-here'" in missing.failure.error


@pytest.mark.parametrize("raised", [SystemExit(3), KeyboardInterrupt(), GeneratorExit()])
def test_a_handler_raising_a_base_exception_failed_its_attempt(raised: BaseException) -> None:
    from dynacron.adapters.delivery.python_handlers import PythonDelivery

    registry = HandlerRegistry()

    def exits(run: dynacron.ExecutionContext) -> None:
        raise raised

    registry.register("exits", exits)
    dispatch = Dispatch(execution_id="t1_x", task_id="t1", scheduled_at=NOW)
    result = PythonDelivery(registry, timeout_seconds=5).deliver(make_task("exits"), dispatch, "t")
    assert result.answer is not HandlerAnswer.SUCCEEDED
    assert result.failure is not None
    assert result.failure.retryable
    assert type(raised).__name__ in result.failure.error


class Unrenderable:
    def __str__(self) -> str:
        raise RuntimeError("no str")

    def __repr__(self) -> str:
        raise RuntimeError("no repr")


def deep(levels: int) -> list[object]:
    value: list[object] = []
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("returned", "excerpt"),
    [
        (Unrenderable(), "<a Unrenderable that cannot be rendered>"),
        ({"when": NOW}, '{"when":"2026-11-30 12:00:00+00:00"}'),
        ({1, 2}, '"{1, 2}"'),
    ],
    ids=["raises-in-str-and-repr", "a-datetime", "a-set"],
)
def test_any_returned_value_succeeds_with_an_excerpt(returned: object, excerpt: str) -> None:
    from dynacron.adapters.delivery.python_handlers import PythonDelivery

    registry = HandlerRegistry()
    registry.register("odd", lambda run: returned)
    dispatch = Dispatch(execution_id="t1_x", task_id="t1", scheduled_at=NOW)
    result = PythonDelivery(registry, timeout_seconds=5).deliver(make_task("odd"), dispatch, "t")
    assert result.answer is HandlerAnswer.SUCCEEDED
    assert result.excerpt == excerpt


def test_a_value_too_deep_to_render_as_json_succeeds_with_its_type() -> None:
    from dynacron.adapters.delivery.python_handlers import PythonDelivery

    registry = HandlerRegistry()
    registry.register("deep", lambda run: deep(100_000))
    dispatch = Dispatch(execution_id="t1_x", task_id="t1", scheduled_at=NOW)
    # A generous timeout: rendering a value this deep took over 5 s on a loaded machine,
    # and what is asserted is the answer, not its speed.
    delivery = PythonDelivery(registry, timeout_seconds=60)
    result = delivery.deliver(make_task("deep"), dispatch, "t")
    assert result.answer is HandlerAnswer.SUCCEEDED
    assert result.excerpt == "<a list that cannot be rendered>"
