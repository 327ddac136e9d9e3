"""The CDK app. ``make synth`` runs it as ``python -m infra.app`` and it writes cdk.out/.

Run it as a module from the repository root: as a script, Python would put infra/
first on the import path, where infra/constructs would hide the constructs library.
Synthesis needs no AWS credentials: the stack is environment-agnostic, and the CDK
CLI fills in the account and region at deploy time.
"""

from __future__ import annotations

import sys
from typing import Any

from aws_cdk import App, Validations, cx_api
from cdk_nag import AwsSolutionsChecks

from infra.config import SchedulerConfig
from infra.layer import LayerAssets, build_layers
from infra.stack import DynacronStack


def build_app(
    layers: LayerAssets, *, context: dict[str, Any] | None = None, outdir: str | None = None
) -> App:
    """The app with its one stack, checked by the cdk-nag AwsSolutions pack."""
    app = App(context=context, outdir=outdir)
    config = SchedulerConfig.from_context(app.node)
    DynacronStack(
        app,
        f"Dynacron-{config.stage}",
        config=config,
        layers=layers,
        description=f"dynacron task scheduler ({config.stage})",
    )
    Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return app


def synth_errors(assembly: cx_api.CloudAssembly) -> list[str]:
    """Error annotations (cdk-nag findings among them) across the assembly's stacks."""
    return [
        f"{message.id}: {message.entry.data}"
        for stack in assembly.stacks
        for message in stack.messages
        if message.level == cx_api.SynthesisMessageLevel.ERROR
    ]


def main() -> int:
    assembly = build_app(build_layers()).synth()
    errors = synth_errors(assembly)
    for error in errors:
        print(error, file=sys.stderr)
    print(f"{'FAILED' if errors else 'synthesized'}: {assembly.directory}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
