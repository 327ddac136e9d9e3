"""Least privilege, both ways: remove each granted action in turn and see whether the
deployed tier notices.

For every role of the stack ``make synth`` deploys, every statement of its policies
and every action of that statement, run ``pytest tests/deployed`` with that one
action removed (the harness reads ``DYNACRON_GRANT_MUTATION`` when it loads the
role). A removal the tier notices is a grant a scenario needs. A removal it does
not notice is either a grant nothing needs (remove it from infra/constructs) or a
path no scenario covers (add the scenario). The templates are synthesised once;
runs go ``-j`` at a time.

    python -m tests.deployed.verify_grants [-j 2] [--only SUBSTRING]

Exit status 1 when any removal goes unnoticed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tests.deployed.conftest import ASSEMBLY_VAR, SYNTHESIZED_STACKS
from tests.deployed.harness import DEFAULT_STACK, MUTATION_VAR, Mutation

ROOT = Path(__file__).resolve().parents[2]
# Grants that Lambda itself uses, not the function's code: the tier cannot notice
# their removal, and each is needed on AWS.
LAMBDA_RUNTIME_ACTIONS = {"logs:CreateLogStream", "logs:PutLogEvents"}
# What the SQS event source mapping's poller calls besides receive and delete (which
# the tier's poller makes with the function's role): CDK's grantConsumeMessages.
EVENT_SOURCE_ACTIONS = {
    "sqs:ChangeMessageVisibility",
    "sqs:GetQueueAttributes",
    "sqs:GetQueueUrl",
}


@dataclass(frozen=True)
class Outcome:
    mutation: Mutation
    noticed: bool
    by: str  # the first test that failed, and how
    seconds: float


class Factory:
    """The part of pytest's TempPathFactory that synthesis uses."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def mktemp(self, name: str) -> Path:
        path = Path(tempfile.mkdtemp(prefix=name, dir=self.root))
        return path


def synthesize(root: Path) -> Path:
    from tests.infra.conftest import synthesize as synthesize_app

    return Path(synthesize_app(Factory(root)).assembly.directory)  # type: ignore[arg-type]


def mutations(template: dict[str, Any]) -> Iterator[tuple[Mutation, str]]:
    """Every (policy, statement, action) of the template, with who it belongs to."""
    resources_by_id = template["Resources"]
    # (role, queue) of each SQS event source mapping: its poller uses the role.
    sources = {
        (
            resources_by_id[m["Properties"]["FunctionName"]["Ref"]]["Properties"]["Role"][
                "Fn::GetAtt"
            ][0],
            json.dumps(m["Properties"]["EventSourceArn"]),
        )
        for m in resources_by_id.values()
        if m["Type"] == "AWS::Lambda::EventSourceMapping"
    }
    for logical_id, resource in sorted(template["Resources"].items()):
        if resource["Type"] != "AWS::IAM::Policy":
            continue
        properties = resource["Properties"]
        role_ids = [r["Ref"] for r in properties["Roles"]]
        roles = ",".join(role_ids)
        for index, statement in enumerate(properties["PolicyDocument"]["Statement"]):
            actions = statement["Action"]
            resources = statement["Resource"]
            resources = resources if isinstance(resources, list) else [resources]
            for action in [actions] if isinstance(actions, str) else actions:
                exempt = ""
                if action in LAMBDA_RUNTIME_ACTIONS:
                    exempt = "Lambda's own log writes"
                elif action in EVENT_SOURCE_ACTIONS and any(
                    (role, json.dumps(r)) in sources for role in role_ids for r in resources
                ):
                    exempt = "the SQS event source mapping's poller"
                yield Mutation(DEFAULT_STACK, logical_id, index, action), f"{roles}|{exempt}"


def run(mutation: Mutation | None, assembly: Path) -> tuple[bool, str]:
    env = dict(os.environ)
    env[ASSEMBLY_VAR] = str(assembly)
    if mutation is not None:
        env[MUTATION_VAR] = json.dumps(asdict(mutation))
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/deployed", "-x", "-q", "-p", "no:cacheprovider"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode == 0:
        return False, ""
    failed = [
        line
        for line in result.stdout.splitlines()
        if line.startswith(("FAILED tests/", "ERROR tests/"))
    ]
    denied = "AccessDenied" in result.stdout
    summary = failed[0].split(" - ")[0] if failed else f"exit {result.returncode}"
    return True, summary + (" (AccessDenied)" if denied else "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-j", "--jobs", type=int, default=2)
    parser.add_argument("--only", default="", help="mutate only policies whose id has this")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="verify-grants-") as root:
        started = time.monotonic()
        assembly = synthesize(Path(root))
        noticed, why = run(None, assembly)
        if noticed:
            print(f"the tier fails without any mutation: {why}")
            return 2
        template_path = assembly / f"{SYNTHESIZED_STACKS[DEFAULT_STACK]}.template.json"
        template = json.loads(template_path.read_text())
        candidates = [(m, w) for m, w in mutations(template) if args.only in m.policy]
        judged = [(m, w.split("|")[0]) for m, w in candidates if not w.split("|")[1]]
        exempt = [(m, w.split("|")[1]) for m, w in candidates if w.split("|")[1]]

        def judge(item: tuple[Mutation, str]) -> Outcome:
            begun = time.monotonic()
            noticed, by = run(item[0], assembly)
            return Outcome(item[0], noticed, by, time.monotonic() - begun)

        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            outcomes = list(pool.map(judge, judged))
    unnoticed = [o for o in outcomes if not o.noticed]
    for outcome in outcomes:
        m = outcome.mutation
        verdict = f"noticed by {outcome.by}" if outcome.noticed else "UNNOTICED"
        print(f"{m.policy} #{m.statement} {m.action}: {verdict}")
    for mutation, reason in exempt:
        print(f"{mutation.policy} #{mutation.statement} {mutation.action}: not judged ({reason})")
    print(
        f"{len(outcomes)} removals tried, {len(outcomes) - len(unnoticed)} noticed, "
        f"{len(unnoticed)} unnoticed, {len(exempt)} not judged; "
        f"{time.monotonic() - started:.0f} s with -j {args.jobs}"
    )
    return 1 if unnoticed else 0


if __name__ == "__main__":
    sys.exit(main())
