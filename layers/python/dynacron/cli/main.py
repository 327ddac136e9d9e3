"""The ``dynacron`` command line."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any
from urllib.parse import urlsplit

import typer
from pydantic import BaseModel, ValidationError
from rich.console import Console
from rich.table import Table

from dynacron.api.requests import TaskCreate
from dynacron.api.responses import ExecutionPage
from dynacron.cli import tables
from dynacron.cli.try_handler import try_handler
from dynacron.client.api_client import LOCAL_URL, ApiError, ApiUnreachable, Client, SigV4Auth
from dynacron.console.command import console_command
from dynacron.domain.errors import InvalidRequest
from dynacron.domain.instants import format_instant
from dynacron.domain.schedules.describe import describe
from dynacron.domain.schedules.expressions import parse_expression, parse_local_instant, upcoming
from dynacron.domain.schedules.wallclock import Ambiguous, DstPolicy, Nonexistent
from dynacron.local import commands as local_commands
from dynacron.planning import capacity

app = typer.Typer(help="dynacron: a serverless, distributed task scheduler.", no_args_is_help=True)
tasks_app = typer.Typer(help="Register, inspect and control tasks.", no_args_is_help=True)
executions_app = typer.Typer(
    help="Executions: across your tasks, those to look at (failed, retrying, long-running); "
    "a task's whole history with `list TASK_ID`.",
    invoke_without_command=True,
)
dead_letters_app = typer.Typer(help="Executions that ran out of attempts.", no_args_is_help=True)
app.add_typer(tasks_app, name="tasks")
app.add_typer(executions_app, name="executions")
app.add_typer(dead_letters_app, name="dead-letters")
app.command()(local_commands.local)
app.command()(local_commands.aws)
app.command("console")(console_command)
app.command("try-handler")(try_handler)
console = Console(stderr=True, highlight=False)


@app.callback()
def _root() -> None:
    """Keep sub-commands explicit."""


out = Console(highlight=False)

UrlOption = Annotated[
    str,
    typer.Option(
        "--url",
        envvar="DYNACRON_URL",
        help="The API; a non-loopback URL is signed with your AWS credentials (SigV4)",
    ),
]
ApiKeyOption = Annotated[
    str | None,
    typer.Option("--api-key", envvar="DYNACRON_API_KEY", help="An API key, instead of SigV4"),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON, for scripts")]
LimitOption = Annotated[int, typer.Option(min=1, max=100, help="Items per page")]
TokenOption = Annotated[str | None, typer.Option(help="next_token of the previous page")]
TagOption = Annotated[
    list[str] | None,
    typer.Option(
        "--tag",
        help="A tag, key=value or key:value; repeat it for several",
        show_default=False,
    ),
]
TagFilterOption = Annotated[
    list[str] | None,
    typer.Option(
        "--tag",
        help="Only tasks with this tag: key=value, key:value, or key (any value); "
        "repeat it for tasks with every one",
        show_default=False,
    ),
]


def split_tag(text: str) -> tuple[str, str | None]:
    """``key=value`` or ``key:value`` (at the first of either: no key holds one) as
    its key and value; a bare ``key`` has no value."""
    cut = min((i for i in (text.find("="), text.find(":")) if i >= 0), default=-1)
    return (text, None) if cut < 0 else (text[:cut], text[cut + 1 :])


def tags_of(texts: Sequence[str]) -> dict[str, str]:
    """``--tag`` options as a task's tags; a tag without a value is a usage error."""
    tags: dict[str, str] = {}
    for text in texts:
        key, value = split_tag(text)
        if value is None:
            console.print(f"[red]error:[/red] --tag {text!r}: give key=value (or key:value)")
            raise typer.Exit(2)
        tags[key] = value
    return tags


@dataclass(frozen=True)
class Target:
    url: str
    api_key: str | None
    as_json: bool

    def client(self) -> Client:
        loopback = urlsplit(self.url).hostname in ("127.0.0.1", "localhost", "::1")
        auth = None if loopback or self.api_key else SigV4Auth()
        return Client(self.url, api_key=self.api_key, auth=auth)


@contextmanager
def api(target: Target) -> Iterator[Client]:
    """A client whose errors become one readable line and exit code 1."""
    try:
        with target.client() as client:
            yield client
    except ApiUnreachable as error:
        console.print(f"[red]error:[/red] {error}", soft_wrap=True)
        raise typer.Exit(1) from None
    except ApiError as error:
        console.print(f"[red]error:[/red] {error}", soft_wrap=True)
        for field in error.problem.errors or []:
            console.print(f"  {field.get('field')}: {field.get('message')}", soft_wrap=True)
        hint = _HINTS.get(error.status)
        if hint:
            console.print(f"  {hint}", soft_wrap=True)
        raise typer.Exit(1) from None


_HINTS = {
    401: "the API does not know who you are: pass --api-key, or AWS credentials for SigV4",
    403: "API Gateway refused the signature: check your AWS credentials and region",
    404: "list your tasks with `dynacron tasks list`",
    429: "slow down: wait a moment and retry",
}


def show(target: Target, value: BaseModel, table: Callable[[Any], Table] | None = None) -> None:
    if target.as_json or table is None:
        out.print_json(value.model_dump_json())
    else:
        out.print(table(value))


def answer(
    ctx: typer.Context, call: Callable[[Client], BaseModel], table: Callable[[Any], Table]
) -> None:
    """Make one API call for the command's target, and show what it answered."""
    target = _target(ctx)
    with api(target) as client:
        show(target, call(client), table)


_AGO = re.compile(r"(\d+)\s*([smhdw])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def _instant_option(value: str | None, now: datetime) -> str | None:
    """``1h``, ``30m``, ``2d`` ago, as an instant; anything else is sent as given
    (ISO 8601 with an offset, which the API checks)."""
    if value is None:
        return None
    ago = _AGO.fullmatch(value.strip())
    if ago is None:
        return value
    return format_instant(now - timedelta(**{_UNITS[ago[2]]: int(ago[1])}))


def _target(ctx: typer.Context) -> Target:
    assert isinstance(ctx.obj, Target)
    return ctx.obj


def _connect(ctx: typer.Context, url: str, api_key: str | None, as_json: bool) -> None:
    ctx.obj = Target(url, api_key, as_json)


for _group in (tasks_app, dead_letters_app):

    @_group.callback()
    def _options(
        ctx: typer.Context,
        url: UrlOption = LOCAL_URL,
        api_key: ApiKeyOption = None,
        as_json: JsonOption = False,
    ) -> None:
        _connect(ctx, url, api_key, as_json)


@tasks_app.command("create")
def tasks_create(
    ctx: typer.Context,
    handler_url: Annotated[str, typer.Option(help="The http(s) URL to POST each execution to")],
    cron: Annotated[
        str | None, typer.Option(help="A cron expression, e.g. '0 9 * * MON-FRI'")
    ] = None,
    rate: Annotated[str | None, typer.Option(help="A rate, e.g. '5 minutes'")] = None,
    at: Annotated[str | None, typer.Option(help="An ISO 8601 instant, for a one-time task")] = None,
    name: Annotated[str | None, typer.Option(help="A name to recognise it by")] = None,
    tz: Annotated[str, typer.Option("--tz", help="IANA time zone")] = "UTC",
    payload: Annotated[str, typer.Option(help="JSON object sent with every execution")] = "{}",
    idempotency_key: Annotated[
        str | None,
        typer.Option(help="Run the command again with the same key: one task (for 24 hours)"),
    ] = None,
    tag: TagOption = None,
) -> None:
    """Register a task: give exactly one of --cron, --rate or --at."""
    target = _target(ctx)
    try:
        body = json.loads(payload)
    except ValueError as error:
        console.print(f"[red]error:[/red] --payload is not JSON: {error}")
        raise typer.Exit(2) from None
    try:
        request = TaskCreate(
            handler_url=handler_url,
            cron=cron,
            rate=rate,
            at=at,
            name=name,
            timezone=tz,
            payload=body,
            tags=tags_of(tag or []),
        )
    except ValidationError as error:
        console.print(f"[red]error:[/red] {error}")
        raise typer.Exit(2) from None
    with api(target) as client:
        task = client.create_task(request, idempotency_key=idempotency_key)
    show(target, task, tables.tasks)


@tasks_app.command("update")
def tasks_update(
    ctx: typer.Context,
    task_id: str,
    name: Annotated[str | None, typer.Option(help="A new name")] = None,
    tag: TagOption = None,
    clear_tags: Annotated[bool, typer.Option("--clear-tags", help="Remove every tag")] = False,
    version: Annotated[
        int | None, typer.Option(min=1, help="Refuse the change unless the task is at it")
    ] = None,
) -> None:
    """Change a task. --tag replaces all of its tags with those given."""
    if tag and clear_tags:
        console.print("[red]error:[/red] give --tag or --clear-tags, not both")
        raise typer.Exit(2)
    fields: dict[str, Any] = {"name": name, "version": version}
    if tag or clear_tags:
        fields["tags"] = tags_of(tag or [])
    changes = {k: v for k, v in fields.items() if v is not None}
    if not changes:
        console.print("[red]error:[/red] nothing to change: give --name, --tag or --clear-tags")
        raise typer.Exit(2)
    answer(ctx, lambda client: client.patch_task(task_id, **changes), tables.tasks)


@tasks_app.command("list")
def tasks_list(
    ctx: typer.Context,
    limit: LimitOption = 50,
    next_token: TokenOption = None,
    tag: TagFilterOption = None,
) -> None:
    """Your tasks, oldest first, one page at a time; with --tag, those with every tag
    given (a page may then hold fewer than --limit: follow --next-token)."""
    filters = [
        key if value is None else f"{key}:{value}" for key, value in map(split_tag, tag or [])
    ]
    answer(ctx, lambda client: client.list_tasks(limit, next_token, tag=filters), tables.tasks)


@tasks_app.command("get")
def tasks_get(ctx: typer.Context, task_id: str) -> None:
    """One task."""
    answer(ctx, lambda client: client.get_task(task_id), tables.tasks)


@tasks_app.command("pause")
def tasks_pause(
    ctx: typer.Context,
    task_id: str,
    note: Annotated[str | None, typer.Option(help="Why, for whoever resumes it")] = None,
) -> None:
    """Stop a task firing until it is resumed."""
    answer(ctx, lambda client: client.pause_task(task_id, note), tables.tasks)


@tasks_app.command("resume")
def tasks_resume(ctx: typer.Context, task_id: str) -> None:
    """Let a paused task fire again; what it missed follows its catch-up policy."""
    answer(ctx, lambda client: client.resume_task(task_id), tables.tasks)


@tasks_app.command("trigger")
def tasks_trigger(ctx: typer.Context, task_id: str) -> None:
    """Run a task once now, outside its schedule."""
    answer(ctx, lambda client: client.trigger_task(task_id), tables.executions)


@tasks_app.command("delete")
def tasks_delete(ctx: typer.Context, task_id: str) -> None:
    """Delete a task; executions already queued are skipped."""
    target = _target(ctx)
    with api(target) as client:
        client.delete_task(task_id)
    if target.as_json:
        out.print_json(json.dumps({"deleted": task_id}))
    else:
        out.print(f"deleted {task_id}")


StatusOption = Annotated[
    str | None,
    typer.Option(
        help="FAILED, QUEUED (waiting for a retry) or RUNNING (a retry, or a long job)",
        case_sensitive=False,
    ),
]
SinceOption = Annotated[
    str | None, typer.Option(help="Listed since: 1h, 30m, 2d ago, or an ISO 8601 instant")
]
UntilOption = Annotated[
    str | None, typer.Option(help="Listed until: 1h, 30m, 2d ago, or an ISO 8601 instant")
]


@executions_app.callback()
def _executions(
    ctx: typer.Context,
    status: StatusOption = None,
    since: SinceOption = None,
    until: UntilOption = None,
    limit: LimitOption = 50,
    next_token: TokenOption = None,
    url: UrlOption = LOCAL_URL,
    api_key: ApiKeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """Without a sub-command: the executions to look at across your tasks, newest first
    (`dynacron executions --status FAILED --since 1h`)."""
    _connect(ctx, url, api_key, as_json)
    if ctx.invoked_subcommand is not None:
        if status or since or until:
            console.print(
                "[red]error:[/red] --status, --since and --until list across tasks: "
                "leave out the sub-command (`dynacron executions --status FAILED --since 1h`)"
            )
            raise typer.Exit(2)
        return
    now = datetime.now(UTC)

    def across(client: Client) -> ExecutionPage:
        return client.list_executions(
            None,
            limit,
            next_token,
            status=status.upper() if status else None,
            since=_instant_option(since, now),
            until=_instant_option(until, now),
        )

    answer(ctx, across, tables.listed)


@executions_app.command("list")
def executions_list(
    ctx: typer.Context, task_id: str, limit: LimitOption = 50, next_token: TokenOption = None
) -> None:
    """A task's executions, newest first."""
    answer(
        ctx, lambda client: client.list_executions(task_id, limit, next_token), tables.executions
    )


@dead_letters_app.command("list")
def dead_letters_list(
    ctx: typer.Context, limit: LimitOption = 50, next_token: TokenOption = None
) -> None:
    """Executions that failed every attempt."""
    answer(ctx, lambda client: client.list_dead_letters(limit, next_token), tables.executions)


@dead_letters_app.command("redrive")
def dead_letters_redrive(ctx: typer.Context, execution_id: str) -> None:
    """Run a dead-lettered execution again."""
    answer(ctx, lambda client: client.redrive(execution_id), tables.executions)


@app.command(name="next")
def next_occurrences(
    expression: Annotated[
        str, typer.Argument(help="A cron expression ('0 9 * * MON-FRI') or a rate ('5 minutes')")
    ],
    tz: Annotated[str, typer.Option("--tz", help="IANA time zone of a cron expression")] = "UTC",
    count: Annotated[int, typer.Option(min=1, max=100, help="How many occurrences")] = 10,
    after: Annotated[
        str | None,
        typer.Option(help="Start strictly after this ISO 8601 instant (default: now)"),
    ] = None,
    explain: Annotated[
        bool, typer.Option("--explain", help="First print what the schedule means")
    ] = False,
    seed: Annotated[
        str | None, typer.Option(help="The task id that spreads 'H' fields (as the API does)")
    ] = None,
    anchor: Annotated[
        str | None, typer.Option(help="A rate's first occurrence (default: --after)")
    ] = None,
    nonexistent: Annotated[
        Nonexistent, typer.Option(help="A local time the clocks skip")
    ] = Nonexistent.SHIFT,
    ambiguous: Annotated[
        Ambiguous, typer.Option(help="A local time the clocks repeat")
    ] = Ambiguous.FIRST,
) -> None:
    """Print a schedule's next occurrences, one ISO 8601 UTC instant per line.

    Computed on this machine with the same code the scheduler runs, so it agrees
    with GET /tasks/{task_id}/next for the same schedule.
    """
    try:
        start = parse_local_instant("after", after, tz) if after is not None else datetime.now(UTC)
        schedule = parse_expression(
            expression,
            tz,
            anchor=parse_local_instant("anchor", anchor, tz) if anchor is not None else start,
            dst=DstPolicy(nonexistent, ambiguous),
            seed=seed,
        )
    except InvalidRequest as error:
        console.print(f"[red]error:[/red] {error.field}: {error.message}", soft_wrap=True)
        raise typer.Exit(2) from None
    if explain:
        typer.echo(describe(schedule))
    for occurrence in upcoming(schedule, start, count):
        typer.echo(format_instant(occurrence))


@app.command(name="plan")
def plan_capacity(
    fires_per_second: Annotated[
        float, typer.Option("--fires-per-second", help="Fires per second to sustain")
    ],
    handler_seconds: Annotated[
        float, typer.Option(min=0.0, help="How long a handler takes to answer, in seconds")
    ] = 0.2,
    current_shards: Annotated[
        int,
        typer.Option(
            min=1,
            max=capacity.MAX_SHARDS,
            help="The deployment's shard_count today: a plan never lowers it",
        ),
    ] = 1,
    as_json: JsonOption = False,
) -> None:
    """Size a deployment for a rate of fires: shards, claim invocations, workers,
    DynamoDB billing, monthly cost (and what looping ticks alone would idle at), and
    the CDK context that deploys it.

    From the tick's CPU per claim and per page handed out, and the capacity units per
    fire that `make bench` measured (docs/deploy.md, "Sizing", explains the model).
    """
    from dynacron.definitions.resources import TABLES

    try:
        row = capacity.plan(
            fires_per_second,
            handler_seconds=handler_seconds,
            min_shards=current_shards,
            provisioned_targets=sum(1 + len(table.indexes) for table in TABLES),
        )
    except capacity.PlanRefused as error:
        console.print(f"[red]error:[/red] {error}", soft_wrap=True)
        raise typer.Exit(2) from None
    flags = row.context_flags()
    if as_json:
        out.print_json(
            data={
                **dataclasses.asdict(row),
                "tick_capacity": row.tick_capacity,
                "idle_usd_per_month": row.idle.total,
                "loaded_usd_per_month": row.loaded.total,
                "context": row.context(),
            }
        )
        return
    table = Table(title=f"dynacron for {fires_per_second:,g} fires/s", show_header=False)
    table.add_column("")
    table.add_column("")
    for name, value in zip(
        capacity.SIZING_HEADERS[1:-1], capacity.sizing_row(row)[1:-1], strict=True
    ):
        table.add_row(name, value)
    table.add_row(
        "handler + worker per fire",
        f"{handler_seconds:g} s + {capacity.WORKER_OVERHEAD_SECONDS:g} s",
    )
    out.print(table)
    for note in row.notes:
        out.print(f"note: {note}", soft_wrap=True)
    out.print(f'make synth CONTEXT="{flags}"', soft_wrap=True)
    out.print(f"cdk deploy {flags}", soft_wrap=True)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
