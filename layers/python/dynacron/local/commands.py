"""The commands that run dynacron on this machine: ``dynacron local`` and ``dynacron aws``.

The runtime and the emulator are imported when a command runs, so that the rest
of the CLI starts without them.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from dynacron.entry.settings import parse_api_keys

console = Console(stderr=True, highlight=False)
COMPONENT_NAMES = ("api", "tick", "worker", "reaper")
# Per project: the directory `make run` starts in.
DEFAULT_DATA_DIR = Path(".dynacron")


def local(
    port: Annotated[int, typer.Option(help="API port on the loopback interface")] = 8080,
    shards: Annotated[int, typer.Option(min=1, max=64, help="Due-index shards to tick")] = 4,
    workers: Annotated[int, typer.Option(min=1, max=64, help="Worker threads polling SQS")] = 4,
    store: Annotated[
        str,
        typer.Option(
            help="sqlite: keep tasks and history in --data-dir across restarts; "
            "emulator: the AWS code paths on an in-memory AWS emulator, forgotten at exit"
        ),
    ] = "sqlite",
    data_dir: Annotated[
        Path,
        typer.Option(
            envvar="DYNACRON_DATA_DIR",
            help="Where the sqlite store keeps its database (created if missing)",
        ),
    ] = DEFAULT_DATA_DIR,
    sync: Annotated[
        str,
        typer.Option(
            help="What a change survives. full: every change survives a power loss; "
            "acknowledged: what the API acknowledged survives a power loss, and the "
            "scheduler's own last changes may be undone (run again); "
            "normal: every change survives a crash, the last may not survive a power loss"
        ),
    ] = "acknowledged",
    tick_interval: Annotated[
        float | None,
        typer.Option(
            min=0.01,
            max=60,
            help="Seconds between ticks (default: 0.05 on sqlite, 1 on the emulator)",
        ),
    ] = None,
    aws_endpoint: Annotated[
        str | None,
        typer.Option(
            help="Use this AWS endpoint (an emulator already running): implies --store emulator"
        ),
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
    api_key: Annotated[
        list[str] | None,
        typer.Option(
            "--api-key",
            help="KEY or KEY=TENANT (repeatable): require one of these keys; "
            "without any, every caller is the one default tenant",
        ),
    ] = None,
    api_url: Annotated[
        str | None,
        typer.Option(
            help="Where handlers call back when --only leaves the API to another process "
            "(default: this process's API)"
        ),
    ] = None,
) -> None:
    """Run dynacron on this machine: the HTTP API, tick, workers and reaper, on a
    SQLite database in --data-dir that keeps tasks and history across restarts.

    With --only, run some components in this process, e.g. workers in one process
    and the tick in another, on a shared --data-dir (or --aws-endpoint, see `dynacron aws`).
    """
    from dynacron.adapters.sqlite.database import DURABILITIES
    from dynacron.local.chaos import ChaosSettings
    from dynacron.local.runtime import LocalOptions, LocalRuntime
    from dynacron.local.stores import STORES

    _quiet_logs(verbose)
    if store not in STORES:
        console.print(f"[red]--store takes one of {', '.join(STORES)}[/red]")
        raise typer.Exit(2)
    if sync not in DURABILITIES:
        console.print(f"[red]--sync takes one of {', '.join(DURABILITIES)}[/red]")
        raise typer.Exit(2)
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
            store="emulator" if store == "emulator" else "sqlite",
            data_dir=data_dir.absolute(),
            durability=sync,
            tick_interval=tick_interval,
            aws_endpoint=aws_endpoint,
            api_keys=parse_api_keys(",".join(api_key or [])),
            components=components,
            visibility_timeout=visibility_timeout,
            batch_size=batch_size,
            reaper_interval=reaper_interval,
            settings_overrides=overrides,
            metrics_file=metrics_file,
            chaos=chaos,
            api_url=api_url,
        )
    )
    try:
        runtime.start()
    except ValueError as error:
        console.print(f"[red]could not start:[/red] {error}")
        raise typer.Exit(2) from None
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
        console.print(f"  console       {api}/console")
    console.print(f"  store         {runtime.store.description}")
    if runtime.recovered:
        console.print(
            f"  recovered     {runtime.recovered} in-flight dispatches of a stopped process"
        )
    if "tick" in components:
        console.print(f"  tick          {shards} shards, every {runtime.tick_interval:g} s")
    if "worker" in components:
        console.print(f"  workers       {workers}, delivering to loopback addresses only")
    if "reaper" in components:
        console.print("  reaper        every second")
    if api:
        console.print(f"  API docs      {api}/docs  (OpenAPI at {api}/openapi.json)")
        tenants = sorted({tenant for _, tenant in runtime.options.api_keys})
        who = f"{', '.join(tenants)} (by --api-key)" if tenants else "'default' (no key needed)"
        console.print(f"  tenants       {who}")
        console.print(
            f"  try           curl -s -X POST {api}/tasks -H 'content-type: application/json' "
            """-d '{"rate": "5 seconds", "handler_url": "http://127.0.0.1:9000/hook"}'"""
        )


def _quiet_logs(verbose: bool) -> None:
    import logging

    level = logging.INFO if verbose else logging.WARNING
    for name in ("dynacron", "dynacron-api", "dynacron-local", "werkzeug"):
        logging.getLogger(name).setLevel(level)
