"""`dynacron executions ...` and `dynacron dead-letters ...`."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

import typer

from dynacron.api.responses import ExecutionPage
from dynacron.cli import tables
from dynacron.cli.connection import (
    ApiKeyOption,
    JsonOption,
    LimitOption,
    TokenOption,
    UrlOption,
    add_connection_options,
    answer,
    connect,
    console,
    instant_option,
)
from dynacron.client.api_client import LOCAL_URL, Client

executions_app = typer.Typer(
    help="Executions: across your tasks, those to look at (failed, retrying, long-running); "
    "a task's whole history with `list TASK_ID`.",
    invoke_without_command=True,
)
dead_letters_app = typer.Typer(help="Executions that ran out of attempts.", no_args_is_help=True)
add_connection_options(dead_letters_app)


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
    connect(ctx, url, api_key, as_json)
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
            since=instant_option(since, now),
            until=instant_option(until, now),
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
