"""The deployed stack's fixtures: the session's synthesised templates (one synthesis,
shared with tests/infra), created in moto once per test module.

A fresh shard's first tick walks back a week of due-index buckets; one stack per
module pays that once. Scenarios sharing a stack keep to their own tasks (and
mostly their own tenants), and read time from the stack's clock.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import moto.sqs.models
import pytest
from moto import mock_aws

from dynacron.domain.clock import SettableClock
from dynacron.local.aws import REGION, speed_up_moto_transactions
from tests.conftest import START
from tests.deployed.harness import Deployment, create_stack
from tests.infra.conftest import Synthesized, synthesized, template, user_template

__all__ = ["synthesized", "template", "user_template"]


@pytest.fixture(scope="module")
def stack_clock() -> SettableClock:
    return SettableClock(START)


@pytest.fixture(scope="module")
def emulator(stack_clock: SettableClock) -> Iterator[None]:
    """In-process moto for one module, with SQS on the stack's clock."""
    with pytest.MonkeyPatch.context() as patch:
        for name in ("AWS_ENDPOINT_URL", "AWS_PROFILE", "HTTPS_PROXY", "HTTP_PROXY"):
            patch.delenv(name, raising=False)
        patch.setenv("AWS_ACCESS_KEY_ID", "testing")
        patch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        patch.setenv("AWS_DEFAULT_REGION", REGION)

        # Deviation: SQS's delays and visibility timeouts run on the test's clock,
        # which the tick's sleep and the scenarios move (no long polls are used).
        def now_millis(dt: Any = None) -> float:
            return float((dt or stack_clock.now()).timestamp() * 1000)

        patch.setattr(moto.sqs.models, "unix_time_millis", now_millis)
        speed_up_moto_transactions()
        with mock_aws():
            yield


@pytest.fixture(scope="module")
def deployed(
    emulator: None,
    synthesized: Synthesized,
    template: dict[str, Any],
    stack_clock: SettableClock,
) -> Deployment:
    """The stack ``make synth`` deploys."""
    return create_stack(
        "dynacron-deployed", template, stack_clock, Path(synthesized.assembly.directory)
    )


@pytest.fixture(scope="module")
def user_deployed(
    emulator: None,
    synthesized: Synthesized,
    user_template: dict[str, Any],
    stack_clock: SettableClock,
) -> Deployment:
    """A user's own stack: ``DynacronScheduler`` with their worker code and handlers."""
    return create_stack(
        "dynacron-user", user_template, stack_clock, Path(synthesized.assembly.directory)
    )
