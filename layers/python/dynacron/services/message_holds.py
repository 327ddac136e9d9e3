"""A worker keeps the messages of its batch invisible a short while at a time, so
that the messages of a worker that dies come back within a minute (decision 0038).

The dispatch queue's own visibility timeout stays six worker timeouts, as the
event source mapping needs; as its invocation starts, the worker lowers each
message's to ``LeaseTerms.message_hold`` and renews that every
``heartbeat_interval`` until the record has ended. A worker that dies renews
nothing: its messages come back once the leases it began are abandoned, and the
worker that receives one takes the lease over (``ExecutionRunner``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from dynacron.domain.executions.execution import LeaseTerms
from dynacron.ports import DispatchQueue

logger = logging.getLogger("dynacron")

# On the way out, wait at most this long for a renewal under way: a call left
# running finishes when the next invocation thaws the process, and holds only
# messages already deleted (skipped) or reported back as failed.
_JOIN_SECONDS = 2.0


class MessageHolds:
    """Holds the messages of one batch at a time, from one thread per batch."""

    def __init__(self, queue: DispatchQueue, terms: LeaseTerms) -> None:
        self._queue = queue
        self._seconds = terms.message_hold.total_seconds()
        self._every = terms.heartbeat_interval.total_seconds()

    @contextmanager
    def holding(self, receipt_handles: Sequence[str]) -> Iterator[Callable[[str], None]]:
        """Hold these messages now and at every interval until released, or until
        the block ends; yields ``release(receipt_handle)``, called as a record ends."""
        waiting = dict.fromkeys(receipt_handles)
        lock = threading.Lock()
        ended = threading.Event()

        def release(receipt_handle: str) -> None:
            with lock:
                waiting.pop(receipt_handle, None)

        def renew() -> None:
            while True:
                with lock:
                    handles = list(waiting)
                if handles:
                    self._hold(handles)
                if ended.wait(self._every):
                    return

        thread = threading.Thread(target=renew, name="message-holds", daemon=True)
        thread.start()
        try:
            yield release
        finally:
            ended.set()
            thread.join(_JOIN_SECONDS)

    def _hold(self, handles: list[str]) -> None:
        try:
            held = self._queue.hold(handles, self._seconds)
        except Exception:
            # The next interval tries again; until then the last hold (or the
            # queue's own timeout) keeps the messages.
            logger.warning("holding messages failed; trying again", exc_info=True)
            return
        if held < len(handles):
            logger.info(
                "some messages could not be held", extra={"asked": len(handles), "held": held}
            )
