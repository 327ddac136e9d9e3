"""`dynacron admin ...`: one-off chores an operator runs on a deployed stack with
their own AWS credentials, such as the backfill an upgrade asks for."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from dynacron.adapters.aws.task_listing import (
    BackfillPage,
    backfill_name_key_pages,
    backfill_tenant_part_pages,
    backfilled,
    record_backfilled,
)
from dynacron.cli.connection import console, out
from dynacron.definitions.resources import (
    COORDINATION,
    NAME_KEYS_BACKFILLED_KEY,
    TENANT_PARTS_BACKFILLED_KEY,
)
from dynacron.domain.instants import format_instant

if TYPE_CHECKING:
    from types_boto3_dynamodb.client import DynamoDBClient


@dataclass(frozen=True)
class Backfill:
    """What one of the backfills gives a task, and where a whole run is recorded."""

    gives: str
    record_key: str
    pages: Callable[..., Iterator[BackfillPage]]


NAME_KEYS = Backfill("a name key", NAME_KEYS_BACKFILLED_KEY, backfill_name_key_pages)
TENANT_PARTS = Backfill("a tenant part", TENANT_PARTS_BACKFILLED_KEY, backfill_tenant_part_pages)

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


# The options every backfill takes (`backfill-name-keys`, `backfill-tenant-parts`).
TasksTableOption = Annotated[
    str | None,
    typer.Option(
        "--tasks-table", help="The deployment's tasks table (the stack's TasksTable output)"
    ),
]
OutputsFileOption = Annotated[
    Path | None,
    typer.Option(
        help="Instead of the tables: `cdk deploy --outputs-file`'s JSON; every stack in it"
        " with a TasksTable output (`make deploy` passes it)",
    ),
]
CoordinationTableOption = Annotated[
    str | None,
    typer.Option(
        "--coordination-table",
        envvar=COORDINATION.env_var,
        help="Where a run over the whole table is recorded, so that the next returns at once",
    ),
]
AgainOption = Annotated[bool, typer.Option("--again", help="Scan even if a whole run is recorded")]
PaceOption = Annotated[
    float, typer.Option(min=0.1, max=10_000.0, help="The most tasks written a second")
]
StartAfterOption = Annotated[
    str | None,
    typer.Option(help="Go on after this task id (the last progress line's, to resume)"),
]
PageSizeOption = Annotated[
    int, typer.Option(min=1, max=10_000, help="Items read by each Scan request")
]
RegionOption = Annotated[str | None, typer.Option(help="The tables' AWS region")]


def _backfill_command(kind: Backfill) -> Callable[..., None]:
    """The command that runs ``kind``'s backfill: every backfill takes the same options."""

    def command(
        tasks_table: TasksTableOption = None,
        outputs_file: OutputsFileOption = None,
        coordination_table: CoordinationTableOption = None,
        again: AgainOption = False,
        max_writes_per_second: PaceOption = 100.0,
        start_after: StartAfterOption = None,
        page_size: PageSizeOption = 500,
        region: RegionOption = None,
    ) -> None:
        _backfill(
            kind,
            tasks_table,
            outputs_file,
            coordination_table,
            again=again,
            max_writes_per_second=max_writes_per_second,
            start_after=start_after,
            page_size=page_size,
            region=region,
        )

    return command


admin_app.command(
    "backfill-name-keys",
    help="Give tasks written before the name index (decision 0045) their name key, so "
    "that `GET /tasks?name_prefix=` finds them. `make deploy` runs it after each deploy; "
    "it does the work once per stack (with --coordination-table, as there) and may be "
    "run again, or alongside the API: a task that has its key, or is created, changed "
    "or deleted meanwhile, is left alone.",
)(_backfill_command(NAME_KEYS))
admin_app.command(
    "backfill-tenant-parts",
    help="Give tasks written before the write-sharded tenant and name indexes (decision "
    "0053) their tenant part, so that `GET /tasks` lists them. `make deploy` runs it "
    "after each deploy; it does the work once per stack (with --coordination-table, as "
    "there) and may be run again, or alongside the API: a task that has its part, or is "
    "created, changed or deleted meanwhile, is left alone.",
)(_backfill_command(TENANT_PARTS))


def _backfill(
    kind: Backfill,
    tasks_table: str | None,
    outputs_file: Path | None,
    coordination_table: str | None,
    *,
    again: bool,
    max_writes_per_second: float,
    start_after: str | None,
    page_size: int,
    region: str | None,
) -> None:
    import boto3

    if (tasks_table is None) == (outputs_file is None):
        console.print("Give one of --tasks-table or --outputs-file.")
        raise typer.Exit(2)
    stacks = (
        [(tasks_table, coordination_table)]
        if tasks_table is not None
        else _tables_in_outputs(outputs_file)
    )
    client = boto3.client("dynamodb", region_name=region)
    summaries = [
        _backfill_one(
            kind,
            client,
            table,
            coordination,
            again=again,
            pace=WritePace(max_writes_per_second),
            start_after=start_after,
            page_size=page_size,
        )
        for table, coordination in stacks
    ]
    out.print_json(json.dumps(summaries[0] if tasks_table is not None else summaries))


def _stacks_in_outputs(outputs_file: Path) -> list[dict[str, str]]:
    """The outputs of each stack in a CDK outputs file; exit 2 if it cannot be read."""
    try:
        stacks = json.loads(outputs_file.read_text())
    except (OSError, ValueError) as error:
        console.print(f"Cannot read the outputs file {outputs_file}: {error}")
        raise typer.Exit(2) from error
    found = stacks.values() if isinstance(stacks, dict) else []
    return [stack for stack in found if isinstance(stack, dict)]


def _output(stack: dict[str, str], name: str) -> str | None:
    """The stack's output whose key starts with ``name``, if it has one."""
    return next((value for key, value in stack.items() if key.startswith(name)), None)


def _tables_in_outputs(outputs_file: Path | None) -> list[tuple[str, str | None]]:
    """(tasks table, coordination table) of each stack in a CDK outputs file."""
    assert outputs_file is not None
    found = [
        (tasks, _output(stack, "CoordinationTable"))
        for stack in _stacks_in_outputs(outputs_file)
        if (tasks := _output(stack, "TasksTable")) is not None
    ]
    if not found:
        console.print(f"No stack in {outputs_file} has a TasksTable output.")
        raise typer.Exit(2)
    return found


def _backfill_one(
    kind: Backfill,
    client: DynamoDBClient,
    table: str,
    coordination_table: str | None,
    *,
    again: bool,
    pace: WritePace,
    start_after: str | None,
    page_size: int,
) -> dict[str, object]:
    if coordination_table is not None and not again:
        finished_at = backfilled(client, coordination_table, kind.record_key)
        if finished_at is not None:
            console.print(f"{table}: every task has {kind.gives} (a run finished {finished_at})")
            return {"tasks_table": table, "scanned": 0, "given": 0, "changed_meanwhile": 0}
    scanned = given = changed = 0
    for page in kind.pages(
        client, table, page_size=page_size, start_after=start_after, before_write=pace.wait
    ):
        scanned += page.scanned
        given += page.given
        changed += page.changed_meanwhile
        resume = f"; to resume: --start-after {page.resume_after}" if page.resume_after else ""
        console.print(
            f"{table}: scanned {scanned:,} tasks, gave {given:,} {kind.gives}"
            f" ({changed:,} changed meanwhile){resume}",
            soft_wrap=True,  # one line a page, whatever the terminal's width
        )
    if coordination_table is not None and start_after is None:
        record_backfilled(
            client, coordination_table, kind.record_key, format_instant(datetime.now(UTC))
        )
    return {"tasks_table": table, "scanned": scanned, "given": given, "changed_meanwhile": changed}


@admin_app.command("backfill-census")
def backfill_census(
    tasks_table: Annotated[
        str | None,
        typer.Option("--tasks-table", help="The deployment's tasks table (TasksTable output)"),
    ] = None,
    executions_table: Annotated[
        str | None,
        typer.Option(
            "--executions-table",
            help="Where the census lives: the executions table (ExecutionsTable output)",
        ),
    ] = None,
    coordination_table: Annotated[
        str | None,
        typer.Option(
            "--coordination-table",
            help="The tenants' records, which name the tenants to count",
        ),
    ] = None,
    outputs_file: Annotated[
        Path | None,
        typer.Option(
            help="Instead of the tables: `cdk deploy --outputs-file`'s JSON; every stack in it"
            " with the three outputs (`make deploy` passes it)",
        ),
    ] = None,
    region: Annotated[str | None, typer.Option(help="The tables' AWS region")] = None,
) -> None:
    """Count in the schedule census (decision 0046) every task stored before it, so
    that `GET /forecast` of a large tenant counts them. Each tenant with a record is
    read page by page; a task already counted is left alone, so it may be run again,
    or alongside the API. `make deploy` runs it after each deploy."""
    import boto3

    tables = (tasks_table, executions_table, coordination_table)
    if (outputs_file is None) != any(table is not None for table in tables):
        console.print(
            "Give --tasks-table, --executions-table and --coordination-table, or --outputs-file."
        )
        raise typer.Exit(2)
    if outputs_file is None and not all(tables):
        console.print("Give all three of --tasks-table, --executions-table, --coordination-table.")
        raise typer.Exit(2)
    stacks = (
        [(str(tasks_table), str(executions_table), str(coordination_table))]
        if outputs_file is None
        else _census_tables_in_outputs(outputs_file)
    )
    client = boto3.client("dynamodb", region_name=region)
    summaries = [_count_uncounted(client, *stack) for stack in stacks]
    out.print_json(json.dumps(summaries[0] if outputs_file is None else summaries))


def _census_tables_in_outputs(outputs_file: Path) -> list[tuple[str, str, str]]:
    """(tasks, executions, coordination table) of each stack in a CDK outputs file."""
    found = []
    for stack in _stacks_in_outputs(outputs_file):
        names = (
            _output(stack, "TasksTable"),
            _output(stack, "ExecutionsTable"),
            _output(stack, "CoordinationTable"),
        )
        if all(names):
            found.append((str(names[0]), str(names[1]), str(names[2])))
    if not found:
        console.print(
            f"No stack in {outputs_file} has TasksTable, ExecutionsTable and CoordinationTable"
            " outputs."
        )
        raise typer.Exit(2)
    return found


def _count_uncounted(
    client: DynamoDBClient, tasks_table: str, executions_table: str, coordination_table: str
) -> dict[str, object]:
    from dynacron.adapters.aws.tasks import DynamoTaskStore
    from dynacron.domain.clock import SystemClock
    from dynacron.services.forecast import HerdForecast

    store = DynamoTaskStore(client, tasks_table, coordination_table, census_table=executions_table)
    census = HerdForecast(tasks=store, clock=SystemClock(), max_tasks=0, max_occurrences=0)
    tenants = counted = 0
    for tenant_id in _tenant_ids(client, coordination_table):
        tenants += 1
        newly = census.count_uncounted(tenant_id)
        counted += newly
        console.print(f"{tasks_table}: tenant {tenant_id}: counted {newly:,} tasks", soft_wrap=True)
    return {"tasks_table": tasks_table, "tenants": tenants, "counted": counted}


def _tenant_ids(client: DynamoDBClient, coordination_table: str) -> list[str]:
    """Every tenant that has a record (one is made with its first task): a Scan."""
    from dynacron.definitions.resources import TENANT_KEY_PREFIX

    found = []
    for page in client.get_paginator("scan").paginate(
        TableName=coordination_table,
        FilterExpression="begins_with(#key, :prefix)",
        ExpressionAttributeNames={"#key": "key"},
        ExpressionAttributeValues={":prefix": {"S": TENANT_KEY_PREFIX}},
        ProjectionExpression="#key",
    ):
        found += [item["key"]["S"].removeprefix(TENANT_KEY_PREFIX) for item in page["Items"]]
    return sorted(found)
