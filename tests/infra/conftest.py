"""One synthesis per test session: starting jsii and synthesising cost seconds.

The session's app holds two stacks, synthesised together: the stack ``make synth``
deploys (default context, stage "test") and a user's own stack built around the
reusable ``DynacronScheduler``, with its own worker code and non-default settings.
The layers come from the source tree only (the dependencies layer is empty), so
no test needs the network; ``make synth`` builds the real dependencies layer.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

# jsii warns at length about the Node.js version on every start; the tests do not
# depend on it. Set before aws_cdk starts its jsii runtime.
os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")

from aws_cdk import App, Stack, Validations, cx_api
from aws_cdk import aws_lambda as lambda_
from aws_cdk.assertions import Template

from infra.app import build_app
from infra.config import SchedulerConfig
from infra.constructs.scheduler import DynacronScheduler
from infra.layer import LayerAssets, build_package_layer

STAGE = "test"
ALARM_EMAIL = "alarms@dynacron.invalid"
USER_VPC_ID = "vpc-0a1b2c3d4e5f60718"
USER_SUBNETS = ("subnet-0a1b2c3d4e5f60001", "subnet-0a1b2c3d4e5f60002")
USER_SECURITY_GROUP = "sg-0a1b2c3d4e5f60003"
# The operator's own key (decision 0059): the user's stack encrypts with it.
USER_KMS_KEY_ARN = "arn:aws:kms:eu-west-1:123456789012:key/0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b"
USER_CONFIG = SchedulerConfig(
    stage="prod",
    shard_count=7,
    billing="provisioned",
    worker_batch_window_seconds=2,
    worker_max_concurrency=5,
    claim_memory_mb=1024,
    claim_reserved_concurrency=7,
    # History kept a week, not the default 90 days (the executions' TTL).
    execution_retention_days=7,
    # No WAF web ACL: the stack still synthesises, with cdk-nag's APIG3 acknowledged.
    api_firewall=False,
    # The worker in the user's VPC, by ids (no lookup), and a private range tenants
    # may be granted (decision 0050).
    private_networks="10.20.0.0/16, fd12:3456::/48",
    worker_vpc_id=USER_VPC_ID,
    worker_subnet_ids=",".join(USER_SUBNETS),
    worker_security_group_ids=USER_SECURITY_GROUP,
    kms_key_arn=USER_KMS_KEY_ARN,
)
USER_WORKER_HANDLER = "my_worker.handler"
# The user's Python handler: its module is what my_worker imports.
USER_HANDLER = "my_jobs.greet"
USER_JOBS = """import dynacron

CALLS = []


@dynacron.handler("my_jobs.greet")
def greet(run: dynacron.ExecutionContext) -> None:
    CALLS.append((run.execution_id, run.payload))
"""


@dataclass(frozen=True)
class Synthesized:
    app: App
    assembly: cx_api.CloudAssembly
    default_stack: str
    user_stack: str

    def template(self, stack_name: str) -> dict[str, Any]:
        artifact = self.assembly.get_stack_by_name(stack_name)
        return dict(json.loads(Path(artifact.template_full_path).read_text()))

    def assertions(self, stack_name: str) -> Template:
        return Template.from_json(self.template(stack_name))

    def acknowledgments(self) -> dict[str, dict[str, str]]:
        """cdk-nag findings acknowledged, by construct path: rule -> reason."""
        found: dict[str, dict[str, str]] = {}
        for construct in self.app.node.find_all():
            for entry in construct.node.metadata:
                if entry.type == Validations.ACKNOWLEDGED_RULES_METADATA_KEY:
                    found.setdefault(construct.node.path, {}).update(entry.data)
        return found


_SYNTHESIZED: list[Synthesized] = []


@pytest.fixture(scope="session")
def synthesized(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    return synthesized_once(tmp_path_factory)


def synthesized_once(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    """The session's one synthesis (tests/deployed uses it too)."""
    if not _SYNTHESIZED:
        _SYNTHESIZED.append(synthesize(tmp_path_factory))
    return _SYNTHESIZED[0]


def synthesize(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    root = tmp_path_factory.mktemp("infra")
    dependencies = root / "dependencies"
    (dependencies / "python").mkdir(parents=True)
    layers = LayerAssets(dependencies=dependencies, package=build_package_layer(root / "package"))
    user_code = root / "user-worker"
    user_code.mkdir()
    (user_code / "my_worker.py").write_text(
        "import my_jobs  # noqa: F401  (registers the user's handlers)\n"
        "from dynacron.entry.functions import worker as handler\n"
    )
    (user_code / "my_jobs.py").write_text(USER_JOBS)
    app = build_app(
        layers,
        context={"stage": STAGE, "alarm_email": ALARM_EMAIL},
        outdir=str(root / "cdk.out"),
    )
    user_stack = Stack(app, "UserApp")
    DynacronScheduler(
        user_stack,
        "Scheduler",
        layers=layers,
        config=USER_CONFIG,
        worker_code=lambda_.Code.from_asset(str(user_code)),
        worker_handler=USER_WORKER_HANDLER,
    )
    # Synthesis runs the cdk-nag AwsSolutions pack and fails on any finding
    # that is not acknowledged.
    assembly = app.synth()
    return Synthesized(
        app=app, assembly=assembly, default_stack=f"Dynacron-{STAGE}", user_stack="UserApp"
    )


@pytest.fixture(scope="session")
def template(synthesized: Synthesized) -> dict[str, Any]:
    return synthesized.template(synthesized.default_stack)


@pytest.fixture(scope="session")
def user_template(synthesized: Synthesized) -> dict[str, Any]:
    return synthesized.template(synthesized.user_stack)


def resources_of(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    """Logical id -> properties of every resource of one CloudFormation type."""
    return {
        logical_id: resource.get("Properties", {})
        for logical_id, resource in template["Resources"].items()
        if resource["Type"] == kind
    }
