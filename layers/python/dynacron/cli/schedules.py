"""`dynacron next` and `dynacron plan`: schedules and capacity, computed on this machine."""

from __future__ import annotations

import dataclasses
import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from dynacron.cli.calendars import dates_from_ics
from dynacron.cli.connection import (
    JsonOption,
    console,
    out,
)
from dynacron.definitions.environment import DEFAULT_EXECUTION_RETENTION_DAYS
from dynacron.domain.errors import InvalidRequest
from dynacron.domain.instants import format_instant
from dynacron.domain.schedules.calendars import Calendar, CalendarRule, calendar_of
from dynacron.domain.schedules.describe import describe
from dynacron.domain.schedules.expressions import parse_expression, parse_local_instant, upcoming
from dynacron.domain.schedules.wallclock import Ambiguous, DstPolicy, Nonexistent
from dynacron.planning import capacity
from dynacron.planning.imports import ImportPlan, plan_import
from dynacron.planning.partitions import (
    PARTITION_READ_UNITS,
    PARTITION_UTILISATION,
    PARTITION_WRITE_UNITS,
    Workload,
)


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
    exclude: Annotated[
        list[Path] | None,
        typer.Option(
            help="An iCalendar (.ics) file whose all-day events the schedule skips, "
            "read in --tz; repeat for more. Excluded occurrences are marked"
        ),
    ] = None,
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
    try:
        rule = CalendarRule(exclude=tuple(_ics_calendar(path, tz) for path in exclude or ()))
    except (OSError, ValueError) as error:
        console.print(f"[red]error:[/red] {error}", soft_wrap=True)
        raise typer.Exit(2) from None
    if explain:
        typer.echo(describe(schedule))
        if rule:
            typer.echo(f"Not on the days of {', '.join(rule.names)} ({tz}).")
    for occurrence in upcoming(schedule, start, count):
        excluded = rule.excluded(occurrence) if rule else None
        typer.echo(format_instant(occurrence) + (f"  skipped: {excluded}" if excluded else ""))


def _ics_calendar(path: Path, timezone: str) -> Calendar:
    """The all-day events of an .ics file as a calendar named after the file."""
    entries, _ = dates_from_ics(path.read_bytes())
    return calendar_of(path.stem, timezone, entries)


def plan_capacity(
    fires_per_second: Annotated[
        float | None, typer.Option("--fires-per-second", help="Fires per second to sustain")
    ] = None,
    handler_seconds: Annotated[
        float, typer.Option(min=0.0, help="How long a handler takes to answer, in seconds")
    ] = 0.2,
    handler_p99: Annotated[
        float | None,
        typer.Option(
            "--handler-p99",
            min=0.0,
            help="The handlers' 99th percentile answer, in seconds (default 4 x the median)",
        ),
    ] = None,
    current_shards: Annotated[
        int,
        typer.Option(
            min=1,
            max=capacity.MAX_SHARDS,
            help="The deployment's shard_count today: a plan never lowers it",
        ),
    ] = 1,
    busiest_tenant_share: Annotated[
        float,
        typer.Option(min=0.0, max=1.0, help="The busiest tenant's share of the fires"),
    ] = 1.0,
    long_job_share: Annotated[
        float,
        typer.Option(
            min=0.0, max=1.0, help="Share of fires answered 202 and completed by callback"
        ),
    ] = 0.0,
    heartbeats_per_long_job: Annotated[
        float, typer.Option(min=0.0, help="Heartbeats each long job sends")
    ] = 0.0,
    one_time_share: Annotated[
        float,
        typer.Option(min=0.0, max=1.0, help="Share of fires of one-time tasks (one API call each)"),
    ] = 0.0,
    tasks: Annotated[
        int,
        typer.Option("--tasks", min=0, help="Tasks registered: their storage and backups at rest"),
    ] = 0,
    retention_days: Annotated[
        int,
        typer.Option(
            min=1, max=3650, help="Days an execution's record is kept (its storage at rest)"
        ),
    ] = DEFAULT_EXECUTION_RETENTION_DAYS,
    import_tasks: Annotated[
        int | None,
        typer.Option(
            "--import-tasks",
            min=1,
            help="Size a bulk import of this many tasks instead (dynacron tasks import)",
        ),
    ] = None,
    import_hours: Annotated[
        float, typer.Option("--import-hours", min=0.001, help="...within this many hours")
    ] = 1.0,
    import_tenants: Annotated[
        int, typer.Option("--import-tenants", min=1, help="...spread evenly over this many tenants")
    ] = 1,
    as_json: JsonOption = False,
) -> None:
    """Size a deployment for a rate of fires: shards, claim invocations, workers,
    DynamoDB billing, its busiest partitions, the AWS quotas to raise, monthly cost
    (and what looping ticks alone would idle at), and the CDK context that deploys it.

    From the tick's CPU per claim and per page handed out, and the capacity units per
    fire that `make bench` measured (docs/deploy.md, "Sizing", explains the model).
    """
    from dynacron.definitions.resources import TABLES

    if import_tasks is not None:
        _plan_an_import(
            plan_import(import_tasks, import_hours, tenants=import_tenants, shards=current_shards),
            as_json,
        )
        return
    if fires_per_second is None:
        console.print(
            "[red]error:[/red] give --fires-per-second N (or --import-tasks N)", soft_wrap=True
        )
        raise typer.Exit(2)
    if handler_p99 is not None and handler_p99 < handler_seconds:
        console.print(
            f"[red]error:[/red] --handler-p99 ({handler_p99:g} s) must be at least "
            f"--handler-seconds ({handler_seconds:g} s), the median",
            soft_wrap=True,
        )
        raise typer.Exit(2)
    workload = Workload(
        handler_seconds=handler_seconds,
        handler_p99_seconds=handler_p99,
        busiest_tenant_share=busiest_tenant_share,
        long_job_share=long_job_share,
        heartbeats_per_long_job=heartbeats_per_long_job,
        one_time_share=one_time_share,
        registered_tasks=tasks,
    )
    try:
        row = capacity.plan(
            fires_per_second,
            workload=workload,
            min_shards=current_shards,
            execution_retention_days=retention_days,
            provisioned_targets=sum(1 + len(table.indexes) for table in TABLES),
        )
    except capacity.PlanRefused as error:
        console.print(f"[red]error:[/red] {error}", soft_wrap=True)
        raise typer.Exit(2) from None
    if as_json:
        out.print_json(data=_plan_json(row))
        return
    _print_plan(row)


def _plan_an_import(row: ImportPlan, as_json: bool) -> None:
    figures = {
        "tasks per second": f"{row.tasks_per_second:,.0f}",
        "batch requests a second (all tenants)": f"{row.requests_per_second:,.1f}",
        "API stage throttle to set (api_rate_limit)": f"{row.stage_rate_limit:,}",
        "tenant rate to set (requests a second)": f"{row.tenant_rate_limit:,}",
        "transactions a second": f"{row.transactions_per_second:,.1f}",
        "tasks table write units a second": f"{row.table_write_units:,.0f}",
        **{
            f"{index} write units a second": f"{units:,.0f}"
            for index, units in row.index_write_units.items()
        },
        "coordination write units a second": f"{row.coordination_write_units:,.0f}",
        "updates of a tenant's record a second": f"{row.tenant_record_updates:,.1f}",
        "tasks table partitions (writes)": f"{row.table_partitions:,}",
        "due-index writes a partition (at worst)": f"{row.due_index_partition_writes:,.0f}",
        "tenant-index writes a partition": f"{row.tenant_index_partition_writes:,.0f}",
        "warm throughput to set (write units)": f"{row.warm_write_units:,}",
    }
    if as_json:
        out.print_json(
            data={
                **dataclasses.asdict(row),
                "stage_rate_limit": row.stage_rate_limit,
                "tenant_rate_limit": row.tenant_rate_limit,
                "table_partitions": row.table_partitions,
                "shards_needed": row.shards_needed,
                "tenants_needed": row.tenants_needed,
                "warm_write_units": row.warm_write_units,
                "notes": row.notes(),
            }
        )
        return
    table = Table(
        title=f"importing {row.tasks:,} tasks in {row.hours:g} h over {row.tenants:,} tenant(s)",
        show_header=False,
    )
    table.add_column("")
    table.add_column("")
    for name, value in figures.items():
        table.add_row(name, value)
    out.print(table)
    for note in row.notes():
        out.print(f"note: {note}", soft_wrap=True)


def _plan_json(row: capacity.Plan) -> dict[str, Any]:
    return {
        **dataclasses.asdict(row),
        "tick_capacity": row.tick_capacity,
        "idle_usd_per_month": row.idle.total,
        "loaded_usd_per_month": row.loaded.total,
        "loaded_usd_per_million_fires": row.usd_per_million_fires,
        "loaded_usd_per_million_fires_one_call_at_a_time": capacity.usd_per_million(
            row.loaded_sequential_worker, row.fires_per_second
        ),
        "dispatch_queues": row.workers.dispatch_queues,
        "quota_requests": [str(need) for need in row.quotas],
        "quota_figures": {
            figure.quota.name: {"needed": figure.needed, "default": figure.quota.default}
            for figure in row.quota_figures
        },
        "context": row.context(),
    }


def _print_plan(row: capacity.Plan) -> None:
    flags = row.context_flags()
    workers = row.workers
    table = Table(title=f"dynacron for {row.fires_per_second:,g} fires/s", show_header=False)
    table.add_column("")
    table.add_column("")
    for name, value in zip(
        capacity.SIZING_HEADERS[1:-1], capacity.sizing_row(row)[1:-1], strict=True
    ):
        table.add_row(name, value)
    table.add_row(
        "worker batches",
        f"{workers.model.batch_size} records, {workers.model.batching_window_seconds} s window",
    )
    table.add_row("dispatch queues needed", str(workers.dispatch_queues))
    latency, model = workers.latency, workers.model
    table.add_row(
        "handler answers",
        f"lognormal, median {latency.median:g} s, p99 {latency.p99:g} s "
        f"(sigma {latency.sigma:.2f})",
    )
    table.add_row(
        "worker invocation",
        f"{workers.invocation_seconds:.3g} s: the slowest of {model.concurrent_calls:g} calls at "
        f"once, {latency.expected_slowest(math.ceil(model.concurrent_calls)):.3g} s expected, "
        f"x {model.rounds} round(s), + {model.path_overhead_seconds:.3g} s each; at least "
        f"{model.batch_size} x {model.cpu_seconds_per_fire:.3g} s of CPU",
    )
    table.add_row("worker time per fire", f"{workers.seconds_per_fire:.3g} s")
    table.add_row(
        "loaded $ a million fires, one call at a time",
        f"{capacity.usd_per_million(row.loaded_sequential_worker, row.fires_per_second):.2f}",
    )
    out.print(table)
    partitions = Table(title="busiest partition, per second")
    for column in ("table or index", "partition key", "reads", "writes", "of its limit"):
        partitions.add_column(column)
    for load in row.partitions:
        partitions.add_row(
            load.target,
            load.key,
            f"{load.reads_per_second:,.0f}",
            f"{load.writes_per_second:,.0f}",
            f"{load.share_of_limit:.0%}",
        )
    out.print(partitions)
    out.print(
        f"partitions are kept within {PARTITION_UTILISATION:.0%} of DynamoDB's "
        f"{PARTITION_READ_UNITS:,} reads and {PARTITION_WRITE_UNITS:,} writes a second",
        soft_wrap=True,
    )
    quotas = Table(title="AWS quotas, at this row's peak")
    for column in ("quota", "needed", "default", "to ask for"):
        quotas.add_column(column)
    for figure in row.quota_figures:
        quotas.add_row(
            figure.quota.name,
            f"{figure.needed:,.0f} {figure.quota.unit}",
            f"{figure.quota.default:,}",
            f"{figure.request:,}" if figure.exceeded else "within",
        )
    out.print(quotas)
    out.print("quotas:" if row.quotas else "quotas: none above AWS's defaults")
    for need in row.quotas:
        out.print(f"  {need}", soft_wrap=True)
    for note in row.notes:
        out.print(f"note: {note}", soft_wrap=True)
    out.print(f'make synth CONTEXT="{flags}"', soft_wrap=True)
    out.print(f"cdk deploy {flags}", soft_wrap=True)
