"""The deployed stack's fixtures: the session's synthesised templates (the synthesis
tests/infra uses, or a cloud assembly named by ``DYNACRON_TIER_ASSEMBLY``, which
``verify_grants.py`` synthesises once for all its runs), created in moto once per
test module.

A fresh shard's first tick walks back a week of due-index buckets; one stack per
module pays that once. Scenarios sharing a stack keep to their own tasks (and
mostly their own tenants), and read time from the stack's clock.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import moto.sqs.models
import pytest
from moto import mock_aws

from dynacron.domain.clock import SettableClock
from dynacron.local.aws import REGION, serialise_in_process_dynamodb, speed_up_moto_transactions
from tests.conftest import START
from tests.deployed.harness import DEFAULT_STACK, USER_STACK, Deployment, create_stack

ASSEMBLY_VAR = "DYNACRON_TIER_ASSEMBLY"
# The stack names synthesis gives the two stacks (tests/infra/conftest.py).
SYNTHESIZED_STACKS = {DEFAULT_STACK: "Dynacron-test", USER_STACK: "UserApp"}


@dataclass(frozen=True)
class Assembly:
    directory: Path

    def template(self, stack: str) -> dict[str, Any]:
        path = self.directory / f"{SYNTHESIZED_STACKS[stack]}.template.json"
        return dict(json.loads(path.read_text()))


@pytest.fixture(scope="session")
def assembly(tmp_path_factory: pytest.TempPathFactory) -> Assembly:
    if os.environ.get(ASSEMBLY_VAR):
        return Assembly(Path(os.environ[ASSEMBLY_VAR]))
    # Imported here: aws_cdk starts a jsii runtime, which a run on a given assembly skips.
    from tests.infra.conftest import synthesized_once

    return Assembly(Path(synthesized_once(tmp_path_factory).assembly.directory))


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

        def now_seconds(dt: Any = None) -> float:
            return now_millis(dt) / 1000

        patch.setattr(moto.sqs.models, "unix_time_millis", now_millis)
        # Retention too: a message sent on the stack's clock is judged by the same.
        patch.setattr(moto.sqs.models, "unix_time", now_seconds)
        speed_up_moto_transactions()
        serialise_in_process_dynamodb()
        with mock_aws():
            yield


@pytest.fixture(scope="module")
def deployed(emulator: None, assembly: Assembly, stack_clock: SettableClock) -> Deployment:
    """The stack ``make synth`` deploys."""
    return create_stack(
        DEFAULT_STACK, assembly.template(DEFAULT_STACK), stack_clock, assembly.directory
    )


@pytest.fixture(scope="module")
def user_deployed(emulator: None, assembly: Assembly, stack_clock: SettableClock) -> Deployment:
    """A user's own stack: ``DynacronScheduler`` with their worker code and handlers."""
    return create_stack(USER_STACK, assembly.template(USER_STACK), stack_clock, assembly.directory)
