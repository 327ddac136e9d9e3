"""`dynacron admin ...`: one-off chores an operator runs on a deployed stack with
their own AWS credentials, such as the backfill an upgrade asks for."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Annotated

import typer

from dynacron.cli.connection import console, out
from dynacron.definitions.resources import TASKS

admin_app = typer.Typer(help="An operator's chores on a deployed stack.", no_args_is_help=True)


class WritePace:
    """At most ``per_second`` writes a second: each ``wait`` returns no sooner than
    1/``per_second`` after the previous one's slot (no burst after a slow stretch
    beyond one slot)."""

    def __init__(
        self,
        per_second: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._interval = 1.0 / per_second
        self._clock = clock
        self._sleep = sleep
        self._next: float | None = None

    def wait(self) -> None:
        now = self._clock()
        if self._next is not None and now < self._next:
            self._sleep(self._next - now)
            now = self._next
        self._next = now + self._interval


@admin_app.command("backfill-name-keys")
def backfill_name_keys(
    tasks_table: Annotated[
        str,
        typer.Option(
            "--tasks-table",
            envvar=TASKS.env_var,
            help="The deployment's tasks table (the stack's TasksTable output)",
        ),
    ],
    max_writes_per_second: Annotated[
        float,
        typer.Option(min=0.1, max=10_000.0, help="The most name keys written a second"),
    ] = 100.0,
    start_after: Annotated[
        str | None,
        typer.Option(help="Go on after this task id (the last progress line's, to resume)"),
    ] = None,
    page_size: Annotated[
        int, typer.Option(min=1, max=10_000, help="Items read by each Scan request")
    ] = 500,
    region: Annotated[str | None, typer.Option(help="The table's AWS region")] = None,
) -> None:
    """Give tasks written before the name index (decision 0045) their name key, so
    that `GET /tasks?name_prefix=` finds them. Run once after upgrading a stack to
    the version with the name index; safe to run again or alongside the API (a task
    that has its key, or is changed meanwhile, is left alone)."""
    import boto3

    from dynacron.adapters.aws.task_listing import backfill_name_key_pages

    client = boto3.client("dynamodb", region_name=region)
    pace = WritePace(max_writes_per_second)
    scanned = given = changed = 0
    for page in backfill_name_key_pages(
        client, tasks_table, page_size=page_size, start_after=start_after, before_write=pace.wait
    ):
        scanned += page.scanned
        given += page.given
        changed += page.changed_meanwhile
        resume = f"; to resume: --start-after {page.resume_after}" if page.resume_after else ""
        console.print(
            f"scanned {scanned:,} tasks, gave {given:,} a name key"
            f" ({changed:,} changed meanwhile){resume}",
            soft_wrap=True,  # one line a page, whatever the terminal's width
        )
    out.print_json(json.dumps({"scanned": scanned, "given": given, "changed_meanwhile": changed}))
