"""An SQS batch whose records run at once, at most ``concurrency`` at a time, answered
with Powertools' partial batch response (decision 0034).

Powertools' ``AsyncBatchProcessor`` gathers every record's handler at once and
reports back the records whose handler raised, each alone. Here each record's
handler hands the record to a pool of ``concurrency`` threads: at most that many
run at a time, and they start in the batch's order (the pool's queue is first in,
first out). A record's own work stays synchronous (boto3, httpx); a thread waiting
on an answer lets the others run.
"""

from __future__ import annotations

import asyncio
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
    records = event.get("Records") or []
    pool = ThreadPoolExecutor(
        max_workers=max(1, min(concurrency, len(records))), thread_name_prefix="dynacron-record"
    )

    async def in_pool(record: SQSRecord) -> None:
        await asyncio.get_running_loop().run_in_executor(pool, record_handler, record)

    try:
        response = async_process_partial_response(
            event=event,
            record_handler=in_pool,
            processor=AsyncBatchProcessor(event_type=EventType.SQS),
            context=context,
        )
    finally:
        # Returns once every record started has ended. After a crash (a BaseException
        # out of one record), the records not started yet never start, as in a
        # process that died.
        pool.shutdown(wait=True, cancel_futures=True)
    return dict(response)
