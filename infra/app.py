"""The CDK app. ``make synth`` runs it as ``python -m infra.app [-c key=value ...]``.

Run it as a module from the repository root: as a script, Python would put infra/
first on the import path, where infra/constructs would hide the constructs library.
Synthesis needs no AWS credentials and no Docker: the stack is environment-agnostic
(the CDK CLI fills in account and region at deploy time) and the layers are built
on this machine (see infra/layer.py).

Run by the CDK CLI, the CLI hands over cdk.json's context and its ``-c`` flags and
says where to write; run directly, this module reads them itself and writes cdk.out/.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from aws_cdk import App, Validations, cx_api
from cdk_nag import AwsSolutionsChecks

from infra.config import SchedulerConfig
from infra.layer import ROOT, LayerAssets, build_layers
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
    """Error annotations that constructs left on the stacks (the CDK CLI would refuse them).

    cdk-nag findings do not get this far: they fail ``synth`` itself.
    """
    return [
        f"{message.id}: {message.entry.data}"
        for stack in assembly.stacks
        for message in stack.messages
        if message.level == cx_api.SynthesisMessageLevel.ERROR
    ]


def command_line_context(argv: list[str], cdk_json: Path = ROOT / "cdk.json") -> dict[str, Any]:
    """cdk.json's context, overridden by ``-c key=value`` flags, as the CDK CLI merges them."""
    parser = argparse.ArgumentParser(prog="python -m infra.app")
    parser.add_argument("-c", "--context", action="append", default=[], metavar="KEY=VALUE")
    flags = parser.parse_args(argv).context
    context: dict[str, Any] = dict(json.loads(cdk_json.read_text()).get("context", {}))
    for flag in flags:
        key, separator, value = flag.partition("=")
        if not separator:
            parser.error(f"context {flag!r} is not KEY=VALUE")
        context[key] = value
    return context


def main(argv: list[str]) -> int:
    under_cli = "CDK_OUTDIR" in os.environ
    app = build_app(
        build_layers(),
        context=None if under_cli else command_line_context(argv),
        outdir=None if under_cli else str(ROOT / "cdk.out"),
    )
    try:
        assembly = app.synth()
    except RuntimeError as failure:  # jsii's wrapper around a failed validation
        print(str(failure).split("\n    at ")[0], file=sys.stderr)
        return 1
    errors = synth_errors(assembly)
    for error in errors:
        print(error, file=sys.stderr)
    print(f"{'FAILED' if errors else 'synthesized'}: {assembly.directory}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
