"""The ``dynacron`` command line."""

from __future__ import annotations

import signal
import time
from typing import Annotated

import typer
from rich.console import Console

app = typer.Typer(help="dynacron: a serverless, distributed task scheduler.", no_args_is_help=True)
console = Console(stderr=True, highlight=False)


@app.callback()
def _root() -> None:
    """Keep sub-commands explicit, even while there is only one."""


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


def _quiet_logs(verbose: bool) -> None:
    import logging

    level = logging.INFO if verbose else logging.WARNING
    for name in ("dynacron", "dynacron-api", "dynacron-local", "werkzeug"):
        logging.getLogger(name).setLevel(level)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
