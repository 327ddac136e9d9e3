"""An SQS batch whose records run at once, at most ``concurrency`` at a time, begun
and ended in groups, answered with Powertools' partial batch response (decision 0034).

The calling thread begins records in the batch's order, as many at once as the
pool has threads free (one store call for their begins: ``begin_wave``), and hands
what is left of each (its handler call) to a pool of ``concurrency`` threads. A
record's own work stays synchronous (boto3, httpx); a thread waiting on an answer
lets the others run. Whenever records end, the calling thread does together what
they left (one store call for their ends: ``finish``), then begins as many more.
Once every record has ended, Powertools' ``BatchProcessor`` goes over the batch and
is told how each ended: the answer reports back the records that raised, each
alone. (Before, each record began and ended on its own thread, one store call each:
in local mode, a third of a worker's CPU went to waking the threads that waited
for a shared transaction.)

The pool is kept from one batch to the next (one per calling thread: a worker loop,
or a warm Lambda's one thread), not made for each: its threads, and what each keeps
(its SQLite connection in local mode), are reused. Only a batch that ends in a
crash (a BaseException out of a record) takes its pool down with it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    process_partial_response,
)
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

# What ``begin_wave`` answers for one record: done (None), failed (the exception),
# or the rest of its work, to run on a thread of the pool; what that answers, if not
# None, is left for ``finish``.
WaveStart = Exception | Callable[[], Any] | None


def process_in_waves(
    event: dict[str, Any],
    *,
    begin_wave: Callable[[list[SQSRecord]], list[WaveStart]],
    finish: Callable[[list[Any]], list[Exception | None]],
    settled: Callable[[SQSRecord], None],
    context: Any,
    concurrency: int,
) -> dict[str, Any]:
    """Run the SQS ``event``'s records ``concurrency`` at a time, begun and ended in
    groups from this thread: whenever threads of the pool are free, the next records
    in the batch's order (as many as are free) are begun together (``begin_wave``)
    and what is left of each runs on the pool; whatever the records that ended since
    left to do is done together (``finish``). A record is ``settled`` once all its
    work is done, and reported failed if any part of it raised, alone. The answer is
    Powertools' partial batch response."""
    records = event.get("Records")
    errors: list[Exception | None] = []
    if isinstance(records, list) and records:
        waves = _Waves([SQSRecord(record) for record in records], begin_wave, finish, settled)
        errors = waves.run(_pool(max(1, concurrency)), max(1, concurrency))
    outcomes = iter(errors)

    def ended(record: SQSRecord) -> None:
        error = next(outcomes)
        if error is not None:
            raise error

    response = process_partial_response(
        event=event,
        record_handler=ended,
        processor=BatchProcessor(event_type=EventType.SQS),
        context=context,
    )
    return dict(response)


# How long the ends of records that succeeded may wait for others to end with them.
GATHER_SECONDS = 0.02


class _Waves:
    """One batch run by ``process_in_waves``: what each record came to, by index.

    Records are begun as soon as threads of the pool are free (waiting for half of it
    to be free cost slow handlers a round: 400 one-second calls drained in 4.3 s, not
    3.4 s), and the ends left to do are done once half the pool's worth has
    gathered, before a wave begins, when nothing runs any more, or
    ``GATHER_SECONDS`` after the first of them ended: each store call carries many
    records, and none waits long."""

    def __init__(
        self,
        batch: list[SQSRecord],
        begin_wave: Callable[[list[SQSRecord]], list[WaveStart]],
        finish: Callable[[list[Any]], list[Exception | None]],
        settled: Callable[[SQSRecord], None],
    ) -> None:
        self._batch = batch
        self._begin_wave = begin_wave
        self._finish = finish
        self._settled = settled
        self._errors: list[Exception | None] = [None] * len(batch)
        self._running: dict[Future[Any], int] = {}
        # Records whose calls ended with something left to do, and since when.
        self._left: list[tuple[int, Any]] = []
        self._left_since = 0.0

    def run(self, pool: ThreadPoolExecutor, concurrency: int) -> list[Exception | None]:
        started = 0
        gather = max(1, concurrency // 2)
        try:
            while started < len(self._batch) or self._running:
                free = concurrency - len(self._running)
                if started < len(self._batch) and free > 0:
                    self._finish_left()
                    wave = range(started, min(len(self._batch), started + free))
                    started = wave.stop
                    self._start(pool, wave)
                    continue
                timeout = None
                if self._left:
                    timeout = max(0.0, self._left_since + GATHER_SECONDS - time.monotonic())
                done, _ = wait(self._running, timeout, return_when=FIRST_COMPLETED)
                self._ended(done)
                if self._left and (
                    len(self._left) >= gather
                    or not self._running
                    or time.monotonic() >= self._left_since + GATHER_SECONDS
                ):
                    self._finish_left()
            self._finish_left()
        except BaseException:
            # Returns once every call started has ended. After a crash (a
            # BaseException out of one record), the records not started never start,
            # as in a process that died; the next batch gets a pool of its own.
            _pools.pool = None
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        return self._errors

    def _start(self, pool: ThreadPoolExecutor, wave: range) -> None:
        try:
            starts = self._begin_wave([self._batch[index] for index in wave])
        except Exception as error:
            starts = [error] * len(wave)
        for index, start in zip(wave, starts, strict=True):
            if callable(start):
                self._running[pool.submit(start)] = index
            else:
                self._settle(index, start)

    def _ended(self, done: set[Future[Any]]) -> None:
        """The records whose calls ended: settled, or left to finish together."""
        for call in done:
            index = self._running.pop(call)
            error = call.exception()
            if error is not None and not isinstance(error, Exception):
                raise error  # a crash: as in a process that died
            rest = call.result() if error is None else None
            if rest is None:
                self._settle(index, error)
                continue
            if not self._left:
                self._left_since = time.monotonic()
            self._left.append((index, rest))

    def _finish_left(self) -> None:
        left, self._left = self._left, []
        if not left:
            return
        try:
            finished = self._finish([rest for _, rest in left])
        except Exception as failure:
            finished = [failure] * len(left)
        for (index, _), outcome in zip(left, finished, strict=True):
            self._settle(index, outcome)

    def _settle(self, index: int, error: Exception | None) -> None:
        self._errors[index] = error
        self._settled(self._batch[index])


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
