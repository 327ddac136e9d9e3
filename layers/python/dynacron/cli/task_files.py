"""`dynacron tasks import` and `dynacron tasks export`: tasks as JSON Lines, one
``POST /tasks`` body a line (``dynacron.client.bulk``)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, BinaryIO, TextIO

import typer
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from dynacron.cli.connection import api, console, out, target_of
from dynacron.client.bulk import (
    Importer,
    ImportReport,
    ImportState,
    destination_of,
    export_lines,
)

STDIN = "-"


class RateColumn(ProgressColumn):
    """Lines a second, over rich's recent window."""

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text("" if speed is None else f"{speed:,.0f} lines/s", style="progress.data.speed")


def tasks_import(
    ctx: typer.Context,
    file: Annotated[
        str, typer.Argument(help="JSON Lines, one POST /tasks body a line; - for standard input")
    ],
    concurrency: Annotated[
        int, typer.Option(min=1, max=32, help="Batches of 100 in flight at once")
    ] = 4,
    key_prefix: Annotated[
        str,
        typer.Option(
            help="Part of every line's idempotency key: a new prefix imports the same "
            "lines again as new tasks"
        ),
    ] = "",
    state: Annotated[
        Path | None,
        typer.Option(
            help="Record here the last line answered for good; a rerun skips the lines "
            "before it without sending them"
        ),
    ] = None,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Only check each line, here, with the API's own rules (no call is made)",
        ),
    ] = False,
) -> None:
    """Register the tasks of a JSON Lines file, 100 a request, several requests at once.

    Each line is sent with an idempotency key made of its line number and its bytes
    (and --key-prefix): run the command again after an interruption, within 24
    hours, and what was created is replayed, never created twice. Standard input has
    no name either: the same lines piped again are the same tasks. Blank lines are
    skipped. Lines refused (not JSON, not an object, or refused by the API) are
    listed by number at the end, and the command then exits 1.
    """
    target = target_of(ctx)
    try:
        destination = destination_of(target.url, target.api_key)
        saved = ImportState(state, key_prefix, destination) if state is not None else None
    except (ValueError, KeyError) as error:
        console.print(f"[red]error:[/red] --state: {error}", soft_wrap=True)
        raise typer.Exit(2) from None
    with _input(file) as (lines, total), _progress(total, dry_run) as advance:
        if saved is not None and not dry_run:
            advance(saved.through_line)
        try:
            if dry_run:
                report = Importer(None, state=None, progress=advance).run(lines)
            else:
                with api(target) as client:
                    importer = Importer(
                        client,
                        concurrency=concurrency,
                        key_prefix=key_prefix,
                        state=saved,
                        progress=advance,
                    )
                    report = importer.run(lines)
        except ValueError as error:
            console.print(f"[red]error:[/red] {error}", soft_wrap=True)
            raise typer.Exit(2) from None
    _show_report(report, target.as_json, dry_run)
    if not report.ok:
        raise typer.Exit(1)


def tasks_export(
    ctx: typer.Context,
    output: Annotated[
        Path | None, typer.Option(help="Write to this file instead of standard output")
    ] = None,
) -> None:
    """Every task of your tenant as JSON Lines that `dynacron tasks import` takes back:
    each line the POST /tasks body of the task's current settings. Not carried: ids,
    status (a paused task comes back active, a completed one-time task is refused if
    its time has passed), runs and history. A task that names another with `after`
    names its id, which another tenant or deployment does not have."""
    target = target_of(ctx)
    written = 0
    with api(target) as client, _output(output) as sink:
        for line in export_lines(client):
            sink.write(line + "\n")
            written += 1
    console.print(f"exported {written} tasks" + (f" to {output}" if output else ""))


@contextmanager
def _input(file: str) -> Iterator[tuple[Iterator[bytes], int | None]]:
    """The lines of ``file`` (or standard input), and how many there are (None for
    standard input, read only once)."""
    if file == STDIN:
        yield iter(sys.stdin.buffer), None
        return
    path = Path(file)
    try:
        stream: BinaryIO = path.open("rb")
    except OSError as error:
        console.print(f"[red]error:[/red] cannot read {file}: {error.strerror}")
        raise typer.Exit(2) from None
    with stream:
        yield iter(stream), _count_lines(path)


def _count_lines(path: Path) -> int:
    count, last = 0, b"\n"
    with path.open("rb") as stream:
        while chunk := stream.read(1 << 20):
            count += chunk.count(b"\n")
            last = chunk[-1:]
    return count + (last != b"\n")


@contextmanager
def _output(path: Path | None) -> Iterator[TextIO]:
    if path is None:
        yield sys.stdout
        return
    with path.open("w", encoding="utf-8") as sink:
        yield sink


@contextmanager
def _progress(total: int | None, dry_run: bool) -> Iterator[Callable[[int], None]]:
    columns = [
        TextColumn("checked" if dry_run else "imported"),
        BarColumn(),
        MofNCompleteColumn(),
        RateColumn(),
        TimeElapsedColumn() if total is None else TimeRemainingColumn(),
    ]
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task("lines", total=total)
        yield lambda n: progress.advance(task, n)


def _show_report(report: ImportReport, as_json: bool, dry_run: bool) -> None:
    if as_json:
        shown = {
            "created": report.created,
            "replayed": report.replayed,
            "skipped": report.skipped,
            "refused": [{"line": n, "problem": why} for n, why in report.refused],
            "unanswered": [
                {"first_line": a, "last_line": b, "error": why} for a, b, why in report.unanswered
            ],
        }
        out.print_json(json.dumps(shown))
        return
    if dry_run:
        out.print(f"checked: {len(report.refused)} lines refused")
    else:
        out.print(
            f"created {report.created}, replayed {report.replayed} (created before), "
            f"skipped {report.skipped} (in --state), refused {len(report.refused)}"
        )
    for number, why in report.refused:
        out.print(f"line {number}: {why}", soft_wrap=True, markup=False)
    for first, last, why in report.unanswered:
        out.print(
            f"lines {first}-{last}: no answer ({why}); run the command again to send them",
            soft_wrap=True,
            markup=False,
        )
