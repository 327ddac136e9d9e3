"""How a long poll on the SQLite queues hears of a send in its own process at once,
instead of at its next poll (a send from another process is seen by polling the
file's ``data_version``)."""

from __future__ import annotations

import threading
from pathlib import Path


class Signal:
    """Wakes this process's long polls on one database file when a message may
    have become visible: a counter, so a notify between a look and a wait is not lost."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self.generation = 0

    def notify(self) -> None:
        with self._condition:
            self.generation += 1
            self._condition.notify_all()

    def wait(self, generation: int, timeout: float) -> bool:
        """True once the counter has moved past ``generation``; False after ``timeout``."""
        with self._condition:
            return self._condition.wait_for(lambda: self.generation != generation, timeout)


_signals: dict[Path, Signal] = {}
_signals_lock = threading.Lock()


def signal_for(path: Path) -> Signal:
    # One per file, not per SqliteQueues: a sender and a waiter built apart still meet.
    key = path.resolve()
    with _signals_lock:
        return _signals.setdefault(key, Signal())
