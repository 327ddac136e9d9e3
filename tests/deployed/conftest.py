"""The deployed stack's fixtures: the session's synthesised templates (one synthesis,
shared with tests/infra), created in moto for each test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import moto.sqs.models
import pytest

from dynacron.domain.clock import SettableClock
from tests.deployed.harness import Deployment, create_stack
from tests.infra.conftest import Synthesized, synthesized, template, user_template

__all__ = ["synthesized", "template", "user_template"]


@pytest.fixture
def sqs_on_the_clock(monkeypatch: pytest.MonkeyPatch, clock: SettableClock) -> None:
    """Deviation: SQS's delays and visibility timeouts run on the test's clock, which
    the tick's sleep and the test move (long polls, on the wall clock, are not used)."""

    def now_millis(dt: Any = None) -> float:
        return (dt or clock.now()).timestamp() * 1000

    monkeypatch.setattr(moto.sqs.models, "unix_time_millis", now_millis)


@pytest.fixture
def deployed(
    aws: tuple[Any, Any],
    synthesized: Synthesized,
    template: dict[str, Any],
    clock: SettableClock,
    sqs_on_the_clock: None,
) -> Iterator[Deployment]:
    """The stack ``make synth`` deploys."""
    yield create_stack(
        "dynacron-deployed", template, clock, Path(synthesized.assembly.directory)
    )


@pytest.fixture
def user_deployed(
    aws: tuple[Any, Any],
    synthesized: Synthesized,
    user_template: dict[str, Any],
    clock: SettableClock,
    sqs_on_the_clock: None,
) -> Iterator[Deployment]:
    """A user's own stack: ``DynacronScheduler`` with their worker code and handlers."""
    yield create_stack("dynacron-user", user_template, clock, Path(synthesized.assembly.directory))
