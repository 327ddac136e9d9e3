"""An SQS batch whose records run at once, at most ``concurrency`` at a time, answered
with Powertools' partial batch response (decision 0034).

Powertools' ``AsyncBatchProcessor`` gathers every record's handler at once and
reports back the records whose handler raised, each alone. Here each record's
handler hands the record to a pool of ``concurrency`` threads: at most that many
run at a time, and they start in the batch's order (the pool's queue is first in,
first out). A record's own work stays synchronous (boto3, httpx); a thread waiting
on an answer lets the others run.

The pool is kept from one batch to the next (one per calling thread: a worker loop,
or a warm Lambda's one thread), not made for each: its threads, and what each keeps
(its SQLite connection in local mode, opened and closed per batch before), are
reused. Only a batch that ends in a crash (a BaseException out of a record) takes
its pool down with it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from aws_lambda_powertools.utilities.batch import (
    AsyncBatchProcessor,
    EventType,
    async_process_partial_response,
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
    pool = _pool(max(1, concurrency))

    async def in_pool(record: SQSRecord) -> None:
        await asyncio.get_running_loop().run_in_executor(pool, record_handler, record)

    try:
        # Returns once every record has ended (the processor gathers them all).
        response = async_process_partial_response(
            event=event,
            record_handler=in_pool,
            processor=AsyncBatchProcessor(event_type=EventType.SQS),
            context=context,
        )
    except BaseException:
        # Returns once every record started has ended. After a crash (a BaseException
        # out of one record), the records not started yet never start, as in a
        # process that died; the next batch gets a pool of its own.
        _pools.pool = None
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    return dict(response)


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
