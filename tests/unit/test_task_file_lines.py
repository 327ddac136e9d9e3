"""The pure parts of `dynacron tasks import` and `export`: lines, keys, batches, bodies."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from dynacron.api.requests import TaskCreate
from dynacron.api.responses import TaskView
from dynacron.client.bulk import (
    BATCH_SIZE,
    Importer,
    ImportReport,
    ImportState,
    create_body,
    destination_of,
    line_key,
    parse_line,
)
from dynacron.domain.coordination.create_keys import KEY_PATTERN
from dynacron.domain.tasks.skips import Skip
from dynacron.domain.tasks.specs import new_task

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
HOOK = "http://127.0.0.1:9/hook"


def test_a_line_is_a_body_a_problem_or_nothing() -> None:
    assert parse_line(1, b"  \r\n") is None
    good = parse_line(2, b'{"cron": "0 9 * * *"}\n')
    assert good is not None
    assert (good.body, good.problem) == ({"cron": "0 9 * * *"}, None)
    broken = parse_line(3, b'{"cron": \n')
    assert broken is not None
    assert broken.body is None
    assert broken.problem is not None
    assert broken.problem.startswith("not JSON")
    for raw, kind in ((b"[1]", "list"), (b'"text"', "str"), (b"null", "null"), (b"7", "int")):
        line = parse_line(4, raw)
        assert line is not None
        assert line.problem == f"not a JSON object (a body of POST /tasks) but {kind}"


def test_a_line_s_key_is_its_number_bytes_and_prefix_and_the_api_takes_it() -> None:
    raw = b'{"cron": "0 9 * * *", "handler_url": "http://127.0.0.1:9/hook"}'
    key = line_key(7, raw)
    assert re.fullmatch(KEY_PATTERN, key)
    # The same line at the same place, its line ending aside: the same key
    assert line_key(7, raw + b"\r\n") == key
    assert line_key(7, b"  " + raw + b"\n") == key
    # Another place, other bytes, another prefix: another key
    assert line_key(8, raw) != key
    assert line_key(7, raw.replace(b"9", b"8")) != key
    assert line_key(7, raw, "second run") != key
    # The parts cannot run into one another
    assert line_key(1, b"1" + raw) != line_key(11, raw)
    assert line_key(1, raw, "1") != line_key(11, raw, "")


def checked(lines: list[bytes]) -> tuple[list[tuple[int, str]], list[int]]:
    """A dry run's refusals, and the count of lines of each batch it made."""
    covered: list[int] = []
    report = Importer(None, progress=covered.append, now=lambda: NOW).run(lines)
    return report.refused, covered


def test_a_dry_run_batches_by_100_bodies_and_refuses_with_the_api_s_own_rules() -> None:
    line = json.dumps({"cron": "0 9 * * *", "handler_url": HOOK}).encode() + b"\n"
    lines = [line] * 250
    lines[4] = b"\n"
    lines[5] = b"{oops\n"
    lines[149] = json.dumps({"cron": "0 9 * * *", "handler_url": HOOK, "timezone": "Nowhere/X"})
    lines[199] = json.dumps({"rate": "5 minutes", "cron": "0 9 * * *", "handler_url": HOOK})
    lines[219] = json.dumps({"cron": "0 9 * * *", "handler_url": HOOK, "colour": "red"})
    refused, covered = checked([raw if isinstance(raw, bytes) else raw.encode() for raw in lines])
    assert [number for number, _ in refused] == [6, 150, 200, 220]
    assert refused[1][1].startswith("timezone")
    assert "exactly one" in refused[2][1]
    assert refused[3][1].startswith("colour")
    # Every line is covered once, in batches of BATCH_SIZE bodies
    assert sum(covered) == 250
    assert len(covered) == 3
    assert covered[0] == BATCH_SIZE + 2  # the blank line and the broken one


def test_a_state_file_refuses_another_input_or_another_prefix(tmp_path: Path) -> None:
    state_path = tmp_path / "import.state"
    state = ImportState(state_path, "p")
    lines = [b'{"cron": "0 9 * * *"}\n'] * 5
    state.save(3, _digest(lines[:3]))
    with pytest.raises(ValueError, match="written with --key-prefix 'p'"):
        ImportState(state_path, "q")
    resumed = ImportState(state_path, "p")
    assert resumed.through_line == 3
    other = [b'{"cron": "0 8 * * *"}\n', *lines[1:]]
    with pytest.raises(ValueError, match="its first 3 lines differ"):
        list(Importer(None, state=resumed)._batches(other, _report()))
    batches = list(Importer(None, state=resumed)._batches(lines, _report()))
    assert [(b.first, b.last) for b in batches] == [(4, 5)]
    with pytest.raises(ValueError, match="the input has 2"):
        list(Importer(None, state=resumed)._batches(lines[:2], _report()))


def test_an_exported_body_registers_the_task_it_came_from_again() -> None:
    body = {
        "name": "nightly",
        "cron": "30 2 * * *",
        "timezone": "Europe/Paris",
        "dst": {"nonexistent": "skip", "ambiguous": "both"},
        "jitter_seconds": 30,
        "catchup": "run_all",
        "catchup_window_seconds": 3600,
        "overlap": "buffer_one",
        "handler_url": HOOK,
        "payload": {"report": "daily"},
        "retry": {"max_attempts": 3, "base_delay_seconds": 5, "max_delay_seconds": 60},
        "max_concurrency": 2,
        "rate_limit": {"per_second": 5.0},
        "tags": {"team": "ops"},
    }
    task = new_task(TaskCreate.model_validate(body).to_spec(), NOW, task_id="t1", tenant_id="a")
    exported = create_body(TaskView.of(task))
    assert exported is not None
    assert TaskCreate.model_validate(exported) == TaskCreate.model_validate(body)
    plain = {"rate": "5 minutes", "handler_url": HOOK}
    task = new_task(TaskCreate.model_validate(plain).to_spec(), NOW, task_id="t2", tenant_id="a")
    # Defaults are left out, but for the name the API gives a task without one, and
    # the rate's anchor (the registration time): the same grid in another store
    assert create_body(TaskView.of(task)) == {
        **plain,
        "name": TaskView.of(task).name,
        "anchor": "2026-12-05T12:00:00.000Z",
    }


def _digest(lines: list[bytes]) -> str:
    digest = hashlib.sha256()
    for line in lines:
        digest.update(line)
    return digest.hexdigest()


def _report() -> ImportReport:
    return ImportReport()


def test_an_exported_target_task_registers_again_with_its_target() -> None:
    body = {
        "cron": "0 * * * *",
        "target": {
            "arn": "arn:aws:sqs:us-east-1:123456789012:jobs.fifo",
            "role_arn": "arn:aws:iam::123456789012:role/dynacron-target/jobs",
            "input": '{"run": "<dynacron.execution-id>"}',
            "sqs_parameters": {"message_group_id": "nightly"},
        },
    }
    task = new_task(TaskCreate.model_validate(body).to_spec(), NOW, task_id="t3", tenant_id="a")
    exported = create_body(TaskView.of(task))
    assert exported is not None
    assert TaskCreate.model_validate(exported).target == TaskCreate.model_validate(body).target


def test_an_exported_task_names_its_calendars_and_leaves_its_skips_behind() -> None:
    body = {
        "cron": "0 9 * * *",
        "handler_url": HOOK,
        "exclude_calendars": ["holidays"],
        "on_excluded": "next",
    }
    task = new_task(TaskCreate.model_validate(body).to_spec(), NOW, task_id="t4", tenant_id="a")
    task = dataclasses.replace(task, skips=(Skip(by="alice", asked_at=NOW, at=(NOW,)),))
    exported = create_body(TaskView.of(task))
    assert exported is not None
    assert {k: exported.get(k) for k in ("exclude_calendars", "only_calendars", "on_excluded")} == {
        "exclude_calendars": ["holidays"],
        "only_calendars": None,
        "on_excluded": "next",
    }
    assert "skips" not in exported
    assert TaskCreate.model_validate(exported).calendar_rule() == (
        TaskCreate.model_validate(body).calendar_rule()
    )


def test_a_state_file_refuses_another_api_or_api_key(tmp_path: Path) -> None:
    state_path = tmp_path / "import.state"
    here = destination_of("http://127.0.0.1:8080/", "key-a")
    ImportState(state_path, "", here).save(3, _digest([b"{}\n"] * 3))
    assert ImportState(state_path, "", destination_of("http://127.0.0.1:8080", "key-a"))
    for url, key in (("http://127.0.0.1:9090", "key-a"), ("http://127.0.0.1:8080", "key-b")):
        with pytest.raises(ValueError, match="another API or API key"):
            ImportState(state_path, "", destination_of(url, key))
    # The key itself is never written down
    assert "key-a" not in state_path.read_text()
