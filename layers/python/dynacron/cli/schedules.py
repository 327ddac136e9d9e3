"""`dynacron next` and `dynacron plan`: schedules and capacity, computed on this machine."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Annotated

import typer
from rich.table import Table

from dynacron.cli.connection import (
    JsonOption,
    console,
    out,
)
from dynacron.domain.errors import InvalidRequest
from dynacron.domain.instants import format_instant
from dynacron.domain.schedules.describe import describe
from dynacron.domain.schedules.expressions import parse_expression, parse_local_instant, upcoming
from dynacron.domain.schedules.wallclock import Ambiguous, DstPolicy, Nonexistent
from dynacron.planning import capacity


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
