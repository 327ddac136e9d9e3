"""`dynacron tasks ...`: register, inspect and control tasks."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Annotated, Any

import typer
from pydantic import ValidationError

from dynacron.api.requests import TaskCreate
from dynacron.cli import tables, task_files
from dynacron.cli.connection import (
    LimitOption,
    TagFilterOption,
    TagOption,
    TokenOption,
    add_connection_options,
    answer,
    api,
    console,
    delete,
    show,
    split_tag,
    tags_of,
    target_of,
)
from dynacron.cli.eventbridge_import import import_eventbridge

tasks_app = typer.Typer(help="Register, inspect and control tasks.", no_args_is_help=True)
add_connection_options(tasks_app)
tasks_app.command("import")(task_files.tasks_import)
tasks_app.command("export")(task_files.tasks_export)


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
    target = target_of(ctx)
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


class ListingSort(StrEnum):
    """``dynacron tasks list --sort``: GET /tasks's orders."""

    CREATED_AT = "created_at"
    NAME = "name"
    NEXT_RUN_AT = "next_run_at"


class TaskStatusChoice(StrEnum):
    """``dynacron tasks list --status``."""

    ACTIVE = "ACTIVE"
    PAUSED = "PAUSED"
    COMPLETED = "COMPLETED"
    ERROR = "ERROR"


@tasks_app.command("list")
def tasks_list(
    ctx: typer.Context,
    limit: LimitOption = 50,
    next_token: TokenOption = None,
    tag: TagFilterOption = None,
    name: Annotated[
        str | None,
        typer.Option("--name", help="Only tasks whose name starts with this (any case), by name"),
    ] = None,
    sort: Annotated[
        ListingSort | None,
        typer.Option(help="created_at (default), name, or next_run_at (local mode only)"),
    ] = None,
    desc: Annotated[bool, typer.Option("--desc", help="Newest, last or Z first")] = False,
    status: Annotated[
        TaskStatusChoice | None, typer.Option(help="Only tasks in this status")
    ] = None,
) -> None:
    """Your tasks, oldest first, one page at a time; with --tag, those with every tag
    given, with --name those whose name starts with it (a filtered page may hold fewer
    than --limit: follow --next-token)."""
    filters = [
        key if value is None else f"{key}:{value}" for key, value in map(split_tag, tag or [])
    ]
    answer(
        ctx,
        lambda client: client.list_tasks(
            limit,
            next_token,
            tag=filters,
            name_prefix=name,
            sort=sort.value if sort else None,
            order="desc" if desc else None,
            status=status.value if status else None,
        ),
        tables.tasks,
    )


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


@tasks_app.command("changes")
def tasks_changes(
    ctx: typer.Context, task_id: str, limit: LimitOption = 50, next_token: TokenOption = None
) -> None:
    """Who changed a task, when, and each field before -> after, newest first."""
    answer(ctx, lambda client: client.list_changes(task_id, limit, next_token), tables.changes)


@tasks_app.command("revert")
def tasks_revert(
    ctx: typer.Context,
    task_id: str,
    change_id: str,
    version: Annotated[
        int | None,
        typer.Option(help="Refuse (409) unless the task is at this version; default: as read now"),
    ] = None,
) -> None:
    """Restore the fields a change changed to what they were before it."""
    answer(ctx, lambda client: client.revert_change(task_id, change_id, version), tables.tasks)


@tasks_app.command("delete")
def tasks_delete(ctx: typer.Context, task_id: str) -> None:
    """Delete a task; executions already queued are skipped."""
    delete(ctx, lambda client: client.delete_task(task_id), task_id)


tasks_app.command("import-eventbridge")(import_eventbridge)


@tasks_app.command("skip")
def tasks_skip(
    ctx: typer.Context,
    task_id: str,
    occurrences: Annotated[int | None, typer.Option(help="Skip the next N occurrences")] = None,
    until: Annotated[
        str | None, typer.Option(help="Skip every occurrence before this ISO 8601 instant")
    ] = None,
    at: Annotated[
        list[str] | None, typer.Option(help="Skip this occurrence (ISO 8601); repeat for more")
    ] = None,
    note: Annotated[str | None, typer.Option(help="Why, recorded with each one skipped")] = None,
) -> None:
    """Have occurrences not run: each is recorded SKIPPED, who asked and why."""
    body: dict[str, Any] = {
        k: v
        for k, v in {"occurrences": occurrences, "until": until, "at": at, "note": note}.items()
        if v is not None
    }
    answer(ctx, lambda client: client.skip_occurrences(task_id, body), tables.tasks)


@tasks_app.command("unskip")
def tasks_unskip(
    ctx: typer.Context,
    task_id: str,
    at: Annotated[
        str | None, typer.Option(help="Only this occurrence (default: every skip)")
    ] = None,
) -> None:
    """Remove skips not yet reached."""
    answer(ctx, lambda client: client.remove_skips(task_id, at), tables.tasks)
