"""``verify_grants.py``'s bookkeeping: which tests a removal tries first, and the cache
of which test noticed what."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tests.deployed.harness import DEFAULT_STACK, Mutation
from tests.deployed.verify_grants import (
    FIRST_TRIES,
    TIER,
    Judge,
    Outcome,
    Verdict,
    first_tries,
    key,
    read_cache,
    record,
    updated_cache,
    wanted,
    write_cache,
)

WORKER = "SchedulerWorkerFunctionRoleDefaultPolicy"
GET = Mutation(DEFAULT_STACK, WORKER, 0, "dynamodb:GetItem")
PUT = Mutation(DEFAULT_STACK, WORKER, 0, "dynamodb:PutItem")
SEND = Mutation(DEFAULT_STACK, "SchedulerTickFunctionRoleDefaultPolicy", 1, "sqs:SendMessage")


def test_a_removal_tries_the_test_that_noticed_it_then_its_policy_s_then_no_other() -> None:
    cache = {
        key(GET): "tests/deployed/test_a.py::test_get",
        key(PUT): "tests/deployed/test_b.py::test_put",
        key(SEND): "tests/deployed/test_c.py::test_send",
    }
    noticing = {WORKER: ["tests/deployed/test_d.py::test_now"]}

    assert first_tries(GET, cache, noticing) == [
        "tests/deployed/test_a.py::test_get",
        "tests/deployed/test_d.py::test_now",
        "tests/deployed/test_b.py::test_put",
    ]
    assert first_tries(GET, {}, {}) == []
    assert first_tries(SEND, {}, noticing) == []


def test_first_tries_are_distinct_and_few() -> None:
    many = {WORKER: [f"tests/deployed/test_x.py::test_{n}" for n in range(FIRST_TRIES + 2)]}
    cache = {key(GET): many[WORKER][1]}

    tries = first_tries(GET, cache, many)

    assert tries[0] == many[WORKER][1]
    assert len(tries) == len(set(tries)) == FIRST_TRIES


def test_the_cache_keeps_what_noticed_drops_what_did_not_and_keeps_what_was_not_tried(
    tmp_path: Path,
) -> None:
    path = tmp_path / "build" / "verify-grants.json"
    previous = {key(GET): "tests/deployed/test_a.py::test_old", key(SEND): "t::s"}
    outcomes = [
        Outcome(GET, noticed=False, by="", seconds=1.0),
        Outcome(PUT, noticed=True, by="FAILED x", seconds=1.0, test="tests/x.py::test_put"),
    ]

    write_cache(path, updated_cache(previous, outcomes))

    assert read_cache(path) == {key(PUT): "tests/x.py::test_put", key(SEND): "t::s"}


def test_two_runs_writing_one_cache_keep_each_other_s_verdicts(tmp_path: Path) -> None:
    path = tmp_path / "verify-grants.json"
    write_cache(path, {key(SEND): "t::s"})
    # Two runs (--only one role, --only another) read the cache, then each records
    got = Outcome(GET, noticed=True, by="FAILED x", seconds=1.0, test="tests/a.py::test_get")
    sent = Outcome(SEND, noticed=False, by="", seconds=1.0)

    record(path, got)
    record(path, sent)

    assert read_cache(path) == {key(GET): "tests/a.py::test_get"}


def test_a_missing_or_unreadable_cache_is_empty(tmp_path: Path) -> None:
    garbled = tmp_path / "garbled.json"
    garbled.write_text("{not json")
    listed = tmp_path / "listed.json"
    listed.write_text("[1, 2]")

    assert read_cache(tmp_path / "missing.json") == {}
    assert read_cache(garbled) == {}
    assert read_cache(listed) == {}


def test_only_picks_the_removals_whose_name_has_any_of_its_parts() -> None:
    assert wanted(GET, [])
    assert wanted(GET, ["Tick", "Worker"])
    assert wanted(GET, [f"{WORKER}#0 ", "sts:AssumeRole"])
    assert not wanted(GET, ["Api", f"{WORKER}#1 ", "PutItem"])


class Tier:
    """pytest over a tier whose tests each fail under some removals, and some always
    (a flaky or broken test): the first failing test not deselected, as ``run`` says."""

    def __init__(self, fails: dict[str, set[Mutation | None]]) -> None:
        self.fails = fails
        self.runs: list[tuple[Mutation | None, tuple[str, ...]]] = []

    def __call__(self, mutation: Mutation | None, _: Path, tests: Sequence[str]) -> Verdict:
        self.runs.append((mutation, tuple(tests)))
        deselected = {tests[i + 1] for i, arg in enumerate(tests) if arg == "--deselect"}
        chosen = list(self.fails) if tests[0] == TIER else [tests[0]]
        for test in chosen:
            if test not in deselected and {mutation, None} & self.fails[test]:
                return Verdict(noticed=True, by=f"FAILED {test}", test=test)
        return Verdict(noticed=False)


def test_a_whole_tier_failing_on_a_test_that_fails_without_the_removal_runs_again_without_it(
    tmp_path: Path,
) -> None:
    flaky, noticing = "tests/deployed/test_a.py::test_flaky", "tests/deployed/test_b.py::test_get"
    tier = Tier({flaky: {None}, noticing: {GET}})
    judge = Judge(tmp_path, {}, tier)

    got, put = judge(GET), judge(PUT)

    # The flaky test noticed neither; the tier ran again without it each time
    assert (got.noticed, got.test, got.whole_tier) == (True, noticing, True)
    assert (put.noticed, put.test) == (False, "")
    assert (PUT, (TIER, "--deselect", flaky)) in tier.runs
    # ...and it was run alone once, not once per removal
    assert tier.runs.count((None, (flaky,))) == 1


def test_a_whole_tier_failing_on_a_test_that_passes_alone_has_noticed_the_removal(
    tmp_path: Path,
) -> None:
    noticing = "tests/deployed/test_b.py::test_get"
    tier = Tier({noticing: {GET}})

    outcome = Judge(tmp_path, {}, tier)(GET)

    assert (outcome.noticed, outcome.by, outcome.test) == (True, f"FAILED {noticing}", noticing)
    assert [tests for _, tests in tier.runs] == [(TIER,), (noticing,)]
