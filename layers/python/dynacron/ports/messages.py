"""A dispatch as a queue message: what services need of the wire format.

``adapters.messages`` holds the format itself (the same on SQS and SQLite).
"""

from __future__ import annotations

from collections.abc import Callable

from dynacron.domain.executions.execution import Dispatch

# A queue takes at most this many messages in one send request (SQS's limit;
# the SQLite queue keeps it too). Larger sends are split by the adapter.
SEND_BATCH_LIMIT = 10

# Reads a message body back into its dispatch; raises ValueError, KeyError,
# TypeError or AttributeError for a body that is not one.
DecodeDispatch = Callable[[str], Dispatch]
