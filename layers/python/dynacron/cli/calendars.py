"""`dynacron calendars ...`: a tenant's named sets of days (holidays, business
days), and their import from an iCalendar file (decision 0056)."""

from __future__ import annotations

from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from dynacron.api.responses import CalendarList, CalendarView
from dynacron.cli.connection import add_connection_options, answer, console, delete

calendars_app = typer.Typer(
    help="Named sets of days your tasks skip or keep to.", no_args_is_help=True
)
add_connection_options(calendars_app)


def dates_from_ics(data: bytes) -> tuple[list[dict[str, Any]], list[str]]:
    """The all-day events of an iCalendar file as calendar entries (``from``, ``to``
    both included, the summary as the note), and what was left out, in words.

    A timed event names no whole day and is left out; an event with a repeat rule
    gives its first date only (holiday files list each year's dates).
    """
    import icalendar

    try:
        calendar = icalendar.Calendar.from_ical(data)
    except ValueError as error:
        raise ValueError(f"not an iCalendar file: {error}") from None
    entries: list[dict[str, Any]] = []
    left_out: list[str] = []
    for event in calendar.walk("VEVENT"):
        summary = str(event.get("SUMMARY") or "").strip()[:200] or None
        start = event.get("DTSTART")
        if start is None:
            left_out.append(f"{summary or 'an event'}: no DTSTART")
            continue
        first = start.dt
        if isinstance(first, datetime) or not isinstance(first, date):
            left_out.append(f"{summary or first}: a timed event, not a whole day")
            continue
        end = event.get("DTEND")
        # DTEND of an all-day event is the day after its last (RFC 5545, 3.6.1).
        last = end.dt - timedelta(days=1) if end is not None else first
        if isinstance(last, datetime) or last < first:
            last = first
        if event.get("RRULE") is not None:
            left_out.append(f"{summary or first}: repeats; only its first date is imported")
        entry: dict[str, Any] = {"from": first.isoformat(), "to": last.isoformat()}
        if summary:
            entry["note"] = summary
        entries.append(entry)
    return sorted(entries, key=lambda e: (e["from"], e["to"])), left_out


def _table(calendar: CalendarView) -> Table:
    table = Table("from", "to", "note", title=f"{calendar.name} ({calendar.timezone})")
    for span in calendar.dates:
        table.add_row(span.from_, span.to, span.note or "")
    return table


def _list_table(calendars: CalendarList) -> Table:
    table = Table("name", "timezone", "entries", "first", "last")
    for calendar in calendars.calendars:
        dates = calendar.dates
        table.add_row(
            calendar.name,
            calendar.timezone,
            str(len(dates)),
            dates[0].from_ if dates else "",
            dates[-1].to if dates else "",
        )
    return table


@calendars_app.command("import")
def calendars_import(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="The calendar to create or replace")],
    file: Annotated[Path, typer.Argument(help="An iCalendar (.ics) file of all-day events")],
    timezone: Annotated[str, typer.Option("--tz", help="The zone its days are read in")] = "UTC",
) -> None:
    """Create or replace a calendar from an .ics file's all-day events."""
    try:
        entries, left_out = dates_from_ics(file.read_bytes())
    except (OSError, ValueError) as error:
        console.print(f"[red]error:[/red] {error}", soft_wrap=True)
        raise typer.Exit(2) from None
    for line in left_out:
        console.print(f"left out: {line}", soft_wrap=True)
    answer(ctx, lambda client: client.put_calendar(name, timezone, entries), _table)


@calendars_app.command("list")
def calendars_list(ctx: typer.Context) -> None:
    """Your calendars."""
    answer(ctx, lambda client: client.list_calendars(), _list_table)


@calendars_app.command("get")
def calendars_get(ctx: typer.Context, name: str) -> None:
    """One calendar's days."""
    answer(ctx, lambda client: client.get_calendar(name), _table)


@calendars_app.command("delete")
def calendars_delete(ctx: typer.Context, name: str) -> None:
    """Delete a calendar no task names."""
    delete(ctx, lambda client: client.delete_calendar(name), name)
