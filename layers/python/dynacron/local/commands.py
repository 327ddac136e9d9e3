"""The commands that run dynacron on this machine: ``dynacron local`` and ``dynacron aws``.

The runtime and the emulator are imported when a command runs, so that the rest
of the CLI starts without them.
"""

from __future__ import annotations

import errno
import os
import signal
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, cast

import typer
from rich.console import Console
from rich.markup import escape

from dynacron.definitions.environment import API_KEYS_VAR, DEFAULT_EXECUTION_RETENTION_DAYS
from dynacron.entry.settings import parse_api_keys
from dynacron.local.private_files import read_private_file
from dynacron.local.tuning import settle_collector

if TYPE_CHECKING:
    from dynacron.adapters.sqlite.database import Durability
    from dynacron.local.chaos import ChaosSettings
    from dynacron.local.runtime import LocalRuntime

console = Console(stderr=True, highlight=False)
COMPONENT_NAMES = ("api", "tick", "worker", "reaper")
ALL_COMPONENTS = ",".join(COMPONENT_NAMES)
# Per project: the directory `make run` starts in.
DEFAULT_DATA_DIR = Path(".dynacron")


# The options of `dynacron local`, each with its help text.
PortOption = Annotated[int, typer.Option(help="API port on the loopback interface")]
ShardsOption = Annotated[int, typer.Option(min=1, max=64, help="Due-index shards to tick")]
WorkersOption = Annotated[
    int,
    typer.Option(
        min=1, max=64, help="Worker invocations at once, each polling SQS for its own batches"
    ),
]
WorkerProcessesOption = Annotated[
    int | None,
    typer.Option(
        min=0,
        max=64,
        help="Run the workers in this many processes of their own, --workers threads "
        "each, to use more than one core; 0: threads of this process "
        "(default: 2 with several cores and the sqlite store, else 0)",
    ),
]
StoreOption = Annotated[
    str,
    typer.Option(
        help="sqlite: keep tasks and history in --data-dir across restarts; "
        "emulator: the AWS code paths on an in-memory AWS emulator, forgotten at exit"
    ),
]
DataDirOption = Annotated[
    Path,
    typer.Option(
        envvar="DYNACRON_DATA_DIR",
        help="Where the sqlite store keeps its database (created if missing)",
    ),
]
SyncOption = Annotated[
    str,
    typer.Option(
        help="What a change survives. full: every change survives a power loss; "
        "acknowledged: what the API acknowledged survives a power loss, and the "
        "scheduler's own last changes may be undone (run again); "
        "normal: every change survives a crash, the last may not survive a power loss"
    ),
]
TickIntervalOption = Annotated[
    float | None,
    typer.Option(
        min=0.01,
        max=60,
        help="Seconds between ticks (default: 0.05 on sqlite, 1 on the emulator)",
    ),
]
AwsEndpointOption = Annotated[
    str | None,
    typer.Option(
        help="Use this AWS endpoint (an emulator already running): implies --store emulator"
    ),
]
OnlyOption = Annotated[
    str,
    typer.Option(help="Comma-separated components to run: api, tick, worker, reaper"),
]
HandlersOption = Annotated[
    str, typer.Option(help="Comma-separated modules that register Python handlers")
]
LeaseSecondsOption = Annotated[
    float | None, typer.Option(help="Lease of a running execution (heartbeats renew it)")
]
ClockSkewSecondsOption = Annotated[
    float | None, typer.Option(help="Margin for clock skew in lease decisions")
]
PickupGraceSecondsOption = Annotated[
    float | None, typer.Option(help="How late a queued attempt may start before a resend")
]
HttpTimeoutSecondsOption = Annotated[
    float | None, typer.Option(help="Time limit of one HTTP handler call")
]
VisibilityTimeoutOption = Annotated[
    int | None, typer.Option(help="Receive with this SQS visibility timeout (seconds)")
]
BatchSizeOption = Annotated[
    int, typer.Option(min=1, max=10_000, help="SQS messages per worker invocation")
]
WorkerConcurrencyOption = Annotated[
    int | None,
    typer.Option(min=1, max=1000, help="Records one worker invocation runs at once (default 32)"),
]
ReaperIntervalOption = Annotated[float, typer.Option(help="Seconds between reaper runs")]
RetentionOption = Annotated[
    int,
    typer.Option(
        min=1,
        max=36_500,
        help="Days an ended execution is kept, as deployed; older "
        "ones are deleted every minute, 500 a transaction",
    ),
]
MetricsFileOption = Annotated[
    Path | None, typer.Option(help="Append EMF metric documents to this file")
]
ChaosSeedOption = Annotated[
    int | None, typer.Option(help="Inject faults, seeded (for crash tests)", hidden=True)
]
CrashRateOption = Annotated[float, typer.Option(hidden=True)]
ThrottleRateOption = Annotated[float, typer.Option(hidden=True)]
DuplicateRateOption = Annotated[float, typer.Option(hidden=True)]
SendFailureRateOption = Annotated[float, typer.Option(hidden=True)]
VerboseOption = Annotated[bool, typer.Option("--verbose", "-v", help="Log every step")]
ApiKeyOption = Annotated[
    list[str] | None,
    typer.Option(
        "--api-key",
        help="KEY or KEY=TENANT (repeatable): require one of these keys; "
        "without any, every local user and process is the one default tenant. "
        "Visible to others in `ps`: prefer --api-key-file or DYNACRON_API_KEYS",
    ),
]
ApiKeyFileOption = Annotated[
    Path | None,
    typer.Option(
        "--api-key-file",
        help="Read keys from this file, yours alone (chmod 600): KEY or KEY=TENANT "
        "per line, # comments. Keys are also read from DYNACRON_API_KEYS "
        "(KEY=TENANT,KEY2=TENANT2)",
    ),
]
ApiUrlOption = Annotated[
    str | None,
    typer.Option(
        help="Where handlers call back when --only leaves the API to another process "
        "(default: this process's API)"
    ),
]


def local(
    port: PortOption = 8080,
    shards: ShardsOption = 4,
    workers: WorkersOption = 2,
    worker_processes: WorkerProcessesOption = None,
    store: StoreOption = "sqlite",
    data_dir: DataDirOption = DEFAULT_DATA_DIR,
    sync: SyncOption = "acknowledged",
    tick_interval: TickIntervalOption = None,
    aws_endpoint: AwsEndpointOption = None,
    only: OnlyOption = ALL_COMPONENTS,
    handlers: HandlersOption = "",
    lease_seconds: LeaseSecondsOption = None,
    clock_skew_seconds: ClockSkewSecondsOption = None,
    pickup_grace_seconds: PickupGraceSecondsOption = None,
    http_timeout_seconds: HttpTimeoutSecondsOption = None,
    visibility_timeout: VisibilityTimeoutOption = None,
    batch_size: BatchSizeOption = 64,
    worker_concurrency: WorkerConcurrencyOption = None,
    reaper_interval: ReaperIntervalOption = 1.0,
    retention: RetentionOption = DEFAULT_EXECUTION_RETENTION_DAYS,
    metrics_file: MetricsFileOption = None,
    chaos_seed: ChaosSeedOption = None,
    crash_rate: CrashRateOption = 0.0,
    throttle_rate: ThrottleRateOption = 0.0,
    duplicate_rate: DuplicateRateOption = 0.0,
    send_failure_rate: SendFailureRateOption = 0.0,
    verbose: VerboseOption = False,
    api_key: ApiKeyOption = None,
    api_key_file: ApiKeyFileOption = None,
    api_url: ApiUrlOption = None,
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
    _refuse_unknown("--store", (store,), STORES)
    _refuse_unknown("--sync", (sync,), DURABILITIES)
    components = tuple(c.strip() for c in only.split(",") if c.strip())
    _refuse_unknown("--only", components, COMPONENT_NAMES)
    overrides: dict[str, Any] = {
        name: value
        for name, value in (
            ("lease_seconds", lease_seconds),
            ("clock_skew_seconds", clock_skew_seconds),
            ("pickup_grace_seconds", pickup_grace_seconds),
            ("http_timeout_seconds", http_timeout_seconds),
            ("worker_concurrency", worker_concurrency),
            ("handler_modules", tuple(m.strip() for m in handlers.split(",") if m.strip())),
        )
        if value
    }
    try:
        api_keys = _api_keys(api_key or [], api_key_file, os.environ.get(API_KEYS_VAR, ""))
    except ValueError as error:
        _cannot_start(str(error))
        raise typer.Exit(2) from None
    chaos = None
    if chaos_seed is not None:
        chaos = ChaosSettings(
            seed=chaos_seed,
            crash_rate=crash_rate,
            throttle_rate=throttle_rate,
            duplicate_rate=duplicate_rate,
            send_failure_rate=send_failure_rate,
        )
    options = LocalOptions(
        port=port,
        shards=shards,
        workers=workers,
        worker_processes=(
            default_worker_processes(store, aws_endpoint, chaos)
            if worker_processes is None
            else worker_processes
        ),
        store="emulator" if store == "emulator" else "sqlite",
        data_dir=data_dir.absolute(),
        durability=cast("Durability", sync),  # one of DURABILITIES: checked above
        tick_interval=tick_interval,
        aws_endpoint=aws_endpoint,
        api_keys=api_keys,
        components=components,
        visibility_timeout=visibility_timeout,
        batch_size=batch_size,
        reaper_interval=reaper_interval,
        retention_days=retention,
        settings_overrides=overrides,
        metrics_file=metrics_file,
        chaos=chaos,
        api_url=api_url,
    )
    _run(LocalRuntime(options))


def _api_keys(
    given: list[str], key_file: Path | None, from_environment: str
) -> tuple[tuple[str, str], ...]:
    """Every (key, tenant) of --api-key, the key file and DYNACRON_API_KEYS."""
    entries = [*given, from_environment]
    if key_file is not None:
        lines = read_private_file(key_file).splitlines()
        entries += [line.strip() for line in lines if not line.strip().startswith("#")]
    return parse_api_keys(",".join(entries))


def default_worker_processes(
    store: str, aws_endpoint: str | None, chaos: ChaosSettings | None
) -> int:
    """Worker processes when none are asked for: two on a machine of several cores
    with the sqlite store (measured: BENCHMARKS.md, "Burst"), else none. The
    emulator serves every process from one, and crash tests (``--chaos-seed``)
    kill the process they run in."""
    if store != "sqlite" or aws_endpoint is not None or chaos is not None:
        return 0
    return 2 if (os.cpu_count() or 1) > 1 else 0


def _refuse_unknown(option: str, given: tuple[str, ...], known: Iterable[str]) -> None:
    """Exit with status 2 unless ``given`` is a non-empty subset of ``known``."""
    choices = tuple(known)
    if not given or set(given) - set(choices):
        how_many = "one" if option != "--only" else "some"
        console.print(f"[red]{option} takes {how_many} of {', '.join(choices)}[/red]")
        raise typer.Exit(2)


def _run(runtime: LocalRuntime) -> None:
    """Start ``runtime``, print what it does until Ctrl-C or SIGTERM, then stop it."""
    options = runtime.options
    try:
        runtime.start()
    except ValueError as error:  # an option, the data directory, the key file
        _cannot_start(str(error))
        raise typer.Exit(2) from None
    except OSError as error:
        in_use = error.errno == errno.EADDRINUSE
        _cannot_start(f"{error}. Is port {options.port} already in use?" if in_use else str(error))
        raise typer.Exit(1) from None
    # Before "is running" is printed: whoever waits for that line may send SIGTERM
    # at once, and without the handler it would kill, not stop.
    signal.signal(signal.SIGTERM, lambda *_: runtime.stop())
    settle_collector()
    _announce(runtime, options.components, options.shards, options.workers)
    try:
        runtime.wait(_ActivityLine(runtime))
    except KeyboardInterrupt:
        console.print("stopping…")
    finally:
        runtime.stop()


def _cannot_start(why: str) -> None:
    # Paths and values are printed as text, never read as markup, on one line.
    console.print(f"[red]could not start:[/red] {escape(why)}", soft_wrap=True)


class _ActivityLine:
    """Prints one line of totals whenever they change (called by ``runtime.wait``)."""

    def __init__(self, runtime: LocalRuntime) -> None:
        self._runtime = runtime
        self._last: tuple[int, ...] = (0,) * 7

    def __call__(self, activity: object) -> None:
        dispatched, succeeded, failed = self._runtime.activity.snapshot()
        totals = self._runtime.metrics.totals
        current = (
            dispatched,
            succeeded,
            failed,
            *(
                int(totals.total(name))
                for name in ("Retries", "DeadLetters", "LeasesReaped", "DuplicatesSuppressed")
            ),
        )
        if current == self._last:
            return
        self._last = current
        console.print(
            f"{time.strftime('%H:%M:%S')}  dispatched {dispatched}  succeeded {succeeded}  "
            f"failed {failed}  retries {current[3]}  dead letters {current[4]}  "
            f"reaped {current[5]}  duplicates suppressed {current[6]}"
        )


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
        processes = runtime.options.worker_processes
        where = f" in each of {processes} processes" if processes else ""
        console.print(f"  workers       {workers}{where}, delivering to loopback addresses only")
    if "reaper" in components:
        console.print("  reaper        every second")
    if api:
        console.print(f"  API docs      {api}/docs  (OpenAPI at {api}/openapi.json)")
        tenants = sorted({tenant for _, tenant in runtime.options.api_keys})
        who = (
            f"{', '.join(tenants)} (by API key)"
            if tenants
            else "'default': no key needed, so every local user and process may call it"
        )
        console.print(f"  tenants       {who}")
        console.print(
            "  try           dynacron try-handler --port 9000   (in another terminal), then"
        )
        console.print(
            f"                curl -s -X POST {api}/tasks -H 'content-type: application/json' "
            """-d '{"rate": "5 seconds", "handler_url": "http://127.0.0.1:9000/hook"}'"""
        )


def _quiet_logs(verbose: bool) -> None:
    import logging

    level = logging.INFO if verbose else logging.WARNING
    for name in ("dynacron", "dynacron-api", "dynacron-local", "werkzeug"):
        logging.getLogger(name).setLevel(level)
