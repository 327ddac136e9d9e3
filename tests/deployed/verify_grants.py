"""Least privilege, both ways: remove each granted action in turn and see whether the
deployed tier notices.

For every role of the stack ``make synth`` deploys, every statement of its policies
and every action of that statement, run ``pytest tests/deployed`` with that one
action removed (the harness reads ``DYNACRON_GRANT_MUTATION`` when it loads the
role). A removal the tier notices is a grant a scenario needs. A removal it does
not notice is either a grant nothing needs (remove it from infra/constructs) or a
path no scenario covers (add the scenario). The templates are synthesised once;
runs go ``-j`` at a time.

A removal is first tried against the tests likeliest to notice it: the one that
noticed it last time (the cache, ``build/verify-grants.json`` unless ``--cache``
names another), then those that noticed other removals from the same policy. A
test that fails there, and passes alone without the removal, has noticed it in
seconds; otherwise the whole tier runs (``-x``), as it does with no cache. A test
failing the whole tier is held to the same rule: one that fails alone without the
removal too has noticed nothing, and the tier runs again without it. The verdict
rule is the same either way: UNNOTICED only when the whole tier passes with the
removal.

    python -m tests.deployed.verify_grants [-j 2] [--only SUBSTRING]... [--cache PATH] [--list]

Exit status 1 when any removal goes unnoticed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tests.deployed.conftest import ASSEMBLY_VAR, SYNTHESIZED_STACKS
from tests.deployed.harness import DEFAULT_STACK, MUTATION_VAR, Mutation

ROOT = Path(__file__).resolve().parents[2]
TIER = "tests/deployed"
CACHE = ROOT / "build" / "verify-grants.json"
# Tests tried before the whole tier: each costs a few seconds when it does not notice.
FIRST_TRIES = 3
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
    test: str = ""  # the node id of that test
    whole_tier: bool = True  # whether the whole tier ran (else a first try noticed it)


@dataclass(frozen=True)
class Verdict:
    noticed: bool
    by: str = ""
    test: str = ""


# How the judge runs pytest: ``run``, or a stand-in in the tool's own tests.
Runner = Callable[[Mutation | None, Path, Sequence[str]], Verdict]


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


def key(mutation: Mutation) -> str:
    """A removal's name in the cache (the stack is always the default one)."""
    return f"{mutation.policy}#{mutation.statement} {mutation.action}"


def read_cache(path: Path) -> dict[str, str]:
    """Which test noticed each removal last time; an unreadable cache is an empty one
    (it only orders the runs)."""
    try:
        loaded = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(loaded, dict):
        return {}
    return {k: v for k, v in loaded.items() if isinstance(k, str) and isinstance(v, str)}


def updated_cache(previous: Mapping[str, str], outcomes: Sequence[Outcome]) -> dict[str, str]:
    """The cache after a run: each noticed removal with its test, unnoticed ones dropped,
    removals this run did not try kept."""
    cache = dict(previous)
    for outcome in outcomes:
        if outcome.noticed and outcome.test:
            cache[key(outcome.mutation)] = outcome.test
        else:
            cache.pop(key(outcome.mutation), None)
    return cache


def write_cache(path: Path, cache: Mapping[str, str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".tmp")
    partial.write_text(json.dumps(dict(sorted(cache.items())), indent=1) + "\n")
    partial.replace(path)


def record(path: Path, outcome: Outcome) -> None:
    """Write one verdict to the cache as read now, not as this run first read it: a
    run of other removals (``--only``) writing it meanwhile keeps its verdicts."""
    write_cache(path, updated_cache(read_cache(path), [outcome]))


def first_tries(
    mutation: Mutation, cache: Mapping[str, str], noticing: Mapping[str, Sequence[str]]
) -> list[str]:
    """The tests to try before the whole tier: the one that noticed this removal last
    time, then those that noticed removals from the same policy (this run's, then the
    cache's), at most ``FIRST_TRIES``."""
    siblings = [t for k, t in sorted(cache.items()) if k.startswith(f"{mutation.policy}#")]
    tries: list[str] = []
    for test in [cache.get(key(mutation), ""), *noticing.get(mutation.policy, ()), *siblings]:
        if test and test not in tries:
            tries.append(test)
    return tries[:FIRST_TRIES]


def wanted(mutation: Mutation, only: Sequence[str]) -> bool:
    """Whether ``--only`` (none: every removal) picks this removal: a part of its name
    (``policy#statement action``), e.g. a policy id, ``Policy09BB55B5#12 `` or
    ``sts:AssumeRole``."""
    return not only or any(part in key(mutation) for part in only)


def run(mutation: Mutation | None, assembly: Path, tests: Sequence[str] = (TIER,)) -> Verdict:
    """``pytest tests`` (node ids, or the tier with ``--deselect`` options) with
    ``mutation`` removed, stopping at the first failure."""
    env = dict(os.environ)
    env[ASSEMBLY_VAR] = str(assembly)
    env.pop(MUTATION_VAR, None)
    if mutation is not None:
        env[MUTATION_VAR] = json.dumps(asdict(mutation))
    result = subprocess.run(
        [sys.executable, "-m", "pytest", *tests, "-x", "-q", "-p", "no:cacheprovider"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode == 0:
        return Verdict(noticed=False)
    failed = [
        line
        for line in result.stdout.splitlines()
        if line.startswith(("FAILED tests/", "ERROR tests/"))
    ]
    denied = "AccessDenied" in result.stdout
    summary = failed[0].split(" - ")[0] if failed else f"exit {result.returncode}"
    test = summary.split(" ", 1)[1] if failed else ""
    return Verdict(True, summary + (" (AccessDenied)" if denied else ""), test)


class Judge:
    """Judges removals, a first try at a time, then the whole tier; safe across threads."""

    def __init__(
        self, assembly: Path, cache: Mapping[str, str], runner: Runner | None = None
    ) -> None:
        self.assembly = assembly
        self.cache = cache
        self.run = runner or run
        self.lock = threading.Lock()
        self.noticing: dict[str, list[str]] = {}  # policy -> tests that noticed this run
        self.alone: dict[str, threading.Event] = {}
        self.passes_alone: dict[str, bool] = {}

    def sound(self, test: str) -> bool:
        """Whether ``test`` passes alone without any removal (once per test): only then
        does its failing with a removal say the removal was noticed."""
        with self.lock:
            done = self.alone.get(test)
            mine = done is None
            if done is None:
                done = self.alone[test] = threading.Event()
        if mine:
            self.passes_alone[test] = not self.run(None, self.assembly, [test]).noticed
            done.set()
        done.wait()
        return self.passes_alone[test]

    def __call__(self, mutation: Mutation) -> Outcome:
        begun = time.monotonic()
        with self.lock:
            tries = first_tries(mutation, self.cache, self.noticing)
        for test in tries:
            verdict = self.run(mutation, self.assembly, [test])
            if verdict.noticed and self.sound(test):
                return self.outcome(mutation, verdict, begun, whole_tier=False)
        # A test that fails without the removal too (a flaky one, or one broken since
        # the tier's first run) says nothing of it: the tier runs again without it.
        unsound: list[str] = []
        while True:
            deselected = [arg for test in unsound for arg in ("--deselect", test)]
            verdict = self.run(mutation, self.assembly, [TIER, *deselected])
            if not verdict.test or verdict.test in unsound or self.sound(verdict.test):
                return self.outcome(mutation, verdict, begun, whole_tier=True)
            unsound.append(verdict.test)

    def outcome(
        self, mutation: Mutation, verdict: Verdict, begun: float, whole_tier: bool
    ) -> Outcome:
        if verdict.noticed and verdict.test:
            with self.lock:
                tests = self.noticing.setdefault(mutation.policy, [])
                if verdict.test not in tests:
                    tests.append(verdict.test)
        seconds = time.monotonic() - begun
        return Outcome(mutation, verdict.noticed, verdict.by, seconds, verdict.test, whole_tier)


def line(outcome: Outcome) -> str:
    m = outcome.mutation
    how = "whole tier" if outcome.whole_tier else "first try"
    verdict = f"noticed by {outcome.by}" if outcome.noticed else "UNNOTICED"
    return f"{m.policy} #{m.statement} {m.action}: {verdict} ({how}, {outcome.seconds:.0f} s)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-j", "--jobs", type=int, default=2)
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        help="only the removals whose name (policy#statement action) has this; repeatable",
    )
    parser.add_argument("--cache", type=Path, default=CACHE, help="which test noticed what")
    parser.add_argument("--list", action="store_true", help="print the removals and exit")
    args = parser.parse_args()
    cache = read_cache(args.cache)
    with tempfile.TemporaryDirectory(prefix="verify-grants-") as root:
        started = time.monotonic()
        assembly = synthesize(Path(root))
        template_path = assembly / f"{SYNTHESIZED_STACKS[DEFAULT_STACK]}.template.json"
        template = json.loads(template_path.read_text())
        candidates = [(m, w) for m, w in mutations(template) if wanted(m, args.only)]
        judged = [m for m, w in candidates if not w.split("|")[1]]
        exempt = [(m, w.split("|")[1]) for m, w in candidates if w.split("|")[1]]
        if args.list:
            for mutation, who in candidates:
                roles, reason = who.split("|")
                last = f"not judged ({reason})" if reason else cache.get(key(mutation), "-")
                print(f"{key(mutation)} [{roles}]: {last}")
            print(f"{len(judged)} removals to judge, {len(exempt)} not judged")
            return 0
        baseline = run(None, assembly)
        if baseline.noticed:
            print(f"the tier fails without any mutation: {baseline.by}")
            return 2
        judge = Judge(assembly, cache)
        outcomes: list[Outcome] = []
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            # Written and printed as outcomes come: an interrupted run still orders the
            # next one and says what it found.
            for done in as_completed([pool.submit(judge, m) for m in judged]):
                outcomes.append(done.result())
                record(args.cache, outcomes[-1])
                print(line(outcomes[-1]), flush=True)
    unnoticed = [o for o in outcomes if not o.noticed]
    for outcome in sorted(unnoticed, key=lambda o: key(o.mutation)):
        print(f"UNNOTICED: {key(outcome.mutation)}")
    for mutation, reason in exempt:
        print(f"{mutation.policy} #{mutation.statement} {mutation.action}: not judged ({reason})")
    first = sum(not o.whole_tier for o in outcomes)
    print(
        f"{len(outcomes)} removals tried, {len(outcomes) - len(unnoticed)} noticed "
        f"({first} by a first try), {len(unnoticed)} unnoticed, {len(exempt)} not judged; "
        f"{time.monotonic() - started:.0f} s with -j {args.jobs}"
    )
    return 1 if unnoticed else 0


if __name__ == "__main__":
    sys.exit(main())
