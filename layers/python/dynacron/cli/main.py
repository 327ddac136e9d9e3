"""The ``dynacron`` command line: one typer app, its groups and commands."""

from __future__ import annotations

import typer

from dynacron.cli.admin import admin_app
from dynacron.cli.calendars import calendars_app
from dynacron.cli.executions import dead_letters_app, executions_app
from dynacron.cli.schedules import next_occurrences, plan_capacity
from dynacron.cli.tasks import tasks_app
from dynacron.cli.tenants import tenants_app
from dynacron.cli.try_handler import try_handler
from dynacron.console.command import console_command
from dynacron.local import commands as local_commands

app = typer.Typer(help="dynacron: a serverless, distributed task scheduler.", no_args_is_help=True)
app.add_typer(tasks_app, name="tasks")
app.add_typer(executions_app, name="executions")
app.add_typer(dead_letters_app, name="dead-letters")
app.add_typer(tenants_app, name="tenants")
app.add_typer(calendars_app, name="calendars")
app.add_typer(admin_app, name="admin")
app.command()(local_commands.local)
app.command()(local_commands.aws)
app.command("console")(console_command)
app.command("try-handler")(try_handler)
app.command(name="next")(next_occurrences)
app.command(name="plan")(plan_capacity)


@app.callback()
def _root() -> None:
    """Keep sub-commands explicit."""


def main() -> None:
    app()


if __name__ == "__main__":
    main()
