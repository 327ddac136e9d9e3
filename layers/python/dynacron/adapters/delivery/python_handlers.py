"""Delivery of one attempt to a Python handler registered in this process: it runs
in a thread of its own, and the worker stops waiting for it at the call's deadline."""

from __future__ import annotations

import contextvars
import json
import logging
import threading
import time
from collections.abc import Callable

from dynacron.adapters.delivery.registry import ExecutionContext, HandlerRegistry, PermanentFailure
from dynacron.adapters.messages import upstream_to_map, upstreams_to_list
from dynacron.domain.executions.execution import DeliveryResult, Dispatch
from dynacron.domain.executions.retry import AttemptFailure
from dynacron.domain.tasks.task import Task
from dynacron.ports.metrics import NO_METRICS, Metrics

logger = logging.getLogger("dynacron")


class PythonDelivery:
    """Calls a handler registered with ``@dynacron.handler`` in this process.

    The handler runs in a thread of its own, and the worker waits for it at most
    ``timeout_seconds``: then the attempt fails as timed out. Python cannot stop a
    thread, so a handler that overruns goes on in the background until it returns
    (its work may still happen: ``execution_id`` is the key that makes a later
    attempt's effect happen once). A worker process may hold several such threads;
    while one runs, this process does not call the handler again for the same
    execution (that attempt fails, to be retried), so it never runs twice at once
    here. Another process cannot know: the handler's own key must hold.

    With ``max_running``, at most that many handlers run in this process at once,
    however many records the worker runs at once (decision 0034): they share its
    CPU. A call waits its turn within its deadline (and fails as timed out if none
    comes); a handler that overruns holds its turn until it returns.

    How many calls are running past their timeout (``overrunning``) goes to
    ``metrics`` whenever it changes: a hung handler is counted, not only bounded.
    """

    def __init__(
        self,
        registry: HandlerRegistry,
        timeout_seconds: float | None = None,
        max_running: int | None = None,
        metrics: Metrics = NO_METRICS,
    ) -> None:
        self._registry = registry
        self._metrics = metrics
        self._overrun_count = 0
        self._timeout_seconds = timeout_seconds
        self._turns = threading.BoundedSemaphore(max_running) if max_running else None
        self._overrunning: dict[str, _HandlerRun] = {}
        self._lock = threading.Lock()

    def deliver(self, task: Task, dispatch: Dispatch, callback_token: str) -> DeliveryResult:
        assert task.handler_name is not None, "a Python delivery needs a handler name"
        function = self._registry.get(task.handler_name)
        if function is None:
            # Registered when the task was created, so this process lacks the module:
            # a deployment mistake that a later attempt (on a fixed worker) may outlive.
            return DeliveryResult.failed(
                AttemptFailure(f"no handler named {task.handler_name!r} in this worker")
            )
        context = ExecutionContext(
            execution_id=dispatch.execution_id,
            task_id=task.task_id,
            scheduled_at=dispatch.scheduled_at,
            attempt=dispatch.attempt,
            payload=task.payload,
            upstream=upstream_to_map(dispatch.upstream) if dispatch.upstream else None,
            upstreams=upstreams_to_list(dispatch.upstream) if dispatch.upstream else None,
        )
        with self._lock:
            earlier = self._overrunning.get(dispatch.execution_id)
            if earlier is not None and not earlier.done.is_set():
                return DeliveryResult.failed(
                    AttemptFailure("the handler is still running from an earlier attempt")
                )
            self._overrunning.pop(dispatch.execution_id, None)
        began = time.monotonic()
        if self._turns is not None and not self._turns.acquire(timeout=self._timeout_seconds):
            return DeliveryResult.failed(
                AttemptFailure(
                    f"handler timed out after {self._timeout_seconds:g} s waiting for its turn"
                )
            )
        run = _HandlerRun(function, context, ended=lambda: self._ended(run))
        thread = threading.Thread(
            target=contextvars.copy_context().run,
            args=(run,),
            name=f"handler-{dispatch.execution_id}",
            daemon=True,  # an overrunning handler must not keep the process alive
        )
        thread.start()
        left = None
        if self._timeout_seconds is not None:
            left = max(0.0, self._timeout_seconds - (time.monotonic() - began))
        if not run.done.wait(left) and self._overran(dispatch.execution_id, run):
            logger.warning(
                "python handler overran its timeout; left running in the background",
                extra={"execution_id": dispatch.execution_id, "handler": task.handler_name},
            )
            return DeliveryResult.failed(
                AttemptFailure(f"handler timed out after {self._timeout_seconds:g} s")
            )
        if isinstance(run.error, PermanentFailure):
            return DeliveryResult.failed(
                AttemptFailure(f"handler failed permanently: {run.error}", retryable=False)
            )
        if run.error is not None:
            error = run.error
            return DeliveryResult.failed(
                AttemptFailure(f"handler raised {type(error).__name__}: {error}")
            )
        returned = run.returned
        return DeliveryResult.succeeded(excerpt=None if returned is None else _as_text(returned))

    @property
    def overrunning(self) -> int:
        """Calls of this process still running past their timeout."""
        with self._lock:
            return self._overrun_count

    def _overran(self, execution_id: str, run: _HandlerRun) -> bool:
        """The call ``run`` passed its timeout: counted as overrunning unless it
        returned meanwhile (then False, and its answer stands)."""
        with self._lock:
            if run.done.is_set():
                return False
            self._overrunning = {
                key: other for key, other in self._overrunning.items() if not other.done.is_set()
            }
            self._overrunning[execution_id] = run
            run.overran = True
            self._overrun_count += 1
            count = self._overrun_count
        self._metrics.python_handlers_overrunning(count)
        return True

    def _ended(self, run: _HandlerRun) -> None:
        """(The handler's thread, once it returned or raised) its turn back, and the
        count down if it had overrun."""
        if self._turns is not None:
            self._turns.release()
        with self._lock:
            if not run.overran:
                return
            self._overrun_count -= 1
            count = self._overrun_count
        self._metrics.python_handlers_overrunning(count)


class _HandlerRun:
    """One Python handler call, made in its own thread; ``done`` once it returned or
    raised, and then ``ended`` is called."""

    def __init__(
        self,
        function: Callable[[ExecutionContext], object],
        context: ExecutionContext,
        ended: Callable[[], None] | None = None,
    ):
        self._function = function
        self._context = context
        self._ended = ended
        self.done = threading.Event()
        # Set (under the delivery's lock) when the worker stopped waiting for it.
        self.overran = False
        self.returned: object = None
        self.error: BaseException | None = None

    def __call__(self) -> None:
        try:
            self.returned = self._function(self._context)
        except PermanentFailure as error:
            self.error = error
        except BaseException as error:
            # SystemExit, KeyboardInterrupt and the like, raised in the handler's own
            # thread, end that call and nothing else: the attempt failed.
            logger.warning("python handler raised", exc_info=True)
            self.error = error
        finally:
            self.done.set()
            if self._ended is not None:
                self._ended()


def _as_text(returned: object) -> str:
    """The value as the execution's excerpt: JSON, or its repr, or at least its type.
    A value that renders neither way (a ``__str__`` or ``__repr__`` that raises, a
    structure too deep) is the handler's odd answer, never the worker's failure."""
    try:
        return json.dumps(returned, separators=(",", ":"), default=str)
    except Exception:  # any error of the value's own code, see above
        pass
    try:
        return repr(returned)
    except Exception:
        return f"<a {type(returned).__name__} that cannot be rendered>"
