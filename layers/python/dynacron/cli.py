"""The ``dynacron`` command line."""

from __future__ import annotations

import signal
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from dynacron.domain.describe import describe
from dynacron.domain.errors import InvalidRequest
from dynacron.domain.instants import format_instant
from dynacron.domain.schedules import parse_expression, parse_local_instant, upcoming
from dynacron.domain.wallclock import Ambiguous, DstPolicy, Nonexistent

app = typer.Typer(help="dynacron: a serverless, distributed task scheduler.", no_args_is_help=True)
console = Console(stderr=True, highlight=False)
COMPONENT_NAMES = ("api", "tick", "worker", "reaper")


@app.callback()
def _root() -> None:
    """Keep sub-commands explicit."""


@app.command()
def local(
    port: Annotated[int, typer.Option(help="API port on the loopback interface")] = 8080,
    shards: Annotated[int, typer.Option(min=1, max=64, help="Due-index shards to tick")] = 4,
    workers: Annotated[int, typer.Option(min=1, max=64, help="Worker threads polling SQS")] = 4,
    aws_endpoint: Annotated[
        str | None, typer.Option(help="Use this AWS endpoint instead of an embedded one")
    ] = None,
    only: Annotated[
        str,
        typer.Option(help="Comma-separated components to run: api, tick, worker, reaper"),
    ] = ",".join(COMPONENT_NAMES),
    handlers: Annotated[
        str, typer.Option(help="Comma-separated modules that register Python handlers")
    ] = "",
    lease_seconds: Annotated[
        float | None, typer.Option(help="Lease of a running execution (heartbeats renew it)")
    ] = None,
    clock_skew_seconds: Annotated[
        float | None, typer.Option(help="Margin for clock skew in lease decisions")
    ] = None,
    pickup_grace_seconds: Annotated[
        float | None, typer.Option(help="How late a queued attempt may start before a resend")
    ] = None,
    http_timeout_seconds: Annotated[
        float | None, typer.Option(help="Time limit of one HTTP handler call")
    ] = None,
    visibility_timeout: Annotated[
        int | None, typer.Option(help="Receive with this SQS visibility timeout (seconds)")
    ] = None,
    batch_size: Annotated[
        int, typer.Option(min=1, max=10, help="SQS messages per worker invocation")
    ] = 10,
    reaper_interval: Annotated[float, typer.Option(help="Seconds between reaper runs")] = 1.0,
    metrics_file: Annotated[
        Path | None, typer.Option(help="Append EMF metric documents to this file")
    ] = None,
    chaos_seed: Annotated[
        int | None, typer.Option(help="Inject faults, seeded (for crash tests)", hidden=True)
    ] = None,
    crash_rate: Annotated[float, typer.Option(hidden=True)] = 0.0,
    throttle_rate: Annotated[float, typer.Option(hidden=True)] = 0.0,
    duplicate_rate: Annotated[float, typer.Option(hidden=True)] = 0.0,
    send_failure_rate: Annotated[float, typer.Option(hidden=True)] = 0.0,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log every step")] = False,
) -> None:
    """Run dynacron on this machine: embedded AWS, the HTTP API, tick, workers and reaper.

    With --only, run some components in this process, e.g. workers in one process
    and the tick in another, against a shared --aws-endpoint (see `dynacron aws`).
    """
    from dynacron.local.chaos import ChaosSettings
    from dynacron.local.runtime import LocalOptions, LocalRuntime

    _quiet_logs(verbose)
    components = tuple(c.strip() for c in only.split(",") if c.strip())
    unknown = sorted(set(components) - set(COMPONENT_NAMES))
    if unknown or not components:
        console.print(f"[red]--only takes some of {', '.join(COMPONENT_NAMES)}[/red]")
        raise typer.Exit(2)
    overrides: dict[str, Any] = {
        name: value
        for name, value in (
            ("lease_seconds", lease_seconds),
            ("clock_skew_seconds", clock_skew_seconds),
            ("pickup_grace_seconds", pickup_grace_seconds),
            ("http_timeout_seconds", http_timeout_seconds),
            ("handler_modules", tuple(m.strip() for m in handlers.split(",") if m.strip())),
        )
        if value
    }
    chaos = None
    if chaos_seed is not None:
        chaos = ChaosSettings(
            seed=chaos_seed,
            crash_rate=crash_rate,
            throttle_rate=throttle_rate,
            duplicate_rate=duplicate_rate,
            send_failure_rate=send_failure_rate,
        )
    runtime = LocalRuntime(
        LocalOptions(
            port=port,
            shards=shards,
            workers=workers,
            aws_endpoint=aws_endpoint,
            components=components,
            visibility_timeout=visibility_timeout,
            batch_size=batch_size,
            reaper_interval=reaper_interval,
            settings_overrides=overrides,
            metrics_file=metrics_file,
            chaos=chaos,
        )
    )
    try:
        runtime.start()
    except OSError as error:
        console.print(f"[red]could not start:[/red] {error}. Is port {port} already in use?")
        raise typer.Exit(1) from None
    _announce(runtime, components, shards, workers)
    signal.signal(signal.SIGTERM, lambda *_: runtime.stop())
    last: tuple[int, ...] = (0,) * 7

    def show(activity: object) -> None:
        nonlocal last
        dispatched, succeeded, failed = runtime.activity.snapshot()
        totals = runtime.metrics.totals
        current = (
            dispatched,
            succeeded,
            failed,
            int(totals.total("Retries")),
            int(totals.total("DeadLetters")),
            int(totals.total("LeasesReaped")),
            int(totals.total("DuplicatesSuppressed")),
        )
        if current != last:
            console.print(
                f"{time.strftime('%H:%M:%S')}  dispatched {dispatched}  succeeded {succeeded}  "
                f"failed {failed}  retries {current[3]}  dead letters {current[4]}  "
                f"reaped {current[5]}  duplicates suppressed {current[6]}"
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


@app.command()
def aws(
    port: Annotated[int, typer.Option(help="Port on the loopback interface (0: any free one)")] = 0,
) -> None:
    """Run only the embedded AWS (DynamoDB + SQS), for components in other processes."""
    from dynacron.local.aws import serve

    _quiet_logs(False)
    serve(port)


def _announce(runtime: Any, components: tuple[str, ...], shards: int, workers: int) -> None:
    api = runtime.api_url
    console.print("[bold green]dynacron local[/bold green] is running  (Ctrl-C to stop)")
    if api:
        console.print(f"  API           {api}")
    where = "embedded" if runtime.options.aws_endpoint is None else "shared"
    console.print(f"  {where} AWS  {runtime.aws_endpoint}  (DynamoDB + SQS)")
    if "tick" in components:
        console.print(f"  tick          {shards} shards, every second")
    if "worker" in components:
        console.print(f"  workers       {workers}, delivering to loopback addresses only")
    if "reaper" in components:
        console.print("  reaper        every second")
    if api:
        console.print(
            f"  try           curl -s -X POST {api}/tasks -H 'content-type: application/json' "
            """-d '{"rate": "5 seconds", "handler_url": "http://127.0.0.1:9000/hook"}'"""
        )


def _quiet_logs(verbose: bool) -> None:
    import logging

    level = logging.INFO if verbose else logging.WARNING
    for name in ("dynacron", "dynacron-api", "dynacron-local", "werkzeug"):
        logging.getLogger(name).setLevel(level)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
