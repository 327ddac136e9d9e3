"""An SQS batch whose records run at once, at most ``concurrency`` at a time, answered
with Powertools' partial batch response (decision 0034).

Every record's handler is handed to a pool of ``concurrency`` threads at once: at
most that many run at a time, and they start in the batch's order (the pool's
queue is first in, first out). A record's own work stays synchronous (boto3,
httpx); a thread waiting on an answer lets the others run. Once every record has
ended, Powertools' ``BatchProcessor`` goes over the batch and is told how each
ended: the answer reports back the records whose handler raised, each alone, as
Powertools' ``AsyncBatchProcessor`` gathering them would (it did, before: an event
loop per batch and a hand-over to it per record, for the same answer).

The pool is kept from one batch to the next (one per calling thread: a worker loop,
or a warm Lambda's one thread), not made for each: its threads, and what each keeps
(its SQLite connection in local mode, opened and closed per batch before), are
reused. Only a batch that ends in a crash (a BaseException out of a record) takes
its pool down with it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from typing import Any

from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    process_partial_response,
)
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord


def process_at_once(
    event: dict[str, Any],
    record_handler: Callable[[SQSRecord], None],
    *,
    context: Any,
    concurrency: int,
) -> dict[str, Any]:
    """Run ``record_handler`` on every record of the SQS ``event``, ``concurrency`` at
    a time; the answer lists the records whose handler raised (``batchItemFailures``)."""
    records = event.get("Records")
    calls: list[Future[None]] = []
    if isinstance(records, list) and records:
        pool = _pool(max(1, concurrency))
        calls = [pool.submit(record_handler, SQSRecord(record)) for record in records]
        try:
            _wait_for_all(calls)
        except BaseException:
            # Returns once every record started has ended. After a crash (a
            # BaseException out of one record), the records not started yet never
            # start, as in a process that died; the next batch gets a pool of its own.
            _pools.pool = None
            pool.shutdown(wait=True, cancel_futures=True)
            raise
    outcomes = iter(calls)

    def ended(record: SQSRecord) -> None:
        """How the record's handler ended, told to Powertools in the batch's order."""
        error = next(outcomes).exception()
        if error is not None:
            raise error

    response = process_partial_response(
        event=event,
        record_handler=ended,
        processor=BatchProcessor(event_type=EventType.SQS),
        context=context,
    )
    return dict(response)


def _wait_for_all(calls: list[Future[None]]) -> None:
    """Until every call has ended; a call that raised a BaseException that is not an
    Exception (a crash) cancels those not started and is raised at once."""
    pending = set(calls)
    while pending:
        done, pending = wait(pending, return_when=FIRST_EXCEPTION)
        for call in done:
            error = call.exception()
            if error is not None and not isinstance(error, Exception):
                for waiting in pending:
                    waiting.cancel()
                raise error


_pools = threading.local()


def _pool(concurrency: int) -> ThreadPoolExecutor:
    """This thread's pool of ``concurrency`` threads, made on first use (or when the
    concurrency changed) and kept; its threads start as records need them."""
    pool: ThreadPoolExecutor | None = getattr(_pools, "pool", None)
    if pool is None or getattr(_pools, "concurrency", None) != concurrency:
        if pool is not None:
            pool.shutdown(wait=False)
        pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="dynacron-record")
        _pools.pool, _pools.concurrency = pool, concurrency
    return pool
