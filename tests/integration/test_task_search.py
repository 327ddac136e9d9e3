"""GET /tasks by name prefix and in name or next-run order, over the API, on either
store (decision 0045); what DynamoDB's name index costs a fire: nothing."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from typer.testing import CliRunner

from dynacron.adapters.aws.task_listing import backfill_name_key_pages, backfill_name_keys
from dynacron.adapters.aws.tasks import DynamoTaskStore
from dynacron.cli.main import app
from dynacron.definitions.resources import NAME_INDEX, TASKS
from dynacron.domain.clock import SettableClock
from dynacron.entry.composition import Dynacron
from tests.integration.api_client import call
from tests.integration.conftest import Build

HOOK = "http://127.0.0.1:9/hook"
BOB = "arn:aws:sts::000000000000:assumed-role/Billing/session-1"


def create(system: Dynacron, name: str, principal: str | None = None, **fields: Any) -> str:
    assert isinstance(system.clock, SettableClock)
    system.clock.advance(timedelta(seconds=1))
    extra = {"principal": principal} if principal else {}
    body = {"name": name, "rate": "1 minute", "handler_url": HOOK, **fields}
    status, task = call(system, "POST", "/tasks", body, **extra)
    assert status == 201, task
    return str(task["task_id"])


def listed(
    system: Dynacron, principal: str | None = None, limit: int = 3, **query: str
) -> list[str]:
    """The names on every page of ``GET /tasks?...``, following ``next_token``."""
    extra = {"principal": principal} if principal else {}
    names: list[str] = []
    token = None
    while True:
        pairs = [*query.items(), ("limit", str(limit)), *([("next_token", token)] if token else [])]
        status, page = call(system, "GET", "/tasks?" + urlencode(pairs), **extra)
        assert status == 200, page
        names += [task["name"] for task in page["items"]]
        token = page["next_token"]
        if not token:
            return names


def test_a_name_prefix_finds_a_task_among_many_in_name_order(build: Build) -> None:
    system = build()
    # Given a hundred tasks (one batch), and three named alike in different cases, and
    # another tenant's task with the same name
    jobs = [{"name": f"job {n:03d}", "rate": "1 minute", "handler_url": HOOK} for n in range(100)]
    status, answer = call(system, "POST", "/tasks/batch", {"tasks": jobs})
    assert (status, answer["created"]) == (200, 100), answer
    for name in ("Invoice run", "invoice RETRY", "INVOICES"):
        create(system, name)
    create(system, "invoice of bob", principal=BOB)
    # When the tenant searches by prefix, Then it gets its own three, by name
    assert listed(system, name_prefix="invoice") == ["invoice RETRY", "Invoice run", "INVOICES"]
    assert listed(system, name_prefix="INVOICE R") == ["invoice RETRY", "Invoice run"]
    assert listed(system, name_prefix="invoice", order="desc") == [
        "INVOICES",
        "Invoice run",
        "invoice RETRY",
    ]
    assert listed(system, name_prefix="job 09") == [f"job {n:03d}" for n in range(90, 100)]
    assert listed(system, name_prefix="nothing") == []
    assert listed(system, principal=BOB, name_prefix="INVOICE") == ["invoice of bob"]
    # And a paused task is found by status among them
    (first,) = call(system, "GET", "/tasks?name_prefix=job%20000&limit=1")[1]["items"]
    assert call(system, "POST", f"/tasks/{first['task_id']}/pause")[0] == 200
    # (pages of 25, still several over the 104 tasks: of 3, the two listings below
    # read some 70 pages, on DynamoDB most of this test's time)
    assert listed(system, status="PAUSED", limit=25) == ["job 000"]
    assert listed(system, name_prefix="job", status="PAUSED", limit=25) == ["job 000"]
    assert listed(system, name_prefix="invoice", status="PAUSED") == []


def test_sort_by_name_and_tags_combine(build: Build) -> None:
    system = build()
    for name, env in (("b", "prod"), ("C", "dev"), ("a", "prod")):
        create(system, name, tags={"env": env})
    assert listed(system, sort="name") == ["a", "b", "C"]
    assert listed(system, sort="name", order="desc", tag="env:prod") == ["b", "a"]
    assert listed(system, order="desc") == ["a", "C", "b"]


@pytest.mark.parametrize(
    ("query", "field", "says"),
    [
        ({"name_prefix": "a", "sort": "created_at"}, "sort", "name_prefix lists tasks by name"),
        ({"name_prefix": "a", "sort": "next_run_at"}, "sort", "leave sort out or give sort=name"),
        ({"name_prefix": ""}, "name_prefix", ""),
        ({"name_prefix": "x" * 201}, "name_prefix", ""),
        ({"sort": "next"}, "sort", ""),
        ({"order": "up"}, "order", ""),
        ({"status": "active"}, "status", ""),
        ({"kind": "weekly"}, "kind", ""),
    ],
)
def test_a_combination_or_value_not_offered_is_a_422_naming_the_parameter(
    build: Build, query: dict[str, str], field: str, says: str
) -> None:
    system = build()
    create(system, "a task")
    status, problem = call(system, "GET", "/tasks?" + urlencode(query))
    assert status == 422, problem
    assert [e["field"] for e in problem["errors"]] == [field]
    assert says in problem["detail"]


def test_next_run_order_on_sqlite_and_a_422_naming_sort_on_dynamodb(build: Build) -> None:
    system = build()
    # Given tasks due in an order that is neither their names' nor their creation's
    for name, minutes in (("late", 30), ("soon", 5), ("middle", 15)):
        create(system, name, rate=f"{minutes} minutes")
    paused = create(system, "paused", rate="1 minute")
    assert call(system, "POST", f"/tasks/{paused}/pause")[0] == 200
    status, answer = call(system, "GET", "/tasks?sort=next_run_at")
    if isinstance(system.tasks, DynamoTaskStore):
        # DynamoDB: no index in that order (one would be rewritten by every fire)
        assert status == 422, answer
        assert [e["field"] for e in answer["errors"]] == ["sort"]
        assert "next_run_at is not offered on DynamoDB" in answer["detail"]
        return
    # SQLite: soonest first, a task not due to run (paused) last; desc the reverse
    assert listed(system, sort="next_run_at") == ["soon", "middle", "late", "paused"]
    assert listed(system, sort="next_run_at", order="desc") == ["paused", "late", "middle", "soon"]


def test_the_document_states_the_parameters_and_combinations(system: Dynacron) -> None:
    status, doc = call(system, "GET", "/openapi.json")
    assert status == 200
    operation = doc["paths"]["/tasks"]["get"]
    names = {p["name"] for p in operation["parameters"]}
    assert {"name_prefix", "sort", "order", "status", "kind", "tag"} <= names
    assert "| next_run_at | by next run |" in operation["description"]
    assert "no (422)" in operation["description"]


def test_a_claim_leaves_the_name_index_entry_as_it_was(
    system: Dynacron, aws: tuple[Any, Any]
) -> None:
    # Given a recurring task due now, and its item's attributes the name index keys on
    task_id = create(system, "Nightly backup")
    client = aws[0]
    table = system.settings.tasks_table
    keys = (NAME_INDEX.partition_key.name, NAME_INDEX.sort_key.name)

    def item() -> dict[str, Any]:
        found = client.get_item(TableName=table, Key={"task_id": {"S": task_id}})["Item"]
        return dict(found)

    before = item()
    assert before[NAME_INDEX.sort_key.name] == {"S": f"nightly backup\x1f{task_id}"}
    # When the tick claims it (a minute on)
    assert isinstance(system.clock, SettableClock)
    system.clock.advance(timedelta(minutes=1, seconds=1))
    assert sum(report.claimed for report in system.ticker.tick()) == 1
    after = item()
    # Then the claim changed the task (its version and next run) but not the name
    # index's attributes: keys only, so DynamoDB writes no index entry
    assert after["version"] != before["version"]
    assert after["next_run_at"] != before["next_run_at"]
    assert {k: after[k] for k in keys} == {k: before[k] for k in keys}
    assert NAME_INDEX in TASKS.indexes
    assert NAME_INDEX.projection == "KEYS_ONLY"


def test_tasks_written_before_the_name_index_are_found_after_the_backfill(
    system: Dynacron, aws: tuple[Any, Any]
) -> None:
    # Given tasks whose items predate the name index (no name key), and a newer one
    client, table = aws[0], system.settings.tasks_table
    old = [create(system, f"Legacy {n}") for n in range(3)]
    for task_id in old:
        client.update_item(
            TableName=table,
            Key={"task_id": {"S": task_id}},
            UpdateExpression="REMOVE #key",
            ExpressionAttributeNames={"#key": NAME_INDEX.sort_key.name},
        )
    create(system, "Legacy new")
    assert listed(system, name_prefix="legacy") == ["Legacy new"]
    # When the backfill runs (twice: the second finds nothing left to do)
    assert backfill_name_keys(client, table, page_size=2) == 3
    assert backfill_name_keys(client, table) == 0
    # Then every one is found by name
    assert listed(system, name_prefix="legacy") == [
        "Legacy 0",
        "Legacy 1",
        "Legacy 2",
        "Legacy new",
    ]


def written_before_the_name_index(client: Any, table: str, task_id: str) -> None:
    """Put ``task_id``'s item back as a version before decision 0045 wrote it: a raw
    put of the same item without the name key."""
    item = client.get_item(TableName=table, Key={"task_id": {"S": task_id}})["Item"]
    del item[NAME_INDEX.sort_key.name]
    client.put_item(TableName=table, Item=item)


def backfill_cli(table: str | None, *options: str) -> tuple[Any, str]:
    """``dynacron admin backfill-name-keys``: (its summary, its progress lines)."""
    tables = ["--tasks-table", table] if table is not None else []
    result = CliRunner().invoke(
        app,
        ["admin", "backfill-name-keys", *tables, "--max-writes-per-second", "1000", *options],
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout), result.stderr


def test_the_operator_s_backfill_command_makes_old_tasks_findable_once(
    system: Dynacron, aws: tuple[Any, Any]
) -> None:
    # Given five tasks whose items were written before the name index, and a newer one
    client, table = aws[0], system.settings.tasks_table
    old = [create(system, f"Legacy {n}") for n in range(5)]
    for task_id in old:
        written_before_the_name_index(client, table, task_id)
    create(system, "Legacy new")
    assert listed(system, name_prefix="legacy") == ["Legacy new"]
    # When the operator runs the command, two items a Scan page
    summary, progress = backfill_cli(table, "--page-size", "2")
    # Then it gave the five their key, said how far it got on each page, and every
    # task is found by name
    assert summary == {"tasks_table": table, "scanned": 6, "given": 5, "changed_meanwhile": 0}
    assert "to resume: --start-after" in progress
    assert "scanned 6 tasks, gave 5 a name key" in progress.splitlines()[-1]
    assert listed(system, name_prefix="legacy") == [
        *(f"Legacy {n}" for n in range(5)),
        "Legacy new",
    ]
    # and a second run writes nothing
    assert backfill_cli(table)[0] == {
        "tasks_table": table,
        "scanned": 6,
        "given": 0,
        "changed_meanwhile": 0,
    }


def test_the_backfill_resumes_after_the_task_a_progress_line_names(
    system: Dynacron, aws: tuple[Any, Any]
) -> None:
    # Given three tasks written before the name index, in the Scan's order
    client, table = aws[0], system.settings.tasks_table
    for n in range(3):
        written_before_the_name_index(client, table, create(system, f"Old {n}"))
    in_scan_order = [i["task_id"]["S"] for i in client.scan(TableName=table)["Items"]]
    # When a run is resumed after the first (as if it had stopped there)
    assert backfill_cli(table, "--start-after", in_scan_order[0])[0]["given"] == 2
    # Then the first is still not found, and a run from the start gives it its key
    found = listed(system, name_prefix="old")
    assert len(found) == 2
    assert backfill_cli(table)[0]["given"] == 1
    assert listed(system, name_prefix="old") == ["Old 0", "Old 1", "Old 2"]


def test_make_deploy_s_backfill_does_the_work_once_per_stack(
    system: Dynacron, aws: tuple[Any, Any], tmp_path: Path
) -> None:
    # Given a stack's outputs as `cdk deploy --outputs-file` writes them, and two tasks
    # written before the name index
    client, table = aws[0], system.settings.tasks_table
    outputs = tmp_path / "outputs.json"
    stack = {"ApiUrl": "https://example.invalid/", "TasksTable": table}
    stack["CoordinationTable"] = system.settings.coordination_table
    outputs.write_text(json.dumps({"Dynacron-dev": stack}))
    old = [create(system, f"Upgraded {n}") for n in range(2)]
    for task_id in old:
        written_before_the_name_index(client, table, task_id)
    # When `make deploy` runs the backfill after the deploy, Then it gives them their key
    (first,) = backfill_cli(None, "--outputs-file", str(outputs))[0]
    assert (first["scanned"], first["given"]) == (2, 2)
    assert listed(system, name_prefix="upgraded") == ["Upgraded 0", "Upgraded 1"]
    # And the next deploy's run reads nothing: the whole run is recorded
    written_before_the_name_index(client, table, old[0])  # (a key lost by hand)
    (second,) = backfill_cli(None, "--outputs-file", str(outputs))[0]
    assert (second["scanned"], second["given"]) == (0, 0)
    # unless asked to scan again
    (third,) = backfill_cli(None, "--outputs-file", str(outputs), "--again")[0]
    assert (third["scanned"], third["given"]) == (2, 1)


def test_the_backfill_command_refuses_what_names_no_table(tmp_path: Path) -> None:
    outputs = tmp_path / "outputs.json"
    outputs.write_text(json.dumps({"Other": {"ApiUrl": "https://example.invalid/"}}))
    for options in ([], ["--outputs-file", str(outputs)], ["--outputs-file", str(tmp_path)]):
        result = CliRunner().invoke(app, ["admin", "backfill-name-keys", *options])
        assert result.exit_code == 2, (options, result.output)
    assert "TasksTable" in result.output or "outputs file" in result.output


def test_the_backfill_leaves_a_task_renamed_or_deleted_while_it_runs(
    system: Dynacron, aws: tuple[Any, Any]
) -> None:
    # Given old tasks without a name key
    client, table = aws[0], system.settings.tasks_table
    renamed = create(system, "Before rename")
    deleted = create(system, "Before delete")
    nameless = create(system, "Its name is dropped")
    for task_id in (renamed, deleted, nameless):
        written_before_the_name_index(client, table, task_id)
    # and an item without a name at all (a hand-written one)
    client.update_item(
        TableName=table,
        Key={"task_id": {"S": nameless}},
        UpdateExpression="REMOVE #n",
        ExpressionAttributeNames={"#n": "name"},
    )

    # When, after the Scan read them and before its first write, the API renames
    # one (writing its new key) and deletes another, and the nameless one is deleted
    def meanwhile() -> None:
        if (
            client.get_item(TableName=table, Key={"task_id": {"S": renamed}})["Item"]["name"]["S"]
            == "Before rename"
        ):
            status, body = call(system, "PATCH", f"/tasks/{renamed}", {"name": "After rename"})
            assert status == 200, body
            assert call(system, "DELETE", f"/tasks/{deleted}")[0] == 204
            client.delete_item(TableName=table, Key={"task_id": {"S": nameless}})

    pages = list(backfill_name_key_pages(client, table, before_write=meanwhile))
    # Then the backfill wrote none: the renamed task keeps the key of its new name,
    # and the deleted ones are not made again
    assert sum(page.given for page in pages) == 0
    assert sum(page.changed_meanwhile for page in pages) == 3
    item = client.get_item(TableName=table, Key={"task_id": {"S": renamed}})["Item"]
    assert item[NAME_INDEX.sort_key.name]["S"] == f"after rename\x1f{renamed}"
    for gone in (deleted, nameless):
        assert "Item" not in client.get_item(TableName=table, Key={"task_id": {"S": gone}})
    assert listed(system, name_prefix="after") == ["After rename"]
    assert listed(system, name_prefix="before") == []


def test_a_page_of_long_names_in_any_script_gives_a_token_the_api_takes(build: Build) -> None:
    system = build()
    # Given tasks whose names are as long as allowed, in characters outside the Basic
    # Multilingual Plane (each escaped as 12 characters in a token's JSON)
    smile = "\U0001f600"
    names = [smile * 199 + str(n) for n in range(3)]
    for name in names:
        create(system, name)
    # When they are listed by a long prefix a task at a time, Then each page's token
    # is taken and every task comes once (they differ past the name key's 600 bytes,
    # where names tie and go by task id)
    pairs = {"name_prefix": smile * 150, "limit": "1"}
    found, token, longest = [], None, 0
    while True:
        query = urlencode({**pairs, **({"next_token": token} if token else {})})
        status, page = call(system, "GET", "/tasks?" + query)
        assert status == 200, page
        found += [task["name"] for task in page["items"]]
        if not (token := page["next_token"]):
            break
        longest = max(longest, len(token))
    assert sorted(found) == names
    assert longest > 2048  # (what the API took at most before)
    # and NFKC reads the mathematical script A as a plain one
    create(system, "\U0001d49c" * 3 + "z")
    assert listed(system, name_prefix="AAA") == ["\U0001d49c" * 3 + "z"]
