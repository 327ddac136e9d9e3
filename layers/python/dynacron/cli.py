"""The ``dynacron`` command line."""

from __future__ import annotations

import signal
import time
from datetime import UTC, datetime
from typing import Annotated

import typer
from rich.console import Console

from dynacron.domain.describe import describe
from dynacron.domain.errors import InvalidRequest
from dynacron.domain.instants import format_instant
from dynacron.domain.schedules import parse_expression, parse_local_instant, upcoming
from dynacron.domain.wallclock import Ambiguous, DstPolicy, Nonexistent

app = typer.Typer(help="dynacron: a serverless, distributed task scheduler.", no_args_is_help=True)
console = Console(stderr=True, highlight=False)


@app.command()
def local(
    port: Annotated[int, typer.Option(help="API port on the loopback interface")] = 8080,
    shards: Annotated[int, typer.Option(min=1, max=64, help="Due-index shards to tick")] = 4,
    workers: Annotated[int, typer.Option(min=1, max=64, help="Worker threads polling SQS")] = 4,
    aws_endpoint: Annotated[
        str | None, typer.Option(help="Use this AWS endpoint instead of an embedded one")
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log every step")] = False,
) -> None:
    """Run dynacron on this machine: embedded AWS, the HTTP API, tick and workers."""
    from dynacron.local.runtime import LocalOptions, LocalRuntime

    _quiet_logs(verbose)
    runtime = LocalRuntime(
        LocalOptions(port=port, shards=shards, workers=workers, aws_endpoint=aws_endpoint)
    )
    try:
        runtime.start()
    except OSError as error:
        console.print(f"[red]could not start:[/red] {error}. Is port {port} already in use?")
        raise typer.Exit(1) from None
    api = runtime.api_url
    console.print("[bold green]dynacron local[/bold green] is running  (Ctrl-C to stop)")
    console.print(f"  API           {api}")
    console.print(f"  embedded AWS  {runtime.aws_endpoint}  (DynamoDB + SQS)")
    console.print(f"  tick          {shards} shards, every second")
    console.print(f"  workers       {workers}, delivering to loopback addresses only")
    console.print(
        f"  try           curl -s -X POST {api}/tasks -H 'content-type: application/json' "
        """-d '{"rate": "5 seconds", "handler_url": "http://127.0.0.1:9000/hook"}'"""
    )
    signal.signal(signal.SIGTERM, lambda *_: runtime.stop())
    last = (0, 0, 0)

    def show(activity: object) -> None:
        nonlocal last
        current = runtime.activity.snapshot()
        if current != last:
            dispatched, succeeded, failed = current
            console.print(
                f"{time.strftime('%H:%M:%S')}  dispatched {dispatched}  "
                f"succeeded {succeeded}  failed {failed}"
            )
            last = current

    try:
        runtime.wait(show)
    except KeyboardInterrupt:
        console.print("stopping…")
    finally:
        runtime.stop()


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


def _quiet_logs(verbose: bool) -> None:
    import logging

    level = logging.INFO if verbose else logging.WARNING
    for name in ("dynacron", "dynacron-api", "dynacron-local", "werkzeug"):
        logging.getLogger(name).setLevel(level)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
