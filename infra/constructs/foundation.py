"""What the tick, worker and API constructs build on."""

from __future__ import annotations

from dataclasses import dataclass

from infra.config import SchedulerConfig
from infra.constructs.functions import FunctionKit
from infra.constructs.queues import Queues
from infra.constructs.storage import Storage


@dataclass(frozen=True)
class Foundation:
    """The deployment's settings, the shared function kit, and the tables and queues."""

    config: SchedulerConfig
    kit: FunctionKit
    storage: Storage
    queues: Queues
