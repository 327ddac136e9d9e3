"""`dynacron tasks import-eventbridge`: EventBridge Scheduler's schedules as tasks.

Reads the schedules with the caller's AWS credentials (``scheduler:ListSchedules``,
``scheduler:GetSchedule``; ``AWS_ENDPOINT_URL`` points it at an emulator),
translates each (``cli.eventbridge_schedules``) and creates the tasks through
``POST /tasks/batch``. Idempotent on each schedule's ARN: every task carries the
ARN's digest as its ``eventbridge-schedule`` tag, and a schedule whose tag a task
already has is not imported again (its batch item's idempotency key is the same
digest, so a batch sent twice within a day creates nothing twice either).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

import typer

from dynacron.api.requests import MAX_BATCH
from dynacron.cli.connection import api, console, out, target_of
from dynacron.cli.eventbridge_schedules import (
    SOURCE_TAG,
    ImportedSchedule,
    schedule_digest,
    translate_schedule,
)
from dynacron.client.api_client import Client


@dataclass
class Outcome:
    """What became of one schedule, for the report."""

    schedule: ImportedSchedule
    result: str  # created, already imported, refused, would create, not created
    task_id: str | None = None
    problem: str | None = None

    def as_map(self) -> dict[str, Any]:
        return {
            "schedule": self.schedule.name,
            "group": self.schedule.group,
            "arn": self.schedule.arn,
            "result": self.result,
            "task_id": self.task_id,
            "problem": self.problem,
            "not_mapped": list(self.schedule.notes),
        }


def read_schedules(scheduler: Any, group: str | None) -> Iterator[dict[str, Any]]:
    """Every schedule (of ``group``, if given), as GetSchedule answers it."""
    listing: dict[str, Any] = {"GroupName": group} if group else {}
    for page in scheduler.get_paginator("list_schedules").paginate(**listing):
        for summary in page.get("Schedules", []):
            yield scheduler.get_schedule(
                Name=summary["Name"], GroupName=summary.get("GroupName") or "default"
            )


def imported_digests(client: Client) -> dict[str, str]:
    """Digest of a schedule's ARN -> the task imported from it, for every task tagged."""
    return {
        task.tags[SOURCE_TAG]: task.task_id
        for task in client.iter_tasks(tag=SOURCE_TAG)
        if SOURCE_TAG in task.tags
    }


def import_schedules(schedules: Sequence[ImportedSchedule], client: Client | None) -> list[Outcome]:
    """Create the tasks of ``schedules`` (``client`` None: a dry run, nothing sent)."""
    outcomes = [Outcome(s, "refused") for s in schedules]
    done = imported_digests(client) if client is not None else {}
    pending: list[Outcome] = []
    for outcome in outcomes:
        schedule = outcome.schedule
        if schedule.body is None:
            outcome.problem = schedule.notes[0]
        elif schedule_digest(schedule.arn) in done:
            outcome.result, outcome.task_id = (
                "already imported",
                done[schedule_digest(schedule.arn)],
            )
        elif client is None:
            outcome.result = "would create"
        else:
            pending.append(outcome)
    for start in range(0, len(pending), MAX_BATCH):
        chunk = pending[start : start + MAX_BATCH]
        assert client is not None
        answer = client.create_tasks(
            [o.schedule.body or {} for o in chunk], keys=[o.schedule.idempotency_key for o in chunk]
        )
        for outcome, item in zip(chunk, answer.items, strict=True):
            if item.task is not None:
                result = "created" if item.outcome == "created" else "already imported"
                outcome.result, outcome.task_id = result, item.task.task_id
                if outcome.schedule.paused and item.outcome == "created":
                    client.pause_task(item.task.task_id, "DISABLED in EventBridge Scheduler")
            else:
                outcome.result = "not created"
                problem = item.problem
                errors = (problem.errors if problem else None) or []
                details = [f"{e.get('field')}: {e.get('message')}" for e in errors]
                outcome.problem = "; ".join(details) or (problem.detail if problem else None)
    return outcomes


def import_eventbridge(
    ctx: typer.Context,
    group: Annotated[
        str | None, typer.Option(help="Only this schedule group's schedules (default: all)")
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Report what would be created; create nothing")
    ] = False,
    region: Annotated[str | None, typer.Option(help="The schedules' AWS region")] = None,
) -> None:
    """Create a task for each EventBridge Scheduler schedule, and report what could
    not be carried over; a schedule already imported is not imported again."""
    import boto3

    target = target_of(ctx)
    scheduler = boto3.client("scheduler", region_name=region)
    schedules = [translate_schedule(s) for s in read_schedules(scheduler, group)]
    if dry_run:
        outcomes = import_schedules(schedules, None)
    else:
        with api(target) as client:
            outcomes = import_schedules(schedules, client)
    if target.as_json:
        out.print_json(json.dumps([o.as_map() for o in outcomes]))
    else:
        for outcome in outcomes:
            named = f"{outcome.schedule.group}/{outcome.schedule.name}"
            task = f" -> {outcome.task_id}" if outcome.task_id else ""
            out.print(f"{named}: {outcome.result}{task}", soft_wrap=True, markup=False)
            for note in outcome.schedule.notes:
                out.print(f"  not mapped: {note}", soft_wrap=True, markup=False)
            if outcome.problem and outcome.problem not in outcome.schedule.notes:
                out.print(f"  refused: {outcome.problem}", soft_wrap=True, markup=False)
    if any(o.result in ("refused", "not created") for o in outcomes):
        console.print("Some schedules were not imported: see the report above.")
        raise typer.Exit(1)
