"""Outside checks over the synthesised templates: cfn-lint, and proof that cdk-nag is live."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App, Stack, Validations
from aws_cdk import aws_sqs as sqs
from cdk_nag import AwsSolutionsChecks
from cfnlint.api import lint_all
from cfnlint.template.template import Template

from tests.infra.conftest import Synthesized

# CDK adds an explicit DependsOn from each function to its role's policy, which
# cfn-lint finds redundant with the GetAtt of the role; harmless, and CDK's choice.
ACCEPTED_WARNINGS = {"W3005"}


@pytest.fixture(scope="module")
def getatts_built_once() -> Iterator[None]:
    """cfn-lint builds a template's valid GetAtts (each resource's, in every region)
    anew for every ``Fn::GetAtt`` it checks: half of a lint's time, for a result fixed
    by the template's regions and resources, which its rules only read. Built once
    per template and regions here: the same rules, regions and findings."""
    build = Template.get_valid_getatts

    def built_once(self: Template) -> Any:
        built = self.__dict__.setdefault("_getatts_built", {})
        key = tuple(self.regions)
        if key not in built or built[key][0] is not self.context:
            built[key] = (self.context, build(self))
        return built[key][1]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Template, "get_valid_getatts", built_once)
        yield


@pytest.mark.parametrize("stack", ["default", "user"])
@pytest.mark.usefixtures("getatts_built_once")
def test_cfn_lint_finds_no_error(synthesized: Synthesized, stack: str) -> None:
    name = synthesized.default_stack if stack == "default" else synthesized.user_stack
    matches = lint_all(json.dumps(synthesized.template(name)))
    errors = [f"{m.rule.id} {m.message}" for m in matches if m.rule.id.startswith("E")]
    assert errors == []
    # Informational hints (I...) are style advice on generated code; warnings count.
    warnings = {m.rule.id for m in matches if m.rule.id.startswith("W")}
    unexpected = warnings - ACCEPTED_WARNINGS
    assert unexpected == set(), [str(m) for m in matches if m.rule.id in unexpected]


def test_cdk_nag_fails_synthesis_on_a_finding_nobody_acknowledged(tmp_path: Path) -> None:
    """The session's clean synthesis means something only if the pack really checks."""
    app = App(outdir=str(tmp_path))
    stack = Stack(app, "Careless")
    sqs.Queue(stack, "Unencrypted", encryption=sqs.QueueEncryption.UNENCRYPTED)
    Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    with pytest.raises(RuntimeError, match="ValidationFailed"):
        app.synth()
    report = json.loads((tmp_path / "validation-report.json").read_text())
    rules = {v["ruleName"] for r in report["pluginReports"] for v in r["violations"]}
    assert {"AwsSolutions-SQS2", "AwsSolutions-SQS3", "AwsSolutions-SQS4"} <= rules
