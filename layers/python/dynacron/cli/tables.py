"""The tables the ``dynacron`` command line prints (``--json`` prints the API's answer)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from rich.table import Table
from rich.text import Text

from dynacron.api.responses import (
    ChangePage,
    ChangeView,
    ExecutionPage,
    ExecutionView,
    TaskPage,
    TaskView,
)
from dynacron.cli.target_names import describe_target


def handler_of(task: TaskView) -> str:
    """What a task calls: its URL, its Python handler, or its target by name."""
    if task.target is not None:
        ecs = task.target.ecs_parameters
        return describe_target(task.target.arn, ecs.task_definition_arn if ecs else None)
    if task.handler is not None:
        return f"Python handler {task.handler}"
    return task.handler_url or ""


def table(
    title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], next_token: str | None
) -> Table:
    shown = Table(title=title, title_justify="left")
    for column in columns:
        shown.add_column(column, overflow="fold")
    for row in rows:
        # Text, never markup: names, tags and errors are whatever their owner wrote.
        shown.add_row(*(Text("" if v is None else str(v)) for v in row))
    if next_token:
        shown.caption = f"more: --next-token {next_token}"
    return shown


def notify_of(task: TaskView) -> str:
    """A task's notifications, one line each: ``on_failure (after 3) -> URL``."""
    if task.notify is None:
        return ""
    lines = []
    for kind, target in task.notify:
        if target is None:
            continue
        after = getattr(target, "after", None)
        within = getattr(target, "within_seconds", None)
        qualifier = f" (after {after})" if after else f" (within {within} s)" if within else ""
        lines.append(f"{kind}{qualifier} -> {target.url}")
    return "\n".join(lines)


def tasks(page: TaskPage | TaskView) -> Table:
    items = page.items if isinstance(page, TaskPage) else [page]
    columns = ["task_id", "name", "schedule", "status", "next_run_at", "handler", "tags"]
    # One task shown alone (``tasks get``): its notifications too.
    one = not isinstance(page, TaskPage)
    return table(
        "tasks",
        [*columns, "notify"] if one else columns,
        [
            [
                t.task_id,
                t.name,
                f"{t.schedule.kind} {t.schedule.expression}",
                f"{t.status}: {t.status_reason}" if t.status_reason else t.status,
                t.next_run_at,
                handler_of(t),
                ", ".join(f"{k}={v}" for k, v in t.tags.items()),
                *([notify_of(t)] if one else []),
            ]
            for t in items
        ],
        page.next_token if isinstance(page, TaskPage) else None,
    )


def executions(page: ExecutionPage | ExecutionView) -> Table:
    items = page.items if isinstance(page, ExecutionPage) else [page]
    return table(
        "executions",
        ["execution_id", "scheduled_at", "status", "attempt", "error"],
        [[e.execution_id, e.scheduled_at, e.status, e.attempt, e.error] for e in items],
        page.next_token if isinstance(page, ExecutionPage) else None,
    )


def changes(page: ChangePage) -> Table:
    """A task's changes, newest first: each field as before -> after."""

    def shown(change: ChangeView) -> str:
        names = [n for n in {**change.before, **change.after} if n != "version"]
        return "; ".join(
            f"{n}: {_short(change.before.get(n))} -> {_short(change.after.get(n))}" for n in names
        )

    return table(
        "changes",
        ["change_id", "at", "who", "what", "version", "fields"],
        [
            [c.change_id, c.at, c.who, c.what, c.after.get("version", ""), shown(c)]
            for c in page.items
        ],
        page.next_token,
    )


def _short(value: object) -> str:
    text = json.dumps(value, separators=(",", ":"), sort_keys=True)
    return text if len(text) <= 60 else text[:57] + "..."


def listed(page: ExecutionPage) -> Table:
    """Executions across tasks (``GET /executions``)."""
    return table(
        "executions across tasks",
        ["attention_at", "status", "execution_id", "attempt", "lease_until", "error"],
        [
            [e.attention_at, e.status, e.execution_id, e.attempt, e.lease_until, e.error]
            for e in page.items
        ],
        page.next_token,
    )
