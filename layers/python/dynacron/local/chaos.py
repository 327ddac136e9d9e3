"""Fault injection for the crash tests and the soak: crashes at step boundaries,
DynamoDB throttling, SQS duplicates and partial batch failures.

Everything is seeded, so a failing run can be replayed. Only tests and
``dynacron local --chaos-seed`` use this module; nothing that ships to Lambda does.
"""

from __future__ import annotations

import os
import random
import signal
import threading
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from dynacron.ports.faults import Boundary

THROTTLED = "ProvisionedThroughputExceededException"


class InjectedCrash(BaseException):
    """The pipeline stops here, as if the process died.

    A BaseException: no ``except Exception`` of ours, of Powertools' idempotency or
    of its batch processor catches it, so nothing is cleaned up, exactly as after a
    real crash. Tests catch it where the "process" ends.
    """


@dataclass(frozen=True)
class ChaosSettings:
    seed: int
    # Probability of dying at each boundary crossing.
    crash_rate: float = 0.0
    # Probability that a DynamoDB call fails as throttled.
    throttle_rate: float = 0.0
    # Probability that a received SQS message is also delivered to another receiver.
    duplicate_rate: float = 0.0
    # Probability that an entry of SendMessageBatch is reported failed.
    send_failure_rate: float = 0.0
    # Where crashes may happen; empty means every boundary.
    boundaries: frozenset[Boundary] = frozenset()

    @property
    def client_faults(self) -> bool:
        """Whether faults are injected into AWS clients (the emulator store only)."""
        return bool(self.throttle_rate or self.duplicate_rate or self.send_failure_rate)


class SeededChance:
    """A seeded coin, safe to toss from several threads."""

    def __init__(self, seed: int) -> None:
        self._random = random.Random(seed)
        self._lock = threading.Lock()

    def __call__(self, probability: float) -> bool:
        if probability <= 0:
            return False
        with self._lock:
            return self._random.random() < probability


def kill_this_process() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def raise_crash() -> None:
    raise InjectedCrash()


class CrashAt:
    """A ``Faults`` that stops the pipeline at chosen boundaries.

    ``after`` skips that many crossings first (to crash mid-batch); ``times``
    bounds how many crashes happen; ``rate`` crashes at random instead.
    """

    def __init__(
        self,
        boundaries: Collection[Boundary] = (),
        *,
        after: int = 0,
        times: int = 1,
        rate: float = 1.0,
        chance: SeededChance | None = None,
        crash: Callable[[], None] = raise_crash,
    ) -> None:
        self._boundaries = frozenset(boundaries)
        self._skip = after
        self._times = times
        self._rate = rate
        self._chance = chance or SeededChance(0)
        self._crash = crash
        self._lock = threading.Lock()
        self.crossed: list[Boundary] = []
        self.crashed: list[Boundary] = []

    def reached(self, boundary: Boundary) -> None:
        with self._lock:
            self.crossed.append(boundary)
            if self._boundaries and boundary not in self._boundaries:
                return
            if self._skip > 0:
                self._skip -= 1
                return
            if len(self.crashed) >= self._times or not self._chance(self._rate):
                return
            self.crashed.append(boundary)
        self._crash()


class _Proxy:
    def __init__(self, client: Any) -> None:
        self._client = client

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


class ThrottlingDynamoDB(_Proxy):
    """A DynamoDB client whose calls sometimes fail as throttled, before reaching the table."""

    def __init__(self, client: Any, chance: SeededChance, rate: float) -> None:
        super().__init__(client)
        self._chance = chance
        self._rate = rate
        self.throttled = 0

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._client, name)
        if name.startswith("_") or not callable(attribute) or name in ("meta", "exceptions"):
            return attribute

        def call(*args: Any, **kwargs: Any) -> Any:
            if self._chance(self._rate):
                self.throttled += 1
                raise ClientError(
                    {"Error": {"Code": THROTTLED, "Message": "injected throttling"}},
                    _operation_name(name),
                )
            return attribute(*args, **kwargs)

        return call


class UnreliableSQS(_Proxy):
    """An SQS client that delivers some messages twice and fails some batch entries."""

    def __init__(
        self, client: Any, chance: SeededChance, duplicate_rate: float, send_failure_rate: float
    ) -> None:
        super().__init__(client)
        self._chance = chance
        self._duplicate_rate = duplicate_rate
        self._send_failure_rate = send_failure_rate
        self.duplicated = 0
        self.send_failures = 0

    def receive_message(self, **kwargs: Any) -> dict[str, Any]:
        response: dict[str, Any] = self._client.receive_message(**kwargs)
        for message in response.get("Messages", []):
            if self._chance(self._duplicate_rate):
                # Visible again at once: another receive gets it too, with another
                # receipt handle, as when SQS delivers a message twice.
                self._client.change_message_visibility(
                    QueueUrl=kwargs["QueueUrl"],
                    ReceiptHandle=message["ReceiptHandle"],
                    VisibilityTimeout=0,
                )
                self.duplicated += 1
        return response

    def send_message_batch(self, **kwargs: Any) -> dict[str, Any]:
        kept: list[dict[str, Any]] = []
        failed: list[dict[str, Any]] = []
        for entry in kwargs["Entries"]:
            (failed if self._chance(self._send_failure_rate) else kept).append(entry)
        self.send_failures += len(failed)
        response: dict[str, Any] = {"Successful": [], "Failed": []}
        if kept:
            response = self._client.send_message_batch(**{**kwargs, "Entries": kept})
        response.setdefault("Failed", [])
        response["Failed"] = list(response["Failed"]) + [
            {"Id": e["Id"], "SenderFault": False, "Code": "InternalError", "Message": "injected"}
            for e in failed
        ]
        return response


def _operation_name(method: str) -> str:
    return "".join(part.capitalize() for part in method.split("_"))


def chaotic_clients(dynamodb: Any, sqs: Any, chaos: ChaosSettings) -> tuple[Any, Any]:
    chance = SeededChance(chaos.seed)
    return (
        ThrottlingDynamoDB(dynamodb, chance, chaos.throttle_rate),
        UnreliableSQS(sqs, chance, chaos.duplicate_rate, chaos.send_failure_rate),
    )
