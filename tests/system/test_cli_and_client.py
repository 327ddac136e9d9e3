"""The Python client and the CLI against local mode."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from rich.console import Console
from typer.testing import CliRunner

import dynacron
from dynacron.api.requests import TaskCreate
from dynacron.cli import connection as cli_output
from dynacron.cli.main import app
from dynacron.client.api_client import ApiError, ApiUnreachable
from dynacron.local.runtime import LocalOptions, LocalRuntime
from tests.support import Sink, free_port, wait_until

pytestmark = pytest.mark.system
runner = CliRunner()
HOOK = "http://127.0.0.1:9/hook"


@pytest.fixture(scope="module")
def local() -> Iterator[str]:
    runtime = LocalRuntime(
        LocalOptions(
            port=0,
            shards=2,
            workers=2,
            api_keys=(
                ("k1", "team-a"),
                ("k2", "team-b"),
                ("k3", "team-c"),
                ("k4", "team-d"),
                ("k5", "team-e"),
                ("k6", "team-f"),
            ),
        )
    ).start()
    yield runtime.api_url
    runtime.stop()


def cli(*args: str) -> Any:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout) if "--json" in args else result.stdout


def test_the_client_drives_local_mode_and_a_task_fires_signed(local: str, sink: Sink) -> None:
    with dynacron.Client(local, api_key="k1") as client:
        task = client.create_task(rate="1 second", handler_url=f"{sink.url}/hook", name="tick")
        assert client.get_task(task.task_id) == task
        assert [t.task_id for t in client.iter_tasks()] == [task.task_id]
        secret = client.tenant().signing_secrets[0]
        assert wait_until(lambda: sink.snapshot(), timeout=10)
        assert wait_until(lambda: client.list_executions(task.task_id).items, timeout=10)
        client.delete_task(task.task_id)
        with pytest.raises(ApiError) as missing:
            client.get_task(task.task_id)
        assert missing.value.status == 404
    from dynacron.domain.executions.signing import verify

    delivery = sink.snapshot()[0]
    body = json.dumps(delivery.body, separators=(",", ":")).encode()
    header = delivery.headers["Dynacron-Signature"]
    assert verify(header, secret, body, now=int(header.split(",")[0][2:]))
    with dynacron.Client(local, api_key="k2") as other, pytest.raises(ApiError) as hidden:
        other.get_task(task.task_id)
    assert hidden.value.status == 404


def test_the_cli_creates_lists_gets_and_deletes_with_json_and_tables(local: str) -> None:
    target = ["--url", local, "--api-key", "k2"]
    created = cli(
        "tasks",
        *target,
        "--json",
        "create",
        "--cron",
        "0 9 * * MON-FRI",
        "--tz",
        "Europe/Berlin",
        "--handler-url",
        "http://127.0.0.1:9/h",
        "--name",
        "report",
        "--idempotency-key",
        "report-v1",
    )
    assert created["schedule"] == {"kind": "cron", "expression": "0 9 * * MON-FRI"}
    # Run again with the same key (a script retried): the same task, not a second
    again = cli(
        "tasks", *target, "--json", "create", "--cron", "0 9 * * MON-FRI", "--tz",
        "Europe/Berlin", "--handler-url", "http://127.0.0.1:9/h", "--name", "report",
        "--idempotency-key", "report-v1",
    )  # fmt: skip
    assert again == created
    listed = cli("tasks", *target, "--json", "list")
    assert [t["task_id"] for t in listed["items"]] == [created["task_id"]]
    table = cli("tasks", *target, "list")
    assert "report" in table
    assert "MON-FRI" in table
    assert cli("tasks", *target, "--json", "get", created["task_id"]) == created
    assert cli("executions", *target, "--json", "list", created["task_id"])["items"] == []
    assert "deleted" in cli("tasks", *target, "delete", created["task_id"])


def test_cli_errors_say_what_to_do(local: str) -> None:
    result = runner.invoke(app, ["tasks", "--url", local, "--api-key", "k1", "get", "nope"])
    assert result.exit_code == 1
    assert "404 Not found" in result.output
    assert "dynacron tasks list" in result.output
    result = runner.invoke(app, ["tasks", "--url", local, "--api-key", "bad", "list"])
    assert result.exit_code == 1
    assert "401" in result.output
    assert "--api-key" in result.output
    closed = f"http://127.0.0.1:{free_port()}"
    result = runner.invoke(app, ["tasks", "--url", closed, "list"])
    assert result.exit_code == 1
    assert "is dynacron local running? start it with `make run`" in result.output
    with pytest.raises(ApiUnreachable):
        dynacron.Client(closed).list_tasks()
    result = runner.invoke(
        app, ["tasks", "--url", local, "--api-key", "k1", "create", "--handler-url", "x"]
    )
    assert result.exit_code == 1
    assert "schedule: give exactly one of 'cron', 'rate', 'at', 'fixed_delay' or 'after'" in (
        result.output
    )


def test_pause_resume_trigger_and_dead_letters_from_the_cli_and_the_client(
    local: str, sink: Sink
) -> None:
    sink.status = 400  # a handler that refuses: never retried, so a dead letter at once
    target = ["--url", local, "--api-key", "k1"]
    created = cli(
        "tasks", *target, "--json", "create", "--rate", "1 hour", "--handler-url", f"{sink.url}/h"
    )
    task_id = created["task_id"]
    paused = cli("tasks", *target, "--json", "pause", task_id, "--note", "deploy")
    assert (paused["status"], paused["pause_note"]) == ("PAUSED", "deploy")
    assert cli("tasks", *target, "--json", "resume", task_id)["status"] == "ACTIVE"
    triggered = cli("tasks", *target, "--json", "trigger", task_id)
    execution_id = triggered["execution_id"]
    assert execution_id.startswith(task_id)

    def dead_letters() -> list[str]:
        page = cli("dead-letters", *target, "--json", "list")
        return [e["execution_id"] for e in page["items"]]

    assert wait_until(lambda: execution_id in dead_letters(), timeout=20)
    sink.status = 200
    redriven = cli("dead-letters", *target, "--json", "redrive", execution_id)
    assert (redriven["execution_id"], redriven["status"]) == (execution_id, "QUEUED")
    with dynacron.Client(local, api_key="k1") as client:
        assert wait_until(
            lambda: client.get_execution(execution_id).status == "SUCCEEDED", timeout=20
        )
        patched = client.patch_task(task_id, name="renamed", version=created["version"] + 2)
        assert patched.name == "renamed"
        with pytest.raises(ApiError) as stale:
            client.patch_task(task_id, name="again", version=created["version"])
        assert stale.value.status == 409
        assert client.forecast(hours=1).tasks == 1
    # Another tenant's key sees none of it
    other = ["--url", local, "--api-key", "k2"]
    assert cli("dead-letters", *other, "--json", "list")["items"] == []
    result = runner.invoke(app, ["tasks", *other, "trigger", task_id])
    assert result.exit_code == 1
    assert "404" in result.output


class AnswerLost(httpx.HTTPTransport):
    """The network between client and API: the first request reaches the API, and
    its answer is lost on the way back (a timeout, as the client sees it)."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[httpx.Request] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.sent.append(request)
        response = super().handle_request(request)
        if len(self.sent) == 1:
            response.read()
            raise httpx.ReadTimeout("the answer was lost", request=request)
        return response


def test_a_create_whose_answer_was_lost_is_retried_into_the_same_task(local: str) -> None:
    network, hook = AnswerLost(), "http://127.0.0.1:9/h"
    with dynacron.Client(local, api_key="k3", transport=network) as client:
        # When a create reaches the API and its answer is lost
        task = client.create_task(rate="1 hour", handler_url=hook, name="once")
        # Then the client sent it again with the same key, and the tenant has one task
        first, retried = (r.headers["Idempotency-Key"] for r in network.sent)
        assert first == retried
        assert [t.task_id for t in client.iter_tasks()] == [task.task_id]
        # And a create with a key of the caller's own is refused for another body
        client.create_task(rate="1 hour", handler_url="http://127.0.0.1:9/h", idempotency_key="k")
        with pytest.raises(ApiError) as reused:
            client.create_task(
                rate="2 hours", handler_url="http://127.0.0.1:9/h", idempotency_key="k"
            )
        assert reused.value.status == 422


def test_a_batch_whose_answer_was_lost_is_retried_into_the_same_tasks(local: str) -> None:
    network, hook = AnswerLost(), "http://127.0.0.1:9/h"
    with dynacron.Client(local, api_key="k4", transport=network) as client:
        # When a batch with one malformed item reaches the API and its answer is lost
        answer = client.create_tasks(
            [
                {"rate": "1 hour", "handler_url": hook, "name": "one"},
                {"handler_url": hook, "name": "no schedule"},
                TaskCreate(cron="0 3 * * *", handler_url=hook, name="three"),
            ]
        )
        # Then the client sent it again with the same keys, and got the tasks the
        # first made (replayed), the malformed item refused by its index
        first, retried = (json.loads(r.content) for r in network.sent)
        assert first == retried
        assert [i.outcome for i in answer.items] == ["replayed", "refused", "replayed"]
        assert answer.items[1].problem is not None
        assert answer.items[1].problem.status == 422
        made = {i.task.task_id for i in answer.items if i.task is not None}
        assert {t.task_id for t in client.iter_tasks()} == made
        assert client.tenant().task_count == 2
        # And the caller's own keys: the same batch again creates nothing
        bodies = [{"rate": "1 hour", "handler_url": hook, "name": f"k-{n}"} for n in range(3)]
        keys = [f"batch-key-{n}" for n in range(3)]
        assert client.create_tasks(bodies, keys=keys).created == 3
        again = client.create_tasks(bodies, keys=keys)
        assert (again.created, {i.outcome for i in again.items}) == (0, {"replayed"})
        assert client.tenant().task_count == 5


def test_tags_from_the_client_set_replaced_filtered_and_kept_per_tenant(local: str) -> None:
    hook = "http://127.0.0.1:9/h"
    with (
        dynacron.Client(local, api_key="k2") as client,
        dynacron.Client(local, api_key="k3") as other,
    ):
        # Given tasks tagged through the client, and another tenant's with the same tags
        prod = client.create_task(
            rate="1 hour", handler_url=hook, tags={"suite": "client", "env": "prod"}
        )
        dev = client.create_task(
            rate="1 hour", handler_url=hook, tags={"suite": "client", "env": "dev", "team": "a"}
        )
        theirs = other.create_task(
            rate="1 hour", handler_url=hook, tags={"suite": "client", "env": "prod"}
        )
        assert prod.tags == {"suite": "client", "env": "prod"}
        # Then tags= (a mapping, None for any value) and tag= (raw filters) filter alike
        by_mapping = client.list_tasks(tags={"suite": "client", "env": "prod"})
        assert [t.task_id for t in by_mapping.items] == [prod.task_id]
        assert [t.task_id for t in client.list_tasks(tag="team").items] == [dev.task_id]
        both = client.iter_tasks(tag=["suite:client"], tags={"team": None})
        assert [t.task_id for t in both] == [dev.task_id]
        assert [t.task_id for t in other.iter_tasks(tags={"suite": "client"})] == [theirs.task_id]
        # A patch replaces the whole map; an empty one clears it
        assert client.patch_task(dev.task_id, tags={"suite": "client"}).tags == {"suite": "client"}
        assert client.patch_task(dev.task_id, tags={}).tags == {}
        assert [t.task_id for t in client.iter_tasks(tags={"suite": "client"})] == [prod.task_id]
        # Bad tags are the API's 422, naming the field
        with pytest.raises(ApiError) as refused:
            client.patch_task(prod.task_id, tags={"bad key": "v"})
        assert refused.value.status == 422
        assert refused.value.problem.errors == [
            {"field": "tags", "message": refused.value.problem.errors[0]["message"]}
        ]
        for task in (prod, dev):
            client.delete_task(task.task_id)
        other.delete_task(theirs.task_id)


def test_tags_from_the_cli_on_create_update_and_list(
    local: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Tables as wide as they need: a console made at import takes COLUMNS as it was
    # then (pytest-xdist's workers set 80), so a tag line would fold
    monkeypatch.setattr(cli_output, "out", Console(highlight=False, width=300))
    target = ["--url", local, "--api-key", "k2"]
    hook = "http://127.0.0.1:9/h"
    # Given a task created with --tag in both spellings, one value holding markup
    created = cli(
        "tasks", *target, "--json", "create", "--rate", "1 hour", "--handler-url", hook,
        "--tag", "suite=cli", "--tag", "env:prod", "--tag", "note=[/bold] a=b:c",
    )  # fmt: skip
    assert created["tags"] == {"suite": "cli", "env": "prod", "note": "[/bold] a=b:c"}
    other = cli(
        "tasks", *target, "--json", "create", "--rate", "1 hour", "--handler-url", hook,
        "--tag", "suite=cli",
    )  # fmt: skip

    # Then list --tag keeps the tasks with every tag given (key=value, key:value, key)
    def listed(*tags: str) -> list[str]:
        flags = [part for tag in tags for part in ("--tag", tag)]
        page = cli("tasks", *target, "--json", "list", *flags)
        return [t["task_id"] for t in page["items"]]

    assert listed("suite=cli") == [created["task_id"], other["task_id"]]
    assert listed("suite:cli", "env=prod") == [created["task_id"]]
    assert listed("suite=cli", "note") == [created["task_id"]]
    # and the table shows the tags as they are, markup and all
    wide = runner.invoke(app, ["tasks", *target, "list", "--tag", "env=prod"])
    assert wide.exit_code == 0, wide.output
    assert "env=prod, note=[/bold] a=b:c, suite=cli" in wide.stdout
    # update --tag replaces every tag; --clear-tags removes them
    task_id = created["task_id"]
    updated = cli("tasks", *target, "--json", "update", task_id, "--tag", "suite=cli")
    assert updated["tags"] == {"suite": "cli"}
    assert listed("env") == []
    assert cli("tasks", *target, "--json", "update", task_id, "--clear-tags")["tags"] == {}
    # A tag without a value on create, or nothing to change, is a usage error
    for args in (
        ["create", "--rate", "1 hour", "--handler-url", hook, "--tag", "novalue"],
        ["update", task_id],
    ):
        result = runner.invoke(app, ["tasks", *target, *args])
        assert result.exit_code == 2, result.output
    # And a bad filter is the API's 422, naming the parameter
    result = runner.invoke(app, ["tasks", *target, "list", "--tag", "bad key"])
    assert result.exit_code == 1
    assert "tag:" in result.output
    for task in (task_id, other["task_id"]):
        cli("tasks", *target, "delete", task)


def test_failed_executions_across_tasks_from_the_cli_and_the_client(local: str, sink: Sink) -> None:
    # Given a tenant with a task whose handler refuses (a dead letter at once) and one
    # whose handler succeeds, each triggered
    sink.answer = lambda delivery: (400 if delivery.path == "/refuse" else 200, {})
    target = ["--url", local, "--api-key", "k3"]
    with dynacron.Client(local, api_key="k3") as client:
        refusing = client.create_task(rate="1 hour", handler_url=f"{sink.url}/refuse")
        fine = client.create_task(rate="1 hour", handler_url=f"{sink.url}/fine")
        failed_id = client.trigger_task(refusing.task_id).execution_id
        fine_id = client.trigger_task(fine.task_id).execution_id
        assert wait_until(
            lambda: (
                client.get_execution(fine_id).status == "SUCCEEDED"
                and [e.execution_id for e in client.list_executions(status="FAILED").items]
                == [failed_id]
            ),
            timeout=20,
        )
        # The client lists across tasks with aware datetimes, and no filter on a task
        an_hour_ago = datetime.now(UTC) - timedelta(hours=1)
        listed = list(client.iter_executions(since=an_hour_ago))
        assert [(e.execution_id, e.status) for e in listed] == [(failed_id, "FAILED")]
        assert list(client.iter_executions(until=an_hour_ago)) == []
        with pytest.raises(ValueError, match="leave task_id out"):
            client.list_executions(fine.task_id, status="FAILED")

    # When the CLI is asked what failed in the last hour
    page = cli("executions", *target, "--json", "--status", "FAILED", "--since", "1h")
    # Then it names the failure and not the success, in JSON and in a table
    assert [e["execution_id"] for e in page["items"]] == [failed_id]
    table = cli("executions", *target, "--status", "failed", "--since", "1h")
    assert "executions across tasks" in table
    assert ("FAILED" in table, "SUCCEEDED" in table) == (True, False)
    assert cli("executions", *target, "--json", "--until", "1h")["items"] == []
    # And another tenant sees none of it
    assert cli("executions", "--url", local, "--api-key", "k2", "--json")["items"] == []
    # And a status that is not listed across tasks says where to look instead
    result = runner.invoke(app, ["executions", *target, "--status", "SUCCEEDED"])
    assert result.exit_code == 1
    assert "GET /tasks/{task_id}/executions" in result.output
    result = runner.invoke(app, ["executions", *target, "--since", "yesterday"])
    assert result.exit_code == 1
    assert "since" in result.output


def test_the_client_previews_a_schedule_and_explains_a_task_s_next_runs(local: str) -> None:
    with dynacron.Client(local, api_key="k3") as client:
        tasks_before = len(list(client.iter_tasks()))
        preview = client.preview_schedule(count=12, cron="0 9 1 * *", timezone="Europe/Berlin")
        # Twelve monthly occurrences cross both of the year's changes of offset
        assert len(preview.occurrences) == 12
        assert len(preview.dst_transitions) == 2
        assert preview.explanation.startswith("At 09:00, on day 1 of the month")
        with pytest.raises(ApiError) as refused:
            client.preview_schedule(cron="0 25 * * *")
        assert refused.value.status == 422
        assert len(list(client.iter_tasks())) == tasks_before  # nothing was stored
        task = client.create_task(cron="0 9 1 * *", timezone="Europe/Berlin", handler_url=HOOK)
        upcoming = client.next_occurrences(task.task_id, count=12)
        assert upcoming.explanation == preview.explanation
        assert upcoming.dst_transitions == preview.dst_transitions
        client.delete_task(task.task_id)


def test_tasks_found_by_name_from_the_cli_and_the_client(local: str) -> None:
    # Given a tenant's tasks, three of them named alike in different cases
    target = ["--url", local, "--api-key", "k5"]
    with dynacron.Client(local, api_key="k5") as client:
        for name in ("Backup nightly", "backup Hourly", "BACKUPS", "report", "zeta"):
            client.create_task(rate="1 hour", handler_url=HOOK, name=name)

        # Then the client finds them by prefix, in name order, either way
        def names(**listing: Any) -> list[str]:
            return [t.name for t in client.list_tasks(**listing).items]

        assert names(name_prefix="BACKUP") == ["backup Hourly", "Backup nightly", "BACKUPS"]
        assert names(name_prefix="backup n") == ["Backup nightly"]
        assert names(sort="name", order="desc")[:2] == ["zeta", "report"]
        assert [t.name for t in client.iter_tasks(name_prefix="backups")] == ["BACKUPS"]
        assert names(status="PAUSED") == []

    # And so does the CLI, with --name, --sort and --desc
    def listed(*flags: str) -> list[str]:
        return [t["name"] for t in cli("tasks", *target, "--json", "list", *flags)["items"]]

    assert listed("--name", "backup") == ["backup Hourly", "Backup nightly", "BACKUPS"]
    assert listed("--name", "backup", "--desc", "--limit", "2") == ["BACKUPS", "Backup nightly"]
    assert listed("--sort", "name")[-1] == "zeta"
    assert len(listed("--sort", "next_run_at", "--status", "ACTIVE")) == 5
    # A combination the API does not offer is its 422, naming the parameter
    result = runner.invoke(app, ["tasks", *target, "list", "--name", "b", "--sort", "created_at"])
    assert result.exit_code == 1
    assert "sort:" in result.output


def test_the_client_and_cli_show_a_change_and_revert_it(local: str) -> None:
    target = ["--url", local, "--api-key", "k6"]
    with dynacron.Client(local, api_key="k6") as client:
        task = client.create_task(rate="1 hour", handler_url=HOOK, name="before")
        client.patch_task(task.task_id, name="after", version=task.version)
        patch = client.list_changes(task.task_id).items[0]
        assert (patch.what, patch.before["name"], patch.after["name"]) == (
            "patch",
            "before",
            "after",
        )
        assert patch.who == "team-f"
    table = cli("tasks", *target, "changes", task.task_id)
    assert "patch" in table
    assert "create" in table
    reverted = cli("tasks", *target, "--json", "revert", task.task_id, patch.change_id)
    assert reverted["name"] == "before"
    listed = cli("tasks", *target, "--json", "changes", task.task_id)
    assert [c["what"] for c in listed["items"]] == ["revert", "patch", "create"]
    stale = runner.invoke(
        app, ["tasks", *target, "revert", task.task_id, patch.change_id, "--version", "1"]
    )
    assert stale.exit_code != 0
    assert "409" in stale.output or "changed meanwhile" in stale.output
